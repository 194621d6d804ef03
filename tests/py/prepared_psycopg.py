"""psycopg 3 with prepare=True: its first execution of the text prepares it
(a Parse alone with its Sync, then the Bind), the rest only bind it.

usage: prepared_psycopg.py DSN QUERIES
The table described_t(a int) exists, with rows 1 and 2.
"""
import json
import sys

import psycopg

dsn, n = sys.argv[1], int(sys.argv[2])
got = []
with psycopg.connect(dsn, autocommit=True) as conn:
    for i in range(n):
        row = conn.execute(
            "select a, a + %s::int as b from described_t where a = %s", (i, i % 2 + 1), prepare=True
        ).fetchone()
        got.append(list(row))
print(json.dumps(got))
