#!/usr/bin/env python3
"""Benchmark: Cypher compiled to SQL vs AGE's own cypher(), per query.

Builds (with --load) a seeded LDBC-like graph of about 227k vertices and
1M edges inside PostgreSQL with AGE's own functions plus INSERT ... SELECT,
then times each query both ways: the original `SELECT * FROM cypher(...)`
and the statement `onetrip plan-cypher` prints for it. Rounds alternate
the order of the two runs; every result is fully fetched by the client.
With --proxy HOST:PORT the "compiled" side is instead the original SQL sent
through a running onetrip proxy (which rewrites it), as an application
would see it; with --age-proxy HOST:PORT as well, the cypher() side goes
through a second proxy that does not rewrite, so both sides pay the same
hop and the ratio is the rewrite's alone.

Needs Python 3.9+ and psycopg 3. Example:

  python3 planner/bench/cypher_bench.py --port 5432 --load
  python3 planner/bench/cypher_bench.py --port 5432 --rounds 9 \
      --plan-cmd "target/release/onetrip plan-cypher"
  ONETRIP_PLANNER_CYPHER_REWRITE=false onetrip --upstream 127.0.0.1:5432 \
      --listen 127.0.0.1:6433 &
  onetrip --upstream 127.0.0.1:5432 --listen 127.0.0.1:6432 &
  python3 planner/bench/cypher_bench.py --port 5432 --rounds 9 \
      --proxy 127.0.0.1:6432 --age-proxy 127.0.0.1:6433

With --corpus, the queries are those of the differential corpus
(planner/tests/cypher_corpus/queries.txt) on its graph `snb_diff`, which
the differential test leaves behind (run it once with ONETRIP_AGE_DSN set
to the server); --index adds the indexes a real deployment has (btree on
id/start_id/end_id, gin on properties). Each query is classed by
`plan-cmd` as compiled or declined; the geometric mean is over the
compiled ones, and --rerun-below R runs every compiled query whose
speedup came out below R again, alone, with more rounds:

  python3 planner/bench/cypher_bench.py --port 5432 --corpus --index \
      --proxy 127.0.0.1:6432 --age-proxy 127.0.0.1:6433 \
      --plan-cmd "target/release/onetrip plan-cypher" --catalog-arg=--catalog \
      --min-seconds 0.5 --rerun-below 0.95

Output: one line per query (median ms for AGE and compiled, speedup) and the
geometric mean of the speedups. Rows of both sides are compared once.
"""

import argparse
import math
import os
import shlex
import statistics
import subprocess
import sys
import time

import psycopg

GRAPH = "bench_snb"
N_PERSON, N_CITY, N_TAG, N_FORUM, N_POST, N_COMMENT = 100_000, 1_000, 1_000, 5_000, 80_000, 40_000

