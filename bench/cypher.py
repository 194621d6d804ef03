"""Times every compiled query of the Cypher corpus through two onetrips in
front of one server: one compiling (the default), one with
ONETRIP_PLANNER_CYPHER_REWRITE=false, so both sides pay the same hop and
the ratio is the compiler's alone. Run by bench/cypher.sh, which starts the
server, loads the graph and starts the proxies.

usage: cypher.py PG_PORT COMPILED_PORT AGE_PORT PLAN_CMD [--setting NAME]
                 [--index] [--only N,...] [--fresh K] [--rounds R]
                 [--min-seconds S] [--near R] [--confidence C] [--batch B]
                 [--confirm-rounds N] [--confirm-seconds S] [--json FILE]

Two measures per query, each a ratio AGE time / compiled time (above 1x:
compiled is faster):
  first use  the query alone on a fresh connection (after LOAD 'age' and
             search_path), K connections per side, sides alternating: what
             a session pays the first time (catalog read, AGE's caches,
             planning);
  warm       the query repeated on one connection per side, rounds
             alternating, at least R rounds and S seconds of both.
A measure whose ratio comes out below --near (1.1x) is then confirmed on
independent rounds, each giving one ratio AGE / compiled: for first use,
one fresh connection per side (the side going first alternating); for
warm, a fresh connection per side, warmed by two untimed runs, then
--batch (10) runs of each side alternating, and the median of their
paired ratios. Fresh connections matter on a busy machine: a backend the
scheduler leaves on a CPU shared with a build stays slow for as long as
it lives, so rounds on the same two connections share that bias and only
new ones average it out. The initial measure counts as one round. Rounds
are added until the sign test's confidence interval of the median round
ratio (order statistics, --confidence 0.99) lies wholly below 1x (the
query surely loses) or wholly at or above it (surely not), or until
--confirm-rounds (40) rounds or --confirm-seconds (30 s) per measure are
spent (then it is unsure: a tie within the noise). A query is reported
below 1x only when its interval is.
Prints one line per query (and one per confirmation) and, per measure,
the geometric mean, the median, the queries surely below 1x and those
left unsure.
"""

import argparse
import itertools
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


def first_use(ports, sql, params, k, timeout, turn=0):
    """Seconds per side over k fresh connections each, alternating (from
    round number turn on)."""
    ts = ([], [])
    rows = [None, None]
    for r in range(turn, turn + k):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for side in order:
            dt, rows[side] = fresh(ports[side], sql, params, timeout)
            ts[side].append(dt)
    return ts, rows


def warm(conns, sql, params, rounds, min_seconds, untimed=True):
    """Samples per side of the query repeated on one connection each."""
    ts = ([], [])
    rows = [None, None]
    for c in conns if untimed else ():  # a first run per side, untimed: its plan and caches
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


def pairs(ts):
    """Paired ratios AGE / compiled, round by round."""
    return [a / max(c, 1e-9) for a, c in zip(ts[0], ts[1])]


def median_ci(xs, confidence):
    """Distribution-free confidence interval of the median of xs: the
    order statistics the sign test gives, (lo, hi); None while xs are too
    few for any interval at that confidence."""
    n, tail = len(xs), (1 - confidence) / 2
    k, cdf = 0, 0.0  # cdf = P(Bin(n, 1/2) <= k - 1)
    while True:
        nxt = cdf + math.comb(n, k) / 2.0 ** n
        if nxt > tail:
            break
        cdf, k = nxt, k + 1
    if k == 0:
        return None
    s = sorted(xs)
    return s[k - 1], s[n - k]


def verdict(ci):
    if ci is None or ci[0] < 1 <= ci[1]:
        return "unsure"
    return "below" if ci[1] < 1 else "not below"


def confirm(more, first, a):
    """Adds independent rounds, each a ratio from more(), to the list
    first until their median's interval excludes 1x or the budget is
    spent: (rounds, ci)."""
    t0 = time.monotonic()
    rounds = list(first)
    while True:
        ci = median_ci(rounds, a.confidence)
        if verdict(ci) != "unsure" or len(rounds) >= a.confirm_rounds or \
                time.monotonic() - t0 > a.confirm_seconds:
            return rounds, ci
        rounds.append(more())


def warm_round(ports, sql, params, a):
    """One warm round on new connections: the median paired ratio of
    --batch alternating runs after two untimed ones per side."""
    conns = [connect(p, a.timeout) for p in ports]
    try:
        for _ in range(2):
            for c in conns:
                timed(c, sql, params)
        ts, _ = warm(conns, sql, params, a.batch, 0, untimed=False)
        return statistics.median(pairs(ts))
    finally:
        for c in conns:
            c.close()


