"""Driven by bench/described.sh: asyncpg without a statement cache through
onetrip and PgBouncer, rounds alternating; medians and their ratio."""
import asyncio
import statistics
import sys
import time

import asyncpg

pg, onetrip, pgbouncer, rounds, clients, queries = (int(a) for a in sys.argv[1:])
SQL = "select aid, abalance + $1::int from bench_accounts where aid = $2"


async def client(port, n):
    conn = await asyncpg.connect(
        host="127.0.0.1", port=port, user="postgres", database="postgres",
        statement_cache_size=0,
    )
    try:
        for i in range(n):
            await conn.fetchrow(SQL, i, i % 1000 + 1)
    finally:
        await conn.close()


async def run(port):
    start = time.perf_counter()
    await asyncio.gather(*(client(port, queries) for _ in range(clients)))
    return clients * queries / (time.perf_counter() - start)


async def main():
    setup = await asyncpg.connect(host="127.0.0.1", port=pg, user="postgres", database="postgres")
    await setup.execute(
        "create table if not exists bench_accounts (aid int primary key, abalance int);"
        "insert into bench_accounts select i, 0 from generate_series(1, 1000) i on conflict do nothing"
    )
    await setup.close()
    targets = {"onetrip": onetrip, "pgbouncer": pgbouncer}
    qps = {t: [] for t in targets}
    for r in range(rounds):
        order = list(targets) if r % 2 == 0 else list(reversed(targets))
        for t in order:
            qps[t].append(await run(targets[t]))
    med = {t: statistics.median(v) for t, v in qps.items()}
    print(f"{clients} clients x {queries} queries, {rounds} rounds, median queries/s:")
    for t, v in med.items():
        print(f"  {t:10} {v:10.0f}")
    print(f"  onetrip / pgbouncer: {med['onetrip'] / med['pgbouncer']:.2f}x")


asyncio.run(main())
