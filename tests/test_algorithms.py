"""What a profile really changes: each driver's declared algorithms, the parsers of what live tunnels
reported (real output captured on this machine and in the VM, in tests/data/algorithms), the report's
"Algorithms per profile" table from a store, and the verdict of a finding that sets two profiles
against each other."""

import json
from pathlib import Path
from types import SimpleNamespace

from vpnlab.analyse import algorithms as analysed_algorithms
from vpnlab.report import algorithms as report
from vpnlab.run import algorithms as recorded
from vpnlab import algorithms as alg
from vpnlab.algorithms import AEAD
from vpnlab.drivers import ipsec, libreswan, ocserv, openvpn, ppp, strongswan
from vpnlab.drivers.base import Tunnel
from vpnlab.catalog import DRIVERS
from vpnlab.analyse.labels import for_scenarios
from vpnlab.plan.scenarios import make_plan
from vpnlab.store import Store
from vpnlab.plan.study import parse_study

DATA = Path(__file__).parent / "data" / "algorithms"


def declared(driver, profile="default", implementation="", **options):
    d = DRIVERS[driver]
    return d.algorithms(d.Options(**options), profile, implementation)


# --- each driver's declaration ------------------------------------------------------------------

def test_openvpn_declares_what_each_profile_runs():
    default, fips = declared("openvpn"), declared("openvpn", "fips")
    assert (default.control, default.control_cipher, default.authentication) == \
        ("TLS 1.3", "AES-256-GCM", "ECDSA P-256 SHA-256")
    assert (default.key_exchange, fips.key_exchange) == ("X25519", "ECDH P-256")
    # both profiles carry data with AES-256-GCM: only the key exchange differs
    assert (default.data_cipher, default.data_integrity) == (fips.data_cipher, fips.data_integrity) == \
        ("AES-256-GCM", AEAD)
    assert [k for k in alg.HEADINGS if getattr(default, k) != getattr(fips, k)] == ["key_exchange"]
    cbc = declared("openvpn", cipher="AES-128-CBC")
    assert (cbc.data_cipher, cbc.data_integrity) == ("AES-128-CBC", "HMAC-SHA1")
    assert declared("openvpn", "fips", cipher="AES-128-CBC").data_integrity == "HMAC-SHA256"
    old = declared("openvpn", cipher="DES-EDE3-CBC", auth="MD5", transport="tcp")
    assert (old.data_cipher, old.data_integrity, old.data) == ("3DES-CBC", "HMAC-MD5", "OpenVPN over TCP")


def test_ipsec_drivers_declare_ike_and_esp():
    sw, sw_fips = declared("strongswan"), declared("strongswan", "fips", auth="cert")
    assert (sw.key_exchange, sw.control_cipher, sw.data_cipher, sw.data) == \
        ("X25519", "AES-128-CBC HMAC-SHA256-128", "AES-128-GCM", "ESP")
    assert (sw_fips.key_exchange, sw_fips.control_cipher, sw_fips.data_cipher, sw_fips.authentication) == \
        ("ECDH P-256", "AES-256-CBC HMAC-SHA256-128", "AES-256-GCM", "ECDSA SHA-256")
    assert declared("strongswan", implementation="libipsec").data == "ESP in UDP"
    assert declared("strongswan", compression="on").data == "ESP + IPComp (DEFLATE)"
    des = declared("strongswan", esp="3des-sha1")
    assert (des.data_cipher, des.data_integrity) == ("3DES-CBC", "HMAC-SHA1-96")
    ls, ls_fips = declared("libreswan"), declared("libreswan", "fips")
    assert (ls.key_exchange, ls.control_cipher, ls.data_cipher) == ("MODP-2048", "AES-256-GCM", "AES-256-GCM")
    assert (ls_fips.key_exchange, ls_fips.control_cipher) == ("ECDH P-256", "AES-256-CBC HMAC-SHA256-128")
    l2tp = declared("l2tp")
    assert (l2tp.control, l2tp.authentication, l2tp.data_cipher) == ("IKEv1", "PSK + MS-CHAPv2", "AES-128-CBC")
    assert declared("l2tp", ipsec=False).data_cipher == "none"


