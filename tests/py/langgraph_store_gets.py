"""LangGraph PostgresStore: N gets, for tests/tests/measure.rs.

usage: langgraph_store_gets.py SETUP_DSN N
setup() and one put run on SETUP_DSN (direct to PostgreSQL), so only the N
store.get calls go through the proxy named by DATABASE_URL (set by
`onetrip measure`). Prints how many gets found the item.
"""
import os
import sys

from langgraph.store.postgres import PostgresStore

setup_dsn, n = sys.argv[1], int(sys.argv[2])
with PostgresStore.from_conn_string(setup_dsn) as store:
    store.setup()
    store.put(("users", "u1"), "prefs", {"theme": "dark"})

found = 0
with PostgresStore.from_conn_string(os.environ["DATABASE_URL"]) as store:
    for _ in range(n):
        if store.get(("users", "u1"), "prefs") is not None:
            found += 1
print(found)