# (name, cypher, number of returned columns)
QUERIES = [
    ("point_lookup", "MATCH (p:Person {id: 12345}) RETURN p.name, p.age", 2),
    ("filter_count", "MATCH (p:Person) WHERE p.age > 60 AND p.gender = 'f' RETURN count(*)", 1),
    ("string_prefix", "MATCH (p:Person) WHERE p.name STARTS WITH 'Ann' RETURN count(*)", 1),
    ("nested_prop", "MATCH (p:Person) WHERE p.address.city = 'City_7' RETURN count(*)", 1),
    ("hop1_out", "MATCH (p:Person {id: 12345})-[:KNOWS]->(q:Person) RETURN q.id, q.name", 2),
    ("hop1_in", "MATCH (p:Person {id: 12345})<-[:KNOWS]-(q:Person) RETURN q.id", 1),
    ("hop1_undirected", "MATCH (p:Person {id: 12345})-[:KNOWS]-(q:Person) RETURN q.id", 1),
    ("hop2_distinct", "MATCH (p:Person {id: 12345})-[:KNOWS]->()-[:KNOWS]->(q:Person) RETURN count(DISTINCT q)", 1),
    ("hop2_tags", "MATCH (p:Person {id: 4242})-[:LIKES]->(m:Post)-[:HAS_TAG]->(t:Tag) RETURN t.name, count(*)", 2),
    ("creator_posts", "MATCH (m:Post)-[:HAS_CREATOR]->(p:Person {id: 777}) RETURN m.id, m.content", 2),
    ("return_vertices", "MATCH (p:Person) WHERE p.id < 2000 RETURN p", 1),
    ("return_edges", "MATCH (a:Person {id: 99})-[k:KNOWS]->(b) RETURN k, b", 2),
    ("edge_prop_count", "MATCH (a:Person)-[k:KNOWS]->(b:Person) WHERE k.weight > 0.9 RETURN count(*)", 1),
    ("group_city", "MATCH (p:Person)-[:IS_LOCATED_IN]->(c:City) RETURN c.name, count(*)", 2),
    ("order_limit", "MATCH (p:Person) RETURN p.id, p.age ORDER BY p.age DESC, p.id LIMIT 20", 2),
    ("agg_stats", "MATCH (p:Person) RETURN avg(p.age), min(p.age), max(p.age), sum(p.age)", 4),
    ("return_props", "MATCH (p:Person) WHERE p.age > 78 RETURN p.id, p.name, p.age, p.gender, p.address", 5),
    ("hop1_props", "MATCH (p:Person)-[k:KNOWS]->(q:Person) WHERE p.id < 300 RETURN p.name, k.weight, q.name, q.age", 4),
    ("hop2_props", "MATCH (f:Forum {id: 17})-[:HAS_MEMBER]->(p:Person)-[:IS_LOCATED_IN]->(c:City) RETURN p.name, p.age, c.name", 3),
    # Shapes of LDBC's interactive reads: a profile by vertex id (IS1), a
    # person by name in WHERE rather than an inline map (IC1's start),
    # friends and friends of friends regardless of direction (IC1/IS3).
    ("id_lookup", "MATCH (p:Person) WHERE id(p) = {person_gid} RETURN p.name, p.age", 2),
    ("where_equality", "MATCH (p:Person) WHERE p.name = '{person_name}' RETURN p.id, p.age", 2),
    ("friends_undirected", "MATCH (p:Person {id: 4242})-[k:KNOWS]-(f:Person) RETURN f.id, f.name, k.weight", 3),
    ("fof_undirected", "MATCH (p:Person {id: 4242})-[:KNOWS]-(:Person)-[:KNOWS]-(f:Person) RETURN count(DISTINCT f)", 1),
]


def sql_for(cypher, ncols, graph=GRAPH, params=False):
    cols = ", ".join("c%d agtype" % (i + 1) for i in range(ncols))
    arg = ", $1" if params else ""
    return "SELECT * FROM cypher('%s', $$ %s $$%s) AS (%s)" % (graph, cypher, arg, cols)


CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cypher_corpus",
                      "queries.txt")
CORPUS_GRAPH = "snb_diff"


