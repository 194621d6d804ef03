"""Times LangGraph PostgresStore gets and searches through one DSN.

usage: bench_langgraph.py DSN setup | DSN run GETS SEARCHES
Prints {"get_s": ..., "search_s": ...}: seconds for the loop only, after
the connection is open.
"""
import json
import sys
import time

from langgraph.store.postgres import PostgresStore

NS = ("bench", "docs")


def main():
    dsn, mode = sys.argv[1], sys.argv[2]
    with PostgresStore.from_conn_string(dsn) as store:
        if mode == "setup":
            store.setup()
            for i in range(50):
                store.put(NS, f"k{i}", {"i": i, "text": "x" * 200})
            return
        gets, searches = int(sys.argv[3]), int(sys.argv[4])
        store.get(NS, "k0")  # warm: statement prepared, caches filled
        t0 = time.perf_counter()
        for i in range(gets):
            store.get(NS, f"k{i % 50}")
        t1 = time.perf_counter()
        for i in range(searches):
            store.search(NS, limit=10, offset=i % 5)
        t2 = time.perf_counter()
        print(json.dumps({"get_s": t1 - t0, "search_s": t2 - t1}))


if __name__ == "__main__":
    main()
