"""The background mix's clients: a program that background.py runs on the source node, by that
node's Python (a real host's own: this module imports the standard library only).

Its one argument is JSON: the sink's address and, per flow, its protocol, mean transactions per
second, the seed of its arrivals, the server's port and what a transaction fetches or sends. Each
flow starts transactions as a Poisson process; all are coroutines in one process (a program per
transaction, curl or dig, cost 25 ms of CPU here and tens of times that under the VM's software
emulation, where the mix alone saturated the guest). It prints "ready" once its window opens;
SIGTERM closes the window: transactions still open then may finish for DRAIN_S, and it prints one
JSON line, the window's length and each flow's counters, and exits.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import random
import re
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Awaitable, Callable

DRAIN_S = 10  # how long transactions open at the window's end may take to finish
MAX_IN_FLIGHT = 8  # per flow: beyond this the link is saturated and more clients only add CPU load
TRANSACTION_TIMEOUT_S = 60
POP3_USER = "office"
# Its process name (comm): the CPU meters count it with the workloads' programs, not as the VPN's,
# though in a remote-access study it runs in the client end's namespace.
NAME = "vpnlab-office"
PR_SET_NAME = 15


class ProtocolError(Exception):
    """A server's reply that is not the one the transaction needs."""


async def _expect(reader: asyncio.StreamReader, code: bytes) -> bytes:
    """One reply (FTP and SMTP: "123-" opens a multi-line one, "123 " ends it; POP3: "+OK");
    ProtocolError unless it starts with `code`."""
    first = line = await reader.readline()
    if first[3:4] == b"-":
        while line and not line.startswith(first[:3] + b" "):
            line = await reader.readline()
    if not first.startswith(code) or not line:
        raise ProtocolError(first.decode(errors="replace").strip() or "connection closed")
    return first


async def _command(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str, code: bytes) -> bytes:
    writer.write(line.encode() + b"\r\n")
    await writer.drain()
    return await _expect(reader, code)


async def _count_until_closed(reader: asyncio.StreamReader) -> int:
    total = 0
    while chunk := await reader.read(1 << 16):
        total += len(chunk)
    return total


class _Connection:
    """`async with _Connection(ip, port) as (reader, writer)`: closed however the transaction ends."""

    def __init__(self, ip: str, port: int):
        self.address = (ip, port)

    async def __aenter__(self):
        self.reader, self.writer = await asyncio.open_connection(*self.address)
        return self.reader, self.writer

    async def __aexit__(self, *exc) -> None:
        self.writer.transport.abort()  # nothing is left to say: do not wait for a slow link to close


