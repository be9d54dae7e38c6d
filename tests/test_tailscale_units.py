"""The Tailscale driver without daemons: its options, labels, ports and channels by path, its overhead models,
the programs it declares (all built from tailscale.com at one pinned release), and how it reads the path from
`tailscale status --json` (a peer as tailscaled 1.98 prints it, the parser's only fake)."""

import pytest

from vpnlab.catalog import DRIVERS
from vpnlab.drivers.tailscale import (BUILDS, CONTROL_SERVER, DIRECT, RELAYED, _channels, path_of)

TAILSCALE = DRIVERS["tailscale"]
# A peer of `tailscale status --json`, trimmed: direct (CurAddr set) and relayed (CurAddr empty, Relay its DERP)
PEER_DIRECT = {"HostName": "vpnlab-ts0b", "TailscaleIPs": ["100.64.0.1", "fd7a:115c:a1e0::1"],
               "Relay": "vpnlab", "CurAddr": "198.19.0.2:41641", "Online": True}
PEER_RELAYED = PEER_DIRECT | {"CurAddr": ""}


def test_the_path_is_direct_or_relayed_and_anything_else_names_the_field():
    assert TAILSCALE.Options().path == "direct" and TAILSCALE.Options(path="relayed").path == "relayed"
    with pytest.raises(ValueError, match="path"):
        TAILSCALE.Options(path="sideways")
    with pytest.raises(ValueError, match="mode"):
        TAILSCALE.Options(mode="userspace")  # only kernel TUN: no such option
    assert [TAILSCALE.describe(TAILSCALE.Options(path=p), "default") for p in ("direct", "relayed")] == [
        "tailscale", "tailscale relayed"]
    assert TAILSCALE.check(TAILSCALE.Options(), "fips").startswith("profile: Tailscale has no FIPS 140")


def test_the_data_channel_is_the_paths_and_every_other_one_is_listed_too():
    direct, relayed = (_channels(TAILSCALE.Options(path=p)) for p in ("direct", "relayed"))
    assert direct[0] == ("udp", 41641) and relayed[0] == ("tcp", 8443)
    assert set(direct) == set(relayed) == {("udp", 41641), ("tcp", 8443), ("udp", 3478), ("tcp", 8080), ("tcp", 443)}
    ports = TAILSCALE.ports(TAILSCALE.Options())
    assert ports.client == (("udp", 41641),) and set(ports.gateway) == set(direct) - {("tcp", 443)}


def test_overhead_models_pad_as_wireguard_does():
    direct, relayed = TAILSCALE.Options(), TAILSCALE.Options(path="relayed")
    # IPv4 + UDP + WireGuard's 16-byte header and 16-byte tag, the plaintext padded to 16 bytes
    assert [TAILSCALE.overhead(direct, "default", "tailscale-current", n) for n in (1024, 1028, 1040)] == [60, 72, 60]
    # through the derper: IPv4 + TCP with timestamps + a TLS 1.3 record + DERP's SendPacket frame + the same
    assert RELAYED - DIRECT == (32 - 8) + 22 + 37
    assert TAILSCALE.overhead(relayed, "default", "tailscale-current", 1028) == 155
    assert TAILSCALE.full_packet_overhead(direct, "default", "tailscale-current", 1280) == DIRECT


def test_every_program_is_built_from_the_one_pinned_release():
    assert [tool.command for tool in TAILSCALE.tools] == ["tailscaled", "tailscale", "derper", "tailscale-testcontrol"]
    assert {(t.go.module, t.go.version, t.go.experiments) for t in TAILSCALE.tools} == {
        ("tailscale.com", "v1.98.10", ("nojsonv2",))}
    assert [BUILDS[c].package for c in ("tailscaled", "derper")] == ["tailscale.com/cmd/tailscaled",
                                                                     "tailscale.com/cmd/derper"]
    assert BUILDS["tailscale-testcontrol"].local == "testcontrol"
    declared = TAILSCALE.algorithms(TAILSCALE.Options(path="relayed"), "default")
    assert CONTROL_SERVER in declared.authentication and declared.data == "WireGuard in DERP over TLS (relayed)"


def test_the_path_is_read_from_the_peers_current_address():
    assert path_of(PEER_DIRECT) == "direct" and path_of(PEER_RELAYED) == "relayed"
    assert path_of({"Relay": "vpnlab"}) == "relayed"  # no CurAddr at all: nothing direct yet