def test_ssl_wireguard_and_pptp_declarations():
    oc, oc_tls = declared("ocserv"), declared("ocserv", transport="tls")
    assert oc.as_dict() | {"data": ""} == declared("ocserv", "fips").as_dict() | {"data": ""}  # fips: the same
    assert (oc.data, oc_tls.data) == ("DTLS 1.2 (PSK from the TLS session)", "TLS 1.2 (CSTP)")
    wg = declared("wireguard")
    assert (wg.control, wg.key_exchange, wg.data_cipher) == ("Noise_IKpsk2", "X25519", "ChaCha20-Poly1305")
    assert DRIVERS["wireguard"].negotiated(None, DRIVERS["wireguard"].Options(), "default").values() == wg.values()
    pptp = declared("pptp", mppe="40")
    assert (pptp.data_cipher, pptp.data_integrity, pptp.control_cipher) == ("RC4-40 (MPPE stateless)", "none", "none")
    assert declared("none") is None


def not_fips(algorithms: alg.Algorithms) -> list[str]:
    """The fields whose algorithm FIPS 140 does not approve: 'key exchange X25519'."""
    return [f"{alg.HEADINGS[k]} {v}" for k, v in algorithms.values().items() if not alg.fips_approved(v)]


def test_every_fips_profile_declares_only_approved_algorithms():
    for name, driver in DRIVERS.items():
        if driver.baseline or driver.check(driver.Options(), "fips"):
            continue  # no FIPS profile (WireGuard, PPTP)
        found = not_fips(declared(name, "fips"))
        if name == "l2tp":  # PPP's MS-CHAPv2 under either profile, inside ESP: the table marks it
            assert found == ["authentication PSK + MS-CHAPv2"]
        else:
            assert found == [], name


def test_the_options_a_fips_profile_allows_follow_the_one_fips_rule():
    """Each driver takes its FIPS-approved options from algorithms.fips_approved, in its own names."""
    assert ipsec.FIPS_ESP == {"aes128-sha1", "aes256-sha1", "aes128-sha256", "aes256-sha256", "aes128gcm16",
                              "aes256gcm16"}
    assert openvpn.FIPS_CIPHERS == {"AES-128-GCM", "AES-256-GCM", "AES-128-CBC", "AES-256-CBC"}
    assert openvpn.FIPS_AUTH == {"SHA1", "SHA256", "SHA512"}
    assert not alg.fips_approved("3DES-CBC HMAC-MD5-96") and alg.fips_approved("AES-256-GCM")


def test_broken_or_deprecated_algorithms_are_named_whatever_the_profile(tmp_path):
    study = parse_study("""
name: w
vpns:
  - {driver: pptp}
  - {driver: openvpn, options: {cipher: [BF-CBC, AES-256-GCM]}}
  - {driver: strongswan, options: {esp: 3des-md5}}
  - {driver: wireguard}
workloads: [{kind: ping}]
""")
    store = Store.open_dir(tmp_path)
    for scenario in make_plan(study).scenarios:
        store.add_scenario(scenario)
    weak = {row.vpn_label: [w.split(":")[0] for w in analysed_algorithms.weak_in(row)] for row in store.scenarios()}
    store.close()
    assert weak["pptp mppe-128"] == ["MS-CHAP", "RC4"]  # authentication, then the data cipher
    assert weak["openvpn bf-cbc-sha1 udp"] == ["BF"]
    assert weak["strongswan 3des-md5 psk"] == ["3DES", "MD5"]
    assert weak["openvpn aes-256-gcm udp"] == weak["wireguard"] == []


# --- parsers, on real output ----------------------------------------------------------------------

def log(name: str) -> str:
    return (DATA / name).read_text()


def test_openvpn_log():
    default = openvpn.parse_log(log("openvpn-default.log"))
    assert default.values() == {"control": "TLS 1.3", "control_cipher": "AES-256-GCM", "key_exchange": "X25519",
                                "authentication": "ECDSA P-256 SHA-256", "data_cipher": "AES-256-GCM",
                                "data_integrity": AEAD}
    assert openvpn.parse_log(log("openvpn-fips.log")).key_exchange == "ECDH P-256"
    # before --tls-groups: OpenSSL 3 ignored --ecdh-curve, and the fips profile ran X25519
    ignored = openvpn.parse_log(log("openvpn-fips-ecdh-curve-ignored.log"))
    assert alg.mismatches(declared("openvpn", "fips"), ignored) == [
        "key exchange: declared ECDH P-256, negotiated X25519"]
    cases = {"openvpn-aes-128-cbc-sha256.log": ("AES-128-CBC", "HMAC-SHA256"),
             "openvpn-bf-cbc-sha1.log": ("BF-CBC", "HMAC-SHA1"),
             "openvpn-des-ede3-cbc-md5.log": ("3DES-CBC", "HMAC-MD5"),
             "openvpn-chacha20-poly1305-tcp.log": ("ChaCha20-Poly1305", AEAD)}
    for name, data in cases.items():
        found = openvpn.parse_log(log(name))
        assert (found.data_cipher, found.data_integrity) == data, name
    for name, options in (("openvpn-default.log", {}), ("openvpn-fips.log", {"profile": "fips"}),
                          ("openvpn-aes-128-cbc-sha256.log", {"cipher": "AES-128-CBC", "auth": "SHA256"}),
                          ("openvpn-chacha20-poly1305-tcp.log", {"cipher": "CHACHA20-POLY1305", "transport": "tcp"})):
        profile = options.pop("profile", "default")
        assert alg.mismatches(declared("openvpn", profile, **options), openvpn.parse_log(log(name))) == [], name
    assert openvpn.parse_log("no such lines") is None


