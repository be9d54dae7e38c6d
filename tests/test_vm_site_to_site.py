"""The VM backend's site-to-site study, in one boot: two IPsec implementations with certificates in kernel
ESP; IPComp, which needs kernel ESP, shrinking text on the WAN. Each test reads the study's results.
(PPTP and L2TP/IPsec in the VM are the remote-access study's.)"""

import pytest

from vpnlab.catalog import DRIVERS

from hosts_harness import check_overhead
from vm_harness import run_in_vm


# Site to site, one boot: two IPsec implementations with certificates; IPComp, which needs kernel ESP
# (strongSwan's libipsec cannot do it), shrinking text on the WAN. Three scenarios, each checked twice:
# its proof's probe is random, so incompressible, and crosses an IPComp tunnel as plain ESP (each
# scenario under emulation costs half a minute to a minute of the suite's two cores).
SITE_TO_SITE = """
name: vm-site-to-site
repetitions: 1
topology: site-to-site
vpns:
  - {driver: libreswan, options: {auth: cert, esp: aes128-sha256, compression: on}}
  - {driver: strongswan, options: {implementation: kernel, auth: cert, esp: aes128-sha256, compression: ["off", "on"]}}
workloads:
  - {kind: transfer, protocol: http, data: text, size: 2M}
"""
OFF = "strongswan aes128-sha256 cert kernel"
ON = {"strongswan": "strongswan aes128-sha256 cert ipcomp kernel", "libreswan": "libreswan aes128-sha256 cert ipcomp"}


@pytest.fixture(scope="module")
def site_to_site(tmp_path_factory):
    return run_in_vm(SITE_TO_SITE, tmp_path_factory.mktemp("vm-site-to-site"), keep=lambda s: True)


def _metrics(run, label: str) -> dict[str, float]:
    return {metric: value for (vpn, _, _, metric), value in run.values.items() if vpn == label}


@pytest.mark.integration
def test_site_to_site_two_ipsec_implementations_with_certificates_in_the_vm(site_to_site):
    strongswan = DRIVERS["strongswan"]
    ipsec = strongswan.overhead(strongswan.Options(esp="aes128-sha256"), "default", "kernel", 84)
    for label in (OFF, ON["libreswan"]):  # each proved encrypted and its file carried: run_in_vm's "done"
        check_overhead(label.split()[0], [_metrics(site_to_site, label)["overhead_bytes"]], [ipsec])


@pytest.mark.integration
def test_ipcomp_shrinks_text_on_the_wan_in_the_vm(site_to_site):
    """IPComp needs kernel ESP (strongSwan's libipsec cannot do it): here that means the VM."""
    off = _metrics(site_to_site, OFF)
    on = {name: _metrics(site_to_site, label) for name, label in ON.items()}
    # without compression every payload byte costs more than a byte on the wire; text compresses
    # to about half with DEFLATE, so with IPComp it costs less than one
    assert off["wan_bytes_per_byte"] > 1
    for name, measured in on.items():
        assert measured["wan_bytes_per_byte"] < 0.9 * off["wan_bytes_per_byte"], name
        # the proof's random probe is incompressible: sent as it is, the overhead is plain ESP's
        assert measured["overhead_bytes"] == measured["overhead_model_bytes"] == off["overhead_bytes"], name
    print(f"\nbytes per byte, text: off {off['wan_bytes_per_byte']:.3f},"
          + ", ".join(f" {n} on {m['wan_bytes_per_byte']:.3f}" for n, m in on.items()))
