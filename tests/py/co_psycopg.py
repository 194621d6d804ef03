"""psycopg 3 pipeline scenarios for coalescing; prints one JSON document.

usage: co_psycopg.py DSN scenario
Each scenario's output (rows, errors with SQLSTATE, transaction status) must
be the same direct and through the proxy.
"""
import json
import sys

import psycopg
from psycopg import pq


def err(e):
    return {"error": type(e).__name__, "sqlstate": getattr(e, "sqlstate", None)}


def status(conn):
    return pq.TransactionStatus(conn.info.transaction_status).name


def lone_reads(conn, n):
    out = []
    for i in range(n):
        with conn.pipeline():
            out.append(conn.execute("select %s::int * 2 as x", (i,)).fetchall())
    return out


def scenario(conn, name):
    conn.execute("create table if not exists co(id int primary key, v int)")
    conn.execute("truncate co")
    conn.execute("insert into co select g, g from generate_series(1, 5) g")
    out = []
    if name == "lone":
        out = lone_reads(conn, 1)
    elif name == "many":
        out = lone_reads(conn, 200)
    elif name == "failing":
        try:
            with conn.pipeline():
                conn.execute("select 1/0").fetchall()
        except psycopg.Error as e:
            out.append(err(e))
        out.append(status(conn))
        out.append(conn.execute("select 1").fetchall())
    elif name == "more_before_sync":
        try:
            with conn.pipeline():
                c1 = conn.execute("select v from co where id = 1")
                out.append(c1.fetchall())
                c2 = conn.execute("select v from co where id = 2")
                c3 = conn.execute("select 1/0")
                c4 = conn.execute("select 3")
                out.append(c2.fetchall())
                out.append(c3.fetchall())
        except psycopg.Error as e:
            out.append(err(e))
        out.append(conn.execute("select count(*) from co").fetchall())
    elif name == "block":
        with conn.transaction():
            with conn.pipeline():
                out.append(conn.execute("select v from co where id = 3").fetchall())
            with conn.pipeline():
                conn.execute("update co set v = v + 100 where id = 3")
            out.append(status(conn))
        out.append(conn.execute("select v from co where id = 3").fetchall())
    elif name == "write":
        with conn.pipeline():
            out.append(conn.execute("insert into co values (6, 6) returning id").fetchall())
        out.append(conn.execute("select count(*) from co").fetchall())
    elif name == "cte_no_rows":
        with conn.pipeline():
            out.append(conn.execute(
                "with u as (update co set v = v where id < 0 returning id) select count(*) from u").fetchall())
    elif name == "cte_rows":
        for _ in range(2):
            with conn.pipeline():
                out.append(conn.execute(
                    "with u as (update co set v = v + 1 where id <= 2 returning id, v) "
                    "select * from u order by id").fetchall())
        out.append(conn.execute("select id, v from co order by id").fetchall())
    elif name == "set_config":
        with conn.pipeline():
            out.append(conn.execute("select set_config('x.y', '1', true)").fetchall())
    elif name == "repeatable_read":
        conn.execute("set default_transaction_isolation = 'repeatable read'")
        out = lone_reads(conn, 3)
    else:
        raise SystemExit(f"unknown scenario {name}")
    out.append(status(conn))
    return out


def main():
    dsn, name = sys.argv[1], sys.argv[2]
    with psycopg.connect(dsn, autocommit=True) as conn:
        print(json.dumps(scenario(conn, name), default=str))


if __name__ == "__main__":
    main()
