"""File transfers through the tunnel with real servers: nginx (HTTP, HTTPS), OpenSSH (scp),
vsftpd (FTP). The sink serves, the source downloads and times the transfer."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from ..drivers.pki import make_pki
from ..errors import MeasurementError
from ..metrics import declare
from ..schema import Size, human_size, parse_size
from ..testbed.node import private_run
from ..tools import Tool
from . import datasets
from .base import Measurement, WorkloadContext, WorkloadKind, WorkloadOptions, without_one_pair

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
CLIENTS = {"http": (NGINX, CURL), "https": (NGINX, CURL), "ftp": (VSFTPD, CURL),
           "ssh": (SSHD, Tool("scp", "openssh-client"), Tool("ssh", "openssh-client"),  # (scp runs ssh)
                   Tool("ssh-keygen", "openssh-client"))}


class TransferOptions(WorkloadOptions):
    """Download one file from the sink over a real protocol server, or `files` files totalling `size`
    one after another in one session (one curl or scp command, as a user fetching a folder)."""

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

    @model_serializer(mode="wrap")
    def _one_file_as_before(self, handler):
        # `files` came after runs were stored: left out at 1, so those scenarios keep their ids
        data = handler(self)
        if isinstance(data, dict) and self.files == 1:
            data.pop("files", None)
        return without_one_pair(self, data)

    @property
    def sizes(self) -> list[int]:
        """Each file's size: equal parts, the remainder in the last."""
        part = self.size // self.files
        return [part] * (self.files - 1) + [self.size - part * (self.files - 1)]

    @property
    def label(self) -> str:
        return f"{self.protocol}-{self.data}-{human_size(self.size)}" + (f"-in-{self.files}" if self.files > 1 else "")


def data_dir(ctx: WorkloadContext) -> Path:
    """Per-run folder of generated files, readable by the servers' unprivileged users."""
    folder = Path(f"/var/tmp/vpnlab-{ctx.bed.state.run_id}-data")
    if str(folder) not in ctx.bed.state.dirs:
        ctx.bed.state.add_dir(folder)
        folder.mkdir(mode=0o755, exist_ok=True)
    return folder


def private_dir(ctx: WorkloadContext, name: str) -> Path:
    """A server's own folder, fresh for each testbed (a repetition's testbed reuses the names of
    the one before it, whose keys and configuration must not be taken for its own)."""
    folder = ctx.bed.state.secrets_dir / f"{name}-{ctx.bed.nodes[0].namespace}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    return folder


def _start_nginx(ctx: WorkloadContext, data: Path) -> dict:
    home = private_dir(ctx, "nginx")
    pki = make_pki(ctx.bed.sink_ip).install("server", lambda name, pem: ctx.bed.sink.write_file(home / name, pem))
    conf = home / "nginx.conf"
    conf.write_text(f"""daemon off;
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
    listen {ctx.bed.sink_ip}:80;
    listen {ctx.bed.sink_ip}:443 ssl;
    ssl_certificate {pki.cert};
    ssl_certificate_key {pki.key};
    root {data};
  }}
}}
""")
    return {"argv": ["nginx", "-c", conf, "-p", home], "port": 80, "ca": pki.ca}


