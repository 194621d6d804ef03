"""Driven by bench/shared.sh: asyncpg clients with their statement caches
through onetrip sharing statements, onetrip not sharing them, and
PgBouncer; rounds alternating the order; median queries per second."""
import asyncio
import statistics
import sys
import time

import asyncpg

pg, shared, unshared, pgbouncer, rounds, clients, texts, queries = (
    int(a) for a in sys.argv[1:]
)
# One text per "endpoint" of an application: the same on every client.
SQL = [f"select aid, abalance + {t} from bench_accounts where aid = $1" for t in range(texts)]


async def client(port, n, seed):
    conn = await asyncpg.connect(
        host="127.0.0.1", port=port, user="postgres", database="postgres",
    )
    try:
        for i in range(n):
            row = await conn.fetchrow(SQL[(seed + i) % texts], i % 1000 + 1)
            if row[1] != (seed + i) % texts:
                raise SystemExit(f"wrong answer on port {port}: {row}")
    finally:
        await conn.close()


async def run(port):
    start = time.perf_counter()
    await asyncio.gather(*(client(port, queries, c) for c in range(clients)))
    return clients * queries / (time.perf_counter() - start)


async def main():
    setup = await asyncpg.connect(host="127.0.0.1", port=pg, user="postgres", database="postgres")
    await setup.execute(
        "create table if not exists bench_accounts (aid int primary key, abalance int);"
        "insert into bench_accounts select i, 0 from generate_series(1, 1000) i on conflict do nothing"
    )
    await setup.close()
    targets = {"onetrip": shared, "unshared": unshared, "pgbouncer": pgbouncer}
    qps = {t: [] for t in targets}
    for r in range(rounds):
        order = list(targets) if r % 2 == 0 else list(reversed(targets))
        for t in order:
            qps[t].append(await run(targets[t]))
    med = {t: statistics.median(v) for t, v in qps.items()}
    print(f"{clients} clients x {queries} queries over {texts} texts, {rounds} rounds, median queries/s:")
    for t, v in med.items():
        print(f"  {t:10} {v:10.0f}")
    print(f"  onetrip / unshared: {med['onetrip'] / med['unshared']:.2f}x")
    print(f"  onetrip / pgbouncer: {med['onetrip'] / med['pgbouncer']:.2f}x")


asyncio.run(main())