def return_width(cypher):
    """Columns of the last RETURN: its top-level commas, up to ORDER BY,
    SKIP or LIMIT (strings, brackets and comments skipped)."""
    depth, i, start, n = 0, 0, None, len(cypher)
    quote = None
    tokens = []  # (position, depth, upper-case word or char)
    while i < n:
        c = cypher[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if c in "'\"`":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ",":
            tokens.append((i, depth, ","))
        elif c.isalpha():
            j = i
            while j < n and (cypher[j].isalnum() or cypher[j] == "_"):
                j += 1
            tokens.append((i, depth, cypher[i:j].upper()))
            i = j
            continue
        i += 1
    for k in range(len(tokens) - 1, -1, -1):
        if tokens[k][2] == "RETURN" and tokens[k][1] == 0:
            start = k
            break
    if start is None:
        return 1
    cols = 1
    for _, d, t in tokens[start + 1:]:
        if d == 0 and t in ("ORDER", "SKIP", "LIMIT", "UNION"):
            break
        if d == 0 and t == ",":
            cols += 1
    return cols


def corpus_queries(path):
    """(name, cypher, ncols, params) per line of the differential corpus."""
    out = []
    for k, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("ordered:"):
            line = line[len("ordered:"):].strip()
        ncols = None
        if line.startswith("columns ") and ":" in line:
            n, line = line[len("columns "):].split(":", 1)
            ncols, line = int(n), line.strip()
        params = None
        if "|||" in line:
            line, params = (x.strip() for x in line.split("|||", 1))
        out.append(("line%d" % k, line, ncols or return_width(line), params))
    return out


def add_indexes(conn, graph):
    """Indexes as gen_graph.py of the public corpus builds them."""
    labels = conn.execute("SELECT l.name, l.kind FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g "
                          "ON l.graph = g.graphid WHERE g.name = %s AND l.name NOT LIKE '\\_ag%%'",
                          (graph,)).fetchall()
    for name, kind in labels:
        cols = ["id"] + (["start_id", "end_id"] if kind == "e" else [])
        for c in cols:
            conn.execute('CREATE INDEX IF NOT EXISTS "%s_%s_%s" ON "%s"."%s" (%s)' % (graph, name, c, graph, name, c))
        conn.execute('CREATE INDEX IF NOT EXISTS "%s_%s_gin" ON "%s"."%s" USING gin (properties)'
                     % (graph, name, graph, name))
    conn.execute('ANALYZE')


def load(conn):
    """Creates the graph server-side; deterministic (hash of the row number)."""
    x = conn.execute
    x("CREATE EXTENSION IF NOT EXISTS age")
    x("LOAD 'age'")
    x("SET search_path = ag_catalog, \"$user\", public")
    if x("SELECT 1 FROM ag_graph WHERE name = %s", (GRAPH,)).fetchone():
        x("SELECT drop_graph(%s, true)", (GRAPH,))
    x("SELECT create_graph(%s)", (GRAPH,))
    for l in ["Person", "City", "Tag", "Forum", "Post", "Comment"]:
        x("SELECT create_vlabel(%s, %s)", (GRAPH, l))
    for l in ["KNOWS", "IS_LOCATED_IN", "HAS_CREATOR", "LIKES", "HAS_TAG", "HAS_MEMBER", "REPLY_OF"]:
        x("SELECT create_elabel(%s, %s)", (GRAPH, l))
    lid = dict(x("SELECT l.name, l.id FROM ag_label l JOIN ag_graph g ON l.graph = g.graphid "
                 "WHERE g.name = %s", (GRAPH,)).fetchall())
    # h(i, k): a stable pseudo-random integer in [0, 2^31).
    x("CREATE OR REPLACE FUNCTION pg_temp.h(i bigint, k int) RETURNS bigint LANGUAGE sql IMMUTABLE AS "
      "$$ SELECT abs(hashint8(i * 31 + k))::bigint $$")

    def gid(label, expr):
        return "ag_catalog._graphid(%d, %s)" % (lid[label], expr)

    def vertices(label, n, props):
        x('INSERT INTO "%s"."%s" (id, properties) SELECT %s, (%s)::agtype FROM generate_series(1, %d) i'
          % (GRAPH, label, gid(label, "i"), props, n))

    vertices("City", N_CITY, "format('{\"id\": %s, \"name\": \"City_%s\"}', i, i)")
    vertices("Tag", N_TAG, "format('{\"id\": %s, \"name\": \"Tag_%s\"}', i, i)")
    vertices("Forum", N_FORUM, "format('{\"id\": %s, \"title\": \"Forum %s\"}', i, i)")
    vertices("Person", N_PERSON,
             "format('{\"id\": %s, \"name\": \"%s_%s\", \"age\": %s, \"gender\": \"%s\"%s}', i, "
             "(ARRAY['Ann','Bob','Cid','Dee','Eve'])[1 + pg_temp.h(i,1) % 5], i, 12 + pg_temp.h(i,2) % 70, "
             "CASE WHEN pg_temp.h(i,3) % 2 = 0 THEN 'f' ELSE 'm' END, "
             "CASE WHEN pg_temp.h(i,4) % 3 = 0 THEN '' ELSE format(', \"address\": {\"city\": \"City_%s\", \"zip\": \"%s\"}', "
             "pg_temp.h(i,5) % 50, pg_temp.h(i,6) % 99999) END)")
    vertices("Post", N_POST,
             "format('{\"id\": %s, \"content\": \"post %s\", \"length\": %s}', i, i, pg_temp.h(i,7) % 200)")
    vertices("Comment", N_COMMENT, "format('{\"id\": %s, \"content\": \"c %s\"}', i, i)")

    def edges(label, src, dst, n, s_expr, d_expr, props="'{}'"):
        x('INSERT INTO "%s"."%s" (id, start_id, end_id, properties) SELECT %s, %s, %s, (%s)::agtype '
          "FROM generate_series(1, %d) i" % (GRAPH, label, gid(label, "i"), gid(src, s_expr), gid(dst, d_expr), props, n))

    edges("KNOWS", "Person", "Person", 4 * N_PERSON, "1 + (i - 1) %% %d" % N_PERSON,
          "1 + pg_temp.h(i, 8) %% %d" % N_PERSON,
          "format('{\"weight\": %s}', (pg_temp.h(i, 9) % 100) / 100.0)")
    edges("IS_LOCATED_IN", "Person", "City", N_PERSON, "i", "1 + pg_temp.h(i, 10) %% %d" % N_CITY)
    edges("HAS_CREATOR", "Post", "Person", N_POST, "i", "1 + pg_temp.h(i, 11) %% %d" % N_PERSON)
    edges("LIKES", "Person", "Post", 2 * N_PERSON, "1 + (i - 1) %% %d" % N_PERSON, "1 + pg_temp.h(i, 12) %% %d" % N_POST)
    edges("HAS_TAG", "Post", "Tag", N_POST, "i", "1 + pg_temp.h(i, 13) %% %d" % N_TAG)
    edges("HAS_MEMBER", "Forum", "Person", 10 * N_FORUM, "1 + (i - 1) %% %d" % N_FORUM, "1 + pg_temp.h(i, 14) %% %d" % N_PERSON)
    edges("REPLY_OF", "Comment", "Post", N_COMMENT, "i", "1 + pg_temp.h(i, 15) %% %d" % N_POST)
    for l in ["Person", "City", "Tag", "Forum", "Post", "Comment"]:
        x('CREATE INDEX ON "%s"."%s" (id)' % (GRAPH, l))
        x('CREATE INDEX ON "%s"."%s" USING gin (properties)' % (GRAPH, l))
    for l in ["KNOWS", "IS_LOCATED_IN", "HAS_CREATOR", "LIKES", "HAS_TAG", "HAS_MEMBER", "REPLY_OF"]:
        for c in ["id", "start_id", "end_id"]:
            x('CREATE INDEX ON "%s"."%s" (%s)' % (GRAPH, l, c))
    x("ANALYZE")


class TimedOut(Exception):
    """The statement ran into --timeout."""


def timed(conn, sql, params=None):
    """(seconds, rows) of one run, or (seconds, None) on an error; raises
    TimedOut at the statement timeout. With params, sent as $1 of
    unspecified type."""
    from psycopg import pq
    t0 = time.perf_counter()
    if params is None:
        res = conn.pgconn.exec_(sql.encode())
    else:
        res = conn.pgconn.exec_params(sql.encode(), [params.encode()], [0], [0], 0)
    dt = time.perf_counter() - t0
    if res.status != pq.ExecStatus.TUPLES_OK:
        if res.error_field(pq.DiagnosticField.SQLSTATE) == b"57014":
            raise TimedOut()
        return dt, None
    return dt, [tuple(res.get_value(i, j) for j in range(res.nfields)) for i in range(res.ntuples)]


def measure(age, comp, sql, compiled, params, rounds, min_seconds):
    """Alternating rounds of both sides: (median ms AGE, median ms compiled,
    rows AGE, rows compiled, rounds); TimedOut when AGE's first run does."""
    ta, tb = [], []
    ra = rb = None
    timed(age, sql, params)  # warm caches for both sides alike
    timed(comp, compiled, params)
    # At least `rounds`, and more for fast queries until both sides have run
    # `min_seconds`: a 1 ms query needs hundreds of rounds for a median that
    # the machine's noise does not move.
    r = 0
    while r < rounds or (r < 1000 and sum(ta) + sum(tb) < min_seconds):
        order = [(age, sql, ta), (comp, compiled, tb)]
        if r % 2:
            order.reverse()
        for conn, q, acc in order:
            dt, rows = timed(conn, q, params)
            acc.append(dt)
            if acc is ta:
                ra = rows
            else:
                rb = rows
        r += 1
    return statistics.median(ta) * 1000, statistics.median(tb) * 1000, ra, rb, r


def connect(hostport, a, setup, threshold):
    h, p = hostport.rsplit(":", 1)
    c = psycopg.connect(host=h, port=int(p), user=a.user, dbname=a.db, autocommit=True)
    c.prepare_threshold = threshold
    for s in setup:
        c.execute(s)
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--db", default="postgres")
    ap.add_argument("--load", action="store_true", help="(re)build the graph first")
    ap.add_argument("--corpus", nargs="?", const=CORPUS, metavar="FILE",
                    help="time the differential corpus (default %(const)s) on graph snb_diff instead")
    ap.add_argument("--index", action="store_true",
                    help="with --corpus: first create btree (id, start_id, end_id) and gin indexes on snb_diff")
    ap.add_argument("--rounds", type=int, default=7, help="rounds per query at least")
    ap.add_argument("--min-seconds", type=float, default=3.0,
                    help="keep alternating rounds until both sides together ran this long (at most 1000 rounds)")
    ap.add_argument("--plan-cmd", default="onetrip plan-cypher",
                    help="command printing the compiled SQL for the SQL given as its last argument")
    ap.add_argument("--catalog-arg", metavar="FLAG",
                    help="pass the server's AGE catalog to plan-cmd as FLAG <file> (TSV rows of Catalog::QUERY), "
                         "as the proxy compiles with it")
    ap.add_argument("--proxy", help="HOST:PORT of a onetrip proxy; its answers are the compiled side")
    ap.add_argument("--age-proxy", help="HOST:PORT of a onetrip proxy with [planner] cypher_rewrite = false; "
                    "the cypher() side goes through it, so both sides pay the same proxy hop")
    ap.add_argument("--only", help="comma-separated query names")
    ap.add_argument("--rerun-below", type=float, metavar="R",
                    help="run each compiled query whose speedup is below R again, alone, with 3x the time")
    ap.add_argument("--prepared", action="store_true",
                    help="let the driver prepare repeated statements (default: every run is parsed and planned)")
    ap.add_argument("--timeout", type=float, default=60,
                    help="statement timeout in seconds; a query whose cypher() run reaches it is timed on the "
                    "compiled side alone and counted with the timeout as AGE's time (a lower bound)")
    a = ap.parse_args()

    setup = ["LOAD 'age'", "SET search_path = ag_catalog, \"$user\", public",
             "SET statement_timeout = %d" % int(a.timeout * 1000)]
    direct = psycopg.connect(host=a.host, port=a.port, user=a.user, dbname=a.db, autocommit=True)
    threshold = 5 if a.prepared else None
    if a.load:
        t0 = time.perf_counter()
        load(direct)
        print("loaded %s in %.1fs" % (GRAPH, time.perf_counter() - t0), file=sys.stderr)
    for s in setup:
        direct.execute(s)
    graph = CORPUS_GRAPH if a.corpus else GRAPH
    if a.corpus and a.index:
        add_indexes(direct, graph)
    age = connect(a.age_proxy, a, setup, threshold) if a.age_proxy else direct
    age.prepare_threshold = threshold
    comp = connect(a.proxy, a, setup, threshold) if a.proxy else age
    if a.corpus:
        queries = corpus_queries(a.corpus)
    else:
        # Graph ids are label id << 48 | row number (see load), read back here.
        row = direct.execute('SELECT id::text, (properties -> \'name\'::text)::text FROM "%s"."Person" '
                             'WHERE properties @> \'{"id": 12345}\'' % GRAPH).fetchone()
        fill = {"person_gid": row[0], "person_name": row[1].strip('"')} if row else {}
        queries = []
        for name, cypher, ncols in QUERIES:
            for k, v in fill.items():
                cypher = cypher.replace("{%s}" % k, v)
            queries.append((name, cypher, ncols, None))
    nv = direct.execute('SELECT count(*) FROM "%s"._ag_label_vertex' % graph).fetchone()[0]
    ne = direct.execute('SELECT count(*) FROM "%s"._ag_label_edge' % graph).fetchone()[0]
    print("graph %s: %d vertices, %d edges; >= %d rounds and >= %gs per query, median ms, %s; cypher() %s, compiled %s" % (
        graph, nv, ne, a.rounds, a.min_seconds, "prepared" if a.prepared else "unprepared",
        "via proxy (no rewrite)" if a.age_proxy else "direct",
        "via proxy (rewrite)" if a.proxy else "direct"))
    print("%-18s %10s %10s %8s  %s" % ("query", "cypher()", "compiled", "speedup", "rows"))
    plan = shlex.split(a.plan_cmd)
    if a.catalog_arg:
        import tempfile
        rows = direct.execute(
            "SELECT g.name::text, g.namespace::regnamespace::text, g.graphid::oid::int8, l.name::text, "
            "l.kind::text, l.relation::regclass::text FROM ag_catalog.ag_graph g "
            "LEFT JOIN ag_catalog.ag_label l ON l.graph = g.graphid").fetchall()
        f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
        for r in rows:
            f.write("\t".join("" if v is None else str(v) for v in r) + "\n")
        f.close()
        plan += [a.catalog_arg, f.name]
    ratios = {}
    declined = errors = differ = 0
    for name, cypher, ncols, params in queries:
        if a.only and name not in a.only.split(","):
            continue
        sql = sql_for(cypher, ncols, graph, params is not None)
        p = subprocess.run(plan + [sql], capture_output=True, text=True)
        if p.returncode != 0:
            declined += 1
            print("%-18s declined: %s" % (name, p.stderr.strip()))
            continue
        compiled = sql if a.proxy else p.stdout.strip()
        try:
            ma, mb, ra, rb, r = measure(age, comp, sql, compiled, params, a.rounds, a.min_seconds)
        except TimedOut:
            tb = [timed(comp, compiled, params)[0] for _ in range(3)]
            ma, mb = a.timeout * 1000, statistics.median(tb) * 1000
            ratios[name] = (ma / mb, (sql, compiled, params, cypher))
            print("%-18s %9.0f+ %10.2f %6.2fx+  AGE timed out  %s" % (name, ma, mb, ma / mb, cypher[:60]))
            continue
        if ra is None:
            errors += 1
            print("%-18s AGE rejects it%s" % (name, "" if rb is None else "; compiled ANSWERS"))
            continue
        same = rb is not None and sorted(map(repr, ra)) == sorted(map(repr, rb))
        differ += not same
        ratios[name] = (ma / mb, (sql, compiled, params, cypher))
        print("%-18s %10.2f %10.2f %7.2fx  %d rows, %d rounds%s  %s" % (
            name, ma, mb, ma / mb, len(ra), r, "" if same else "  ROWS DIFFER", cypher[:60] if a.corpus else ""))
    if a.rerun_below is not None:
        for name, (ratio, (sql, compiled, params, cypher)) in sorted(ratios.items()):
            if ratio >= a.rerun_below:
                continue
            try:
                ma, mb, _, _, r = measure(age, comp, sql, compiled, params, a.rounds * 3, a.min_seconds * 3)
            except TimedOut:
                continue
            print("rerun %-12s %10.2f %10.2f %7.2fx  (was %.2fx), %d rounds  %s" % (
                name, ma, mb, ma / mb, ratio, r, cypher[:60]))
            ratios[name] = (ma / mb, ratios[name][1])
    if ratios:
        rs = [r for r, _ in ratios.values()]
        gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
        worst = min(ratios, key=lambda n: ratios[n][0])
        print("geometric mean speedup: %.2fx over %d compiled queries; slowest %.2fx (%s); "
              "%d declined, %d rejected by AGE, %d with different rows" % (
                  gm, len(rs), ratios[worst][0], worst, declined, errors, differ))


if __name__ == "__main__":
    main()
