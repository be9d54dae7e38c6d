"""IPComp and nested-tunnel MTU without traffic: the options, the FIPS rule, where IPComp may run,
the configuration each driver writes, and the MTU arithmetic (tests/test_mtu_ipcomp.py measures the MTU,
tests/test_vm_site_to_site.py IPComp)."""

import pytest

from vpnlab.machines.capabilities import Capabilities
from vpnlab.catalog import DRIVERS
from vpnlab.drivers.libreswan import Libreswan
from vpnlab.drivers.strongswan import StrongSwan
from vpnlab.core.errors import CapabilityError, StudyError
from vpnlab.plan.study import parse_study
from vpnlab.run.tunnels import fitting_mtu

IPSEC = ("strongswan", "libreswan")


def study(vpns: str) -> str:
    return f"name: t\ntopology: site-to-site\nvpns:\n{vpns}\nworkloads: [{{kind: ping}}]\n"


@pytest.mark.parametrize("driver", IPSEC)
def test_compression_is_off_unless_asked_and_reads_yaml_on_and_off(driver):
    d = DRIVERS[driver]
    assert d.Options().compression == "off"
    # YAML 1.1 reads a bare on/off as a boolean: both spellings mean the same
    parsed = parse_study(study(f"  - {{driver: {driver}, options: {{compression: [off, on]}}}}"))
    assert [v.options.compression for v in parsed.vpns] == ["off", "on"]
    assert [("ipcomp" in v.label) for v in parsed.vpns] == [False, True]
    with pytest.raises(ValueError):
        d.Options(compression="lzo")


@pytest.mark.parametrize("driver", IPSEC)
def test_ipcomp_is_allowed_under_fips_but_the_esp_rule_still_holds(driver):
    d = DRIVERS[driver]
    # DEFLATE is not a cryptographic algorithm: FIPS 140 neither approves nor forbids it
    assert d.check(d.Options(compression="on"), "fips") is None
    assert d.check(d.Options(compression="on", esp="aes128-sha256"), "fips") is None
    assert d.check(d.Options(compression="on", esp="3des-sha1"), "fips").startswith("options.esp")


def test_strongswan_ipcomp_needs_kernel_esp():
    d = DRIVERS["strongswan"]
    # kernel-libipsec cannot allocate a CPI: charon would log "IPComp disabled" and send uncompressed
    with pytest.raises(StudyError, match=r"vpns\[0\]\.options\.compression: IPComp needs kernel ESP"):
        parse_study(study("  - {driver: strongswan, options: {implementation: libipsec, compression: on}}"))
    assert [i.name for i in d.implementations(d.Options(compression="on"))] == ["kernel"]
    assert [i.name for i in d.implementations(d.Options())] == ["kernel", "libipsec"]
    no_esp = Capabilities("k", {"tun": True, "esp": False}, {"charon": "/x", "swanctl": "/x"})
    assert d.resolve(d.Options(), no_esp).name == "libipsec"
    with pytest.raises(CapabilityError, match="kernel needs feature 'esp'"):
        d.resolve(d.Options(compression="on"), no_esp)  # so the VM backend runs it


def test_overhead_model_is_the_same_with_ipcomp():
    # an incompressible packet (the proof's random probe) is sent without an IPComp header (RFC 3173)
    for driver, impl in (("strongswan", "kernel"), ("strongswan", "libipsec"), ("libreswan", "kernel")):
        d = DRIVERS[driver]
        for esp in ("aes128-sha256", "aes256gcm16"):
            assert (d.overhead(d.Options(esp=esp, compression="on"), "default", impl, 1028)
                    == d.overhead(d.Options(esp=esp), "default", impl, 1028))


class Site:
    def __init__(self, ip, prefix):
        self.underlay_ip, self.prefix, self.tunnel_ip = ip, prefix, "198.19.1.1"


def test_the_drivers_configure_ipcomp_and_mtu():
    a, b = Site("198.19.0.1", "198.18.0.0/17"), Site("198.19.0.2", "198.18.128.0/17")
    swanctl = StrongSwan._swanctl_conf(a, b, True, False, a.prefix, b.prefix, None, "default", False, "0x00", True)
    assert "ipcomp = yes" in swanctl
    assert "ipcomp" not in StrongSwan._swanctl_conf(a, b, True, False, a.prefix, b.prefix, None, "default", False, "0x00")
    conf = StrongSwan._strongswan_conf("/v", libipsec=False, mtu=1374)
    assert "kernel-netlink {\n      mtu = 1374\n    }" in conf
    assert "mtu" not in StrongSwan._strongswan_conf("/v", libipsec=True)
    pluto = Libreswan._conf(a, b, True, False, None, "default", False, False, compress=True, mtu=1374)
    assert "  compress=yes\n" in pluto and "  mtu=1374\n" in pluto
    plain = Libreswan._conf(a, b, True, False, None, "default", False, False)
    assert "compress" not in plain and "mtu" not in plain


