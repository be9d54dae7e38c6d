"""Background office traffic: real HTTP, FTP, POP3, SMTP and DNS transactions at configured
rates, running through the tunnel alongside the measured workload (the small-business study
generated such a mix from its router).

Servers run in the sink (nginx, vsftpd, dovecot, aiosmtpd, dnsmasq); the source starts
transactions as a Poisson process per flow. The clients are coroutines in one thread that has
joined the source's namespace: a program per transaction (curl, dig) cost 25 ms of CPU here and
tens of times that under the VM's software emulation, where the mix alone saturated the guest
and the measured transfer got a tenth of an 8 Mbit/s link. What each flow carried in the
measurement window (completed transactions only) is recorded next to what it offered, so a
result says how much of the link the background really took.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Awaitable, Callable, Literal

import dpkt
from pydantic import Field, field_validator, model_validator

from ..metrics import declare
from ..schema import Size, Strict, parse_size
from ..testbed import netns
from ..tools import Tool
from .base import WorkloadContext
from .datasets import make_on
from .transfer import DATASET_PACKAGES, NGINX, VSFTPD, data_dir, ensure_servers, file_server, private_dir

PROTOCOLS = ("http", "ftp", "smtp", "pop3", "dns")
METRICS = (
    declare("background_kbps", "kbit/s", "office traffic carried during the measurement, all protocols "
            "(completed transactions)", True, level="background", producers="links with background"),
    declare("background_offered_kbps", "kbit/s", "the mix's mean offered rate (HTTP, FTP, POP3, SMTP)", True,
            level="background", producers="links with background"),
    declare("background_failures", "count", "background transactions that failed (a stub resolver's two DNS "
            "attempts both lost, a refused connection, ...)", False, level="background",
            producers="links with background"),
    *(declare(f"background_{p}_kbps", "kbit/s", f"{p.upper()} background traffic carried during the measurement",
              True, level="background", producers="links with background") for p in PROTOCOLS),
)
# What the mix adds to a repetition, for estimates: in the emulated VM about 6 s (small-business-2011's logs:
# from the first server's start to the measurement's 7.3 s over 16 repetitions since the five start together,
# 8.6 s over 304 one after another; a transfer's own server and file take about 1 s of it, aiosmtpd's Python
# imports most of the rest), so about 1.5 s on a host (SLOWDOWN 4).
SETUP_S = 1.5
VM_SETUP_S = 6
DRAIN_S = 10  # how long transactions open at the window's end may take to finish
MAX_IN_FLIGHT = 8  # per flow: beyond this the link is saturated and more clients only add CPU load
TRANSACTION_TIMEOUT_S = 60
POP3_USER = "office"
DOVECOT = Tool("dovecot", "dovecot-pop3d", ("dovecot", "--version"), path="/usr/sbin/dovecot")
DNSMASQ = Tool("dnsmasq", "dnsmasq-base", ("dnsmasq", "--version"), path="/usr/sbin/dnsmasq")
FLOW_TOOLS = {"http": (NGINX,), "ftp": (VSFTPD,), "smtp": (), "pop3": (DOVECOT,), "dns": (DNSMASQ,)}
TOOLS = tuple(dict.fromkeys(t for tools in FLOW_TOOLS.values() for t in tools))
# The SMTP server runs under the sink's Python (a host's own: `python3 -m aiosmtpd`), as do the files' maker.
PACKAGES = ("python3-aiosmtpd", *DATASET_PACKAGES)
# Off the well-known ports, as the file servers' (transfer.PORTS): a host's own may hold those.
PORTS = {"smtp": 2525, "pop3": 1110, "dns": 5300}
# One transaction of each protocol: a web object, a file, a mail sent, a mail fetched.
DEFAULT_OBJECT = {"http": 64 * 1024, "ftp": 256 * 1024, "smtp": 32 * 1024, "pop3": 32 * 1024}


class BackgroundFlow(Strict):
    """Transactions of one protocol at a mean offered rate (Poisson arrivals), source <- sink
    except SMTP, which sends. DNS is given in queries per second, the rest in kbit/s."""

    protocol: Literal["http", "ftp", "smtp", "pop3", "dns"]
    rate_kbit: float | None = Field(None, gt=0, le=10_000_000)
    queries_per_s: float | None = Field(None, gt=0, le=10_000)
    size: Size | None = Field(None, le=1024**3, description="bytes per transaction (not for dns)")

    @field_validator("size", mode="before")
    @classmethod
    def parse_object_size(cls, value):
        return None if value is None else parse_size(value)

    @model_validator(mode="after")
    def rate_given_once(self):
        if self.protocol == "dns":
            if self.queries_per_s is None or self.rate_kbit is not None or self.size is not None:
                raise ValueError("a dns flow takes queries_per_s (and no rate_kbit or size)")
        elif self.rate_kbit is None or self.queries_per_s is not None:
            raise ValueError(f"a {self.protocol} flow takes rate_kbit (and no queries_per_s)")
        return self

    @property
    def object_size(self) -> int:
        return self.size or DEFAULT_OBJECT[self.protocol]

    @property
    def per_s(self) -> float:
        """Mean transactions per second."""
        if self.protocol == "dns":
            return self.queries_per_s
        return self.rate_kbit * 1000 / 8 / self.object_size


class Background(Strict):
    """A mix of flows run alongside every measurement of the scenarios on this link."""

    name: str = Field(min_length=1)
    flows: list[BackgroundFlow] = Field(min_length=1)

    @property
    def offered_kbit(self) -> float:
        """The mean rate the flows with a rate offer (DNS, given in queries, left out)."""
        return sum(f.rate_kbit or 0.0 for f in self.flows)


# The small-business study's router-generated office mix, about 0.8 Mbit/s offered.
PRESETS = {
    "office": Background(name="office", flows=[
        BackgroundFlow(protocol="http", rate_kbit=400),
        BackgroundFlow(protocol="ftp", rate_kbit=200),
        BackgroundFlow(protocol="pop3", rate_kbit=120),
        BackgroundFlow(protocol="smtp", rate_kbit=60),
        BackgroundFlow(protocol="dns", queries_per_s=5),
    ]),
}


def needs(mix: Background) -> set[str]:
    """The programs this mix runs."""
    return {tool.command for flow in mix.flows for tool in FLOW_TOOLS[flow.protocol]}


# --- servers in the sink ----------------------------------------------------------

def _start_aiosmtpd(ctx: WorkloadContext, data: str, mix: Background) -> dict:
    sink = ctx.bed.sink
    argv = [sink.python, "-m", "aiosmtpd", "-n", "-l", f"{ctx.bed.sink_ip}:{PORTS['smtp']}",
            "-c", "aiosmtpd.handlers.Sink"]
    return {"argv": argv, "port": PORTS["smtp"]}


# Maildir/cur/<number>.vpnlab:2,S of a header and a text file, for each (number, header, file) given.
MAILBOX = ('set -e; box="$1/Maildir"; shift; mkdir -p "$box/cur" "$box/new" "$box/tmp"; '
           'while [ $# -gt 0 ]; do { printf %s "$2"; cat "$3"; } > "$box/cur/$1.vpnlab:2,S"; shift 3; done; '
           'chown -R daemon:daemon "$box"')


def _mailbox(sink, data: str, sizes: list[int]) -> dict[int, int]:
    """A maildir on the sink with one text message per size; size -> POP3 message number."""
    numbers, messages = {}, []
    for number, size in enumerate(sorted(set(sizes)), start=1):
        [body] = make_on(sink, data, "text", [size])
        header = f"From: a@office.test\nTo: {POP3_USER}@office.test\nSubject: office mail {number}\n\n"
        messages += [f"{number:04d}", header, body]
        numbers[size] = number
    sink.run(["sh", "-c", MAILBOX, "sh", data, *messages])
    return numbers


def _start_dovecot(ctx: WorkloadContext, data: str, mix: Background) -> dict:
    sink = ctx.bed.sink
    home = private_dir(sink, "dovecot")
    sizes = [f.object_size for f in mix.flows if f.protocol == "pop3"]
    numbers = _mailbox(sink, data, sizes)
    conf = sink.write_file(f"{home}/dovecot.conf", f"""base_dir = {home}/run
