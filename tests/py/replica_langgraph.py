"""LangGraph's Postgres checkpoint saver through onetrip with a lagging
replica behind it: each put is followed by get_tuple of what it put, and
of the thread's latest, which must be that put (a read that follows the
client's write must see it). Then, once the replica has caught up, the
thread's checkpoints are read back again (reads that follow no write,
which the replica may serve). Prints JSON: puts, stale reads, and the
checkpoints read back.

usage: replica_langgraph.py DSN N
"""

import json
import sys
import time

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

dsn, n = sys.argv[1], int(sys.argv[2])
thread = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
stale = 0
ids = []
with PostgresSaver.from_conn_string(dsn) as saver:
    # Its DDL has psycopg send DEALLOCATE ALL, which must not keep the
    # session's reads on the primary.
    saver.setup()
    for i in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = {"step": i}
        cfg = saver.put(thread, cp, {"source": "loop", "step": i, "parents": {}}, {})
        ids.append(cp["id"])
        got = saver.get_tuple(cfg)
        latest = saver.get_tuple(thread)
        if got is None or got.checkpoint["id"] != cp["id"]:
            stale += 1
        if latest is None or latest.checkpoint["id"] != cp["id"]:
            stale += 1
    # Long past the replica's delay: it has replayed every put.
    time.sleep(1)
    listed = [t.checkpoint["id"] for t in saver.list(thread)]
    back = sum(
        1
        for cid in ids
        if (t := saver.get_tuple({"configurable": {**thread["configurable"], "checkpoint_id": cid}}))
        is not None
        and t.checkpoint["id"] == cid
    )
print(json.dumps({"puts": n, "stale": stale, "listed": len(listed), "read_back": back,
                  "newest_first": listed[:1] == ids[-1:]}))