def test_charon_log():
    found = strongswan.parse_charon_log(log("charon-default-psk.log"))
    assert found.values() == {"control": "IKEv2", "control_cipher": "AES-128-CBC HMAC-SHA256-128",
                              "key_exchange": "X25519", "authentication": "PSK", "data_cipher": "AES-128-GCM",
                              "data_integrity": AEAD}
    fips = strongswan.parse_charon_log(log("charon-fips-psk.log"))
    assert (fips.key_exchange, fips.control_cipher, fips.data_cipher) == \
        ("ECDH P-256", "AES-256-CBC HMAC-SHA256-128", "AES-256-GCM")
    des = strongswan.parse_charon_log(log("charon-3des-sha1-psk.log"))
    assert (des.data_cipher, des.data_integrity) == ("3DES-CBC", "HMAC-SHA1-96")
    assert strongswan.parse_charon_log(log("charon-chacha20poly1305-psk.log")).data_cipher == "ChaCha20-Poly1305"
    assert strongswan.parse_charon_log(log("charon-default-cert.log")).authentication == "ECDSA SHA-256"
    for name, profile, options in (("charon-default-psk.log", "default", {}), ("charon-fips-psk.log", "fips", {}),
                                   ("charon-3des-sha1-psk.log", "default", {"esp": "3des-sha1"}),
                                   ("charon-default-cert.log", "default", {"auth": "cert"}),
                                   ("charon-fips-aes256-sha256-cert.log", "fips",
                                    {"auth": "cert", "esp": "aes256-sha256"})):
        assert alg.mismatches(declared("strongswan", profile, "libipsec", **options),
                              strongswan.parse_charon_log(log(name))) == [], name


def test_pluto_log():
    default = libreswan.parse_log(log("pluto-default-psk.log"))
    assert default.values() == {"control": "IKEv2", "control_cipher": "AES-256-GCM", "key_exchange": "MODP-2048",
                                "authentication": "PSK", "data_cipher": "AES-256-GCM", "data_integrity": AEAD}
    fips = libreswan.parse_log(log("pluto-fips-cert.log"))
    assert (fips.key_exchange, fips.control_cipher, fips.authentication) == \
        ("ECDH P-256", "AES-256-CBC HMAC-SHA256-128", "ECDSA P-256 SHA-512")
    des = libreswan.parse_log(log("pluto-3des-sha1-psk.log"))
    assert (des.data_cipher, des.data_integrity) == ("3DES-CBC", "HMAC-SHA1-96")
    for name, profile, options in (("pluto-default-psk.log", "default", {}),
                                   ("pluto-fips-cert.log", "fips", {"auth": "cert"}),
                                   ("pluto-3des-sha1-psk.log", "default", {"esp": "3des-sha1"})):
        assert alg.mismatches(declared("libreswan", profile, **options), libreswan.parse_log(log(name))) == [], name


def test_pppd_log():
    pptp = ppp.parse_pppd_log(log("pppd-pptp-mppe-128.log"))
    assert pptp.values() == {"authentication": "MS-CHAPv2", "data_cipher": "RC4-128 (MPPE stateless)",
                             "data_integrity": "none"}
    assert alg.mismatches(declared("pptp"), pptp) == []
    assert alg.mismatches(declared("pptp", mppe="40"), pptp) == [
        "data cipher: declared RC4-40 (MPPE stateless), negotiated RC4-128 (MPPE stateless)"]
    plain = ppp.parse_pppd_log(log("pppd-l2tp-plain.log"))  # no MPPE: L2TP's data crosses in clear
    assert (plain.authentication, plain.data_cipher) == ("MS-CHAPv2", "none")
    assert alg.mismatches(declared("l2tp", ipsec=False), plain) == []


