"""The no-VPN baseline: traffic crosses the WAN in clear, routed along the chain."""

from __future__ import annotations

from .base import Driver, Implementation, Options, Ports


class NoneOptions(Options):
    pass


class NoVpn(Driver):
    name = "none"
    summary = "no VPN: the baseline every VPN is graded against"
    baseline = True
    Options = NoneOptions

    def check(self, options, profile):
        return None  # the baseline is the same whatever the profile

    def implementations(self, options):
        return [Implementation("routing", features=("netns", "veth"))]

    def ports(self, options):
        return Ports()  # no daemon

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        return 0
