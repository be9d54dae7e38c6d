"""Every bad study file gets a clear error before anything starts (issue 15, section 5).

A case goes through the real CLI in a subprocess, `vpnlab run FILE --dry-run`, and a few
without --dry-run as well: exit 2, the field (or the file's line) named, no traceback, and for
the real runs nothing created: no results directory, no run state, no namespace. The
subprocesses run concurrently, in one module fixture, to keep the suite fast; variants of a kind a CLI
case already shows end to end are checked in-process, through the same loader (`cli=False`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import execlog
from conftest import our_namespaces
from vpnlab.core.errors import StudyError
from vpnlab.core.schema import SOCKET_BUFFER_MAX, socket_buffer_limit
from vpnlab.plan.study import MAX_FILE_BYTES, MAX_SCENARIOS, load_study, parse_study
from vpnlab.testbed.state import CLAIM, PROBE_PREFIX, STATE_ROOT

BASE = "name: t\nvpns: [{driver: none}, {driver: wireguard}]\n"
PING = BASE + "workloads: [{kind: ping}]\n"
TEN = "[" + ", ".join(str(i) for i in range(1, 11)) + "]"
LIMIT = socket_buffer_limit()


def workload(text: str) -> str:
    return BASE + f"workloads: [{text}]\n"


@dataclass
class Case:
    id: str
    content: str | bytes | None  # None: the path is given as is
    expect: tuple[str, ...]      # each in the message: the field, the file's line, the limit
    real: bool = False           # also run without --dry-run: nothing may be created
    path: str = ""               # for content None
    cli: bool = True             # False: a variant of a kind the CLI already shows, checked in-process


CASES = [
    # tracebacks before
    Case("not-utf8", b"name: t\ndescription: caf\xe9\nvpns: [{driver: none}]\nworkloads: [{kind: ping}]\n",
         ("not UTF-8", "byte 0xe9 at line 2, column 17"), real=True),
    Case("deeply-nested", PING + "description: " + "[" * 5000 + "]" * 5000 + "\n",
         ("description[0][0]", "nested more than 32 levels")),
    Case("billion-laughs", BASE + f"workloads: [{{kind: tcp, duration_s: &a {TEN}, omit_s: *a, streams: *a, "
         "window: *a, reverse: [true, false]}, {kind: ping, size: *a, count: *a, interval_s: *a}]\n"
         "links: [{rate_mbit: *a, delay_ms: *a, loss_pct: *a}]\n",
         ("plan: 2 VPN configuration(s) x 1,000 link(s) x 21,000 workload(s)", "more than 10,000",
          "workloads[0]: duration_s (10 values) x omit_s (10 values)"), real=True),
    Case("laughs-in-vpn-options", "name: t\nvpns: [{driver: wireguard, options: {mtu: &a ["
         + ", ".join(str(1280 + i) for i in range(200)) + "], port: *a}}]\nworkloads: [{kind: ping}]\n",
         ("vpns[0]: options.mtu (200 values) x options.port (200 values) = 40,000",), cli=False),
    Case("over-1mb", b"#" * (MAX_FILE_BYTES + 1), ("more than 1 MB", "before reading it as YAML"), real=True),
    # accepted, then failed or hung at run time
    Case("duration-half-second", workload("{kind: tcp, duration_s: 0.5}"),
         ("workloads[0].duration_s", "whole number of seconds", "iperf3 would run 0"), real=True),
    Case("duration-2.9", workload("{kind: tcp, duration_s: 2.9}"),
         ("workloads[0].duration_s", "whole number of seconds", "iperf3 would run 2"), cli=False),
    Case("udp-duration-2.9", workload("{kind: udp, duration_s: 2.9}"), ("workloads[0].duration_s", "whole number"),
         cli=False),
    Case("duration-as-text", workload("{kind: tcp, duration_s: '1.5'}"), ("workloads[0].duration_s", "whole number"),
         cli=False),
    Case("duration-true", workload("{kind: tcp, duration_s: true}"), ("workloads[0].duration_s", "true/false"),
         cli=False),
    Case("duration-zero", workload("{kind: tcp, duration_s: 0}"),
         ("workloads[0].duration_s", "greater than or equal to 1"), cli=False),
    Case("omit-over-60", workload("{kind: tcp, omit_s: 61}"), ("workloads[0].omit_s", "less than or equal to 60"),
         cli=False),
    Case("omit-fraction", workload("{kind: tcp, omit_s: 1.5}"), ("workloads[0].omit_s", "whole number"), cli=False),
    Case("udp-size-below-16", workload("{kind: udp, size: 15}"), ("workloads[0].size", "16 to 65507 bytes"), cli=False),
    Case("udp-size-above-65507", workload("{kind: udp, size: 65508}"), ("workloads[0].size", "16 to 65507 bytes"),
         cli=False),
    Case("window-over-64M", workload("{kind: tcp, window: 65M}"), ("workloads[0].window", "more than 64M"), cli=False),
    pytest.param(Case("window-over-this-kernel", workload(f"{{kind: tcp, window: {(LIMIT or 0) + 1024}}}"),
                      ("workloads[0].window", "net.core.rmem_max", "sysctl -w")),
                 marks=pytest.mark.skipif(not LIMIT or LIMIT + 1024 > SOCKET_BUFFER_MAX,
                                          reason="this kernel's socket buffer limit is unreadable or above 64M")),
    Case("window-fraction", workload("{kind: tcp, window: 1.1M}"), ("workloads[0].window", "whole number of bytes"),
         cli=False),
    Case("window-infinite", workload("{kind: tcp, window: .inf}"), ("workloads[0].window", "whole number of bytes"),
         cli=False),
    Case("window-self-alias", workload("{kind: tcp, window: &w [*w]}"), ("workloads[0].window", "expected a size"),
         cli=False),
    # accepted silently
    Case("vpns-differ-only-in-label", "name: t\nvpns: [{driver: none}, {driver: wireguard, label: a}, "
         "{driver: wireguard, label: b, options: {port: 51820}}]\nworkloads: [{kind: ping}]\n",
         ("vpns[2] ('b') and vpns[1] ('a') are the same configuration",), real=True),
    Case("vpn-sweep-repeats", "name: t\nvpns: [{driver: none}, {driver: openvpn, label: o, "
         "options: {cipher: [AES-128-GCM, AES-128-GCM]}}]\nworkloads: [{kind: ping}]\n",
         ("vpns[1]: its sweeps give the same configuration",), cli=False),
    Case("identical-workloads", BASE + "workloads: [{kind: ping}, {kind: tcp}, {kind: ping, size: 56}]\n",
         ("workloads[2] ('ping-56B') and workloads[0] ('ping-56B') are the same workload",), cli=False),
    Case("workload-sweep-repeats", workload("{kind: ping, size: [56, 64, 56]}"),
         ("workloads[0]: its sweeps give the same workload",), cli=False),
    Case("inner-baseline", "name: t\ntopology: site-to-site\nvpns: [{driver: none}, {driver: wireguard, "
         "inner: {driver: none}}]\nworkloads: [{kind: ping}]\n", ("vpns[1].inner.driver", "no-VPN baseline"),
         real=True),
    # the earlier kinds
    Case("unknown-top-level-key", PING + "repetition: 3\n", ("repetition: unknown field",)),
    Case("unknown-workload-key", workload("{kind: tcp, windw: 8K}"), ("workloads[0].windw: unknown field",), cli=False),
    Case("unknown-kind", workload("{kind: video}"), ("workloads[0]", "unknown kind"), cli=False),
    Case("missing-kind", workload("{size: 56}"), ("workloads[0]", "missing field 'kind'"), cli=False),
    Case("unknown-driver", "name: t\nvpns: [{driver: ipsec}]\nworkloads: [{kind: ping}]\n",
         ("vpns[0].driver: unknown VPN driver 'ipsec'",)),
    Case("unknown-cipher", "name: t\nvpns: [{driver: openvpn, options: {cipher: ROT13}}]\nworkloads: [{kind: ping}]\n",
         ("vpns[0].options.cipher",)),
    Case("unknown-profile", "name: t\nvpns: [{driver: openvpn, profile: nsa}]\nworkloads: [{kind: ping}]\n",
         ("vpns[0].profile",), cli=False),
    Case("fips-non-fips-cipher", "name: t\nvpns: [{driver: openvpn, profile: fips, options: {cipher: BF-CBC}}]\n"
         "workloads: [{kind: ping}]\n", ("vpns[0].options.cipher", "FIPS"), cli=False),
    Case("openvpn-static-key-aead", "name: t\nvpns: [{driver: openvpn, options: {key: static}}]\n"
         "workloads: [{kind: ping}]\n", ("vpns[0].options.cipher", "static key carries CBC ciphers only"), cli=False),
    Case("openvpn-static-key-fips", "name: t\nvpns: [{driver: openvpn, profile: fips, options: {key: static, "
         "cipher: AES-256-CBC}}]\nworkloads: [{kind: ping}]\n", ("vpns[0].options.key", "no TLS"), cli=False),
    Case("nebula-unknown-cipher", "name: t\nvpns: [{driver: nebula, options: {cipher: aes128}}]\n"
         "workloads: [{kind: ping}]\n", ("vpns[0].options.cipher",), cli=False),
    Case("nebula-fips", "name: t\nvpns: [{driver: nebula, profile: fips}]\nworkloads: [{kind: ping}]\n",
         ("vpns[0].profile", "Nebula 1.6.1 has no FIPS 140 mode", "not a FIPS 140-validated module"), cli=False),
    Case("tinc-compression-level", "name: t\nvpns: [{driver: tinc, options: {compression: 12}}]\n"
         "workloads: [{kind: ping}]\n", ("vpns[0].options.compression",), cli=False),
    Case("tinc-mac-longer-than-its-digest", "name: t\nvpns: [{driver: tinc, options: {digest: md5, mac_length: 20}}]"
         "\nworkloads: [{kind: ping}]\n", ("vpns[0].options.mac_length", "16-byte md5 digest"), cli=False),
    Case("tinc-fips", "name: t\nvpns: [{driver: tinc, profile: fips}]\nworkloads: [{kind: ping}]\n",
         ("vpns[0].profile", "tinc 1.0 has no FIPS 140 mode"), cli=False),
    Case("wrong-type", PING + "links: [{rate_mbit: fast}]\n", ("links[0].rate_mbit",), cli=False),
    Case("wrong-type-in-a-sweep", workload("{kind: ping, count: [1, two]}"), ("workloads[0].count",), cli=False),
    Case("empty-vpns", "name: t\nvpns: []\nworkloads: [{kind: ping}]\n", ("vpns:", "at least 1 item"), cli=False),
    Case("empty-sweep", workload("{kind: ping, size: []}"), ("workloads[0].size: empty list",), cli=False),
    Case("missing-name", "vpns: [{driver: none}]\nworkloads: [{kind: ping}]\n", ("name: Field required",), cli=False),
    Case("repetitions-out-of-range", PING + "repetitions: 0\n", ("repetitions",), cli=False),
    Case("unknown-background", PING + "links: [{background: disco}]\n",
         ("links[0].background", "unknown background mix"), cli=False),
    Case("three-layers", "name: t\ntopology: site-to-site\nvpns: [{driver: wireguard, inner: {driver: wireguard, "
         "options: {port: 51821}, inner: {driver: wireguard, options: {port: 51822}}}}]\nworkloads: [{kind: ping}]\n",
         ("vpns: at most 2 tunnel layers",), cli=False),
    Case("nesting-outside-site-to-site", "name: t\nvpns: [{driver: wireguard, inner: {driver: wireguard, "
         "options: {port: 51821}}}]\nworkloads: [{kind: ping}]\n", ("topology: nested tunnels need",), cli=False),
    Case("inner-that-contains-itself", "name: t\ntopology: site-to-site\nvpns: [&v {driver: wireguard, inner: *v}]\n"
         "workloads: [{kind: ping}]\n", ("vpns[0].inner",), cli=False),
    Case("duplicate-labels", "name: t\nvpns: [{driver: wireguard, label: x}, {driver: openvpn, label: x}]\n"
         "workloads: [{kind: ping}]\n", ("vpns: two entries are both labelled 'x'",), cli=False),
    Case("not-yaml", "name: [unclosed\n", ("not valid YAML", "line")),
    Case("tab-indent", "name: t\n\tvpns: []\n", ("not valid YAML", "line 2"), cli=False),
    Case("nul-byte", "name: t\x00\n", ("not valid YAML", "position 7"), cli=False),
    Case("empty-file", "", ("(top level)", "holds nothing")),
    Case("only-a-comment", "# nothing yet\n", ("(top level)", "holds nothing"), cli=False),
    Case("top-level-list", "- name: t\n- vpns: []\n", ("(top level)", "found a list"), cli=False),
    Case("top-level-scalar", "hello\n", ("(top level)", "found the value 'hello'"), cli=False),
    Case("no-such-file", None, ("no-such-study.yaml: no such study file",), path="no-such-study.yaml"),
    Case("a-directory", None, ("cannot read study file: Is a directory",), path="."),
    Case("markup-in-a-key", workload("{kind: ping, '[/x]': 1}"), ("workloads[0].[/x]: unknown field",)),
    # read as a careful parser would (issue 37)
    Case("duplicate-top-level-key", PING + "repetitions: 3\nrepetitions: 5\n",
         ("duplicate key 'repetitions' (also at line 4, column 1)", "line 5"), real=True),
    Case("duplicate-key-in-a-flow-mapping", workload("{kind: ping, count: 5, count: 7}"), ("duplicate key 'count'",),
         cli=False),
    Case("true-for-a-rate", PING + "links: [{rate_mbit: true}]\n",
         ("links[0].rate_mbit: expected a number, not true/false",), real=True),
    Case("false-for-a-driver-option", "name: t\nvpns: [{driver: wireguard, options: {mtu: false}}]\n"
         "workloads: [{kind: ping}]\n", ("vpns[0].options.mtu: expected a number, not true/false",), cli=False),
    Case("true-for-a-count", workload("{kind: ping, count: true}"),
         ("workloads[0].count: expected a number, not true/false",), cli=False),
    Case("loss-100", PING + "links: [{loss_pct: 100}]\n", ("links[0].loss_pct", "less than 100"), cli=False),
    Case("shape-without-hosts", PING + "links: [{rate_mbit: 10, shape: true}]\n",
         ("links[0].shape: only for a study on real hosts",), cli=False),
    Case("escape-in-a-label", 'name: t\nvpns: [{driver: none, label: "\\e[31mred"}]\nworkloads: [{kind: ping}]\n',
         ("vpns[0].label: control character \\x1b",), real=True),
    Case("line-break-in-the-name", 'name: "t\\nforged row"\nvpns: [{driver: none}]\nworkloads: [{kind: ping}]\n',
         ("name: control character \\n",)),
    Case("nul-in-a-link-name", PING + 'links: [{name: "a\\0b"}]\n', ("links[0].name: control character \\x00",),
         cli=False),
    Case("escape-in-a-key", workload('{kind: ping, "\\e[2J": 1}'), ("workloads[0].'\\x1b[2J': control character",),
         cli=False),
    Case("escape-in-a-description", PING + 'description: "\\e]0;title\\a"\n', ("description: control character",),
         cli=False),
    # a path's MTU and filtered ICMP (issue 47)
    Case("path-mtu-below-576", PING + "links: [{mtu: 575}]\n", ("links[0].mtu", "greater than or equal to 576"),
         real=True),
    Case("path-mtu-above-9000", PING + "links: [{mtu: 9001}]\n", ("links[0].mtu", "less than or equal to 9000"), cli=False),
    Case("path-mtu-fraction", PING + "links: [{mtu: 1400.5}]\n", ("links[0].mtu", "integer"), cli=False),
    Case("path-mtu-in-a-sweep", PING + "links: [{mtu: [1400, 100]}]\n", ("links[0].mtu", "576"), cli=False),
    Case("icmp-unknown", PING + "links: [{mtu: 1400, icmp: dropped}]\n", ("links[0].icmp", "'allowed' or 'blocked'"),
         real=True),
    Case("icmp-true", PING + "links: [{icmp: true}]\n", ("links[0].icmp", "'allowed' or 'blocked'"), cli=False),
    Case("path-mtu-in-a-mesh", "name: t\ntopology: mesh\npeers: 3\nvpns: [{driver: none}, {driver: wireguard}]\n"
         "workloads: [{kind: ping}]\nlinks: [{mtu: 1400, icmp: blocked}]\n",
         ("links[0].mtu: only for a remote-access or site-to-site study", "links[0].icmp: only for", "mesh"), cli=False),
    Case("path-mtu-on-real-hosts", PING + "hosts: {client: a, gateway: b}\nlinks: [{mtu: 1400}]\n",
         ("links[0].mtu: only for a remote-access or site-to-site study on this machine", "real hosts"), cli=False),
    Case("path-mtu-stall-not-within-deadline", workload("{kind: path-mtu, timeout_s: 5, stall_s: 5}"),
         ("workloads[0]", "stall_s (5) must be shorter than timeout_s (5)"), real=True),
    Case("path-mtu-size-zero", workload("{kind: path-mtu, size: 0}"), ("workloads[0].size",), cli=False),
    # what breaks VPNs in the field (issue 47): a NAT on the client side, events during a workload
    Case("nat-timeout-without-nat", PING + "links: [{nat_udp_timeout_s: 30}]\n",
         ("links[0]: nat_udp_timeout_s", "needs nat: masquerade"), real=True),
    Case("nat-timeout-out-of-range", PING + "links: [{nat: masquerade, nat_udp_timeout_s: 3601}]\n",
         ("links[0].nat_udp_timeout_s", "less than or equal to 3600"), cli=False),
    Case("nat-in-a-mesh", "name: t\ntopology: mesh\npeers: 3\nvpns: [{driver: wireguard}]\n"
         "workloads: [{kind: ping}]\nlinks: [{nat: masquerade}]\n", ("links[0].nat: only for", "mesh"), cli=False),
    Case("event-after-the-workload", workload("{kind: ping, count: 10, interval_s: 0.1, events: [{at_s: 5, link_down_s: 1}]}"),
         ("workloads[0].events[0].at_s", "past the workload's end"), real=True),
    Case("event-of-two-kinds", workload("{kind: ping, events: [{at_s: 1, link_down_s: 1, address_change: true}]}"),
         ("workloads[0].events[0]", "one of link_down_s"), cli=False),
    Case("event-unknown", workload("{kind: ping, events: [{at_s: 1, lightning: true}]}"),
         ("workloads[0].events[0]", "lightning: unknown kind of event"), cli=False),
    Case("event-rebind-without-nat", workload("{kind: ping, events: [{at_s: 1, nat_rebind: true}]}"),
         ("workloads[0].events[0].nat_rebind", "links[0] has none"), cli=False),
    Case("event-rekey-wireguard", workload("{kind: ping, events: [{at_s: 1, rekey: true}]}"),
         ("workloads[0].events[0].rekey", "wireguard offers no way to force a rekey"), cli=False),
    Case("tens-of-thousands-of-errors", "name: t\nvpns: [" + ", ".join(["1"] * 50_000) + "]\n"
         "workloads: [{kind: ping}]\n",
         ("vpns[0]: Input should be a valid dictionary", "vpns[19]:", "... and 49,980 more")),
]


def _cases():
    for case in CASES:
        yield case.values[0] if hasattr(case, "values") else case  # inside a pytest.param


def _write(case: Case, folder: Path) -> str:
    if case.content is None:
        return case.path
    study = folder / "study.yaml"
    study.write_bytes(case.content if isinstance(case.content, bytes) else case.content.encode())
    return str(study)


def _env(**extra) -> dict:
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **extra}


def _run(argv, cwd, env, pids: set[int]) -> subprocess.CompletedProcess:
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        pids.add(proc.pid)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()  # ours, by its handle
            out, err = proc.communicate()
            err += "\n(killed after 120 s)"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _foreign(name: str, our_pids: set[int]) -> bool:
    """A namespace another vpnlab on this machine made meanwhile (other tests run at once):
    one of a run with state under the default state root, or another process's probe."""
    if name.startswith(PROBE_PREFIX):
        return name.removeprefix(PROBE_PREFIX) not in {str(p) for p in our_pids}
    # a dead run's record is renamed <id>.cleaning-<pid> while another vpnlab removes its namespaces
    runs = {record.partition(CLAIM)[0] for record in os.listdir(STATE_ROOT)} if STATE_ROOT.is_dir() else set()
    return any(name.startswith(f"vl{run}-") for run in runs)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every CLI case at once; the processes by (case id, "dry" or "real"), the namespaces
    that appeared meanwhile and are not another vpnlab's."""
    folder = tmp_path_factory.mktemp("bad-input")
    log = folder / "exec.log"
    saved = execlog.log_path
    execlog.log_path = str(log)  # the programs these runs start are checked by test_only_declared_programs_ran
    env = _env(VPNLAB_EXEC_LOG=str(log))
    jobs = {}
    pids: set[int] = set()
    before = our_namespaces()
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for case in filter(lambda c: c.cli, _cases()):
                home = folder / case.id
                home.mkdir()
                study = _write(case, home)
                argv = [sys.executable, "-m", "vpnlab", "run", study]
                jobs[case.id, "dry"] = pool.submit(_run, [*argv, "--dry-run"], home, env, pids)
                if case.real:
                    cwd = home / "cwd"
                    cwd.mkdir()
                    state = home / "state"  # a run's state would go here, not under /run/vpnlab
                    jobs[case.id, "real"] = pool.submit(_run, [*argv, "--out", str(home / "out"), "--no-progress"],
                                                        cwd, env | {"VPNLAB_STATE_DIR": str(state)}, pids)
            results = {key: job.result() for key, job in jobs.items()}
        after = our_namespaces()
    finally:
        execlog.log_path = saved
    new = {n for n in after - before if not _foreign(n, pids)}
    return {"results": results, "new_namespaces": new, "folder": folder, "log": log}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_study_is_refused_before_anything_starts(case, outcomes, tmp_path, monkeypatch):
    if not case.cli:  # the same loader the CLI calls, in this process
        monkeypatch.chdir(tmp_path)
        with pytest.raises(StudyError) as info:
            load_study(_write(case, tmp_path))
        message = " ".join(str(info.value).split())
        for expected in case.expect:
            assert expected in message, f"{expected!r} not in\n{info.value}"
        return
    results = outcomes["results"]
    runs = [("--dry-run", results[case.id, "dry"])]
    if case.real:
        runs.append(("without --dry-run", results[case.id, "real"]))
    for how, proc in runs:
        output = proc.stdout + proc.stderr
        assert "Traceback" not in output, f"{how}: a traceback\n{output}"
        assert proc.returncode == 2, f"{how}: exit {proc.returncode}\n{output}"
        message = " ".join(proc.stderr.split())  # whatever the console's width
        for expected in case.expect:
            assert " ".join(expected.split()) in message, f"{how}: {expected!r} not in\n{proc.stderr}"
    if case.real:
        home = outcomes["folder"] / case.id
        assert not (home / "out").exists(), "the results directory was created"
        assert list((home / "cwd").iterdir()) == [], "something was created in the working directory"
        assert not (home / "state").exists(), "run state was created"
        assert outcomes["new_namespaces"] == set(), "a namespace was created"


