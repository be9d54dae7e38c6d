"""The one kernel probe (features.KERNEL_PROBE): what this machine, a VM guest and a real host are
asked, by the same script, and what its answer says."""

import os
import subprocess

import pytest

from vpnlab.machines.capabilities import detect, probe, this_machine
from vpnlab.core.features import FEATURES, parse_probe, probe_argv


def namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe makes a network namespace (root)")
def test_the_probe_answers_for_every_feature_and_leaves_no_namespace():
    shown = subprocess.run(probe_argv("vlprobetest1"), capture_output=True, text=True, check=True)
    found = parse_probe(shown.stdout)
    assert "vlprobetest1" not in namespaces()
    assert set(found["features"]) == set(FEATURES) and found["features"]["netns"] and found["features"]["veth"]
    assert found["kernel"] == os.uname().release and found["cpus"] == os.cpu_count()
    assert found["cpu_model"] and found["cpu_model"] != "unknown"
    # on its own (as a host runs it over SSH: a namespace named for its shell), the same answer
    assert parse_probe(subprocess.run(probe_argv(), capture_output=True, text=True).stdout) == found
    # and what this machine reports is that probe's answer
    assert detect().features == found["features"] == probe()["features"]
    assert this_machine()["cpu_model"] == found["cpu_model"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe makes a network namespace (root)")
def test_a_kernel_piece_is_what_trying_it_gives():
    """Each answer is the kernel's own: the probe's PPP is whether /dev/ppp opens, its netem whether
    the qdisc is accepted, here as in a run."""
    found = parse_probe(subprocess.run(probe_argv(), capture_output=True, text=True).stdout)["features"]
    try:
        os.close(os.open("/dev/ppp", os.O_RDWR))
        ppp = True
    except OSError:
        ppp = False
    assert found["ppp"] is ppp
    ns = "vlprobetest2"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb"], check=True)
        netem = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "pa", "root", "netem", "delay", "1ms"],
                               capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)
    assert found["netem"] is netem


def test_an_answer_that_is_not_the_probes_is_refused_and_a_missing_feature_is_false():
    with pytest.raises(ValueError, match="not the kernel probe's answer"):
        parse_probe('{"kernel": "6.1"}')
    with pytest.raises(ValueError):
        parse_probe("sh: 1: ip: not found")
    found = parse_probe('{"kernel": "6.1", "cpu_model": "x", "cpus": 4, "features": {"netns": true, "esp": "yes"}}')
    assert found["features"] == {name: name == "netns" for name in FEATURES}
