"""Background office traffic: real HTTP, FTP, POP3, SMTP and DNS transactions at configured
rates, running through the tunnel alongside the measured workload (the small-business study
generated such a mix from its router).

Servers run in the sink (nginx, vsftpd, dovecot, aiosmtpd, dnsmasq); the source starts
transactions as a Poisson process per flow, in one program run there (office.py: coroutines, not
a program per transaction). Everything goes through the two nodes, so it runs on real hosts as
in namespaces. What each flow carried in the measurement window (completed transactions only) is
recorded next to what it offered, so a result says how much of the link the background really took.
"""

from __future__ import annotations

import inspect
import json
import random
import time
from functools import partial
from typing import Callable, Literal

from pydantic import Field, field_validator, model_validator

from ..core.backend import SLOWDOWN
from ..core.errors import MeasurementError
from ..core.flags import declare as declare_flag
from ..metrics import declare
from ..core.schema import Size, Strict, parse_size
from ..testbed.node import LISTEN_TIMEOUT_S
from ..tools import Tool
from . import office
from .base import WorkloadContext
from .datasets import make_on
from .transfer import DATASET_MODULES, NGINX, VSFTPD, data_dir, ensure_servers, file_server, private_dir

BACKGROUND = declare_flag("background", "the background traffic did not run as offered (transactions "
                          "failed or could not start)")

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
POP3_USER = office.POP3_USER
DOVECOT = Tool("dovecot", "dovecot-pop3d", ("dovecot", "--version"), path="/usr/sbin/dovecot")
DNSMASQ = Tool("dnsmasq", "dnsmasq-base", ("dnsmasq", "--version"), path="/usr/sbin/dnsmasq")
FLOW_TOOLS = {"http": (NGINX,), "ftp": (VSFTPD,), "smtp": (), "pop3": (DOVECOT,), "dns": (DNSMASQ,)}
TOOLS = tuple(dict.fromkeys(t for tools in FLOW_TOOLS.values() for t in tools))
# The SMTP server runs under the sink's Python (a host's own: `python3 -m aiosmtpd`), as do the files' maker.
MODULES = {"aiosmtpd": "python3-aiosmtpd", **DATASET_MODULES}
PACKAGES = tuple(MODULES.values())
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


# --- the clients, on the source ---------------------------------------------------

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
        self._proc = None

    @property
    def _log(self):
        return self.ctx.log_dir / "background.log"

    def start(self) -> None:
        """Its servers listening on the sink, its files made, its clients started on the source:
        back once their window is open."""
        data = data_dir(self.ctx, self.ctx.bed.sink)
        servers = [self._server(flow.protocol, data) for flow in self.mix.flows]
        infos = ensure_servers(self.ctx, dict(servers))
        self._launch(self.ctx.bed.sink_ip, [self._described(flow, infos[name], data)
                                            for flow, (name, _) in zip(self.mix.flows, servers)])

    def _launch(self, ip: str, flows: list[dict]) -> None:
        """office.py on the source, with these flows to `ip`; back once its window is open."""
        source = self.ctx.bed.source
        config = json.dumps({"ip": ip, "flows": flows})
        self._proc = source.spawn([source.python, "-c", inspect.getsource(office), config], self._log,
                                  what=office.NAME)
        self._wait_ready()

    def _server(self, protocol: str, data: str) -> tuple[str, Callable[[], dict]]:
        """The name and starter of the server a flow's transactions need."""
        if protocol in ("http", "ftp"):
            return file_server(self.ctx, protocol, data)
        start = SERVERS[protocol]
        return start.__name__.removeprefix("_start_"), partial(start, self.ctx, data, self.mix)

    def _described(self, flow: BackgroundFlow, info: dict, data: str) -> dict:
        """A flow as office.py takes it, its files made: a file served by the sink, the text the
        source mails made on the source (the same bytes: they are seeded), a message's number."""
        described = {"protocol": flow.protocol, "per_s": flow.per_s, "seed": self.rng.random(), "port": info["port"]}
        if flow.protocol in ("http", "ftp"):
            [path] = make_on(self.ctx.bed.sink, data, "text", [flow.object_size])
            described["target"] = path.rsplit("/", 1)[-1]
        elif flow.protocol == "smtp":
            source = self.ctx.bed.source
            [described["target"]] = make_on(source, data_dir(self.ctx, source), "text", [flow.object_size])
        elif flow.protocol == "pop3":
            described["target"] = info["messages"][flow.object_size]
        return described

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S * SLOWDOWN
        while b"ready\n" not in self._log.read_bytes():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.abandon()
                raise MeasurementError(f"the background's clients did not start: {self._tail()}")
            time.sleep(0.05)

    def _tail(self) -> str:
        return self._log.read_text(errors="replace")[-500:].strip()

    def _end(self, grace: float) -> None:
        if self._proc is not None:
            self.ctx.bed.source.stop(self._proc, grace)
            deadline = time.monotonic() + 5  # (on a host: until its output is all in the local log)
            while self._proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            self._proc = None

    def abandon(self) -> None:
        """End it at once, counting nothing and raising nothing: the measurement failed, and its
        error, not one of the background's, is the one to tell."""
        self._end(grace=0.1)

    def stop(self) -> tuple[dict[str, float], str, list[str]]:
        """Values, a readable account of the window, flags."""
        self._end(grace=office.DRAIN_S + 5 * SLOWDOWN)
        lines = self._log.read_text(errors="replace").splitlines()
        if not lines or not lines[-1].startswith("{"):
            raise MeasurementError(f"the background's clients ended without their account: {self._tail()}")
        account = json.loads(lines[-1])
        return summary(self.mix, account["window_s"], account["counters"])


def summary(mix: Background, window: float, counters: list[dict]) -> tuple[dict[str, float], str, list[str]]:
    """Values, a readable account of the window and flags, from each flow's counters (office.py's)."""
    values: dict[str, float] = {}
    lines = [f"background mix {mix.name!r} over {window:.1f} s (bytes of transactions that straddle "
             f"the window's end are counted in proportion to their time inside it)"]
    flags = []
    for flow, c in zip(mix.flows, counters):
        kbps = c["window_bytes"] * 8 / window / 1000
        key = f"background_{flow.protocol}_kbps"
        values[key] = values.get(key, 0.0) + kbps
        offered = f" of {flow.rate_kbit:g} offered" if flow.rate_kbit else ""
        lines.append(f"{flow.protocol}: {c['started']} started, {c['completed']} completed ({c['bytes']} B), "
                     f"{c['failed']} failed, {c['skipped']} not started (busy), {kbps:.1f} kbit/s carried{offered}"
                     + "".join(f"\n  error: {e}" for e in c["errors"]))
        if c["skipped"]:
            flags.append(BACKGROUND(f"{flow.protocol}: {c['skipped']} transactions not started, "
                                    f"{office.MAX_IN_FLIGHT} were still running (the link, or this machine's CPU, "
                                    "could not keep up with the offered rate)"))
    failures = sum(c["failed"] for c in counters)
    values["background_kbps"] = sum(c["window_bytes"] for c in counters) * 8 / window / 1000
    values["background_offered_kbps"] = mix.offered_kbit
    values["background_failures"] = float(failures)
    if failures:
        flags.append(BACKGROUND(f"{failures} transactions failed"))
    return values, "\n".join(lines) + "\n", flags
