"""Many clients with prepared statements, for tests/tests/pooling_clients.rs:
run direct and through onetrip in transaction pooling, the output must be
the same. Prints one JSON document of what each client read.

usage: pool_clients.py DSN psycopg|asyncpg CLIENTS
The table pool_items(id int, name text) exists, with rows 1..20.
"""
import asyncio
import json
import sys
import threading

import psycopg


def psycopg_client(dsn, client, out):
    got = []
    # prepare_threshold=5 is psycopg's default: each statement is prepared
    # (a named Parse) on its fifth run, then Bound by name.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(12):
            row = conn.execute(
                "select name, %s::int from pool_items where id = %s", (client, i % 20 + 1)
            ).fetchone()
            got.append(list(row))
            # Prepared at once, under a name every client uses.
            row = conn.execute(
                "select count(*) + %s::int from pool_items", (client,), prepare=True
            ).fetchone()
            got.append(row[0])
            with conn.transaction():
                cur = conn.execute(
                    "select sum(id) + %s::int from pool_items where id <= %s", (client, i)
                )
                got.append(cur.fetchone()[0])
        # Room for two prepared statements: each new one evicts the oldest,
        # which psycopg closes (a Close and a Sync of their own with libpq
        # 17 and later, DEALLOCATE before).
        conn.prepared_max = 2
        for i in range(3):
            for k in range(4):
                row = conn.execute(
                    f"select {k} + %s::int from pool_items where id = %s",
                    (client, i + 1),
                    prepare=True,
                ).fetchone()
                got.append(row[0])
    out[client] = got


def psycopg_run(dsn, n):
    out = {}
    threads = [threading.Thread(target=psycopg_client, args=(dsn, c, out)) for c in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [out.get(c) for c in range(n)]


async def asyncpg_client(dsn, client):
    import asyncpg

    got = []
    # The statement cache is on (asyncpg's default): each text is prepared
    # once under a name of asyncpg's own, the same names on every connection.
    conn = await asyncpg.connect(dsn)
    try:
        for i in range(12):
            row = await conn.fetchrow(
                "select name, $1::int as c from pool_items where id = $2", client, i % 20 + 1
            )
            got.append([row["name"], row["c"]])
            got.append(await conn.fetchval("select count(*) + $1 from pool_items", client))
            async with conn.transaction():
                got.append(
                    await conn.fetchval(
                        "select coalesce(sum(id), 0) + $1 from pool_items where id <= $2",
                        client,
                        i,
                    )
                )
    finally:
        await conn.close()
    return got


async def asyncpg_run(dsn, n):
    return await asyncio.gather(*(asyncpg_client(dsn, c) for c in range(n)))


def main():
    dsn, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if scenario == "psycopg":
        out = psycopg_run(dsn, n)
    else:
        # asyncpg takes a URL.
        kv = dict(p.split("=", 1) for p in dsn.split())
        url = f"postgresql://{kv['user']}@{kv['host']}:{kv['port']}/{kv['dbname']}"
        out = asyncio.run(asyncpg_run(url, n))
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
