"""File transfers through the tunnel with real servers: nginx (HTTP, HTTPS), OpenSSH (scp),
vsftpd (FTP). The sink serves, the source downloads and times the transfer."""

from __future__ import annotations

import time
from pathlib import PurePosixPath
from typing import Any, Callable, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ..drivers.pki import make_pki
from ..core.errors import MeasurementError
from ..metrics import declare
from ..core.schema import Size, human_size, parse_size
from ..testbed.contract import Node
from ..testbed.node import private_run
from ..tools import Tool
from . import datasets
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions

METRICS = (
    declare("transfer_s", "s", "time to download the file, or all `files` of it one after another (curl's own "
            "clock; for scp, the command's)", False,
            judged="share", positive=True, producers="transfer"),
    declare("throughput_mbps", "Mbit/s", "goodput at the receiver (iperf3 sum_received; file bytes over "
            "transfer time)", True, judged="share", graded=True, positive=True, producers="transfer"),
)
NGINX = Tool("nginx", "nginx-light", ("nginx", "-v"), path="/usr/sbin/nginx")
CURL = Tool("curl", "curl", ("curl", "--version"))
VSFTPD = Tool("vsftpd", "vsftpd", ("vsftpd", "-v"), path="/usr/sbin/vsftpd")
SSHD = Tool("sshd", "openssh-server", ("sshd", "-V"), path="/usr/sbin/sshd")
MKTEMP, RM = Tool("mktemp", "coreutils"), Tool("rm", "coreutils")
CLIENTS = {"http": (NGINX, CURL), "https": (NGINX, CURL), "ftp": (VSFTPD, CURL),
           "ssh": (SSHD, Tool("scp", "openssh-client"), Tool("ssh", "openssh-client"),  # (scp runs ssh)
                   Tool("ssh-keygen", "openssh-client"), MKTEMP, RM)}
# What datasets.py, run on the sink by its Python, imports beyond the standard library: module -> package
DATASET_MODULES = {"numpy": "python3-numpy", "PIL": "python3-pil"}
DATASET_PACKAGES = tuple(DATASET_MODULES.values())


class TransferOptions(WorkloadOptions):
    """Download one file from the sink over a real protocol server, or `files` files totalling `size`
    one after another in one session (one curl or scp command, as a user fetching a folder)."""

    ADDED_LATER: ClassVar[dict[str, Any]] = {**WorkloadOptions.ADDED_LATER, "files": 1}

    kind: Literal["transfer"] = "transfer"
    protocol: Literal["http", "https", "ssh", "ftp"] = "http"
    data: Literal["text", "random", "archive", "image"] = Field(
        "random", description="text compresses; random (like video), archive and image do not")
    size: Size = Field(10 * 1024 * 1024, le=64 * 1024**3)
    timeout_s: float = Field(600, gt=0, le=86400)
    files: int = Field(1, ge=1, le=1000, description="several files totalling `size` (the small-business seed "
                       "moved 'multiple files totalling 100MB')")

    @field_validator("size", mode="before")
    @classmethod
    def parse_file_size(cls, value):
        return parse_size(value)

    @model_validator(mode="after")
    def a_byte_per_file(self):
        if self.files > self.size:
            raise ValueError(f"files ({self.files}) is more than size ({self.size} bytes): each file needs a byte")
        return self

    @property
    def sizes(self) -> list[int]:
        """Each file's size: equal parts, the remainder in the last."""
        part = self.size // self.files
        return [part] * (self.files - 1) + [self.size - part * (self.files - 1)]

    @property
    def label(self) -> str:
        return f"{self.protocol}-{self.data}-{human_size(self.size)}" + (f"-in-{self.files}" if self.files > 1 else "")


