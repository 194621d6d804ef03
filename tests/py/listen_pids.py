"""psycopg 3 LISTEN through transaction pooling: a notification names its
sender by the pid that sender was told at login (conn.info.backend_pid),
its own included; one sent from elsewhere (`other_dsn`, a direct
connection) keeps its backend's pid. Prints what it heard, then SHOW POOLS'
pinned count and listening connections when an admin DSN is given."""
import json
import sys

import psycopg

dsn, other_dsn = sys.argv[1], sys.argv[2]
admin = sys.argv[3] if len(sys.argv) > 3 else None
got = []
with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(other_dsn, autocommit=True) as b:
    a.execute("LISTEN pids")
    a.execute("NOTIFY pids, 'own'")
    for n in a.notifies(timeout=20, stop_after=1):
        got.append([n.channel, n.payload, n.pid == a.info.backend_pid])
    b.execute("SELECT pg_notify('pids', 'other')")
    for n in a.notifies(timeout=20, stop_after=1):
        got.append([n.channel, n.payload, n.pid == b.info.backend_pid])
    if admin:
        with psycopg.connect(admin, autocommit=True) as c:
            cur = c.execute("SHOW POOLS")
            cols = [d.name for d in cur.description]
            for row in cur.fetchall():
                r = dict(zip(cols, row))
                got.append(["pools", r["sv_pinned"], r["sv_listening"]])
print(json.dumps(got))
