"""Background office traffic: real HTTP, FTP, POP3, SMTP and DNS transactions at configured
rates, running through the tunnel alongside the measured workload (the small-business study
generated such a mix from its router).

Servers run in the sink (nginx, vsftpd, dovecot, aiosmtpd, dnsmasq); the source starts
transactions as a Poisson process per flow with curl and dig. What each flow carried in the
measurement window (completed transactions only) is recorded next to what it offered, so a
result says how much of the link the background really took.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..metrics import declare
from ..schema import Size, Strict, parse_size
from ..tools import Tool
from .base import WorkloadContext
from .datasets import make as make_file
from .transfer import CURL, NGINX, VSFTPD, data_dir, ensure_file_server, ensure_server, private_dir

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
DRAIN_S = 10  # how long transactions open at the window's end may take to finish
MAX_IN_FLIGHT = 8  # per flow: beyond this the link is saturated and more clients only add CPU load
TRANSACTION_TIMEOUT_S = 60
POP3_USER = "office"
DOVECOT = Tool("dovecot", "dovecot-pop3d", ("dovecot", "--version"), path="/usr/sbin/dovecot")
DNSMASQ = Tool("dnsmasq", "dnsmasq-base", ("dnsmasq", "--version"), path="/usr/sbin/dnsmasq")
DIG = Tool("dig", "bind9-dnsutils", ("dig", "-v"))
BASH = Tool("bash", "bash", ("bash", "--version"))
FLOW_TOOLS = {"http": (NGINX, CURL), "ftp": (VSFTPD, CURL), "smtp": (CURL,), "pop3": (DOVECOT, CURL, BASH),
              "dns": (DNSMASQ, DIG)}
TOOLS = tuple(dict.fromkeys(t for tools in FLOW_TOOLS.values() for t in tools))
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

def _start_aiosmtpd(ctx: WorkloadContext, data: Path, mix: Background) -> dict:
    argv = [sys.executable, "-m", "aiosmtpd", "-n", "-l", f"{ctx.bed.sink_ip}:25", "-c", "aiosmtpd.handlers.Sink"]
    return {"argv": argv, "port": 25}


def _mailbox(data: Path, sizes: list[int]) -> dict[int, int]:
    """A maildir with one text message per size; size -> POP3 message number."""
    box = data / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (box / sub).mkdir(parents=True, exist_ok=True)
    numbers = {}
    for number, size in enumerate(sorted(set(sizes)), start=1):
        body = make_file(data, "text", size).read_bytes()
        header = f"From: a@office.test\nTo: {POP3_USER}@office.test\nSubject: office mail {number}\n\n".encode()
        (box / "cur" / f"{number:04d}.vpnlab:2,S").write_bytes(header + body)
        numbers[size] = number
    subprocess.run(["chown", "-R", "daemon:daemon", box], check=True)
    return numbers


def _start_dovecot(ctx: WorkloadContext, data: Path, mix: Background) -> dict:
    home = private_dir(ctx, "dovecot")
    sizes = [f.object_size for f in mix.flows if f.protocol == "pop3"]
    numbers = _mailbox(data, sizes)
    conf = home / "dovecot.conf"
    conf.write_text(f"""base_dir = {home}/run
state_dir = {home}/state
log_path = /dev/stderr
protocols = pop3
listen = {ctx.bed.sink_ip}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
first_valid_uid = 1
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
    return {"argv": ["dovecot", "-F", "-c", conf], "port": 110, "messages": numbers}


def _start_dnsmasq(ctx: WorkloadContext, data: Path, mix: Background) -> dict:
    ip = ctx.bed.sink_ip
    argv = ["dnsmasq", "--keep-in-foreground", "--log-facility=-", "--conf-file=/dev/null", f"--listen-address={ip}",
            "--bind-interfaces", "--no-resolv", "--no-hosts", "--pid-file=", f"--address=/office.test/{ip}"]
    return {"argv": argv, "port": 53}


SERVERS = {"smtp": _start_aiosmtpd, "pop3": _start_dovecot, "dns": _start_dnsmasq}


# --- one transaction ------------------------------------------------------------

def _transaction(flow: BackgroundFlow, ip: str, data: Path, info: dict) -> list[str]:
    """The client command of one transaction; it prints the bytes it moved."""
    curl = ["curl", "-sS", "--max-time", str(TRANSACTION_TIMEOUT_S)]
    if flow.protocol in ("http", "ftp"):
        name = make_file(data, "text", flow.object_size).name
        return [*curl, "-o", "/dev/null", "-w", "%{size_download}", f"{flow.protocol}://{ip}/{name}"]
    if flow.protocol == "smtp":
        mail = make_file(data, "text", flow.object_size)
        return [*curl, "--crlf", "-w", "%{size_upload}", "--mail-from", "a@office.test",
                "--mail-rcpt", "b@office.test", "-T", str(mail), f"smtp://{ip}"]
    if flow.protocol == "pop3":
        # curl reports no size for POP3: count what RETR delivered.
        number = info["messages"][flow.object_size]
        url = f"pop3://{POP3_USER}:{POP3_USER}@{ip}/{number}"
        return ["bash", "-c", 'set -o pipefail; "$@" | wc -c', "pop3", *curl, url]
    # a stub resolver's retries (glibc: 5 s, 2 attempts): a query lost in a full queue is asked again
    return ["dig", f"@{ip}", "+tries=2", "+time=5", "+qr", f"host{random.randrange(10**6)}.office.test", "A"]


