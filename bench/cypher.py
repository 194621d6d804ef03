"""Times every compiled query of the Cypher corpus through two onetrips in
front of one server: one compiling (the default), one with
ONETRIP_PLANNER_CYPHER_REWRITE=false, so both sides pay the same hop and
the ratio is the compiler's alone. Run by bench/cypher.sh, which starts the
server, loads the graph and starts the proxies.

usage: cypher.py PG_PORT COMPILED_PORT AGE_PORT PLAN_CMD [--setting NAME]
                 [--index] [--only N,...] [--fresh K] [--rounds R]
                 [--min-seconds S] [--near R] [--repeat N] [--json FILE]

Two measures per query, each a ratio AGE time / compiled time (above 1x:
compiled is faster):
  first use  the query alone on a fresh connection (after LOAD 'age' and
             search_path), K connections per side, sides alternating: what
             a session pays the first time (catalog read, AGE's caches,
             planning);
  warm       the query repeated on one connection per side, rounds
             alternating, at least R rounds and S seconds of both.
A ratio below --near (1.2x) is measured again with three times the rounds,
up to --repeat times (3), pooling the samples, so that a median near or below 1x
is not the machine's noise.
Prints one line per query and, per measure, the geometric mean, the median
and the queries below 1x.
"""

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "planner", "bench"))
import psycopg  # noqa: E402
from cypher_bench import CORPUS, CORPUS_GRAPH, TimedOut, add_indexes, corpus_queries, sql_for, timed  # noqa: E402

SETUP = ["LOAD 'age'", "SET search_path = ag_catalog, \"$user\", public"]
CATALOG = ("SELECT g.name::text, g.namespace::regnamespace::text, g.graphid::oid::int8, l.name::text, "
           "l.kind::text, l.relation::regclass::text FROM ag_catalog.ag_graph g "
           "LEFT JOIN ag_catalog.ag_label l ON l.graph = g.graphid")


def connect(port, timeout):
    c = psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)
    c.prepare_threshold = None
    for s in SETUP + ["SET statement_timeout = %d" % int(timeout * 1000)]:
        c.execute(s)
    return c


def fresh(port, sql, params, timeout):
    """(seconds, rows) of the query alone on a new connection."""
    c = connect(port, timeout)
    try:
        return timed(c, sql, params)
    finally:
        c.close()


def first_use(ports, sql, params, k, timeout):
    """Median seconds per side over k fresh connections each, alternating."""
    ts = ([], [])
    rows = [None, None]
    for r in range(k):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for side in order:
            dt, rows[side] = fresh(ports[side], sql, params, timeout)
            ts[side].append(dt)
    return ts, rows