def test_openconnect_log():
    dtls = ocserv.parse_log(log("openconnect-dtls.log"))
    assert dtls.values() == {"control": "TLS 1.2", "key_exchange": "ECDH P-256", "authentication": "ECDSA SHA-256",
                             "control_cipher": "AES-256-GCM", "data": "DTLS 1.2 (PSK from the TLS session)",
                             "data_cipher": "AES-256-GCM", "data_integrity": AEAD}
    assert ocserv.parse_log(log("openconnect-dtls-fips.log")).values() == dtls.values()
    tls = ocserv.parse_log(log("openconnect-tls.log"))
    assert (tls.data, tls.data_cipher) == ("TLS 1.2 (CSTP)", "AES-256-GCM")
    assert alg.mismatches(declared("ocserv", transport="tls"), tls) == []
    # DTLS that never came up: the data went over TLS, which differs from what was declared
    assert alg.mismatches(declared("ocserv"), tls) == [
        "data channel: declared DTLS 1.2 (PSK from the TLS session), negotiated TLS 1.2 (CSTP)"]


def test_kernel_esp_state():
    gcm = alg.parse_xfrm_state(log("xfrm-libreswan-default.log"))  # keys blanked, their lengths kept
    assert gcm.values() == {"data": "ESP", "data_cipher": "AES-256-GCM", "data_integrity": AEAD}
    cbc = alg.parse_xfrm_state(log("xfrm-l2tp-transport-aes128-sha1.log"))
    assert cbc.values() == {"data": "ESP", "data_cipher": "AES-128-CBC", "data_integrity": "HMAC-SHA1-96"}
    assert alg.blank_keys("spi 0xc654a228 auth-trunc hmac(sha1) 0x0123456789abcdef0123 96") == \
        "spi 0xc654a228 auth-trunc hmac(sha1) 0x00000000000000000000 96"


class FakeNode:
    """A node whose `ip xfrm state` prints captured output."""

    def __init__(self, xfrm: str):
        self.xfrm = xfrm

    def run(self, argv, check=True, timeout=None):
        assert argv == ["ip", "xfrm", "state"]
        return SimpleNamespace(stdout=self.xfrm)


def live(tmp_path, implementation, xfrm, **logs):
    """A tunnel as a driver left it: its daemons' logs (client last), its env's own log folder."""
    for name, captured in logs.items():
        (tmp_path / f"l0-{name}.log").write_text(log(captured))
    processes = [(FakeNode(log(xfrm) if xfrm else ""), None, tmp_path / f"l0-{name}.log") for name in logs]
    env = SimpleNamespace(implementation=implementation, log=lambda name: tmp_path / f"l0-{name}.log")
    return SimpleNamespace(processes=processes, env=env, fetch_logs=lambda: None,  # every log already here
                           read_log=lambda log, node=None: Tunnel.read_log(None, log, node))


def test_l2tp_and_libreswan_read_the_kernel_and_their_logs(tmp_path):
    l2tp = DRIVERS["l2tp"]
    tunnel = live(tmp_path, "xl2tpd+esp", "xfrm-l2tp-transport-aes128-sha1.log", **{
        "charon-client": "charon-l2tp-ikev1-psk.log", "pppd-client": "pppd-l2tp-ipsec.log"})
    found = l2tp.negotiated(tunnel, l2tp.Options(), "default")
    assert found.values() == {"control": "IKEv1", "key_exchange": "X25519", "authentication": "PSK + MS-CHAPv2",
                              "control_cipher": "AES-128-CBC HMAC-SHA256-128", "data_cipher": "AES-128-CBC",
                              "data_integrity": "HMAC-SHA1-96"}
    assert found.source == "ip xfrm state + charon log + pppd log"
    assert alg.mismatches(declared("l2tp"), found) == []
    assert "0x0000" in (tmp_path / "l0-xfrm-state.log").read_text()  # the evidence, kept beside the logs
    (tmp_path / "plain").mkdir()
    plain = live(tmp_path / "plain", "xl2tpd", None, **{"pppd-client": "pppd-l2tp-plain.log"})
    assert alg.mismatches(declared("l2tp", ipsec=False), l2tp.negotiated(plain, l2tp.Options(ipsec=False),
                                                                         "default")) == []
    libreswan = DRIVERS["libreswan"]
    (tmp_path / "ls").mkdir()
    tunnel = live(tmp_path / "ls", "kernel", "xfrm-libreswan-default.log", **{"pluto-client": "pluto-default-psk.log"})
    found = libreswan.negotiated(tunnel, libreswan.Options(), "default")
    assert found.source == "ip xfrm state + pluto log" and found.data == "ESP"
    assert alg.mismatches(declared("libreswan"), found) == []
    pptp = DRIVERS["pptp"]
    (tmp_path / "pptp").mkdir()
    tunnel = live(tmp_path / "pptp", "pptpd", None, **{"pppd-client": "pppd-pptp-mppe-128.log"})
    assert alg.mismatches(declared("pptp"), pptp.negotiated(tunnel, pptp.Options(), "default")) == []


