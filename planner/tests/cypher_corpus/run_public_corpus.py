#!/usr/bin/env python3
"""Runs the public Cypher corpus (tests/data/cypher_public) the way the
proxy would: each statement goes through `plan-cypher`; a rewritten one is
sent as compiled SQL, a declined one as written. Rows, column names and
errors are compared with AGE's expected answers by the corpus's own
check.py functions.

  python3 planner/tests/cypher_corpus/run_public_corpus.py --port 5432 \
      --plan-cmd "target/release/onetrip plan-cypher" --catalog-arg=--catalog

The graph must be loaded first with the corpus's gen_graph.py. Needs
psycopg 3. Exit status 0 when every query passes.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Catalog::QUERY (planner/src/cypher/catalog.rs)
CATALOG_QUERY = ("SELECT g.name::text, g.namespace::regnamespace::text, g.graphid::oid::int8, "
                 "l.name::text, l.kind::text, l.relation::regclass::text "
                 "FROM ag_catalog.ag_graph g LEFT JOIN ag_catalog.ag_label l ON l.graph = g.graphid")
DEFAULT_CORPUS = os.path.normpath(os.path.join(HERE, "../../../tests/data/cypher_public"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--user", default="postgres")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--plan-cmd", default="onetrip plan-cypher")
    ap.add_argument("--catalog-arg", metavar="FLAG",
                    help="pass the server's AGE catalog to plan-cmd as FLAG <file> (TSV rows of "
                         "Catalog::QUERY); without it plan-cmd assumes every graph and label exists")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, a.corpus)
    import check  # the corpus's checker: Endpoint, compare, load_corpus

    ep = check.Endpoint(a.host, a.port, a.user)
    corpus = check.load_corpus(os.path.join(a.corpus, "corpus.jsonl"))
    plan = shlex.split(a.plan_cmd)
    if a.catalog_arg:
        import tempfile
        rows = ep.conn("ldbc_public").execute(CATALOG_QUERY).fetchall()
        f = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
        for r in rows:
            f.write("\t".join("" if v is None else str(v) for v in r) + "\n")
        f.close()
        plan += [a.catalog_arg, f.name]
    passed = rewritten = 0
    for q in corpus:
        exp = json.load(open(os.path.join(a.corpus, "expected", q["id"] + ".json"), encoding="utf-8"))
        p = subprocess.run(plan + [q["sql"]], capture_output=True, text=True)
        if p.returncode == 0:
            sql, how = p.stdout.rstrip("\n"), "rewritten"
            rewritten += 1
        else:
            sql, how = q["sql"], "declined: " + p.stderr.strip()
        rows, err, _ = ep.run(q["graph"], sql, q.get("params"))
        ok, why = check.compare(exp, rows or [], err)
        if ok and err is None and ep.last_columns != exp["columns"]:
            ok, why = False, "columns %r, expected %r" % (ep.last_columns, exp["columns"])
        passed += ok
        if a.v or not ok:
            print("%-45s %-4s %s %s" % (q["id"], "ok" if ok else "FAIL", how, why))
    print("%d passed, %d failed; %d rewritten, %d declined"
          % (passed, len(corpus) - passed, rewritten, len(corpus) - rewritten))
    sys.exit(0 if passed == len(corpus) else 1)


if __name__ == "__main__":
    main()
