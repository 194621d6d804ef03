"""psycopg 3 executemany (pipelined by psycopg), with and without RETURNING."""
import json
import sys

import psycopg

with psycopg.connect(sys.argv[1]) as conn:
    conn.execute("drop table if exists em; create table em (id int primary key, v text, f float8)")
    rows = [(i, f"v{i}" * (i % 5), i / 3) for i in range(1000)]
    with conn.cursor() as cur:
        cur.executemany("insert into em values (%s, %s, %s)", rows)
        cur.executemany("update em set v = v || '!' where id = %s returning id, v", [(i,) for i in range(0, 1000, 97)],
                        returning=True)
        returned = []
        while True:
            returned.extend(cur.fetchall())
            if not cur.nextset():
                break
    conn.commit()
    out = {
        "returned": returned,
        "summary": conn.execute("select count(*), sum(id), string_agg(v, ',' order by id) from em").fetchone(),
    }
    print(json.dumps(out))
