"""The mixed workload of bench/replicas.sh, against one onetrip: for each
apply delay given, sets the replica's recovery_min_apply_delay (ALTER
SYSTEM on the replica SHOW REPLICAS names, then a reload), then runs
CLIENTS asyncpg clients for SECONDS, each on a row of its own: 10% writes
(UPDATE ... RETURNING the new value) and 90% reads of that row, with
pg_is_in_recovery() to tell who served them; a read that returns less
than the client's last write is stale. Prints one Markdown table row per
delay.

    python3 bench/replicas.py PORT LABEL CLIENTS SECONDS DELAYS BASE_TPS

DELAYS is comma-separated milliseconds ("-" for a run without replicas);
BASE_TPS the primary-alone throughput the ratio is of (0: this run's).
"""

import asyncio
import random
import sys
import time

import asyncpg

port, label, clients, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
delays, base = sys.argv[5].split(","), float(sys.argv[6])
DSN = f"postgresql://postgres@127.0.0.1:{port}/postgres"
ADMIN = f"postgresql://postgres@127.0.0.1:{port}/onetrip"


def replicas():
    """SHOW REPLICAS from the admin console, which takes simple queries
    only: (address, role) per replica."""
    import psycopg

    with psycopg.connect(ADMIN, autocommit=True, cursor_factory=psycopg.ClientCursor) as c:
        return [(r[0], r[1]) for r in c.execute("SHOW REPLICAS").fetchall()]


async def set_delay(ms):
    """The replica applies each commit `ms` late; waits until the proxy's
    watcher finds it serving reads again."""
    for addr, _ in replicas():
        host, rport = addr.rsplit(":", 1)
        rep = await asyncpg.connect(host=host, port=int(rport), user="postgres", database="postgres")
        await rep.execute(f"ALTER SYSTEM SET recovery_min_apply_delay = '{ms}ms'")
        await rep.execute("SELECT pg_reload_conf()")
        await rep.close()
    for _ in range(600):
        if all(role == "replica" for _, role in replicas()):
            break
        await asyncio.sleep(0.05)


async def client(i, deadline, out):
    conn = await asyncpg.connect(DSN)
    last = await conn.fetchval("SELECT v FROM kv WHERE id = $1", i)
    rng = random.Random(i)
    ops = reads = on_replica = stale = 0
    while time.monotonic() < deadline:
        if rng.random() < 0.1:
            last = await conn.fetchval("UPDATE kv SET v = v + 1 WHERE id = $1 RETURNING v", i)
        else:
            v, r = await conn.fetchrow("SELECT v, pg_is_in_recovery() FROM kv WHERE id = $1", i)
            reads += 1
            on_replica += r
            stale += v < last
        ops += 1
    await conn.close()
    out.append((ops, reads, on_replica, stale))


async def main():
    setup = await asyncpg.connect(DSN)
    # As onetrip runs its private server when it has replicas (a commit
    # streams as it is made): the primary alone commits the same way.
    await setup.execute("ALTER SYSTEM SET synchronous_commit = on")
    await setup.execute("SELECT pg_reload_conf()")
    await setup.execute("CREATE TABLE IF NOT EXISTS kv (id int PRIMARY KEY, v bigint NOT NULL)")
    await setup.execute(
        "INSERT INTO kv SELECT g, 0 FROM generate_series(0, $1::int - 1) g ON CONFLICT DO NOTHING",
        clients,
    )
    await setup.close()
    for d in delays:
        if d != "-":
            await set_delay(int(d))
        out = []
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(client(i, deadline, out) for i in range(clients)))
        ops, reads, on_replica, stale = (sum(x) for x in zip(*out))
        tps = ops / seconds
        ratio = tps / (base or tps)
        delay = "-" if d == "-" else f"{d} ms"
        print(
            f"| {delay} | {label} | {tps:,.0f} | {ratio:.2f}x | "
            f"{100 * on_replica / max(reads, 1):.1f}% | {stale} ({100 * stale / max(reads, 1):.2f}%) |",
            flush=True,
        )
        if base == 0:
            print(f"BASE {tps}", file=sys.stderr)


asyncio.run(main())