@pytest.mark.parametrize("driver,options", [
    ("strongswan", {"compression": "on"}), ("libreswan", {"mtu": 1400}), ("openvpn", {"mtu": 1400}),
    ("wireguard", {"mtu": 1400}),
])
def test_new_options_leave_the_ids_of_old_scenarios_alone(driver, options):
    d = DRIVERS[driver]
    dumped = d.Options().model_dump(mode="json")
    assert "compression" not in dumped or driver == "openvpn"
    assert "mtu" not in dumped
    assert d.Options(**options).model_dump(mode="json").items() >= options.items()


def test_mtu_options_by_hand_and_their_labels():
    parsed = parse_study(study("""  - {driver: openvpn, inner: {driver: openvpn, options: {port: 1195, mtu: [1396, 1500]}}}
  - {driver: openvpn, inner: {driver: wireguard, options: {mtu: 1420}}}
  - {driver: openvpn, inner: {driver: strongswan, options: {mtu: 1300}}}"""))
    labels = [v.label for v in parsed.vpns]
    assert len(set(labels)) == 4
    assert "mtu-1500" in labels[1] and "mtu-1420" in labels[2] and "mtu-1300" in labels[3]
    with pytest.raises(StudyError, match="options.mtu"):
        parse_study(study("  - {driver: strongswan, options: {implementation: libipsec, mtu: 1500}}"))
    with pytest.raises(StudyError, match="options.mtu"):
        parse_study(study("  - {driver: openvpn, options: {mtu: 100}}"))


def fits(driver, impl, path, **options):
    d = DRIVERS[driver]
    return fitting_mtu(d, d.Options(**options), "default", impl, path)


def test_inner_mtu_is_the_outer_ones_less_the_inner_overhead():
    # OpenVPN AEAD over UDP adds 52 bytes: in the 1500-byte WAN it carries 1448, and an OpenVPN
    # inside it gets 1448 - 52
    assert fits("openvpn", "openvpn", 1500) == 1448
    assert fits("openvpn", "openvpn", 1448) == 1396
    assert fits("openvpn", "openvpn", 1448, transport="tcp") == 1448 - 78
    # WireGuard adds 60; it pads to 16 bytes, but never beyond its MTU
    assert fits("wireguard", "wireguard-go", 1448) == 1388
    assert fits("wireguard", "wireguard-go", 1420) == 1360
    # ESP in UDP with AES-GCM (libipsec): 20 + 8 + 8 (SPI, seq) + 8 (IV) + 2 + 16 (ICV), aligned to 4
    assert fits("strongswan", "libipsec", 1448) == 1386


@pytest.mark.parametrize("driver,impl,options", [
    ("openvpn", "openvpn", {}), ("openvpn", "openvpn", {"cipher": "AES-128-CBC", "auth": "SHA256"}),
    ("openvpn", "openvpn", {"cipher": "BF-CBC", "auth": "SHA1", "compression": "lzo"}),
    ("openvpn", "openvpn", {"transport": "tcp"}), ("wireguard", "wireguard-go", {}),
    ("strongswan", "libipsec", {}), ("strongswan", "kernel", {"esp": "aes128-sha256"}),
    ("strongswan", "kernel", {"esp": "3des-sha1"}), ("libreswan", "kernel", {"esp": "aes256-sha1", "udp_encap": True}),
])
@pytest.mark.parametrize("path", [1500, 1448, 1420, 1386, 1280])
def test_the_automatic_mtu_is_the_largest_that_fits(driver, impl, options, path):
    d = DRIVERS[driver]
    opts = d.Options(**options)
    mtu = fitting_mtu(d, opts, "default", impl, path)
    assert mtu + d.full_packet_overhead(opts, "default", impl, mtu) <= path
    # no larger MTU would fit (block padding makes the overhead depend on the size: try them all)
    assert all(n + d.full_packet_overhead(opts, "default", impl, n) > path for n in range(mtu + 1, path + 1))