# Off the well-known ports: in a baseline on real hosts the sink is the host itself, whose own
# sshd (or web, FTP server) may hold those.
PORTS = {"http": 8080, "https": 8443, "ftp": 2121, "ssh": 2222}
# A folder of that name that is there already must be a real folder of root's (a run's own, made
# by an earlier testbed of it), never another user's folder or link in the world-writable /var/tmp.
NOT_ANOTHERS = '[ ! -e "$1" ] && [ ! -L "$1" ] || { [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ]; }'


def data_dir(ctx: WorkloadContext, node: Node) -> str:
    """The run's folder of generated files on `node`. On disk in /var/tmp, not under the node's
    scratch(): files of gigabytes do not fit a host's tmpfs /run, and the servers' unprivileged
    users (nginx's workers, vsftpd's and dovecot's) read them, which the 0700 scratch forbids.
    Recorded on the node before it is made, removed with the run."""
    key = (node.role, node.namespace)
    if key not in ctx.folders:
        folder = f"/var/tmp/vpnlab-{ctx.bed.state.run_id}-data"
        if node.run(["sh", "-c", NOT_ANOTHERS, "sh", folder], check=False).returncode != 0:
            raise MeasurementError(f"{folder} in {node.role} is there and is not this run's: left alone")
        node.record_dir(folder)
        node.run(["mkdir", "-p", "-m", "755", "--", folder])
        ctx.folders[key] = folder
    return ctx.folders[key]


def private_dir(node: Node, name: str) -> str:
    """A server's (or client's) own folder on its node, fresh for each testbed (a repetition's
    testbed reuses the names of the one before it, whose keys and configuration must not be taken
    for its own)."""
    folder = f"{node.scratch()}/{name}-{node.namespace or node.role}"
    node.remove_tree(folder)
    node.run(["mkdir", "-p", "-m", "700", "--", folder])
    return folder


def _server_certificate(node: Node, home: str, ip: str) -> tuple[str, str, bytes]:
    """The server's key and certificate for `ip`, written to its node, and the CA that signed them,
    for the client. Made here, not by openssl on the node: they start a few minutes back
    (pki.CLOCK_SLACK), where a certificate made there would start at the server's own clock and a
    client host whose clock trails it would refuse it as not yet valid."""
    pki = make_pki(ip)
    cert, key = pki.own("server")
    return node.write_file(f"{home}/server.key", key), node.write_file(f"{home}/server.pem", cert, 0o644), pki.ca


def _start_nginx(ctx: WorkloadContext, data: str) -> dict:
    sink, ip = ctx.bed.sink, ctx.bed.sink_ip
    home = private_dir(sink, "nginx")
    key, cert, ca = _server_certificate(sink, home, ip)
    conf = sink.write_file(f"{home}/nginx.conf", f"""daemon off;
worker_processes 1;
pid {home}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  sendfile on;
  client_body_temp_path {home}/body; proxy_temp_path {home}/proxy; fastcgi_temp_path {home}/fastcgi;
  uwsgi_temp_path {home}/uwsgi; scgi_temp_path {home}/scgi;
  server {{
    listen {ip}:{PORTS["http"]};
    listen {ip}:{PORTS["https"]} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {data};
  }}
}}
""")
    return {"argv": ["nginx", "-c", conf, "-p", home], "port": PORTS["http"], "ca": ca}


def _start_vsftpd(ctx: WorkloadContext, data: str) -> dict:
    # Anonymous FTP as a system user whose home exists (vsftpd enters it before anon_root).
    sink = ctx.bed.sink
    home = private_dir(sink, "vsftpd")
    sink.run(["mkdir", "-m", "755", "--", f"{home}/empty"])
    conf = sink.write_file(f"{home}/vsftpd.conf", f"""listen=YES
listen_address={ctx.bed.sink_ip}
listen_port={PORTS["ftp"]}
background=NO
anonymous_enable=YES
no_anon_password=YES
anon_root={data}
ftp_username=daemon
local_enable=NO
write_enable=NO
pasv_enable=YES
pasv_min_port=40000
pasv_max_port=40100
secure_chroot_dir={home}/empty
seccomp_sandbox=NO
isolate_network=NO
xferlog_enable=NO
""")
    return {"argv": ["vsftpd", conf], "port": PORTS["ftp"]}


