"""Transfers over every protocol, several files, and the background mix, run between real hosts:
the lab of tests/hosts_harness.py (namespaces with their own sshd, reached over SSH as Ansible
would), through `vpnlab run --inventory` as a user runs a study on hosts."""

import shutil
import sqlite3
from pathlib import Path

import matplotlib
import pytest

from hosts_harness import lab  # noqa: F401  (the fixture: two SSH "hosts" in namespaces)
from hosts_harness import host_is_clean, wait_until
from vpnlab.hosts.prepare import study_packages
from vpnlab.plan.study import parse_study

# With no VPN the source and the sink are the hosts themselves (their own network, where the
# lab's sshd holds port 22); through WireGuard they are namespaces on them.
TRANSFERS = """\
name: hosts-transfers
topology: remote-access
hosts: {client: gw-a, gateway: gw-b}
repetitions: 1
order: listed
vpns: [{driver: none}, {driver: wireguard}]
workloads:
  - {kind: transfer, protocol: [http, https, ftp, ssh], data: random, size: 1M}
  - {kind: transfer, protocol: [http, ftp, ssh], data: text, size: 300K, files: 3}
"""

BACKGROUND = """\
name: hosts-background
topology: remote-access
hosts: {client: gw-a, gateway: gw-b}
repetitions: 1
order: listed
vpns: [{driver: none}, {driver: wireguard}]
links:
  - rate_mbit: 8
    shape: true
    background:
      name: busy
      flows:
        - {protocol: http, rate_kbit: 2000}
        - {protocol: ftp, rate_kbit: 800, size: 64K}
        - {protocol: pop3, rate_kbit: 400}
        - {protocol: smtp, rate_kbit: 400}
        - {protocol: dns, queries_per_s: 10}
workloads: [{kind: transfer, protocol: http, data: random, size: 4M}]  # 4 s at 8 Mbit/s: about 6 of the rarest
"""


def run_on_hosts(lab, tmp_path, name: str, text: str):  # noqa: F811
    """Run the study on gw-a and gw-b; its scenarios' status, samples and raw outputs, after checking
    that both hosts are clean and that no data folder of a finished run is left in /var/tmp."""
    study, out = tmp_path / f"{name}.yaml", lab.dir / name
    study.write_text(text)
    # the controller's private home gets matplotlib's font list (the report's), or it would build one
    shutil.copytree(matplotlib.get_cachedir(), lab.home / ".cache" / "matplotlib", dirs_exist_ok=True)
    before = set(Path("/var/tmp").glob("vpnlab-*-data"))  # (the lab's hosts share this machine's /var/tmp)
    result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    db = sqlite3.connect(out / "results.sqlite")
    try:
        status = {f"{vpn} {workload}": (state, failure) for vpn, workload, state, failure in db.execute(
            "SELECT vpn, workload_label, status, failure FROM scenarios")}
        samples = {(f"{vpn} {workload}", metric): value for vpn, workload, metric, value in db.execute(
            "SELECT sc.vpn, sc.workload_label, s.metric, s.value FROM samples s"
            " JOIN scenarios sc ON sc.id = s.scenario_id WHERE s.repetition > 0")}
        raw = {(f"{vpn} {workload}", tool): output for vpn, workload, tool, output in db.execute(
            "SELECT sc.vpn, sc.workload_label, r.tool, r.output FROM raw_outputs r"
            " JOIN scenarios sc ON sc.id = r.scenario_id WHERE r.repetition > 0")}
    finally:
        db.close()
    for host in lab.hosts.values():
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())
    left = [p for p in set(Path("/var/tmp").glob("vpnlab-*-data")) - before
            if not Path("/run/vpnlab", p.name.split("-")[1]).exists()]  # (another run's, still going, aside)
    assert left == [], left
    return status, samples, raw


@pytest.mark.integration
def test_transfers_over_every_protocol_run_between_hosts(lab, tmp_path):  # noqa: F811
    status, samples, raw = run_on_hosts(lab, tmp_path, "transfers", TRANSFERS)
    single = [f"{p}-random-1M" for p in ("http", "https", "ftp", "ssh")]
    several = [f"{p}-text-300K-in-3" for p in ("http", "ftp", "ssh")]
    assert set(status) == {f"{vpn} {w}" for vpn in ("none", "wireguard") for w in single + several}
    assert set(status.values()) == {("done", None)}, status
    for scenario in status:
        seconds, mbps = samples[(scenario, "transfer_s")], samples[(scenario, "throughput_mbps")]
        size = 1 << 20 if scenario.endswith("1M") else 300 * 1024
        assert seconds > 0 and mbps == pytest.approx(size * 8 / seconds / 1e6), scenario
    for vpn in ("none", "wireguard"):
        # curl checked each file's bytes (one command, three whole files); scp copied three sources
        assert raw[(f"{vpn} http-text-300K-in-3", "curl")].count("102400 ") == 3
        assert raw[(f"{vpn} ftp-text-300K-in-3", "curl")].count("102400 ") == 3
        assert raw[(f"{vpn} ssh-text-300K-in-3", "scp")].count("root@") == 3


@pytest.mark.integration
def test_the_background_mix_runs_between_hosts(lab, tmp_path):  # noqa: F811
    status, samples, raw = run_on_hosts(lab, tmp_path, "background", BACKGROUND)
    assert set(status.values()) == {("done", None)}, status
    assert len(status) == 2
    for scenario in status:
        account = raw[(scenario, "background")]
        for protocol in ("http", "ftp", "pop3", "smtp", "dns"):
            assert samples[(scenario, f"background_{protocol}_kbps")] > 0, account
        assert samples[(scenario, "background_failures")] <= 1, account
        assert samples[(scenario, "background_offered_kbps")] == 3600
        assert samples[(scenario, "throughput_mbps")] > 0


def test_hosts_prepare_installs_the_servers_clients_and_python_modules_they_need():
    here = "hosts: {client: gw-a, gateway: gw-b}\n"
    transfers = study_packages(parse_study(TRANSFERS.replace(here, "")))
    assert {"nginx-light", "curl", "vsftpd", "openssh-server", "openssh-client", "util-linux",
            "python3-numpy", "python3-pil"} <= set(transfers)  # datasets.py runs under the host's Python
    assert "dovecot-pop3d" not in transfers
    mixed = set(study_packages(parse_study(BACKGROUND.replace(here, "").replace("    shape: true\n", ""))))
    assert {"nginx-light", "vsftpd", "dovecot-pop3d", "dnsmasq-base", "python3-aiosmtpd"} <= mixed
