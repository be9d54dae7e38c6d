"""The path-mtu kind's bulk TCP transfer, both ends: a program run by the node's Python with `python -c`
(a real host's own: this module imports the standard library only).

`receive PORT BYTES DEADLINE_S` listens, takes one connection and reads until it has BYTES, the
sender closes, or DEADLINE_S seconds have passed since it connected; then prints one JSON line: the
bytes it got, the seconds that took (to the last byte, or to the deadline), the longest stretch
without a byte (the stall: before the first one, between two, or after the last one until the
deadline when the transfer did not complete) and whether it completed.
`send ADDRESS PORT BYTES DEADLINE_S` connects and writes BYTES, giving up at the deadline.

The receiver's count is the truth: what a sender wrote may still sit in its socket buffer, which
is where a path MTU black hole holds it (the handshake's small segments pass, the full-size ones
vanish).
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 1 << 16
CONNECT_WAIT_S = 10  # the receiver's wait for its one connection


def receive(port: int, expected: int, deadline_s: float) -> dict:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    server.settimeout(CONNECT_WAIT_S)
    print("listening", flush=True)
    try:
        conn, _ = server.accept()
    except socket.timeout:
        return {"bytes": 0, "seconds": 0.0, "longest_gap_s": 0.0, "complete": False, "connected": False}
    started = last = time.monotonic()
    end = started + deadline_s
    got, gap = 0, 0.0
    with conn:
        while got < expected:
            left = end - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(min(left, 0.5))
            try:
                data = conn.recv(CHUNK)
            except socket.timeout:
                continue
            if not data:
                break
            now = time.monotonic()
            gap = max(gap, now - last)
            got, last = got + len(data), now
    complete = got >= expected
    finished = last if complete else min(time.monotonic(), end)
    if not complete:
        gap = max(gap, finished - last)
    return {"bytes": got, "seconds": finished - started, "longest_gap_s": gap, "complete": complete,
            "connected": True}


def send(address: str, port: int, size: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    with socket.create_connection((address, port), timeout=min(deadline_s, CONNECT_WAIT_S)) as conn:
        block = b"\0" * CHUNK
        sent = 0
        while sent < size:
            left = end - time.monotonic()
            if left <= 0:
                return
            conn.settimeout(left)
            try:
                sent += conn.send(block[:min(CHUNK, size - sent)])
            except socket.timeout:
                return
        conn.shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> int:
    if argv[0] == "receive":
        print(json.dumps(receive(int(argv[1]), int(argv[2]), float(argv[3]))), flush=True)
    else:
        try:
            send(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
        except OSError as exc:
            print(f"send: {exc}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
