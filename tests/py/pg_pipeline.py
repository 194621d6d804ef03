"""psycopg 3 pipeline mode: several queries sent before any result is read,
including one that fails. Prints the results as JSON."""
import json
import sys

import psycopg

with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    out = {}
    conn.execute("drop table if exists pl; create table pl (id int primary key, v text)")
    with conn.pipeline():
        c1 = conn.execute("insert into pl values (%s, %s) returning id", (1, "one"))
        c2 = conn.execute("select %s::int + %s::int", (40, 2))
        c3 = conn.execute("select v from pl where id = %s", (1,))
        c4 = conn.execute("select g, md5(g::text) from generate_series(1, %s) g", (500,))
    out["ok"] = [c1.fetchall(), c2.fetchall(), c3.fetchall(), c4.fetchall()]
    # An error inside a pipeline aborts what follows up to the next sync.
    try:
        with conn.pipeline():
            conn.execute("insert into pl values (2, 'two')")
            conn.execute("select 1/0")
            conn.execute("insert into pl values (3, 'three')")
    except psycopg.Error as e:
        out["error"] = e.sqlstate
    out["after"] = conn.execute("select id, v from pl order by id").fetchall()
    print(json.dumps(out))