def _bytes_moved(protocol: str, output: str) -> int | None:
    """Bytes of one finished transaction from its output, None if it did not succeed."""
    if protocol != "dns":
        text = output.strip()
        return int(float(text)) if text and text.replace(".", "", 1).isdigit() else None
    if "status: NOERROR" not in output:
        return None
    sizes = {}
    for line in output.splitlines():
        for tag in (";; QUERY SIZE:", ";; MSG SIZE"):
            if line.startswith(tag):
                sizes[tag] = int(line.rsplit(":", 1)[1])  # a retried query is printed again: same size
    return sum(sizes.values()) if len(sizes) == 2 else None


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


class BackgroundTraffic:
    """Start with `start()` right before a measurement, `stop()` right after it."""

    def __init__(self, ctx: WorkloadContext, mix: Background, seed: int):
        self.ctx = ctx
        self.mix = mix
        self.rng = random.Random(seed)
        self.counters = [FlowCounters() for _ in mix.flows]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> None:
        data = data_dir(self.ctx)
        commands = []
        for flow in self.mix.flows:
            if flow.protocol in ("http", "ftp"):
                info = ensure_file_server(self.ctx, flow.protocol, data)
            else:
                start = SERVERS[flow.protocol]
                info = ensure_server(self.ctx, start.__name__.removeprefix("_start_"),
                                     lambda start=start: start(self.ctx, data, self.mix))
            commands.append(lambda flow=flow, info=info: _transaction(flow, self.ctx.bed.sink_ip, data, info))
        self._stop.clear()
        self._stopped = 0.0
        self._started = time.monotonic()
        for flow, counters, command, seed in zip(self.mix.flows, self.counters, commands,
                                                 [self.rng.random() for _ in self.mix.flows]):
            thread = threading.Thread(target=self._drive, args=(flow, counters, command, random.Random(seed)),
                                      daemon=True, name=f"background-{flow.protocol}")
            thread.start()
            self._threads.append(thread)

    def _drive(self, flow: BackgroundFlow, counters: FlowCounters, command, rng: random.Random) -> None:
        source = self.ctx.bed.source
        in_flight: list[tuple[subprocess.Popen, float]] = []

        def reap(wait: bool) -> None:
            for proc, began in list(in_flight):
                if wait:
                    try:
                        proc.wait(timeout=max(0.0, self._stopped + DRAIN_S - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        proc.kill()  # ours, by its Popen handle
                        proc.wait()
                if proc.poll() is None:
                    continue
                out, err = proc.communicate()
                ended = time.monotonic()
                in_flight.remove((proc, began))
                moved = _bytes_moved(flow.protocol, out) if proc.returncode == 0 else None
                if moved is None:
                    if not (wait and proc.returncode < 0):  # killed at the drain deadline: unknown, not failed
                        counters.failed += 1
                        if len(counters.errors) < 3:
                            counters.errors.append((err or out).strip()[-200:])
                    continue
                counters.completed += 1
                counters.bytes += moved
                # A transaction still running when the window closed counts with its share inside it.
                inside = min(ended, self._stopped or ended) - began
                counters.window_bytes += moved * max(0.0, inside) / max(ended - began, 1e-6)

        next_at = time.monotonic() + rng.expovariate(flow.per_s)
        while not self._stop.wait(max(0.0, min(next_at - time.monotonic(), 0.05))):
            reap(wait=False)
            if time.monotonic() < next_at:
                continue
            next_at += rng.expovariate(flow.per_s)
            if len(in_flight) >= MAX_IN_FLIGHT:
                counters.skipped += 1
                continue
            counters.started += 1
            proc = subprocess.Popen(["ip", "netns", "exec", source.namespace, *command()],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            in_flight.append((proc, time.monotonic()))
        reap(wait=True)

    def stop(self) -> tuple[dict[str, float], str, list[str]]:
        """Values, a readable account of the window, flags."""
        self._stopped = time.monotonic()
        window = self._stopped - self._started
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
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
                             f"{MAX_IN_FLIGHT} were still running (the link cannot carry the offered rate)")
        failures = sum(c.failed for c in self.counters)
        values["background_kbps"] = sum(c.window_bytes for c in self.counters) * 8 / window / 1000
        values["background_offered_kbps"] = sum(f.rate_kbit or 0.0 for f in self.mix.flows)
        values["background_failures"] = float(failures)
        if failures:
            flags.append(f"background traffic: {failures} transactions failed")
        self.counters = [FlowCounters() for _ in self.mix.flows]
        return values, "\n".join(lines) + "\n", flags
