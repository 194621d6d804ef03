"""asyncpg without a statement cache, as users run it behind a transaction
pooler: each query is prepared unnamed (Parse, Describe, Sync), then bound
and executed.

usage: described.py DSN QUERIES
The table described_t(a int) exists, with rows 1 and 2.
"""
import asyncio
import json
import sys


async def main(dsn, n):
    try:
        import asyncpg
    except ImportError:
        print("no asyncpg")
        return
    # asyncpg takes a URL.
    kv = dict(p.split("=", 1) for p in dsn.split())
    url = f"postgresql://{kv['user']}@{kv['host']}:{kv['port']}/{kv['dbname']}"
    conn = await asyncpg.connect(url, statement_cache_size=0)
    got = []
    try:
        for i in range(n):
            row = await conn.fetchrow(
                "select a, a + $1::int as b from described_t where a = $2", i, i % 2 + 1
            )
            got.append([row["a"], row["b"]])
    finally:
        await conn.close()
    print(json.dumps(got))


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
