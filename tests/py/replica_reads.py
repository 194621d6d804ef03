"""Write-then-read sequences through onetrip with a replica behind it:
each read must see the write before it. Prints JSON: stale reads, and
reads a replica served (pg_is_in_recovery() true)."""

import json
import sys
import time

import psycopg

dsn, n = sys.argv[1], int(sys.argv[2])
stale = 0
on_replica = 0
with psycopg.connect(dsn, autocommit=True) as conn:
    for i in range(n):
        conn.execute(f"UPDATE rw SET v = {i} WHERE id = 1")
        # Simple protocol (no parameters): may go to a replica.
        (v,) = conn.execute("SELECT v FROM rw WHERE id = 1").fetchone()
        stale += v != i
        # Extended protocol: may go to a replica too, and must agree.
        (v,) = conn.execute("SELECT v FROM rw WHERE id = %s", (1,)).fetchone()
        stale += v != i
        if i % 100 == 99:
            # Long enough for the replica to replay the last write: the
            # next reads may go there, and still see it.
            time.sleep(0.1)
            (r, v) = conn.execute(
                "SELECT pg_is_in_recovery(), v FROM rw WHERE id = 1"
            ).fetchone()
            on_replica += r
            stale += v != i
print(json.dumps({"stale": stale, "on_replica": on_replica}))
