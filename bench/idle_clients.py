"""RSS a proxy gains per idle client: N clients log in through it, each
runs one query, and all stay connected while the proxy's RSS is read
(/proc/PID/status). Prints "rss_start_kb rss_idle_kb per_client_bytes".

    python3 bench/idle_clients.py PORT PID N

Raw protocol, not a driver: the client side holds a socket per client and
nothing else, so N can be thousands."""

import socket
import struct
import sys
import time


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def read_until_ready(s: socket.socket) -> None:
    buf = b""
    while True:
        while len(buf) >= 5:
            tag, n = buf[0:1], struct.unpack("!I", buf[1:5])[0]
            if len(buf) < 1 + n:
                break
            if tag == b"E":
                raise SystemExit(f"server error: {buf[5:1 + n]!r}")
            buf = buf[1 + n:]
            if tag == b"Z":
                return
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk


def client(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    body = struct.pack("!I", 196608) + b"user\0postgres\0database\0postgres\0\0"
    s.sendall(struct.pack("!I", len(body) + 4) + body)
    read_until_ready(s)
    q = b"select 1\0"
    s.sendall(b"Q" + struct.pack("!I", len(q) + 4) + q)
    read_until_ready(s)
    return s


def main() -> None:
    port, pid, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    start = rss_kb(pid)
    clients = [client(port) for _ in range(n)]
    time.sleep(1.0)
    idle = rss_kb(pid)
    print(start, idle, round((idle - start) * 1024 / n))
    for c in clients:
        c.close()


main()