async def _http(ip: str, port: int, name: str) -> int:
    async with _Connection(ip, port) as (reader, writer):
        writer.write(f"GET /{name} HTTP/1.0\r\nHost: {ip}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if status.split()[1:2] != [b"200"]:
            raise ProtocolError(status.decode(errors="replace"))
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        body = await _count_until_closed(reader)
        if length and body != int(length[1]):
            raise ProtocolError(f"{body} of {int(length[1])} bytes before the server closed")
        return body


async def _ftp(ip: str, port: int, name: str) -> int:
    """Anonymous passive-mode RETR, as a browser or curl does it."""
    async with _Connection(ip, port) as (reader, writer):
        await _expect(reader, b"220")
        await _command(reader, writer, "USER anonymous", b"230")
        await _command(reader, writer, "TYPE I", b"200")
        reply = await _command(reader, writer, "PASV", b"227")
        numbers = re.search(rb"(\d+),(\d+),(\d+),(\d+),(\d+),(\d+)", reply)
        if not numbers:
            raise ProtocolError(reply.decode(errors="replace").strip())
        async with _Connection(ip, int(numbers[5]) * 256 + int(numbers[6])) as (data, _):
            await _command(reader, writer, f"RETR {name}", b"150")
            moved = await _count_until_closed(data)
        await _expect(reader, b"226")
        writer.write(b"QUIT\r\n")
        return moved


def mail_data(text: bytes) -> bytes:
    """A text file as an SMTP DATA body: CRLF lines, a leading dot doubled, the closing dot."""
    body = re.sub(rb"(?m)^\.", b"..", text.replace(b"\r\n", b"\n")).replace(b"\n", b"\r\n")
    return b"Subject: office mail\r\n\r\n" + body + (b"" if body.endswith(b"\r\n") else b"\r\n") + b".\r\n"


async def _smtp(ip: str, port: int, data: bytes) -> int:
    async with _Connection(ip, port) as (reader, writer):
        await _expect(reader, b"220")
        for line, code in (("EHLO office.test", b"250"), ("MAIL FROM:<a@office.test>", b"250"),
                           ("RCPT TO:<b@office.test>", b"250"), ("DATA", b"354")):
            await _command(reader, writer, line, code)
        writer.write(data)
        await writer.drain()
        await _expect(reader, b"250")
        writer.write(b"QUIT\r\n")
        return len(data)


async def _pop3(ip: str, port: int, number: int) -> int:
    """Log in, RETR one message; the bytes of the message as delivered (dot-stuffing undone)."""
    async with _Connection(ip, port) as (reader, writer):
        await _expect(reader, b"+OK")
        for line in (f"USER {POP3_USER}", f"PASS {POP3_USER}", f"RETR {number}"):
            await _command(reader, writer, line, b"+OK")
        moved = 0
        while (line := await reader.readline()) != b".\r\n":
            if not line:
                raise ProtocolError(f"connection closed after {moved} bytes of the message")
            moved += len(line) - line.startswith(b"..")
        writer.write(b"QUIT\r\n")
        return moved


def dns_query(ident: int, name: str) -> bytes:
    """An A query with recursion desired, as a stub resolver sends it."""
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", 1, 1)


def dns_answers(reply: bytes) -> int:
    """The number of answer records in a reply; ProtocolError for an error code or a short reply."""
    if len(reply) < 12:
        raise ProtocolError(f"a reply of {len(reply)} bytes")
    flags, answers = struct.unpack("!H", reply[2:4])[0], struct.unpack("!H", reply[6:8])[0]
    if flags & 0xF or not answers:
        raise ProtocolError(f"answer with rcode {flags & 0xF} and {answers} records")
    return answers


async def _dns(ip: str, port: int, rng: random.Random) -> int:
    """An A query for a fresh name, with a stub resolver's retries (glibc: 2 attempts of 5 s: a
    query lost in a full queue is asked again); the bytes of the query and its answer."""
    wire = dns_query(rng.randrange(1 << 16), f"host{rng.randrange(10**6)}.office.test")
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.connect((ip, port))
        for _ in range(2):
            await loop.sock_sendall(sock, wire)
            try:
                reply = await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
            except TimeoutError:
                continue
            dns_answers(reply)
            return len(wire) + len(reply)
    raise ProtocolError("no answer to 2 attempts of 5 s")


def transaction(flow: dict, ip: str, rng: random.Random) -> Callable[[], Awaitable[int]]:
    """What one transaction of a flow (as the program's argument gives it) does."""
    protocol, port, target = flow["protocol"], flow["port"], flow.get("target")
    if protocol == "http":
        return partial(_http, ip, port, target)
    if protocol == "ftp":
        return partial(_ftp, ip, port, target)
    if protocol == "smtp":
        with open(target, "rb") as text:  # a text file made on this node
            return partial(_smtp, ip, port, mail_data(text.read()))
    if protocol == "pop3":
        return partial(_pop3, ip, port, target)
    return partial(_dns, ip, port, rng)


@dataclass
class FlowCounters:
    started: int = 0
    completed: int = 0
    failed: int = 0
    skipped: int = 0  # arrivals while MAX_IN_FLIGHT were still running
    bytes: int = 0
    window_bytes: float = 0.0  # the part of `bytes` carried inside the measurement window
    errors: list[str] = field(default_factory=list)


class Mix:
    """Flows of transactions at Poisson arrivals until `end()`; then those in flight drain."""

    def __init__(self, flows: list[tuple[float, Callable[[], Awaitable[int]], random.Random]]):
        self.flows = flows  # (mean transactions per second, one transaction, the arrivals' generator)
        self.counters = [FlowCounters() for _ in flows]
        self.started = time.monotonic()
        self.stopped = 0.0
        self._stop = asyncio.Event()

    def end(self, drain: bool = True) -> None:
        """Close the window (without drain: transactions still running are cancelled at once)."""
        self.stopped = time.monotonic() - (0 if drain else DRAIN_S)
        self._stop.set()

    async def run(self) -> None:
        await asyncio.gather(*(self._drive(per_s, one, rng, counters)
                               for (per_s, one, rng), counters in zip(self.flows, self.counters)))

    async def _drive(self, per_s: float, one, rng: random.Random, counters: FlowCounters) -> None:
        in_flight: set[asyncio.Task] = set()
        next_at = time.monotonic() + rng.expovariate(per_s)
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_at - time.monotonic()))
                break
            except TimeoutError:
                pass
            next_at += rng.expovariate(per_s)
            if len(in_flight) >= MAX_IN_FLIGHT:
                counters.skipped += 1
                continue
            counters.started += 1
            task = asyncio.create_task(self._one(counters, one))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            _, unfinished = await asyncio.wait(in_flight, timeout=max(0.0, self.stopped + DRAIN_S - time.monotonic()))
            for task in unfinished:
                task.cancel()  # still running at the drain deadline: unknown, not failed
            await asyncio.gather(*unfinished, return_exceptions=True)

    async def _one(self, counters: FlowCounters, one) -> None:
        began = time.monotonic()
        try:
            moved = await asyncio.wait_for(one(), TRANSACTION_TIMEOUT_S)
        except (OSError, EOFError, ValueError, ProtocolError, asyncio.LimitOverrunError) as exc:
            counters.failed += 1  # (TimeoutError is an OSError, a cut-off reply an EOFError)
            if len(counters.errors) < 3:
                counters.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return
        ended = time.monotonic()
        counters.completed += 1
        counters.bytes += moved
        # A transaction still running when the window closed counts with its share inside it.
        inside = min(ended, self.stopped or ended) - began
        counters.window_bytes += moved * max(0.0, inside) / max(ended - began, 1e-6)

    def account(self) -> dict:
        return {"window_s": self.stopped - self.started, "counters": [asdict(c) for c in self.counters]}


async def main(config: dict) -> None:
    flows = []
    for flow in config["flows"]:
        rng = random.Random(flow["seed"])
        flows.append((flow["per_s"], transaction(flow, config["ip"], rng), rng))
    mix = Mix(flows)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, mix.end)
    print("ready", flush=True)
    await mix.run()
    print(json.dumps(mix.account()), flush=True)


if __name__ == "__main__":
    ctypes.CDLL(None).prctl(PR_SET_NAME, NAME.encode(), 0, 0, 0)
    asyncio.run(main(json.loads(sys.argv[1])))
