"""psycopg 3 notifications via conn.notifies(), sent by a second connection."""
import json
import sys
import threading

import psycopg

dsn, sender_dsn = sys.argv[1], sys.argv[2]
with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("listen pyc")

    def send():
        with psycopg.connect(sender_dsn, autocommit=True) as s:
            for i in range(3):
                s.execute("select pg_notify('pyc', %s)", (f"msg {i}",))

    t = threading.Thread(target=send)
    t.start()
    got = []
    for n in conn.notifies(timeout=20, stop_after=3):
        got.append([n.channel, n.payload])
    t.join()
    print(json.dumps(got))
