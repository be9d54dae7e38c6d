"""Reading a namespace's tables and processes without starting a program in it (testbed/netns.py)
gives what the programs it replaces (`cat`, `ss`, `ip netns pids`, `sysctl`, `ip addr`, `swanctl
--stats`) give."""

import socket
import subprocess
import sys

import pytest

from vpnlab.testbed import netns

SERVER = """
import socket, sys, time
tcp = socket.socket(socket.AF_INET6); tcp.bind(("::1", 5201)); tcp.listen()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 1194))
print("up", flush=True); time.sleep(30)
"""


def in_namespace(name: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", name, *argv], capture_output=True, text=True, check=True).stdout


def test_tables_and_processes_match_the_programs_they_replace(namespace):
    assert netns.pids(namespace) == [] and not netns.listening(namespace, 5201)
    server = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
        assert netns.pids(namespace) == [int(p) for p in listed] == [server.pid]
        assert netns.listening(namespace, 5201) and netns.listening(namespace, 1194, udp=True)
        assert not netns.listening(namespace, 1194) and not netns.listening(namespace, 5201, udp=True)
        # nothing crosses lo meanwhile: the tables read the same both ways, and are not the default namespace's
        for table in ("dev", "snmp", "tcp6", "udp"):
            assert netns.read_net(namespace, table) == in_namespace(namespace, "cat", f"/proc/net/{table}")
        assert netns.read_net(namespace, "udp") != open("/proc/net/udp").read()
    finally:
        server.kill()
        server.wait()
    assert netns.pids(namespace) == []
    assert netns.pids("vl-no-such-namespace") == []


def test_sysctls_are_set_in_the_namespace_only(namespace):
    before = {key: open(f"/proc/sys/net/{key}").read() for key in ("ipv4/ip_forward", "core/rmem_max")}
    forward = "0" if before["ipv4/ip_forward"].strip() == "1" else "1"  # the opposite of the default namespace's
    netns.sysctl(namespace, {"net.ipv4.ip_forward": forward, "net.core.rmem_max": 1 << 26,
                             "net.vpnlab.no_such_key": 1})
    assert in_namespace(namespace, "sysctl", "-n", "net.ipv4.ip_forward").strip() == forward
    assert {key: open(f"/proc/sys/net/{key}").read() for key in before} == before


def test_an_address_appears_once_set_and_up_and_a_unix_socket_answers_once_listening(namespace, tmp_path):
    subprocess.run(["ip", "-n", namespace, "link", "add", "va", "type", "veth", "peer", "name", "vb"], check=True)
    assert netns.ipv4_address_once_up(namespace, "va") is None
    assert netns.ipv4_address_once_up(namespace, "no-such") is None
    subprocess.run(["ip", "-n", namespace, "addr", "add", "198.18.5.1/24", "dev", "va"], check=True)
    # pppd sets the address before it brings the link up; a route into it fails until then
    assert netns.ipv4_address_once_up(namespace, "va") is None
    subprocess.run(["ip", "-n", namespace, "link", "set", "va", "up"], check=True)
    assert netns.ipv4_address_once_up(namespace, "va") == "198.18.5.1"
    assert netns.ipv4_address_once_up(namespace, "vb") is None
    path = tmp_path / "daemon.sock"
    assert not netns.accepts(path)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert not netns.accepts(path)  # bound, not yet listening: a daemon still starting
        server.listen()
        assert netns.accepts(path)


LATE_SERVER = """
import socket, sys, time
time.sleep(float(sys.argv[1]))
if sys.argv[2] == "exit":
    print("cannot bind", flush=True); sys.exit(3)
tcp = socket.socket(); tcp.bind(("127.0.0.1", 2525)); tcp.listen(); time.sleep(30)
"""


@pytest.mark.parametrize("delay, then, expected", [
    (0.3, "listen", None),
    (0.0, "exit", "sink exited with code 3 before listening on port 2525: cannot bind"),
    (60, "listen", "sink was not listening on port 2525 after 4.0 s"),
])
def test_a_server_is_waited_for_until_it_listens_and_a_failure_says_whether_it_exited_or_was_slow(
        namespace, tmp_path, monkeypatch, delay, then, expected):
    from vpnlab.core.errors import VpnlabError
    from vpnlab.testbed import node as node_module

    # emulated: the limit stretches by SLOWDOWN, as a Python server under TCG takes seconds to start
    # (4 s in all: a Python that sleeps 0.3 s first took over 0.8 s while the suite's guests ran)
    monkeypatch.setattr(node_module, "LISTEN_TIMEOUT_S", 1.0)
    monkeypatch.setattr(node_module, "SLOWDOWN", 4)
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c", LATE_SERVER,
                                   str(delay), then], stdout=out)
    sink = node_module.Node("sink", namespace, state=None)
    try:
        if expected is None:
            sink.wait_listening(2525, server, log)
            assert sink.listening(2525)
        else:
            with pytest.raises(VpnlabError, match=expected):
                sink.wait_listening(2525, server, log)
    finally:
        server.kill()
        server.wait()
