"""Write-then-read sequences through onetrip with a lagging replica
behind it, from one client library (psycopg, asyncpg or sqlalchemy), its
queries with parameters (the extended protocol): each read must see the
write before it. Then reads that follow no write, which the replica must
serve. Prints JSON: stale reads, reads a replica served during the
sequences, and of the reads that followed no write, how many there were
and how many a replica served."""

import asyncio
import json
import sys
import time

client, dsn, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# asyncpg and SQLAlchemy take a URL.
p = dict(kv.split("=", 1) for kv in dsn.split())
url = f"postgresql://{p['user']}@{p['host']}:{p['port']}/{p['dbname']}"
READ = "SELECT v, pg_is_in_recovery() FROM rw WHERE id = %s"
UPDATE = "UPDATE rw SET v = %s WHERE id = 1"
# Reads with no write before them: on a new connection, and on the
# sequences' connection once the replica has replayed its last write.
FRESH = 20
# Who served each of those reads: r a replica, p the primary.
TRACE = []


def result(stale, on_replica, fresh_on_replica, read_only):
    print(
        json.dumps(
            {
                "stale": stale,
                "on_replica": on_replica,
                "fresh": 2 * FRESH,
                "fresh_on_replica": fresh_on_replica,
                "read_only": read_only,
                "trace": "".join("r" if r else "p" for r in TRACE),
            }
        )
    )


def run_psycopg():
    import psycopg

    stale = on_replica = fresh = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n):
            if i % 2 == 0:
                conn.execute(UPDATE, (i,))
            else:
                with conn.transaction():
                    conn.execute(UPDATE, (i,))
            # The same text each time: psycopg prepares it after a few
            # runs, and binds the prepared statement from then on.
            v, r = conn.execute(READ, (1,)).fetchone()
            stale += v != i
            on_replica += r
        time.sleep(0.2)
        for _ in range(FRESH):
            v, r = conn.execute(READ, (1,)).fetchone()
            stale += v != n - 1
            fresh += r
            TRACE.append(r)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(FRESH):
            v, r = conn.execute(READ, (1,)).fetchone()
            stale += v != n - 1
            fresh += r
            TRACE.append(r)
        # A read only transaction: both reads where it runs.
        conn.read_only = True
        with conn.transaction():
            ro = [conn.execute(READ, (1,)).fetchone() for _ in range(2)]
    result(stale, on_replica, fresh, [r for _, r in ro])


async def run_asyncpg():
    import asyncpg

    read = READ.replace("%s", "$1")
    update = UPDATE.replace("%s", "$1")
    stale = on_replica = fresh = 0
    conn = await asyncpg.connect(url)
    for i in range(n):
        if i % 2 == 0:
            await conn.execute(update, i)
        else:
            async with conn.transaction():
                await conn.execute(update, i)
        v, r = await conn.fetchrow(read, 1)
        stale += v != i
        on_replica += r
    await asyncio.sleep(0.2)
    for _ in range(FRESH):
        v, r = await conn.fetchrow(read, 1)
        stale += v != n - 1
        fresh += r
        TRACE.append(r)
    await conn.close()
    conn = await asyncpg.connect(url)
    # asyncpg prepares a statement with a Flush, not a Sync, and runs it
    # in the same implicit transaction: that first run stays with its
    # prepare on the primary. The runs after it may go to the replica.
    await conn.fetchrow(read, 1)
    for _ in range(FRESH):
        v, r = await conn.fetchrow(read, 1)
        stale += v != n - 1
        fresh += r
        TRACE.append(r)
    async with conn.transaction(readonly=True):
        ro = [await conn.fetchrow(read, 1) for _ in range(2)]
    await conn.close()
    result(stale, on_replica, fresh, [r for _, r in ro])


def run_sqlalchemy():
    from sqlalchemy import Column, Integer, create_engine, select, text, update
    from sqlalchemy.orm import Session, declarative_base

    Base = declarative_base()

    class Rw(Base):
        __tablename__ = "rw"
        id = Column(Integer, primary_key=True)
        v = Column(Integer)

    # Reads in autocommit: in a transaction block they stay on the primary.
    engine = create_engine(
        url.replace("postgresql:", "postgresql+psycopg:"), isolation_level="AUTOCOMMIT"
    )
    recovery = text("pg_is_in_recovery()")
    read = select(Rw.v, recovery).where(Rw.id == 1)
    stale = on_replica = fresh = 0
    with engine.connect() as conn, Session(bind=conn) as s:
        for i in range(n):
            if i % 2 == 0:
                conn.execute(update(Rw).where(Rw.id == 1).values(v=i))
            else:
                s.execute(update(Rw).where(Rw.id == 1).values(v=i))
            v, r = s.execute(read).one()
            stale += v != i
            on_replica += r
        time.sleep(0.2)
        for _ in range(FRESH):
            v, r = s.execute(read).one()
            stale += v != n - 1
            fresh += r
            TRACE.append(r)
    engine.dispose()
    with engine.connect() as conn:
        for _ in range(FRESH):
            v, r = conn.execute(read).one()
            stale += v != n - 1
            fresh += r
            TRACE.append(r)
    engine.dispose()
    # A read only transaction, begun by the driver.
    engine = create_engine(url.replace("postgresql:", "postgresql+psycopg:"))
    with engine.connect().execution_options(postgresql_readonly=True) as conn:
        ro = [conn.execute(read).one() for _ in range(2)]
        conn.commit()
    engine.dispose()
    result(stale, on_replica, fresh, [r for _, r in ro])


if client == "psycopg":
    run_psycopg()
elif client == "asyncpg":
    asyncio.run(run_asyncpg())
elif client == "sqlalchemy":
    run_sqlalchemy()
else:
    sys.exit(f"unknown client {client}")
