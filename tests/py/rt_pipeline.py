"""Round-trip patterns of psycopg 3 pipeline mode, for tests/tests/roundtrips.rs.

usage: rt_pipeline.py MODE DSN N
  reads: N pipelines, each with one read fetched inside the pipeline
         (Bind Describe Execute Flush, wait, Sync Flush, wait: 2 round trips)
  batch: one pipeline with N statements and one Sync (1 round trip)
Prints the number of rows read.
"""
import sys

import psycopg

mode, dsn, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = 0
with psycopg.connect(dsn, autocommit=True) as conn:
    if mode == "reads":
        for i in range(n):
            with conn.pipeline():
                cur = conn.execute("select %s::int", (i,))
                rows += len(cur.fetchall())
    elif mode == "batch":
        with conn.pipeline():
            curs = [conn.execute("select %s::int", (i,)) for i in range(n)]
        rows = sum(len(c.fetchall()) for c in curs)
    else:
        sys.exit(f"unknown mode {mode}")
print(rows)
