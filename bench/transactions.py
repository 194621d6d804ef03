"""Times short transactions through three proxies taking turns, round by
round: all of onetrip's savings off, its defaults, and lazy_reads. Run by
bench/transactions.sh, which starts the server and the proxies.

usage: transactions.py OFF_PORT DEFAULTS_PORT LAZY_PORT [ROUNDS] [REQUESTS]

Prints, per request kind, the median time per request of each target and
the speedup over "all off".
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "py"))
import psycopg  # noqa: E402
import tx_clients  # noqa: E402

SCENARIOS = ["psycopg_read", "psycopg_write", "sqlalchemy_get", "sqlalchemy_update"]
SETUP = (
    "drop table if exists tx_users; "
    "create table tx_users(id int primary key, name text not null, score int not null); "
    "insert into tx_users select g, 'user ' || g, g from generate_series(1, 10) g"
)


def dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


def main():
    ports = [int(p) for p in sys.argv[1:4]]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 200
    names = ["all off", "defaults", "lazy_reads"]
    with psycopg.connect(dsn(ports[0]), autocommit=True) as c:
        c.execute(SETUP)
    print(f"{rounds} rounds of {n} requests per target, targets in turn; median ms per request")
    print(f"{'request':<20}" + "".join(f"{x:>12}" for x in names) + f"{'defaults':>10}{'lazy':>8}")
    for scenario in SCENARIOS:
        run = getattr(tx_clients, scenario)
        times = {p: [] for p in ports}
        for r in range(rounds):
            # Alternate the order so that no target always runs first.
            order = ports if r % 2 == 0 else ports[::-1]
            for p in order:
                t0 = time.perf_counter()
                run(dsn(p), n)
                times[p].append((time.perf_counter() - t0) / n * 1000)
        med = [statistics.median(times[p]) for p in ports]
        print(
            f"{scenario:<20}"
            + "".join(f"{m:>12.3f}" for m in med)
            + f"{med[0] / med[1]:>9.2f}x{med[0] / med[2]:>7.2f}x"
        )


if __name__ == "__main__":
    main()