# --- recording, and the report's table ------------------------------------------------------------

def fake_tunnel(tmp_path, *logs):
    """A tunnel whose daemons wrote these captured logs (the client's last, as drivers start them)."""
    processes = []
    for role, name in logs:
        path = tmp_path / f"l0-{name.split('-')[0]}-{role}.log"
        path.write_text(log(name))
        processes.append((None, None, path))
    return SimpleNamespace(processes=processes, env=SimpleNamespace(implementation="libipsec"),
                           read_log=lambda log, node=None: Tunnel.read_log(None, log, node))


def test_record_flags_a_negotiated_value_that_differs(tmp_path):
    plan = make_plan(parse_study("name: r\nvpns: [{driver: openvpn, profile: fips}]\nlinks: [{name: l}]\n"
                                 "workloads: [{kind: ping}]\n"))
    scenario = plan.scenarios[0]
    scenario.implementations = ["openvpn"]
    stage = SimpleNamespace(tunnels=[fake_tunnel(tmp_path, ("client", "openvpn-fips-ecdh-curve-ignored.log"))])
    sample = SimpleNamespace(raw={}, flags=[])
    recorded.record(stage, scenario, sample)
    layers = json.loads(sample.raw[alg.TOOL])
    assert layers[0]["declared"]["key_exchange"] == "ECDH P-256"
    assert layers[0]["negotiated"]["key_exchange"] == "X25519"
    assert sample.flags == [alg.ALGORITHMS_DIFFER("layer 0 (openvpn): key exchange: declared ECDH P-256, "
                                                  "negotiated X25519")]
    stage.tunnels = [fake_tunnel(tmp_path, ("client", "openvpn-fips.log"))]
    sample = SimpleNamespace(raw={}, flags=[])
    recorded.record(stage, scenario, sample)
    assert sample.flags == [] and json.loads(sample.raw[alg.TOOL])[0]["negotiated"]["key_exchange"] == "ECDH P-256"


PROFILES = """
name: fave-like
topology: remote-access
repetitions: 3
vpns: [{driver: none}, {driver: openvpn}, {driver: openvpn, profile: fips}, {driver: strongswan},
       {driver: strongswan, profile: fips}]
links: [{name: lan, rate_mbit: 100}]
workloads: [{kind: tcp, duration_s: 5}]
findings:
  - id: openvpn-fips-slower
    quote: "noticeably greater using its default settings"
    where: "Table 4.4"
    seed: "97.8 against 90.7 Mbit/s"
    a: {vpn: openvpn aes-256-gcm udp, workload: tcp}
    b: {vpn: openvpn aes-256-gcm udp fips, workload: tcp}
    direction: lower
"""

LOGS = {("openvpn", "default"): "openvpn-default.log", ("openvpn", "fips"): "openvpn-fips.log",
        ("strongswan", "default"): "charon-default-psk.log", ("strongswan", "fips"): "charon-fips-psk.log"}


def profile_store(tmp_path, fips_log=None) -> Path:
    """A store of PROFILES whose repetitions recorded what the captured logs say (fake throughput)."""
    plan = make_plan(parse_study(PROFILES))
    store = Store.open_dir(tmp_path)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="fave-like", study_text=PROFILES)
    for position, scenario in enumerate(plan.scenarios):
        store.add_scenario(scenario)
        scenario.implementations = ["openvpn" if scenario.vpn.driver == "openvpn" else "libipsec"]
        for rep in (1, 2, 3):
            raw, flags = {}, []
            if not scenario.vpn.is_baseline:
                name = LOGS[(scenario.vpn.driver, scenario.vpn.profile)]
                if fips_log and scenario.vpn.driver == "openvpn" and scenario.vpn.profile == "fips":
                    name = fips_log
                sample = SimpleNamespace(raw=raw, flags=flags)
                recorded.record(SimpleNamespace(tunnels=[fake_tunnel(tmp_path, ("client", name))]), scenario, sample)
            store.record_repetition(run, scenario.id, rep, {"throughput_mbps": 90.0 + rep + position}, raw, flags,
                                    rep, position)
    store.finish_run(run, "done")
    store.close()
    return tmp_path


