"""Where nodes, the WAN and tunnel layers sit, and what each tunnel end routes."""

from vpnlab.testbed.node import Node
from vpnlab.testbed.topology import Layout
from vpnlab.testbed.topology import Testbed as Bed


def bed(topology, layers):
    layout = Layout.for_topology(topology, layers)
    testbed = Bed(state=None, layout=layout)
    testbed.nodes = [Node(role, f"ns-{role}", None) for role in layout.roles]
    return testbed


def test_remote_access():
    b = bed("remote-access", 1)
    assert b.layout.roles == ["client", "gw", "server"]
    assert b.layout.wan == 0
    left, right = b.tunnel_sites(0)
    assert (left.node.role, right.node.role) == ("client", "gw")
    assert (left.underlay_ip, right.underlay_ip) == ("198.19.0.1", "198.19.0.2")
    assert (left.tunnel_ip, right.tunnel_ip) == ("198.19.1.1", "198.19.1.2")
    assert left.subnets == [] and left.prefix is None
    assert right.subnets == ["198.18.128.0/24"] and right.prefix == "198.18.128.0/17"
    assert b.sink_ip == "198.18.128.2"


def test_site_to_site():
    b = bed("site-to-site", 1)
    assert b.layout.roles == ["host-a", "gw-a0", "gw-b0", "host-b"]
    assert b.layout.wan == 1
    left, right = b.tunnel_sites(0)
    assert left.subnets == ["198.18.0.0/24"] and right.subnets == ["198.18.128.0/24"]
    assert (left.prefix, right.prefix) == ("198.18.0.0/17", "198.18.128.0/17")
    assert (left.underlay_ip, right.underlay_ip) == ("198.19.0.1", "198.19.0.2")


def test_nested_site_to_site_puts_the_inner_tunnel_on_the_outer_gateways_lans():
    b = bed("site-to-site", 2)
    assert b.layout.roles == ["host-a", "gw-a1", "gw-a0", "gw-b0", "gw-b1", "host-b"]
    assert b.layout.wan == 2
    outer_l, outer_r = b.tunnel_sites(0)
    inner_l, inner_r = b.tunnel_sites(1)
    assert (outer_l.node.role, outer_r.node.role) == ("gw-a0", "gw-b0")
    assert (inner_l.node.role, inner_r.node.role) == ("gw-a1", "gw-b1")
    # the inner tunnel's endpoints talk across the outer tunnel
    assert inner_r.underlay_ip == "198.18.129.2" and "198.18.129.0/24" in outer_r.subnets
    assert (outer_l.prefix, outer_r.prefix) == ("198.18.0.0/17", "198.18.128.0/17")
    assert (inner_l.prefix, inner_r.prefix) == ("198.18.0.0/24", "198.18.128.0/24")
    # each tunnel end has an address inside the prefix it stands for (IPsec selectors need it)
    assert b.address(4, 3) == "198.18.129.2" and b.address(1, 1) == "198.18.1.1"
    assert inner_l.tunnel_ip == "198.19.2.1"


def test_baseline_has_no_tunnel_layers():
    assert Layout.for_topology("site-to-site", 0).tunnels == []
    assert Layout.for_topology("remote-access", 0).roles == ["client", "gw", "server"]