def warm(conns, sql, params, rounds, min_seconds):
    """Samples per side of the query repeated on one connection each."""
    ts = ([], [])
    rows = [None, None]
    for c in conns:  # a first run per side, untimed: its plan and caches
        timed(c, sql, params)
    r = 0
    while r < rounds or (r < 1000 and sum(ts[0]) + sum(ts[1]) < min_seconds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for side in order:
            dt, rows[side] = timed(conns[side], sql, params)
            ts[side].append(dt)
        r += 1
    return ts, rows


def ratio(ts):
    return statistics.median(ts[0]) / max(statistics.median(ts[1]), 1e-9)


def summary(label, ratios, names):
    if not ratios:
        print("%s: nothing compiled" % label)
        return
    rs = list(ratios.values())
    gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
    below = sorted((r, n) for n, r in ratios.items() if r < 1)
    print("%s: %d compiled queries, geometric mean %.2fx, median %.2fx, %d below 1x%s" % (
        label, len(rs), gm, statistics.median(rs), len(below),
        "".join("\n    %.2fx %-8s %s" % (r, n, names[n][:90]) for r, n in below)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pg_port", type=int)
    ap.add_argument("compiled_port", type=int)
    ap.add_argument("age_port", type=int)
    ap.add_argument("plan_cmd")
    ap.add_argument("--setting", default="no indexes")
    ap.add_argument("--index", action="store_true", help="first add btree (id, start_id, end_id) and gin indexes")
    ap.add_argument("--only", help="comma-separated corpus line numbers")
    ap.add_argument("--fresh", type=int, default=3, help="fresh connections per side and query")
    ap.add_argument("--rounds", type=int, default=5, help="warm rounds per query at least")
    ap.add_argument("--min-seconds", type=float, default=0.3, help="warm: both sides together at least")
    ap.add_argument("--near", type=float, default=1.2,
                    help="a ratio below this is measured again (3x the rounds, up to 3 times, samples pooled)")
    ap.add_argument("--repeat", type=int, default=3, help="re-measurements at most of a ratio below --near")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--json", help="append per-query results here")
    a = ap.parse_args()
    near = a.near

    direct = connect(a.pg_port, 600)
    if a.index:
        add_indexes(direct, CORPUS_GRAPH)
    f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
    for r in direct.execute(CATALOG).fetchall():
        f.write("\t".join("" if v is None else str(v) for v in r) + "\n")
    f.close()
    plan = shlex.split(a.plan_cmd) + ["--catalog", f.name]
    ports = (a.age_port, a.compiled_port)
    conns = [connect(p, a.timeout) for p in ports]
    only = set(a.only.split(",")) if a.only else None
    first, hot, names = {}, {}, {}
    declined = rejected = differ = timeouts = 0
    print("%s; first use: %d fresh connections per side; warm: >= %d rounds and >= %gs; median ms" % (
        a.setting, a.fresh, a.rounds, a.min_seconds))
    print("%-8s %9s %9s %7s  %9s %9s %7s  %s" % (
        "line", "AGE 1st", "comp 1st", "ratio", "AGE warm", "comp warm", "ratio", "query"))
    out = open(a.json, "a") if a.json else None
    for name, cypher, ncols, params in corpus_queries(CORPUS):
        if only and name[len("line"):] not in only:
            continue
        sql = sql_for(cypher, ncols, CORPUS_GRAPH, params is not None)
        if subprocess.run(plan + [sql], capture_output=True).returncode != 0:
            declined += 1
            continue
        try:
            f_ts, f_rows = first_use(ports, sql, params, a.fresh, a.timeout)
            if f_rows[0] is None:
                rejected += 1
                continue
            w_ts, w_rows = warm(conns, sql, params, a.rounds, a.min_seconds)
            for _ in range(a.repeat):
                if ratio(f_ts) >= near and ratio(w_ts) >= near:
                    break
                more_f, _ = first_use(ports, sql, params, a.fresh * 3, a.timeout)
                more_w, _ = warm(conns, sql, params, a.rounds * 3, a.min_seconds * 3)
                f_ts = (f_ts[0] + more_f[0], f_ts[1] + more_f[1])
                w_ts = (w_ts[0] + more_w[0], w_ts[1] + more_w[1])
        except TimedOut:
            timeouts += 1
            print("%-8s timed out (%gs)  %s" % (name, a.timeout, cypher[:70]))
            conns = [connect(p, a.timeout) for p in ports]
            continue
        same = all(r is not None for r in f_rows + w_rows) and \
            sorted(map(repr, f_rows[0])) == sorted(map(repr, f_rows[1])) == sorted(map(repr, w_rows[1]))
        differ += not same
        first[name], hot[name], names[name] = ratio(f_ts), ratio(w_ts), cypher
        med = [statistics.median(t) * 1000 for t in f_ts + w_ts]
        print("%-8s %9.2f %9.2f %6.2fx  %9.2f %9.2f %6.2fx  %s%s" % (
            name, med[0], med[1], first[name], med[2], med[3], hot[name],
            "" if same else "ROWS DIFFER ", cypher[:70]), flush=True)
        if out:
            out.write(json.dumps({"setting": a.setting, "line": name, "cypher": cypher, "age_first_ms": med[0],
                                  "compiled_first_ms": med[1], "age_warm_ms": med[2], "compiled_warm_ms": med[3],
                                  "first": first[name], "warm": hot[name], "same": same}) + "\n")
    print("%d declined (not timed), %d rejected by AGE, %d timed out, %d with different rows" % (
        declined, rejected, timeouts, differ))
    summary("%s, first use" % a.setting, first, names)
    summary("%s, warm" % a.setting, hot, names)
    os.unlink(f.name)


if __name__ == "__main__":
    main()
