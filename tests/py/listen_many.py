"""Many psycopg 3 clients LISTENing through transaction pooling while other
clients run transactions, one of which sends the notifications; the pool's
listening connection is killed between two rounds. Each listener must get
exactly its channels' notifications, in order, in each round, and one
warning of the loss between them; no client may be pinned.

Prints a JSON summary: per round, the listeners whose notifications were
exactly right; the listeners warned once; the pool's pinned clients and
listening connections and channels at the start.

usage: listen_many.py DSN DIRECT_DSN ADMIN_DSN CLIENTS CHANNELS NOTES"""
import asyncio
import json
import sys
import time

import psycopg

dsn, direct_dsn, admin_dsn = sys.argv[1:4]
clients, channels, notes = (int(a) for a in sys.argv[4:7])


async def pools():
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as c:
        cur = await c.execute("SHOW POOLS")
        cols = [d.name for d in cur.description]
        row = dict(zip(cols, (await cur.fetchall())[0]))
        return [int(row["sv_pinned"]), int(row["sv_listening"]), int(row["listen_channels"])]


async def wait_pools(want):
    deadline = time.monotonic() + 30
    while (got := await pools())[1:] != want:
        if time.monotonic() > deadline:
            raise SystemExit(f"pools {got}, wanted listening {want}")
        await asyncio.sleep(0.05)


async def work(w, rnd):
    """A client running transactions; client 0 also notifies, each
    notification committed before the next, and ends the round on "All"."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        for i in range(notes):
            async with c.transaction():
                await c.execute("INSERT INTO listen_many VALUES (%s, %s)", (w, i))
                if w == 0:
                    await c.execute("SELECT pg_notify(%s, %s)", (f"ch{i % channels}", f"{rnd}-{i}"))
        if w == 0:
            await c.execute("SELECT pg_notify('All', %s)", (f"end-{rnd}",))


async def hear(conn, rnd):
    got = []
    async for n in conn.notifies(timeout=60):
        got.append([n.channel, n.payload])
        if n.channel == "All":
            break
    return got


async def told(conn, warnings):
    """Reads until the client has a warning (at most 30 s)."""
    deadline = time.monotonic() + 30
    while not warnings and time.monotonic() < deadline:
        async for _ in conn.notifies(timeout=0.2):
            raise SystemExit("a notification while none was sent")


def wanted(i, rnd):
    ch = i % channels
    mine = [[f"ch{ch}", f"{rnd}-{k}"] for k in range(notes) if k % channels == ch]
    return mine + [["All", f"end-{rnd}"]]


async def main():
    async with await psycopg.AsyncConnection.connect(direct_dsn, autocommit=True) as d:
        await d.execute("CREATE TABLE IF NOT EXISTS listen_many (w int, i int)")
    warned = [[] for _ in range(clients)]
    listeners = []
    for i in range(clients):
        c = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        c.add_notice_handler(lambda d, i=i: warned[i].append(d.message_primary))
        await c.execute(f"LISTEN ch{i % channels}")
        await c.execute('LISTEN "All"')
        listeners.append(c)
    start = await pools()
    exact = []
    for rnd in range(2):
        if rnd == 1:
            # The listening connection (its last query a LISTEN, or the
            # empty one it sends after notifications) is killed.
            async with await psycopg.AsyncConnection.connect(direct_dsn, autocommit=True) as d:
                cur = await d.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    " AND (query = '' OR query ILIKE 'listen%%')"
                )
                killed = [r[0] for r in await cur.fetchall()]
                if killed != [True]:
                    raise SystemExit(f"killed {killed}")
            # Each listener is told, and the channels are listened on again.
            await asyncio.gather(*(told(c, warned[i]) for i, c in enumerate(listeners)))
            await wait_pools([1, channels + 1])
        heard = asyncio.gather(*(hear(c, rnd) for c in listeners))
        await asyncio.gather(*(work(w, rnd) for w in range(5)))
        got = await heard
        exact.append(sum(g == wanted(i, rnd) for i, g in enumerate(got)))
    once = sum(len(w) == 1 and "may be missing" in w[0] for w in warned)
    for c in listeners:
        await c.close()
    print(json.dumps({"exact": exact, "warned_once": once, "pools": start}))


asyncio.run(main())