state_dir = {home}/state
log_path = /dev/stderr
protocols = pop3
listen = {ctx.bed.sink_ip}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
first_valid_uid = 1
service pop3-login {{
  inet_listener pop3 {{
    port = {PORTS["pop3"]}
  }}
}}
passdb {{
  driver = static
  args = password={POP3_USER}
}}
userdb {{
  driver = static
  args = uid=daemon gid=daemon home={data}
}}
mail_location = maildir:{data}/Maildir
""")
    return {"argv": ["dovecot", "-F", "-c", conf], "port": PORTS["pop3"], "messages": numbers}


def _start_dnsmasq(ctx: WorkloadContext, data: str, mix: Background) -> dict:
    ip = ctx.bed.sink_ip
    argv = ["dnsmasq", "--keep-in-foreground", "--log-facility=-", "--conf-file=/dev/null", f"--listen-address={ip}",
            f"--port={PORTS['dns']}", "--bind-interfaces", "--no-resolv", "--no-hosts", "--pid-file=",
            f"--address=/office.test/{ip}"]
    return {"argv": argv, "port": PORTS["dns"]}


SERVERS = {"smtp": _start_aiosmtpd, "pop3": _start_dovecot, "dns": _start_dnsmasq}


# --- one transaction: a coroutine that returns the bytes it moved ------------------

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


async def _dns(ip: str, port: int, rng: random.Random) -> int:
    """An A query for a fresh name, with a stub resolver's retries (glibc: 2 attempts of 5 s: a
    query lost in a full queue is asked again); the bytes of the query and its answer."""
    query = dpkt.dns.DNS(id=rng.randrange(1 << 16), qd=[dpkt.dns.DNS.Q(name=f"host{rng.randrange(10**6)}.office.test")])
    wire = bytes(query)
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
            answer = dpkt.dns.DNS(reply)
            if answer.rcode != dpkt.dns.DNS_RCODE_NOERR or not answer.an:
                raise ProtocolError(f"answer with rcode {answer.rcode} and {len(answer.an)} records")
            return len(wire) + len(reply)
    raise ProtocolError("no answer to 2 attempts of 5 s")


def _transaction(flow: BackgroundFlow, sink, ip: str, data: str, info: dict,
                 rng: random.Random) -> Callable[[], Awaitable[int]]:
    """What one transaction of the flow does, its files made beforehand on the sink."""
    port = info["port"]  # (http and ftp: their file server's)
    if flow.protocol in ("http", "ftp"):
        [path] = make_on(sink, data, "text", [flow.object_size])
        return partial(_http if flow.protocol == "http" else _ftp, ip, port, path.rsplit("/", 1)[-1])
    if flow.protocol == "smtp":
        [path] = make_on(sink, data, "text", [flow.object_size])
        return partial(_smtp, ip, port, mail_data(sink.read_file(path)))  # (the sink's file, mailed from the source)
    if flow.protocol == "pop3":
        return partial(_pop3, ip, port, info["messages"][flow.object_size])
    return partial(_dns, ip, port, rng)


# --- the generator --------------------------------------------------------------

@dataclass
class FlowCounters:
    started: int = 0
    completed: int = 0
    failed: int = 0
    skipped: int = 0  # arrivals while MAX_IN_FLIGHT were still running
    bytes: int = 0
    window_bytes: float = 0.0  # the part of `bytes` carried inside the measurement window
    errors: list[str] = field(default_factory=list)


def arrivals_seed(study_seed: int, round_no: int, scenario) -> str:
    """The seed of a repetition's arrivals. In one round every configuration on one link and workload
    meets the same arrivals, so compared within the round they differ in the VPN only; each round
    draws anew, so the repetitions sample the background too and the intervals count its spread. (A
    seed per scenario gave each one the same arrivals in every repetition: one configuration's
    unlucky draw was a bias no number of repetitions showed or removed.)"""
    return f"{study_seed}:{round_no}:{scenario.group}"  # (group: what it shares with the other configurations)


class BackgroundTraffic:
    """Start with `start()` right before a measurement, `stop()` right after it."""

    def __init__(self, ctx: WorkloadContext, mix: Background, seed: str):
        self.ctx = ctx
        self.mix = mix
        self.rng = random.Random(seed)
        self.counters = [FlowCounters() for _ in mix.flows]
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> None:
        data = data_dir(self.ctx, self.ctx.bed.sink)
        servers = [self._server(flow.protocol, data) for flow in self.mix.flows]
        infos = ensure_servers(self.ctx, dict(servers))
        flows = []
        for flow, (name, _) in zip(self.mix.flows, servers):
            rng = random.Random(self.rng.random())
            flows.append((flow, _transaction(flow, self.ctx.bed.sink, self.ctx.bed.sink_ip, data, infos[name], rng),
                          rng))
        self._launch(flows)

    def _server(self, protocol: str, data: str) -> tuple[str, Callable[[], dict]]:
        """The name and starter of the server a flow's transactions need."""
        if protocol in ("http", "ftp"):
            return file_server(self.ctx, protocol, data)
        start = SERVERS[protocol]
        return start.__name__.removeprefix("_start_"), partial(start, self.ctx, data, self.mix)

    def _launch(self, flows: list) -> None:
        """Drive (flow, transaction, rng) triples in a thread in the source's namespace."""
        self._ready.clear()
        self._error = None
        self._stopped = 0.0
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(flows,), daemon=True, name="background")
        self._thread.start()
        self._ready.wait()

    def _run(self, flows: list) -> None:
        try:
            netns.join(self.ctx.bed.source.namespace)  # this thread's sockets are the source's
            asyncio.run(self._drive_all(flows))
        except BaseException as exc:  # raised again by stop(), in the measuring thread
            self._error = exc
        finally:
            self._ready.set()

    async def _drive_all(self, flows: list) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        await asyncio.gather(*(self._drive(flow, counters, transaction, rng)
                               for (flow, transaction, rng), counters in zip(flows, self.counters)))

    async def _drive(self, flow: BackgroundFlow, counters: FlowCounters, transaction, rng: random.Random) -> None:
        in_flight: set[asyncio.Task] = set()
        next_at = time.monotonic() + rng.expovariate(flow.per_s)
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_at - time.monotonic()))
                break
            except TimeoutError:
                pass
            next_at += rng.expovariate(flow.per_s)
            if len(in_flight) >= MAX_IN_FLIGHT:
                counters.skipped += 1
                continue
            counters.started += 1
            task = asyncio.create_task(self._one(counters, transaction))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            _, unfinished = await asyncio.wait(in_flight, timeout=max(0.0, self._stopped + DRAIN_S - time.monotonic()))
            for task in unfinished:
                task.cancel()  # still running at the drain deadline: unknown, not failed
            await asyncio.gather(*unfinished, return_exceptions=True)

    async def _one(self, counters: FlowCounters, transaction) -> None:
        began = time.monotonic()
        try:
            moved = await asyncio.wait_for(transaction(), TRANSACTION_TIMEOUT_S)
        except (OSError, EOFError, ValueError, ProtocolError, asyncio.LimitOverrunError, dpkt.UnpackError) as exc:
            counters.failed += 1  # (TimeoutError is an OSError, a cut-off reply an EOFError)
            if len(counters.errors) < 3:
                counters.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return
        ended = time.monotonic()
        counters.completed += 1
        counters.bytes += moved
        # A transaction still running when the window closed counts with its share inside it.
        inside = min(ended, self._stopped or ended) - began
        counters.window_bytes += moved * max(0.0, inside) / max(ended - began, 1e-6)

    def _end(self, drain: bool) -> None:
        self._stopped = time.monotonic() - (0 if drain else DRAIN_S)  # (without drain: cancel at once)
        if self._loop and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        self._loop = self._stop = None

    def abandon(self) -> None:
        """End it at once, counting nothing and raising nothing: the measurement failed, and its
        error, not one of the background's, is the one to tell."""
        self._end(drain=False)
        self.counters = [FlowCounters() for _ in self.mix.flows]

    def stop(self) -> tuple[dict[str, float], str, list[str]]:
        """Values, a readable account of the window, flags."""
        self._end(drain=True)
        window = self._stopped - self._started
        if self._error:
            raise self._error
        values: dict[str, float] = {}
        lines = [f"background mix {self.mix.name!r} over {window:.1f} s (bytes of transactions that straddle "
                 f"the window's end are counted in proportion to their time inside it)"]
        flags = []
        for flow, c in zip(self.mix.flows, self.counters):
            kbps = c.window_bytes * 8 / window / 1000
            key = f"background_{flow.protocol}_kbps"
            values[key] = values.get(key, 0.0) + kbps
            offered = f" of {flow.rate_kbit:g} offered" if flow.rate_kbit else ""
            lines.append(f"{flow.protocol}: {c.started} started, {c.completed} completed ({c.bytes} B), "
                         f"{c.failed} failed, {c.skipped} not started (busy), {kbps:.1f} kbit/s carried{offered}"
                         + "".join(f"\n  error: {e}" for e in c.errors))
            if c.skipped:
                flags.append(f"background {flow.protocol}: {c.skipped} transactions not started, "
                             f"{MAX_IN_FLIGHT} were still running (the link, or this machine's CPU, could not keep "
                             "up with the offered rate)")
        failures = sum(c.failed for c in self.counters)
        values["background_kbps"] = sum(c.window_bytes for c in self.counters) * 8 / window / 1000
        values["background_offered_kbps"] = self.mix.offered_kbit
        values["background_failures"] = float(failures)
        if failures:
            flags.append(f"background traffic: {failures} transactions failed")
        self.counters = [FlowCounters() for _ in self.mix.flows]
        return values, "\n".join(lines) + "\n", flags
