"""LangGraph's PostgresStore through a DSN; prints JSON for comparison.

usage: co_langgraph.py DSN setup|gets|ttl|async|batch [N]
"""
import asyncio
import json
import sys

from langgraph.store.base import GetOp, PutOp
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

NS = ("users", "prefs")


def item(it):
    return None if it is None else {"key": it.key, "ns": list(it.namespace), "value": it.value}


def main():
    dsn, mode = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    out = []
    if mode == "async":
        out = asyncio.run(run_async(dsn, n))
    else:
        ttl = {"default_ttl": 60, "refresh_on_read": True} if mode == "ttl" else None
        with PostgresStore.from_conn_string(dsn, ttl=ttl) as store:
            if mode == "setup":
                store.setup()
                for i in range(10):
                    store.put(NS, f"k{i}", {"i": i, "name": f"item {i}"})
            elif mode == "gets":
                for i in range(n):
                    out.append(item(store.get(NS, f"k{i % 12}")))
            elif mode == "ttl":
                store.put(("ttl",), "a", {"v": 1}, ttl=5)
                with store.conn.cursor() as cur:
                    before = cur.execute("select expires_at from store where prefix = 'ttl' and key = 'a'").fetchone()
                for _ in range(3):
                    out.append(item(store.get(("ttl",), "a")))
                with store.conn.cursor() as cur:
                    after = cur.execute("select expires_at from store where prefix = 'ttl' and key = 'a'").fetchone()
                out.append({"refreshed": after["expires_at"] > before["expires_at"]})
            elif mode == "batch":
                for r in range(n):
                    res = store.batch([
                        GetOp(NS, f"k{r % 10}"),
                        PutOp(("batch",), f"b{r}", {"r": r}),
                        GetOp(("batch",), f"b{r - 1}"),
                    ])
                    out.append([item(x) for x in res])
            else:
                raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(out, sort_keys=True))


async def run_async(dsn, n):
    out = []
    async with AsyncPostgresStore.from_conn_string(dsn) as store:
        for i in range(n):
            out.append(item(await store.aget(NS, f"k{i % 12}")))
    return out


if __name__ == "__main__":
    main()