def test_table_and_what_each_profile_changed(tmp_path):
    store = Store.open_dir(profile_store(tmp_path))
    try:
        scenarios = store.scenarios()
        section = report.table(store, scenarios, for_scenarios(scenarios))
    finally:
        store.close()
    rows = {row["vpn"]: row for row in section.rows}
    assert list(rows) == ["openvpn aes-256-gcm udp", "openvpn aes-256-gcm udp fips", "strongswan default psk",
                          "strongswan aes256gcm16 psk fips"]  # each driver's default beside its fips
    kx = section.headings.index("key exchange")
    assert [rows[v]["cells"][kx]["text"] for v in rows] == ["X25519", "ECDH P-256", "X25519", "ECDH P-256"]
    assert all(row["read"] == "3/3" and not row["cells"][kx]["warn"] for row in rows.values())
    data = section.headings.index("data channel")  # never read from OpenVPN's log: the declared value, marked
    assert rows["openvpn aes-256-gcm udp"]["cells"][data] == {"text": "OpenVPN over UDP", "warn": "", "css": "declared"}
    openvpn, strongswan = section.changes
    assert openvpn.startswith("openvpn: openvpn aes-256-gcm udp fips against openvpn aes-256-gcm udp (negotiated): "
                              "key exchange X25519 -> ECDH P-256; the data channel is the same in both "
                              "(AES-256-GCM, AEAD)")
    assert "data cipher AES-128-GCM -> AES-256-GCM" in strongswan and "both channels differ" in strongswan


def test_a_fips_profile_that_ran_a_non_fips_algorithm_is_marked(tmp_path):
    store = Store.open_dir(profile_store(tmp_path, fips_log="openvpn-fips-ecdh-curve-ignored.log"))
    try:
        scenarios = store.scenarios()
        section = report.table(store, scenarios, for_scenarios(scenarios))
        flagged = {r.flags for r in store.samples() if r.flags}
    finally:
        store.close()
    kx = section.headings.index("key exchange")
    cell = next(r for r in section.rows if r["vpn"] == "openvpn aes-256-gcm udp fips")["cells"][kx]
    assert cell["text"] == "X25519" and cell["css"] == "mismatch"
    assert "declared: ECDH P-256" in cell["warn"] and "not FIPS 140-approved" in cell["warn"]
    assert flagged == {(alg.ALGORITHMS_DIFFER("layer 0 (openvpn): key exchange: declared ECDH P-256, negotiated X25519"),)}
    assert any("openvpn: the fips profile changes no algorithm" in c or "use the same algorithms" in c
               for c in section.changes)


def test_the_verdict_says_which_channel_the_profiles_differ_in(tmp_path):
    from vpnlab.analyse import findings

    store = Store.open_dir(profile_store(tmp_path))
    try:
        (judged,) = findings.judge(store)
    finally:
        store.close()
    assert ("what the profiles changed: openvpn: B against A (negotiated): key exchange X25519 -> ECDH P-256; "
            "the data channel is the same in both (AES-256-GCM, AEAD)") in judged.reason
    assert "does not switch to a FIPS-validated crypto module" in judged.reason


def test_l2tp_under_fips_proposes_fips_ike():
    from vpnlab.drivers.l2tp import swanctl_conf
    from vpnlab.drivers.strongswan import FIPS_IKE

    fips = swanctl_conf("198.18.0.1", "198.18.0.2", True, "aes256gcm16", "fips", "0x00")
    assert f"proposals = {FIPS_IKE}" in fips and "esp_proposals = aes256gcm16" in fips
    assert "proposals = " not in swanctl_conf("198.18.0.1", "198.18.0.2", True, "aes128-sha1", "default", "0x00") \
        .replace("esp_proposals", "")
    assert declared("l2tp", "fips").key_exchange == "ECDH P-256" and declared("l2tp").key_exchange == "X25519"