def _start_vsftpd(ctx: WorkloadContext, data: Path) -> dict:
    # Anonymous FTP as a system user whose home exists (vsftpd enters it before anon_root).
    home = private_dir(ctx, "vsftpd")
    (home / "empty").mkdir(mode=0o755, exist_ok=True)
    conf = home / "vsftpd.conf"
    conf.write_text(f"""listen=YES
listen_address={ctx.bed.sink_ip}
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
    conf.chmod(0o600)
    return {"argv": ["vsftpd", conf], "port": 21}


def _start_sshd(ctx: WorkloadContext, data: Path) -> dict:
    home = private_dir(ctx, "sshd")
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", home / name], check=True)
    (home / "authorized_keys").write_text((home / "client_key.pub").read_text())
    conf = home / "sshd_config"
    conf.write_text(f"""ListenAddress {ctx.bed.sink_ip}
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
    # sshd insists on its privilege-separation directory /run/sshd: give it a private /run.
    argv = private_run(["/usr/sbin/sshd", "-D", "-e", "-f", conf], keep=ctx.bed.state.directory, make=("/run/sshd",))
    return {"argv": argv, "port": 22, "key": home / "client_key"}


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


def file_server(ctx: WorkloadContext, protocol: str, data: Path) -> tuple[str, Callable[[], dict]]:
    """The name and starter of the server behind a file transfer protocol."""
    start = STARTERS[protocol]
    return start.__name__.removeprefix("_start_"), lambda: start(ctx, data)


def ensure_file_server(ctx: WorkloadContext, protocol: str, data: Path) -> dict:
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

    def needs(self, options: TransferOptions) -> tuple[str, ...]:
        return tuple(t.command for t in CLIENTS[options.protocol])

    def estimate_s(self, options: TransferOptions, rate_mbit):
        # the file at 90% of the link rate (unshaped: 10 MB/s, a userspace tunnel's pace), plus the connection
        return options.size * 8 / ((rate_mbit or 80) * 0.9e6) + 1

    def prepare(self, options: TransferOptions, ctx: WorkloadContext) -> None:
        _ready(options, ctx)  # (a first file of a sitting took up to 37 s to make under emulation)

    def run(self, options: TransferOptions, ctx: WorkloadContext) -> Measurement:
        return download(options, ctx)


def _ready(spec: TransferOptions, ctx: WorkloadContext) -> tuple[list[Path], dict]:
    """The files made and their server listening (made and started now if they are not yet)."""
    data = data_dir(ctx)
    paths = [datasets.make(data, spec.data, size, part) for part, size in enumerate(spec.sizes)]
    return paths, ensure_file_server(ctx, spec.protocol, data)


def download(spec: TransferOptions, ctx: WorkloadContext) -> Measurement:
    paths, info = _ready(spec, ctx)
    argv, into = _download_command(spec, ctx, info, paths)
    started = time.monotonic()
    try:
        proc = ctx.bed.source.run(argv, check=False, timeout=spec.timeout_s)
    finally:
        if into:
            shutil.rmtree(into, ignore_errors=True)
    elapsed = time.monotonic() - started
    raw = f"$ {' '.join(map(str, argv))}\n{proc.stdout}{proc.stderr}"
    if proc.returncode != 0:
        raise MeasurementError(f"{spec.protocol} transfer failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    if spec.protocol != "ssh":
        elapsed = _curl_seconds(spec, proc.stdout)  # curl's own clock: the transfers, not the process start
    return Measurement({"transfer_s": elapsed, "throughput_mbps": spec.size * 8 / elapsed / 1e6}, raw,
                       argv[0], carried_bytes=spec.size)


def _download_command(spec: TransferOptions, ctx: WorkloadContext, info: dict, paths: list[Path]):
    """The client's command for all the files, and the folder scp writes them to (None for curl,
    which discards them)."""
    host = ctx.bed.sink_ip
    if spec.protocol == "ssh":
        # scp copies several files only into a folder; one file goes to /dev/null as before
        into = Path(tempfile.mkdtemp(prefix="scp-", dir=data_dir(ctx))) if len(paths) > 1 else None
        return (["scp", "-q", "-i", info["key"], "-o", "StrictHostKeyChecking=no", "-o",
                 "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", *(f"root@{host}:{p}" for p in paths),
                 into or "/dev/null"], into)
    argv = ["curl", "-sS", "-w", "%{size_download} %{time_total}\\n"]
    for path in paths:  # one curl: the connection is reused from file to file
        argv += ["-o", "/dev/null", f"{spec.protocol}://{host}/{path.name}"]
    if spec.protocol == "https":
        argv[1:1] = ["--cacert", info["ca"]]
    return argv, None


def _curl_seconds(spec: TransferOptions, output: str) -> float:
    """The sum of curl's per-file times, after checking each file arrived whole."""
    lines = output.split()
    moved = [int(float(size)) for size in lines[0::2]]
    if moved != spec.sizes:
        raise MeasurementError(f"{spec.protocol} transfer moved {sum(moved)} bytes in {len(moved)} file(s) of "
                               f"{spec.size} in {spec.files}")
    return sum(float(seconds) for seconds in lines[1::2])
