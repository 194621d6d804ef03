"""Short transactions as applications run them, for tests/tests/tx_clients.rs
and bench/transactions.py; prints one JSON document of what each request
returned and the table afterwards.

usage: tx_clients.py DSN scenario N
The table tx_users(id, name, score) exists, with rows 1..10.
"""
import asyncio
import json
import sys

import psycopg


def table(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("select id, name, score from tx_users order by id").fetchall()


def psycopg_read(dsn, n):
    out = []
    with psycopg.connect(dsn) as conn:  # autocommit off: psycopg sends BEGIN
        for i in range(n):
            cur = conn.execute("select name, score from tx_users where id = %s", (i % 10 + 1,))
            out.append(cur.fetchone())
            conn.commit()
    return out


def psycopg_write(dsn, n):
    out = []
    with psycopg.connect(dsn) as conn:
        for i in range(n):
            cur = conn.execute(
                "update tx_users set score = score + 1 where id = %s", (i % 10 + 1,)
            )
            out.append(cur.rowcount)
            conn.commit()
    return out


def sqlalchemy_engine(dsn):
    from sqlalchemy import create_engine

    return create_engine(url(dsn, "postgresql+psycopg"))


def sqlalchemy_models():
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "tx_users"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str]
        score: Mapped[int]

    return User


def sqlalchemy_get(dsn, n):
    from sqlalchemy.orm import Session

    User = sqlalchemy_models()
    engine = sqlalchemy_engine(dsn)
    out = []
    for i in range(n):
        with Session(engine) as s:
            u = s.get(User, i % 10 + 1)
            out.append([u.name, u.score])
    engine.dispose()
    return out


def sqlalchemy_update(dsn, n):
    from sqlalchemy.orm import Session

    User = sqlalchemy_models()
    engine = sqlalchemy_engine(dsn)
    out = []
    for i in range(n):
        with Session(engine) as s:
            u = s.get(User, i % 10 + 1)
            u.score += 1
            out.append(u.score)
            s.commit()
    engine.dispose()
    return out


def url(dsn, scheme="postgresql"):
    parts = dict(p.split("=", 1) for p in dsn.split())
    return "{}://{}@{}:{}/{}".format(
        scheme, parts["user"], parts["host"], parts["port"], parts["dbname"]
    )


async def asyncpg_transaction(dsn, n):
    import asyncpg

    conn = await asyncpg.connect(url(dsn))
    out = []
    try:
        for i in range(n):
            async with conn.transaction():
                out.append(
                    await conn.execute(
                        "update tx_users set score = score + 1 where id = $1", i % 10 + 1
                    )
                )
    finally:
        await conn.close()
    return out


async def asyncpg_fetchrow(dsn, n):
    import asyncpg

    conn = await asyncpg.connect(url(dsn))
    out = []
    try:
        for i in range(n):
            row = await conn.fetchrow("select name, score from tx_users where id = $1", i % 10 + 1)
            out.append(list(row))
    finally:
        await conn.close()
    return out


def langgraph_saver(dsn, n, get):
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres import PostgresSaver

    out = []
    with PostgresSaver.from_conn_string(dsn) as saver:
        for i in range(n):
            config = {"configurable": {"thread_id": f"t{i % 10}", "checkpoint_ns": ""}}
            if get:
                t = saver.get_tuple(config)
                out.append(t.checkpoint["channel_values"] if t else None)
            else:
                cp = empty_checkpoint()
                cp["id"] = f"00000000-0000-0000-0000-{i:012d}"
                cp["ts"] = "2026-01-01T00:00:00+00:00"
                cp["channel_values"] = {"n": i}
                saver.put(config, cp, {"step": i}, {})
                out.append(i)
    return out


def pipeline_error_after_begin(dsn, n):
    """BEGIN, then in pipeline mode a failing statement with neither Sync
    nor Flush after it: libpq's bytes, and PostgreSQL answers at once."""
    import select
    from psycopg import pq

    out = []
    for _ in range(n):
        conn = psycopg.connect(dsn, autocommit=True)
        pg = conn.pgconn
        pg.exec_(b"BEGIN")
        pg.enter_pipeline_mode()
        pg.send_query_params(b"select 1/0", None)
        pg.flush()
        r, _, _ = select.select([pg.socket], [], [], 3)
        if r:
            pg.consume_input()
            while pg.is_busy():
                select.select([pg.socket], [], [], 1)
                pg.consume_input()
            res = pg.get_result()
            out.append(res.error_field(pq.DiagnosticField.SQLSTATE).decode())
        else:
            out.append("no answer within 3 s")
        pg.finish()
    return out


def main():
    dsn, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runs = {
        "psycopg_read": psycopg_read,
        "psycopg_write": psycopg_write,
        "sqlalchemy_get": sqlalchemy_get,
        "sqlalchemy_update": sqlalchemy_update,
        "asyncpg_transaction": lambda d, k: asyncio.run(asyncpg_transaction(d, k)),
        "asyncpg_fetchrow": lambda d, k: asyncio.run(asyncpg_fetchrow(d, k)),
        "langgraph_put": lambda d, k: langgraph_saver(d, k, False),
        "pipeline_error_after_begin": pipeline_error_after_begin,
        "langgraph_get": lambda d, k: langgraph_saver(d, k, True),
    }
    if scenario == "langgraph_setup":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
        return
    out = runs[scenario](dsn, n)
    print(json.dumps({"requests": out, "table": table(dsn)}, default=str))


if __name__ == "__main__":
    main()