def test_only_declared_programs_ran(outcomes):
    """Hands what the module's runs executed to the suite's check (the conftest fixture), once the
    log shows it recorded them: at least every vpnlab command the fixture started."""
    assert outcomes["log"].exists(), "the runs' programs were not recorded: nothing would be checked"
    recorded = outcomes["log"].read_text()
    recorded_argvs = {tuple(argv) for argv in map(json.loads, recorded.splitlines())}
    missing = [proc.args for proc in outcomes["results"].values() if tuple(map(str, proc.args)) not in recorded_argvs]
    assert not missing, f"started but not recorded: {missing}"
    with open(execlog.log_path, "a") as log:
        log.write(recorded)


def test_a_valid_study_at_the_limits_passes(tmp_path):
    """The same harness accepts the boundary values, so the refusals above are the limits'."""
    window = min(LIMIT or 65536, SOCKET_BUFFER_MAX)
    study = tmp_path / "ok.yaml"
    study.write_text("name: t\nvpns: [{driver: none}]\n"  # no VPN: no VM twins whatever this kernel lacks
                     f"workloads: [{{kind: tcp, duration_s: 1, omit_s: 60, window: {window}}}, "
                     "{kind: tcp, duration_s: 3600, omit_s: 0}, {kind: udp, size: [16, 65507], duration_s: 1}]\n")
    proc = subprocess.run([sys.executable, "-m", "vpnlab", "run", str(study), "--dry-run"], capture_output=True,
                          text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 scenarios" in " ".join((proc.stdout + proc.stderr).split())


def test_ten_thousand_scenarios_pass_and_one_more_entry_does_not():
    """2 VPNs x 5,000 workloads is the limit; the billion-laughs case above shows the count
    comes before anything is expanded (else it would not finish)."""
    sizes = ", ".join(str(i) for i in range(MAX_SCENARIOS // 2))
    assert len(parse_study(BASE + f"workloads: [{{kind: ping, size: [{sizes}]}}]\n").workloads) == MAX_SCENARIOS // 2
    with pytest.raises(StudyError, match=r"= 10,002 scenarios, more than 10,000"):
        parse_study(BASE + f"workloads: [{{kind: ping, size: [{sizes}, {MAX_SCENARIOS}]}}]\n")


def test_durations_keep_the_form_scenario_ids_hash():
    """duration_s and omit_s stay floats in the dump (10.0): a scenario's id hashes it, and
    --resume of an older run finds its scenarios by id."""
    dumped = parse_study(workload("{kind: tcp, duration_s: 10, omit_s: 2}")).workloads[0].model_dump(mode="json")
    assert json.dumps([dumped["duration_s"], dumped["omit_s"]]) == "[10.0, 2.0]"
