"""Real tunnels record what they negotiated: OpenVPN and strongSwan, default and fips, one repetition
each; the negotiated algorithms are stored with the repetition, match the declared ones, and the
report says what the fips profile changed."""


import pytest

from conftest import recorded_algorithms, run_here
from vpnlab.report import html as report
from vpnlab.plan.study import parse_study

pytestmark = pytest.mark.integration

STUDY = """
name: algorithms-live
repetitions: 1
vpns: [{driver: openvpn}, {driver: openvpn, profile: fips}, {driver: strongswan}, {driver: strongswan, profile: fips}]
links: [{name: lan}]
workloads: [{kind: ping, count: 3, interval_s: 0.05}]
"""


def test_negotiated_algorithms_are_recorded_and_match(tmp_path, no_leftovers):
    run_here(parse_study(STUDY), tmp_path)
    recorded, flags = recorded_algorithms(tmp_path)
    assert len(recorded) == 4 and flags == []
    for vpn, (layer,) in recorded.items():
        declared, negotiated = layer["declared"], layer["negotiated"]
        assert negotiated, f"{vpn}: nothing read ({layer.get('error')})"
        assert {k: declared[k] for k in negotiated if k != "source"} == \
            {k: v for k, v in negotiated.items() if k != "source"}, vpn
    kx = {vpn: layer["negotiated"]["key_exchange"] for vpn, (layer,) in recorded.items()}
    assert kx == {"openvpn aes-256-gcm udp": "X25519", "openvpn aes-256-gcm udp fips": "ECDH P-256",
                  "strongswan default psk": "X25519", "strongswan aes256gcm16 psk fips": "ECDH P-256"}
    assert {recorded[v][0]["negotiated"]["data_cipher"] for v in kx if v.startswith("openvpn")} == {"AES-256-GCM"}
    assert recorded["strongswan aes256gcm16 psk fips"][0]["negotiated"]["control_cipher"] == \
        "AES-256-CBC HMAC-SHA256-128"
    changes = report.build(tmp_path).algorithms.changes
    assert any(c.startswith("openvpn:") and "key exchange X25519 -> ECDH P-256" in c
               and "the data channel is the same in both (AES-256-GCM, AEAD)" in c for c in changes), changes
