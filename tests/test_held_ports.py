"""The ports a run binds on real hosts: what each driver declares its daemons bind at each end, and
what a host's own network namespace already holds, read from its socket tables (hosts/ports.py)."""

import socket
import subprocess

import pytest

from vpnlab.catalog import DRIVERS
from vpnlab.hosts.ports import SOCKET_TABLES, held_ports, held_text

# Lines of this machine's /proc/net tables, as the kernel wrote them: a UDP socket on 127.0.0.1:55986,
# one on [::]:56504, TCP listeners on 0.0.0.0:2024, 127.0.0.1:47927 and [::1]:33627, and a TCP
# connection between 127.0.0.1:55736 and the listener, both of its sockets established (st 01).
TABLES = """\
== udp
   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
 8370: 0100007F:DAB2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 12407977 2 0000000058c4efb0 0
== udp6
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
 8888: 00000000000000000000000000000000:DCB8 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 12407978 2 00000000e30e80e3 0
== tcp
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1570 1 00000000bb41268a 100 0 0 10 0
   1: 0100007F:BB37 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12407979 1 000000000efa33e4 100 0 0 10 0
   2: 0100007F:D9B8 0100007F:BB37 01 00000000:00000000 00:00000000 00000000     0        0 12407980 2 00000000728c07ab 20 0 0 10 -1
   3: 0100007F:BB37 0100007F:D9B8 01 00000000:00000000 00:00000000 00000000     0        0 12407981 1 000000004e4e1437 20 0 0 10 -1
== tcp6
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:835B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12407982 1 00000000230a477f 100 0 0 10 0
"""


def test_the_socket_tables_show_every_udp_port_and_every_listening_tcp_port():
    assert held_ports(TABLES) == {("udp", 55986), ("udp", 56504), ("tcp", 2024), ("tcp", 47927), ("tcp", 33627)}
    assert ("tcp", 55736) not in held_ports(TABLES)  # a connection's own port: a daemon may listen there
    assert held_ports("") == set()  # a host whose namespace holds nothing


def test_the_script_reads_the_tables_a_host_answers_with():
    """SOCKET_TABLES run as on a host (here, by sh): the ports this test holds on the loopback, a
    connection's client port not among them."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
            socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as udp6, socket.socket() as listener:
        udp.bind(("127.0.0.1", 0))
        udp6.bind(("::1", 0))
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as client:
            held = held_ports(subprocess.run(["sh", "-c", SOCKET_TABLES], capture_output=True, text=True,
                                             check=True).stdout)
            assert {("udp", udp.getsockname()[1]), ("udp", udp6.getsockname()[1]),
                    ("tcp", listener.getsockname()[1])} <= held
            assert ("tcp", client.getsockname()[1]) not in held


def test_a_held_port_says_which_host_what_to_do_and_how_to_see_its_holder():
    assert held_text("gw-b", ("udp", 500)) == (
        "host gw-b: UDP 500 is held by another program: stop it, or run on other hosts; "
        "`ss -uanp 'sport = :500'` on gw-b shows which")
    assert "TCP 1723 " in held_text("gw-b", ("tcp", 1723)) and "`ss -ltnp 'sport = :1723'`" in held_text("gw-b", ("tcp", 1723))


IKE = (("udp", 500), ("udp", 4500))


@pytest.mark.parametrize("driver, options, gateway, client", [
    ("none", {}, (), ()),
    ("wireguard", {}, (("udp", 51820),), (("udp", 51820),)),
    ("wireguard", {"port": 51821, "implementation": "wireguard-go"}, (("udp", 51821),), (("udp", 51821),)),
    ("openvpn", {}, (("udp", 1194),), ()),  # the client: --nobind
    ("openvpn", {"transport": "tcp", "port": 443}, (("tcp", 443),), ()),
    ("strongswan", {}, IKE, IKE),  # charon at both ends, whatever carries ESP
    ("strongswan", {"implementation": "libipsec"}, IKE, IKE),
    ("libreswan", {"udp_encap": True}, IKE, IKE),
    ("l2tp", {}, (("udp", 1701), *IKE), (("udp", 1701), *IKE)),
    ("l2tp", {"ipsec": False}, (("udp", 1701),), (("udp", 1701),)),
    ("pptp", {}, (("tcp", 1723),), ()),  # the client connects out; GRE is no port
    ("ocserv", {}, (("udp", 443), ("tcp", 443)), ()),
    ("ocserv", {"transport": "tls"}, (("tcp", 443),), ()),
    ("nebula", {"port": 4243}, (("udp", 4243),), (("udp", 4243),)),
    ("tinc", {}, (("udp", 655), ("tcp", 655)), (("udp", 655), ("tcp", 655))),
    ("yggdrasil", {}, (("tcp", 12345),), ()),
    ("softether", {}, (("tcp", 443), ("tcp", 5555)), (("tcp", 9931),)),
    ("softether", {"transport": "udp", "port": 8443}, (("tcp", 8443), ("tcp", 5555)), (("tcp", 9931),)),
])
def test_each_driver_declares_the_ports_its_daemons_bind_at_each_end(driver, options, gateway, client):
    declared = DRIVERS[driver].ports(DRIVERS[driver].Options(**options))
    assert (declared.gateway, declared.client) == (gateway, client)


def test_every_driver_declares_ports_and_only_ports():
    for driver in DRIVERS.values():
        declared = driver.ports(driver.Options())
        for proto, number in declared.gateway + declared.client:
            assert proto in ("udp", "tcp") and 0 < number < 65536, (driver.name, proto, number)