def summary(label, ratios, names, cis):
    if not ratios:
        print("%s: nothing compiled" % label)
        return
    rs = list(ratios.values())
    gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
    below = sorted((r, n) for n, r in ratios.items() if verdict(cis.get(n, (r, r))) == "below")
    unsure = sorted((r, n) for n, r in ratios.items() if n in cis and verdict(cis[n]) == "unsure")

    def listing(xs):
        return "".join("\n    %.2fx %-13s %-8s %s" % (
            r, "[%.2f, %.2f]" % cis[n] if cis.get(n) else "", n, names[n][:80]) for r, n in xs)
    print("%s: %d compiled queries, geometric mean %.2fx, median %.2fx, %d surely below 1x%s" % (
        label, len(rs), gm, statistics.median(rs), len(below), listing(below)))
    if unsure:
        print("%s: %d unsure (interval across 1x)%s" % (label, len(unsure), listing(unsure)))


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
    ap.add_argument("--near", type=float, default=1.1, help="a ratio below this is confirmed on paired rounds")
    ap.add_argument("--confidence", type=float, default=0.99, help="of the median paired ratio's interval")
    ap.add_argument("--batch", type=int, default=10, help="warm runs per side in one confirming round")
    ap.add_argument("--confirm-rounds", type=int, default=40, help="rounds at most per confirmed measure")
    ap.add_argument("--confirm-seconds", type=float, default=30, help="time at most per confirmed measure")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--json", help="append per-query results here")
    a = ap.parse_args()

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
    first, hot, names, first_ci, hot_ci = {}, {}, {}, {}, {}
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
            f_ci = w_ci = False  # False: not confirmed; else (rounds, interval or None)
            if ratio(f_ts) < a.near:
                turns = itertools.count(a.fresh)
                f_ci = confirm(lambda: pairs(first_use(ports, sql, params, 1, a.timeout, next(turns))[0])[0],
                               pairs(f_ts), a)
            if ratio(w_ts) < a.near:
                w_ci = confirm(lambda: warm_round(ports, sql, params, a), [statistics.median(pairs(w_ts))], a)
        except TimedOut:
            timeouts += 1
            print("%-8s timed out (%gs)  %s" % (name, a.timeout, cypher[:70]))
            conns = [connect(p, a.timeout) for p in ports]
            continue
        same = all(r is not None for r in f_rows + w_rows) and \
            sorted(map(repr, f_rows[0])) == sorted(map(repr, f_rows[1])) == sorted(map(repr, w_rows[1]))
        differ += not same
        first[name], hot[name], names[name] = ratio(f_ts), ratio(w_ts), cypher
        # A confirmed measure is its median round ratio, which the verdict is about.
        for label, conf, ratios, cis in (("first use", f_ci, first, first_ci), ("warm", w_ci, hot, hot_ci)):
            if conf is not False:
                rounds, ci = conf
                ratios[name] = statistics.median(rounds)
                cis[name] = ci
                print("%-8s confirm %-9s %6.2fx over %3d rounds, %g%% interval %s: %s" % (
                    name, label, ratios[name], len(rounds), a.confidence * 100,
                    "[%.2f, %.2f]" % ci if ci else "none yet", verdict(ci)), flush=True)
        med = [statistics.median(t) * 1000 for t in f_ts + w_ts]
        print("%-8s %9.2f %9.2f %6.2fx  %9.2f %9.2f %6.2fx  %s%s" % (
            name, med[0], med[1], first[name], med[2], med[3], hot[name],
            "" if same else "ROWS DIFFER ", cypher[:70]), flush=True)
        if out:
            out.write(json.dumps({"setting": a.setting, "line": name, "cypher": cypher, "age_first_ms": med[0],
                                  "compiled_first_ms": med[1], "age_warm_ms": med[2], "compiled_warm_ms": med[3],
                                  "first": first[name], "warm": hot[name], "same": same,
                                  "first_ci": first_ci.get(name), "warm_ci": hot_ci.get(name),
                                  "first_verdict": verdict(first_ci[name]) if name in first_ci else None,
                                  "warm_verdict": verdict(hot_ci[name]) if name in hot_ci else None,
                                  "first_rounds": len(f_ci[0]) if f_ci else None,
                                  "warm_rounds": len(w_ci[0]) if w_ci else None}) + "\n")
    print("%d declined (not timed), %d rejected by AGE, %d timed out, %d with different rows" % (
        declined, rejected, timeouts, differ))
    summary("%s, first use" % a.setting, first, names, first_ci)
    summary("%s, warm" % a.setting, hot, names, hot_ci)
    os.unlink(f.name)


if __name__ == "__main__":
    main()
