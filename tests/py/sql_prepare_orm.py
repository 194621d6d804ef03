"""A small ORM in the style of PDO's and Rails' statement caches (one
named statement per query of a model, prepared once per connection and
run by name), that prepares with SQL's PREPARE and runs with EXECUTE,
its arguments quoted as literals, as code that prepares in SQL does; for
tests/tests/pooling_sql_prepared.rs. Many clients in autocommit, each on
its own connection, every one using the same statement names (one of them
for a statement of its own); every result is checked.

usage: sql_prepare_orm.py DSN CLIENTS
The table orm_users(id int primary key, name text, visits int) exists.
Prints "ok N clients" when every check passed.
"""
import sys
import threading
import traceback

import psycopg
from psycopg import sql


class Model:
    """One connection's statements: prepared once, executed by name."""

    def __init__(self, conn, client):
        self.conn = conn
        self.statements = {
            "users_find": "SELECT id, name, visits FROM orm_users WHERE id = $1",
            "users_insert": "INSERT INTO orm_users (id, name, visits) VALUES ($1, $2, 0)",
            "users_visit": "UPDATE orm_users SET visits = visits + 1 WHERE id = $1 RETURNING visits",
            "users_mine": "SELECT count(*) FROM orm_users WHERE id / 1000 = $1",
            # The same name for a statement of each client's own.
            "whoami": f"SELECT {client}::int AS me",
        }
        self.types = {
            "users_find": "(int)",
            "users_insert": "(int, text)",
            "users_visit": "(int)",
            "users_mine": "(int)",
            "whoami": "",
        }
        for name in self.statements:
            self.prepare(name)

    def prepare(self, name):
        self.conn.execute(f"PREPARE {name} {self.types[name]} AS {self.statements[name]}")

    def execute(self, name, *args):
        if args:
            lits = sql.SQL(", ").join(sql.Literal(a) for a in args).as_string(self.conn)
            text = f"EXECUTE {name}({lits})"
        else:
            text = f"EXECUTE {name}"
        cur = self.conn.execute(text)
        return cur.fetchall() if cur.description else cur.statusmessage


def client(dsn, n, errors):
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            m = Model(conn, n)
            base = n * 1000
            for i in range(10):
                tag = m.execute("users_insert", base + i, f"user {n}.{i}")
                assert tag == "INSERT 0 1", tag
                w = m.execute("whoami"); assert w == [(n,)], w
            for i in range(10):
                rows = m.execute("users_find", base + i)
                assert rows == [(base + i, f"user {n}.{i}", 0)], rows
                assert m.execute("users_visit", base + i) == [(1,)]
            # A transaction block of EXECUTEs, and one rolled back.
            with conn.transaction():
                for i in range(3):
                    m.execute("users_visit", base + i)
            try:
                with conn.transaction():
                    m.execute("users_visit", base + 9)
                    conn.execute("SELECT 1/0")
            except psycopg.errors.DivisionByZero:
                pass
            # psycopg sends DEALLOCATE ALL after a rollback: prepared again.
            for name in m.statements:
                m.prepare(name)
            assert m.execute("users_find", base + 9) == [(base + 9, f"user {n}.9", 1)]
            assert m.execute("users_find", base) == [(base, f"user {n}.0", 2)]
            assert m.execute("users_mine", n) == [(10,)]
            # Errors as on a connection of its own.
            try:
                m.prepare("whoami")
                raise AssertionError("PREPARE of a name in use succeeded")
            except psycopg.errors.DuplicatePreparedStatement:
                pass
            conn.execute("DEALLOCATE whoami")
            try:
                m.execute("whoami")
                raise AssertionError("EXECUTE of a deallocated statement succeeded")
            except psycopg.errors.InvalidSqlStatementName:
                pass
            m.prepare("whoami")
            assert m.execute("whoami") == [(n,)]
            conn.execute("DEALLOCATE ALL")
            try:
                m.execute("users_find", base)
                raise AssertionError("EXECUTE after DEALLOCATE ALL succeeded")
            except psycopg.errors.InvalidSqlStatementName:
                pass
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(f"client {n}: {traceback.format_exc()}")


def main():
    dsn, clients = sys.argv[1], int(sys.argv[2])
    errors = []
    threads = [
        threading.Thread(target=client, args=(dsn, n, errors)) for n in range(1, clients + 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"ok {clients} clients")


if __name__ == "__main__":
    main()
