"""strongSwan between real hosts over SSH (tests/hosts_harness.py's lab of namespace "hosts" with their
own sshd, Ansible real): its configurations, certificates and keys written on the hosts, charon
started there in the hosts' own network namespaces, traffic through it, encrypted on the WAN, and
nothing of it left on a host. The lab's hosts have this machine's kernel, which lacks kernel ESP:
their probe says so and the run picks strongSwan's userspace ESP (kernel-libipsec, ESP in UDP).
libreswan needs kernel ESP: its run on hosts is tests/test_hosts_kernel.py's, inside a VM guest; here,
how a host's probe finds its pluto."""

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from conftest import recorded_algorithms
from hosts_harness import built_lab, host_is_clean, sh, wait_until
from test_hosts_study import LAB_SUBNET, read_store
from vpnlab.catalog import DRIVERS

STUDY = """\
name: strongswan-on-hosts
topology: {topology}
hosts: {hosts}
repetitions: 1
order: listed
vpns:
  - driver: none
  - driver: strongswan
  - {{driver: strongswan, profile: fips, options: {{auth: cert}}}}
workloads: [{{kind: tcp, duration_s: 1, omit_s: 0}}]
"""
HOSTS = {"remote-access": "{client: gw-a, gateway: gw-b}", "site-to-site": "{left: gw-a, right: gw-b}"}


@pytest.fixture(scope="module")
def lab():
    """Two SSH "hosts" and a controller, on a network the testbed's addresses do not overlap."""
    with built_lab(study_home=True, subnet=LAB_SUBNET) as built:
        yield built


def network_of(host) -> dict:
    """What charon could leave in a host's own namespace: policy rules, routes of every table, its
    TUN device, the kernel's SAs and policies."""
    def ip(*args):
        return sh("ip", "-n", host.namespace, *args).stdout
    # the lab's own eth0 gains its IPv6 link-local address (and its local route) whenever DAD ends
    routes = [line for line in ip("route", "show", "table", "all").splitlines() if "fe80::" not in line]
    return {"rules": ip("rule") + ip("-6", "rule"), "routes": routes, "links": host.links(),
            "xfrm": ip("xfrm", "state") + ip("xfrm", "policy")}


@pytest.mark.integration
@pytest.mark.parametrize("topology", ["remote-access", "site-to-site"])
def test_strongswan_runs_between_real_hosts_over_ssh(lab, tmp_path, topology):
    a, b = lab.hosts["gw-a"], lab.hosts["gw-b"]
    before = {host.name: network_of(host) for host in (a, b)}
    study, out = tmp_path / "study.yaml", lab.dir / f"strongswan-{topology}"
    study.write_text(STUDY.format(topology=topology, hosts=HOSTS[topology]))
    result = lab.vpnlab("run", study, "--inventory", lab.inventory, "--out", out, "--no-progress", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    _, scenarios, samples = read_store(out)
    strongswan = DRIVERS["strongswan"]
    # ESP in UDP (libipsec's only way) of the default proposal, AES-128-GCM, and of fips's AES-256-GCM
    model = strongswan.overhead(strongswan.Options(), "default", "libipsec", 1028)
    assert model == 64
    link = "unshaped"
    for vpn in ("strongswan default psk", "strongswan aes256gcm16 cert fips"):
        scenario = scenarios[(vpn, link)]
        # done: the proof found the probe on the WAN only inside the tunnel's packets (UDP 4500), of the modelled size
        assert (scenario["status"], scenario["failure"]) == ("done", None), vpn
        assert scenario["implementation"] == "libipsec", vpn  # the hosts' kernel has no ESP
        assert json.loads(scenario["hosts"]) == {"remote-access": {"client": "gw-a", "gateway": "gw-b"},
                                                 "site-to-site": {"left": "gw-a", "right": "gw-b"}}[topology]
        assert samples[(vpn, link, 1, "overhead_bytes")] == samples[(vpn, link, 1, "overhead_model_bytes")] == model
        assert samples[(vpn, link, 1, "throughput_mbps")] > 1, vpn
    recorded, mismatches = recorded_algorithms(out)  # read from charon's logs, streamed from the hosts
    assert mismatches == []
    negotiated = {vpn: recorded[vpn][0]["negotiated"] for vpn in ("strongswan default psk",
                                                                 "strongswan aes256gcm16 cert fips")}
    assert [(n["key_exchange"], n["authentication"]) for n in negotiated.values()] == \
        [("X25519", "PSK"), ("ECDH P-256", "ECDSA SHA-256")], negotiated  # the certificates, verified
    for host in (a, b):  # no charon, file, rule, route, device or SA of its left
        assert wait_until(lambda: host_is_clean(host)), (host.name, host.processes(), host.links())
        assert network_of(host) == before[host.name], host.name
        # charon's private /run was its own: the host's (with the lab's /run/sshd) was never hidden
        assert "sshd" in host.listdir("/run"), host.listdir("/run")



def test_a_host_finds_a_privately_unpacked_program_as_this_machine_does(monkeypatch, tmp_path):
    """libreswan's pluto is installed on a host, or unpacked by bootstrap.sh (a VM guest shares this
    machine's cache): the hosts' probe looks in both places, so a libreswan study is placed on such hosts."""
    from vpnlab.tools import unpacked
    from vpnlab.hosts.doctor import locate

    monkeypatch.setattr(unpacked, "package_folder", lambda package: tmp_path / "packages" / package)
    pluto = dataclasses.replace(DRIVERS["libreswan"].tools[0], command="vpnlab-no-such-pluto",
                                path=str(tmp_path / "installed" / "pluto"))
    copy = tmp_path / "packages" / "libreswan" / pluto.path.lstrip("/")

    script = tmp_path / "locate.sh"  # as the probe runs it over SSH: a script for sh
    script.write_text(f'{locate(pluto)} && echo "$p"\n')

    def found() -> str:
        return subprocess.run(["sh", script], capture_output=True, text=True).stdout.strip()

    assert pluto.private and found() == ""
    for place in (copy, Path(pluto.path)):  # unpacked; then installed too, which comes first
        place.parent.mkdir(parents=True)
        place.write_text("#!/bin/sh\n")
        place.chmod(0o755)
        assert found() == str(place)
