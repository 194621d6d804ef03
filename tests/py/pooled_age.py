"""psycopg clients that LOAD 'age' and read with Cypher, concurrently.

Usage: pooled_age.py DSN CLIENTS ROUNDS
Each client connects (autocommit), loads AGE, puts ag_catalog on its search
path and runs the same Cypher reads ROUNDS times, with pauses so that the
clients move between the pool's connections. Prints one line per query:
the rows as text, identical for every client and round (checked here).
"""

import sys
import threading
import time

import psycopg

QUERIES = [
    "SELECT * FROM cypher('pooled', $$ MATCH (p:Person) RETURN p.name ORDER BY p.name $$) AS (n agtype)",
    "SELECT * FROM cypher('pooled', $$ MATCH (a:Person)-[:KNOWS]->(b:Person) "
    "RETURN a.name, b.name ORDER BY a.name, b.name $$) AS (a agtype, b agtype)",
    "SELECT * FROM cypher('pooled', $$ MATCH (p:Person) WHERE p.age > 30 "
    "RETURN count(*) $$) AS (c agtype)",
]


def client(dsn, rounds, out, i):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = ag_catalog, "$user", public')
        for r in range(rounds):
            for n, q in enumerate(QUERIES):
                rows = [tuple(str(v) for v in row) for row in conn.execute(q).fetchall()]
                out.setdefault(n, set()).add(repr(rows))
            time.sleep(0.005 * ((i + r) % 3))


def main():
    dsn, clients, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {}
    threads = [
        threading.Thread(target=client, args=(dsn, rounds, out, i)) for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in range(len(QUERIES)):
        seen = out.get(n, set())
        if len(seen) != 1:
            sys.exit(f"query {n}: {len(seen)} different answers: {sorted(seen)}")
        print(next(iter(seen)))


if __name__ == "__main__":
    main()