def _start_sshd(ctx: WorkloadContext, data: str) -> dict:
    """sshd on the sink with a host key made there; the client's key made on the source, whose
    public half alone crosses to the sink."""
    sink, source = ctx.bed.sink, ctx.bed.source
    home, client = private_dir(sink, "sshd"), private_dir(source, "scp")
    sink.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{home}/host_key"])
    source.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{client}/client_key"])
    sink.write_file(f"{home}/authorized_keys", source.read_file(f"{client}/client_key.pub"))
    conf = sink.write_file(f"{home}/sshd_config", f"""ListenAddress {ctx.bed.sink_ip}:{PORTS["ssh"]}
HostKey {home}/host_key
AuthorizedKeysFile {home}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile {home}/sshd.pid
Subsystem sftp internal-sftp
""")
    # sshd insists on its privilege-separation directory /run/sshd: give it a private /run (private_run
    # makes its own mount namespace: on a host's own network the sink shares the host's mounts).
    argv = private_run(["/usr/sbin/sshd", "-D", "-e", "-f", conf], keep=sink.scratch(), make=("/run/sshd",))
    return {"argv": argv, "port": PORTS["ssh"], "key": f"{client}/client_key"}


STARTERS = {"http": _start_nginx, "https": _start_nginx, "ftp": _start_vsftpd, "ssh": _start_sshd}


def ensure_servers(ctx: WorkloadContext, starts: dict[str, Callable[[], dict]]) -> dict[str, dict]:
    """Start servers in the sink once per testbed (`start()` says how: argv, port, client facts);
    name -> its facts. All are spawned before any is waited for: each takes seconds to listen under
    software emulation, where the guest's second CPU would otherwise idle."""
    new = [name for name in starts if name not in ctx.services]
    for name in new:
        info = starts[name]()
        ctx.services[name] = (ctx.bed.sink, ctx.bed.sink.spawn(info["argv"], ctx.log_dir / f"{name}.log", what=name))
        ctx.server_info[name] = info
    for name in new:
        ctx.bed.sink.wait_listening(ctx.server_info[name]["port"], ctx.services[name][1], ctx.log_dir / f"{name}.log")
    return {name: ctx.server_info[name] for name in starts}


def file_server(ctx: WorkloadContext, protocol: str, data: str) -> tuple[str, Callable[[], dict]]:
    """The name and starter of the server behind a file transfer protocol."""
    start = STARTERS[protocol]
    return start.__name__.removeprefix("_start_"), lambda: start(ctx, data)


def ensure_file_server(ctx: WorkloadContext, protocol: str, data: str) -> dict:
    name, start = file_server(ctx, protocol, data)
    return ensure_servers(ctx, {name: start})[name]


class Transfer(WorkloadKind):
    kind = "transfer"
    summary = "download a file over a real server: protocol (http, https, ssh, ftp), data, size, files, timeout_s"
    Options = TransferOptions
    tools = tuple(dict.fromkeys(t for tools in CLIENTS.values() for t in tools))
    metrics = METRICS
    primary = "transfer_s"
    graded = (("throughput_mbps", "transfer throughput"),)  # after Jaha's columns: the file's goodput
    loads_path = True
    plotted = ("transfer_s",)
    packages = DATASET_PACKAGES
    modules = DATASET_MODULES

    def needs(self, options: TransferOptions) -> tuple[str, ...]:
        return tuple(t.command for t in CLIENTS[options.protocol])

    def estimate_s(self, options: TransferOptions, rate_mbit):
        # the file at 90% of the link rate (unshaped: 10 MB/s, a userspace tunnel's pace), plus the connection
        return options.size * 8 / ((rate_mbit or 80) * 0.9e6) + 1

    def prepare(self, options: TransferOptions, ctx: WorkloadContext) -> None:
        _ready(options, ctx)  # (a first file of a sitting took up to 37 s to make under emulation)

    def run(self, options: TransferOptions, ctx: WorkloadContext) -> Measurement:
        return download(options, ctx)


