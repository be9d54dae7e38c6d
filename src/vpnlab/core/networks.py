"""The only addresses vpnlab puts on an interface or a route: RFC 2544's benchmarking ranges."""

import ipaddress

BENCHMARK_NETWORKS = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:2::/48"))


def benchmarking(address: str) -> bool:
    """Is `address` (an IPv4 or IPv6 address, without a prefix length) inside the benchmarking ranges?"""
    return any(ipaddress.ip_address(address) in net for net in BENCHMARK_NETWORKS)