def _ready(spec: TransferOptions, ctx: WorkloadContext) -> tuple[list[str], dict]:
    """The files made on the sink and their server listening (made and started now if they are not yet)."""
    data = data_dir(ctx, ctx.bed.sink)
    paths = datasets.make_on(ctx.bed.sink, data, spec.data, spec.sizes)
    return paths, ensure_file_server(ctx, spec.protocol, data)


def download(spec: TransferOptions, ctx: WorkloadContext) -> Measurement:
    paths, info = _ready(spec, ctx)
    source = ctx.bed.source
    argv, into = _download_command(spec, ctx, info, paths)
    started = time.monotonic()
    try:
        proc = source.run(argv, check=False, timeout=spec.timeout_s)
    finally:
        if into:
            source.run(["rm", "-rf", "--", into])
    elapsed = time.monotonic() - started
    raw = f"$ {' '.join(map(str, argv))}\n{proc.stdout}{proc.stderr}"
    if proc.returncode != 0:
        raise MeasurementError(f"{spec.protocol} transfer failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    if spec.protocol != "ssh":
        elapsed = _curl_seconds(spec, proc.stdout)  # curl's own clock: the transfers, not the process start
    return Measurement({"transfer_s": elapsed, "throughput_mbps": spec.size * 8 / elapsed / 1e6}, raw,
                       argv[0], carried_bytes=spec.size)


def _download_command(spec: TransferOptions, ctx: WorkloadContext, info: dict, paths: list[str]):
    """The client's command for all the files, and the folder on the source scp writes them to
    (None for curl, which discards them)."""
    host, port, source = ctx.bed.sink_ip, PORTS[spec.protocol], ctx.bed.source
    if spec.protocol == "ssh":
        # scp copies several files only into a folder; one file goes to /dev/null as before
        into = None
        if len(paths) > 1:
            into = source.run(["mktemp", "-d", "-p", data_dir(ctx, source), "scp-XXXXXX"]).stdout.strip()
        return (["scp", "-q", "-P", str(port), "-i", info["key"], "-o", "StrictHostKeyChecking=no", "-o",
                 "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", *(f"root@{host}:{p}" for p in paths),
                 into or "/dev/null"], into)
    argv = ["curl", "-sS", "-w", "%{size_download} %{time_total}\\n"]
    for path in paths:  # one curl: the connection is reused from file to file
        argv += ["-o", "/dev/null", f"{spec.protocol}://{host}:{port}/{PurePosixPath(path).name}"]
    if spec.protocol == "https":
        argv[1:1] = ["--cacert", _ca_on_source(ctx, info)]
    return argv, None


def _ca_on_source(ctx: WorkloadContext, info: dict) -> str:
    """The CA of the server's certificate, written on the source once per testbed."""
    if "ca_on_source" not in info:
        source = ctx.bed.source
        path = f"{source.scratch()}/curl-{source.namespace or source.role}/ca.pem"
        info["ca_on_source"] = source.write_file(path, info["ca"], 0o644)
    return info["ca_on_source"]


def _curl_seconds(spec: TransferOptions, output: str) -> float:
    """The sum of curl's per-file times, after checking each file arrived whole."""
    lines = output.split()
    moved = [int(float(size)) for size in lines[0::2]]
    if moved != spec.sizes:
        raise MeasurementError(f"{spec.protocol} transfer moved {sum(moved)} bytes in {len(moved)} file(s) of "
                               f"{spec.size} in {spec.files}")
    return sum(float(seconds) for seconds in lines[1::2])
