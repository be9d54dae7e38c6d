"""What a VPN configuration's cryptography really is, per channel: what each driver declares for its
options and profile, what the live tunnel negotiated, and what a profile changed.

Each driver declares, for its options and profile, the algorithms of its control channel (protocol,
key exchange, authentication, cipher) and of its data channel (protocol, cipher, integrity):
`Driver.algorithms`. Once a tunnel is up, every repetition reads what it negotiated
(`Driver.negotiated`: OpenVPN's "Control Channel:" and "Data Channel:" log lines, charon's "selected
proposal", pluto's established SAs, openconnect's ciphersuites, pppd's MPPE line, the kernel's ESP
states from `ip xfrm state`; WireGuard negotiates nothing) and stores both with the repetition (raw
output "algorithms"). A negotiated value that differs from the declared one flags the repetition.

The report's "Algorithms per profile" table shows, per configuration, the negotiated algorithms
beside the declared ones, and what each driver's `fips` profile changed against `default`; the
verdict on a seed's finding that sets two profiles against each other says which channel differs
(findings.py). A profile restricts algorithms: it does not swap the crypto library for a FIPS-validated
module, as some seeds did.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .errors import VpnlabError

TOOL = "algorithms"  # the raw output each repetition stores them under

CONTROL = ("control", "key_exchange", "authentication", "control_cipher")
DATA = ("data", "data_cipher", "data_integrity")
HEADINGS = {"control": "control channel", "key_exchange": "key exchange", "authentication": "authentication",
            "control_cipher": "control cipher", "data": "data channel", "data_cipher": "data cipher",
            "data_integrity": "data integrity"}
AEAD = "AEAD"  # the cipher authenticates (GCM, Poly1305): no separate integrity algorithm

# Not FIPS 140-approved (a fips profile must not run them): Curve25519/X25519 and ChaCha20-Poly1305 are
# not approved for key agreement and encryption, Blowfish, RC4, MD5, MD4 never were, three-key TDEA is
# disallowed for encryption since 2024 (SP 800-131A r2).
NOT_FIPS = ("X25519", "ChaCha20", "BF-", "RC4", "MD5", "MS-CHAP", "3DES", "MODP-1024", "BLAKE2s", "Noise")
# Broken or deprecated whatever the profile: a reader choosing by speed must see it beside the result.
WEAK = {
    "3DES": "64-bit block, open to Sweet32; NIST disallows it for encryption since 2024",
    "BF-": "64-bit block, open to Sweet32",
    "RC4": "biased keystream; RFC 7465 prohibits it in TLS",
    "MD5": "collisions; RFC 6151 advises against it in new protocols",
    "MS-CHAP": "MS-CHAPv2 falls to one DES key search (and with it, in PPTP, the MPPE keys derived from it)",
    "MODP-1024": "a 1024-bit group, within reach of a state's precomputation (Logjam)",
}


def weak(text: str) -> list[str]:
    """Why each broken or deprecated algorithm named in `text` is one."""
    return [f"{name.rstrip('-')}: {why}" for name, why in WEAK.items() if name in text]


def weak_in(scenario_row) -> list[str]:
    """The broken or deprecated algorithms a stored configuration runs, by its driver's declaration."""
    found = []
    for _, _, declared in declared_layers(scenario_row):
        for value in (declared.values().values() if declared else ()):
            found += [w for w in weak(value) if w not in found]
    return found


@dataclass(frozen=True)
class Algorithms:
    """The algorithms of one tunnel layer; a field left empty is unknown (or not read)."""

    control: str = ""         # "TLS 1.3", "IKEv2", "Noise_IKpsk2", "PPTP (TCP 1723)"
    key_exchange: str = ""    # "X25519", "ECDH P-256", "MODP-2048"
    authentication: str = ""  # "ECDSA P-256 SHA-256", "PSK", "MS-CHAPv2"
    control_cipher: str = ""  # "AES-256-GCM", "AES-128-CBC HMAC-SHA256-128"
    data: str = ""            # "ESP", "ESP in UDP", "DTLS 1.2", "OpenVPN UDP"
    data_cipher: str = ""     # "AES-256-GCM", "3DES-CBC", "RC4-128 (MPPE stateless)"
    data_integrity: str = ""  # "AEAD", "HMAC-SHA256", "HMAC-SHA1-96", "none"
    source: str = ""          # where the values were read (negotiated) or what declared them

    def values(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source" and getattr(self, f.name)}

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v}

    @classmethod
    def from_dict(cls, data: dict | None) -> "Algorithms | None":
        if data is None:
            return None
        return cls(**{k: v for k, v in data.items() if k in HEADINGS or k == "source"})

    def __or__(self, other: "Algorithms") -> "Algorithms":
        """These values, completed by `other`'s where these are empty."""
        return Algorithms(**{f.name: getattr(self, f.name) or getattr(other, f.name) for f in fields(self)})


def merged(*found: "Algorithms | None") -> "Algorithms | None":
    """Several readings of one tunnel, the first one's values first (the kernel's state before a log)."""
    present = [f for f in found if f]
    if not present:
        return None
    out = present[0]
    for more in present[1:]:
        out = out | more
    return Algorithms(**{**out.as_dict(), "source": " + ".join(f.source for f in present if f.source)})


ESP_ALGORITHMS = {  # vpnlab's ESP proposal names (drivers/ipsec.py) -> (cipher, integrity)
    "3des-md5": ("3DES-CBC", "HMAC-MD5-96"), "3des-sha1": ("3DES-CBC", "HMAC-SHA1-96"),
    "aes128-sha1": ("AES-128-CBC", "HMAC-SHA1-96"), "aes256-sha1": ("AES-256-CBC", "HMAC-SHA1-96"),
    "aes128-sha256": ("AES-128-CBC", "HMAC-SHA256-128"), "aes256-sha256": ("AES-256-CBC", "HMAC-SHA256-128"),
    "aes128gcm16": ("AES-128-GCM", AEAD), "aes256gcm16": ("AES-256-GCM", AEAD),
    "chacha20poly1305": ("ChaCha20-Poly1305", AEAD),
}


def esp_algorithms(proposal: str) -> tuple[str, str]:
    return ESP_ALGORITHMS.get(proposal, (proposal, ""))


def mismatches(declared: Algorithms | None, negotiated: Algorithms | None) -> list[str]:
    """'key exchange: declared ECDH P-256, negotiated X25519' for each field both know and differ in."""
    if declared is None or negotiated is None:
        return []
    mine, theirs = declared.values(), negotiated.values()
    return [f"{HEADINGS[k]}: declared {mine[k]}, negotiated {theirs[k]}" for k in HEADINGS
            if k in mine and k in theirs and mine[k] != theirs[k]]


def not_fips(algorithms: Algorithms) -> list[str]:
    """The fields whose algorithm FIPS 140 does not approve: 'key exchange X25519'."""
    return [f"{HEADINGS[k]} {v}" for k, v in algorithms.values().items() if any(bad in v for bad in NOT_FIPS)]


# --- names, as the software prints them, to one vocabulary ----------------------------------------

_GROUPS = {"CURVE_25519": "X25519", "X25519": "X25519", "CURVE_448": "X448", "X448": "X448",
           "ECP_256": "ECDH P-256", "ECP_384": "ECDH P-384", "ECP_521": "ECDH P-521",
           "PRIME256V1": "ECDH P-256", "SECP256R1": "ECDH P-256", "P-256": "ECDH P-256",
           "SECP384R1": "ECDH P-384", "P-384": "ECDH P-384", "SECP521R1": "ECDH P-521",
           "DH19": "ECDH P-256", "DH20": "ECDH P-384", "DH21": "ECDH P-521", "DH31": "X25519",
           "DH14": "MODP-2048", "DH15": "MODP-3072", "DH2": "MODP-1024", "DH5": "MODP-1536"}


def group_name(name: str) -> str:
    """A key-exchange group as one vocabulary: 'ECDH P-256', 'X25519', 'MODP-2048'."""
    key = name.strip().upper()
    if key.startswith("EC") and key[2:] in _GROUPS:  # OpenVPN: 'ECprime256v1'
        key = key[2:]
    if key in _GROUPS:
        return _GROUPS[key]
    modp = re.fullmatch(r"MODP_?(\d+)", key)
    return f"MODP-{modp.group(1)}" if modp else name.strip()


def cipher_name(name: str) -> str:
    """A cipher as one vocabulary: 'AES-128-GCM', 'AES-256-CBC', '3DES-CBC', 'ChaCha20-Poly1305'."""
    key = name.strip().upper().replace("_", "-")
    if "CHACHA20" in key:
        return "ChaCha20-Poly1305"
    m = re.fullmatch(r"AES-GCM-(?:16-)?(\d+)", key) or re.fullmatch(r"AES-(\d+)-GCM", key)
    if m:
        return f"AES-{m.group(1)}-GCM"
    m = re.fullmatch(r"AES-CBC-(\d+)", key) or re.fullmatch(r"AES-(\d+)-CBC", key) or re.fullmatch(r"AES(\d+)", key)
    if m:
        return f"AES-{m.group(1)}-CBC"
    if key in ("3DES-CBC", "3DES", "DES-EDE3-CBC", "3DES-CBC-192"):
        return "3DES-CBC"
    if key in ("BF-CBC", "BLOWFISH-CBC"):
        return "BF-CBC"
    return name.strip()


def integrity_name(name: str) -> str:
    """An integrity algorithm: 'HMAC-SHA256-128' (truncated to 128 bits, as ESP and IKE do),
    'HMAC-SHA1-96', 'HMAC-SHA256' (OpenVPN's, untruncated)."""
    key = name.strip().upper().replace("_", "-")
    m = re.fullmatch(r"HMAC-SHA2-(\d+)(?:-(\d+))?", key)
    if m:
        return f"HMAC-SHA{m.group(1)}" + (f"-{m.group(2)}" if m.group(2) else "")
    m = re.fullmatch(r"HMAC-(SHA1|MD5)(?:-(\d+))?", key)
    if m:
        return f"HMAC-{m.group(1)}" + (f"-{m.group(2)}" if m.group(2) else "")
    if key in ("SHA1", "SHA256", "SHA384", "SHA512", "MD5"):
        return f"HMAC-{key}"
    return name.strip()


def cipher_and_integrity(transforms: list[str]) -> tuple[str, str]:
    """strongSwan's or libreswan's transforms (AES_GCM_16_256, HMAC_SHA2_256_128, ...): cipher, integrity."""
    cipher = next((cipher_name(t) for t in transforms if not t.upper().startswith(("HMAC", "PRF", "NO_EXT",
                                                                                    "EXT_SEQ", "AUTH"))), "")
    integrity = next((integrity_name(t) for t in transforms if t.upper().startswith(("HMAC", "AUTH_HMAC"))), "")
    aead = "GCM" in cipher or "Poly1305" in cipher
    return cipher, (AEAD if aead else integrity)


# --- parsers of what the software reports (real output in tests/data/algorithms) ------------------

def parse_openvpn_log(text: str) -> Algorithms | None:
    """OpenVPN 2.x: 'Control Channel: TLSv1.3, cipher TLSv1.3 TLS_AES_256_GCM_SHA384, peer certificate:
    256 bits ECprime256v1, signature: ecdsa-with-SHA256, peer temporary key: 253 bits X25519' and
    "Data Channel: cipher 'AES-128-CBC', auth 'SHA256', peer-id: 0"."""
    control = re.findall(r"Control Channel: (TLSv[\d.]+), cipher \S+ ([\w-]+)(.*)", text)
    data = re.findall(r"Data Channel: cipher '([^']+)'(?:, auth '([^']+)')?", text)
    if not control and not data:
        return None
    values = {}
    if control:
        version, suite, rest = control[-1]
        values["control"] = version.replace("TLSv", "TLS ")
        values["control_cipher"] = _tls_suite_cipher(suite)
        key = re.search(r"peer temporary key: \d+ bits? ([\w-]+)", rest)
        if key:
            values["key_exchange"] = group_name(key.group(1))
        cert = re.search(r"peer certificate: (\d+) bits? (\w+?)(prime256v1|secp384r1|secp521r1)?, signature: "
                         r"([\w-]+)", rest)
        if cert:
            bits, kind, curve, signature = cert.groups()
            digest = re.search(r"SHA-?(\d+)", signature, re.I)
            if kind.upper().startswith("EC"):
                named = group_name(curve).replace("ECDH ", "") if curve else f"{bits}-bit"
                values["authentication"] = f"ECDSA {named}" + (f" SHA-{digest.group(1)}" if digest else "")
            else:
                values["authentication"] = f"{kind.upper()}-{bits}" + (f" SHA-{digest.group(1)}" if digest else "")
    if data:
        cipher, auth = data[-1]
        values["data_cipher"] = cipher_name(cipher)
        aead = "GCM" in cipher.upper() or "POLY1305" in cipher.upper()
        values["data_integrity"] = AEAD if aead else (integrity_name(auth) if auth and "null" not in auth else "none")
    return Algorithms(**values, source="OpenVPN log")


def _tls_suite_cipher(suite: str) -> str:
    """TLS_AES_256_GCM_SHA384 / ECDHE-ECDSA-AES256-GCM-SHA384 / TLS_CHACHA20_POLY1305_SHA256 -> the cipher."""
    key = suite.upper().replace("_", "-")
    if "CHACHA20" in key:
        return "ChaCha20-Poly1305"
    m = re.search(r"AES-?(\d+)-(GCM|CBC|CCM)", key)
    return f"AES-{m.group(1)}-{m.group(2)}" if m else suite


def parse_charon_log(text: str) -> Algorithms | None:
    """strongSwan's charon: 'selected proposal: IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/
    CURVE_25519', 'selected proposal: ESP:AES_GCM_16_128/NO_EXT_SEQ', "authentication of 'client@vpnlab'
    (myself) with pre-shared key successful", 'IKE_SA net[1] established' (IKEv2) or an IKEv1 SA."""
    ike = re.findall(r"selected proposal: IKE:(\S+)", text)
    esp = re.findall(r"selected proposal: ESP:(\S+)", text)
    if not ike and not esp:
        return None
    values = {}
    if ike:
        transforms = ike[-1].split("/")
        cipher, integrity = cipher_and_integrity(transforms)
        values["control_cipher"] = cipher if integrity == AEAD else f"{cipher} {integrity}".strip()
        group = [t for t in transforms if re.match(r"(CURVE|ECP|MODP|ECP_|X25519)", t)]
        if group:
            values["key_exchange"] = group_name(group[-1])
        version = "IKEv1" if re.search(r"\bID_PROT\b|\bAGGRESSIVE\b|\bIKEv1\b", text) else "IKEv2"
        values["control"] = version
    auth = re.findall(r"authentication of '[^']+' with (.+?) successful", text)  # the peer's, verified
    if auth:
        values["authentication"] = _charon_auth(auth[-1])
    elif re.search(r"ID_PROT response \d+ \[ ID HASH", text) and re.search(r"IKE_SA \S+ established", text):
        values["authentication"] = "PSK"  # IKEv1 main mode: a HASH, not a signature, authenticated the peer
    if esp:
        values["data_cipher"], values["data_integrity"] = cipher_and_integrity(esp[-1].split("/"))
    return Algorithms(**values, source="charon log")


def _charon_auth(text: str) -> str:
    """'pre-shared key' -> PSK; 'ECDSA_WITH_SHA256_DER' (an IKEv2 signature) -> 'ECDSA SHA-256';
    'ECDSA-256 signature' -> 'ECDSA P-256'."""
    if "pre-shared key" in text:
        return "PSK"
    m = re.search(r"(ECDSA|RSA\w*?)_WITH_SHA(\d+)", text, re.I)
    if m:
        return f"{m.group(1).upper()} SHA-{m.group(2)}"
    m = re.search(r"ECDSA[-_](\d+)", text, re.I)
    return f"ECDSA P-{m.group(1)}" if m else text


def parse_pluto_log(text: str) -> Algorithms | None:
    """libreswan's pluto (4.x): 'sent IKE_AUTH request {cipher=AES_GCM_16_256 integ=n/a prf=HMAC_SHA2_512
    group=MODP2048}', 'established Child SA ... {ESP/ESN=>0x... <0x... xfrm=3DES_CBC-HMAC_SHA1_96 DPD=passive}',
    'authenticated peer using authby=secret' or "authenticated peer 'P-256 ECDSA with SHA2_512' digital
    signature"."""
    ike = re.findall(r"\{cipher=(\S+) integ=(\S+) prf=(\S+) group=(\S+?)\}", text)
    child = re.findall(r"xfrm=(\S+?)(?:-(\S+?))?(?: |\})", text)
    if not ike and not child:
        return None
    values = {"control": "IKEv2"}
    if ike:
        cipher, integ, _prf, group = ike[-1]
        cipher = cipher_name(cipher)
        aead = "GCM" in cipher or "Poly1305" in cipher
        values["control_cipher"] = cipher if aead or integ.lower() in ("n/a", "none") \
            else f"{cipher} {integrity_name(integ)}"
        values["key_exchange"] = group_name(group)
    if re.search(r"authenticated peer using authby=secret", text):
        values["authentication"] = "PSK"
    signature = re.findall(r"authenticated peer '(?:(P-\d+) )?(\w+) with SHA2?_(\d+)' digital signature", text)
    if signature:
        curve, algorithm, bits = signature[-1]
        values["authentication"] = " ".join(filter(None, (algorithm, curve, f"SHA-{bits}")))
    if child:
        cipher, integ = child[-1]
        cipher = cipher_name(cipher)
        aead = "GCM" in cipher or "Poly1305" in cipher
        values["data_cipher"] = cipher
        values["data_integrity"] = AEAD if aead else integrity_name(integ or "")
    return Algorithms(**values, source="pluto log")


def parse_openconnect_log(text: str) -> Algorithms | None:
    """openconnect: 'Connected to HTTPS on 198.19.0.2 with ciphersuite (TLS1.2)-(ECDHE-SECP256R1)-
    (ECDSA-SHA256)-(AES-256-GCM)' and 'Established DTLS connection (using GnuTLS). Ciphersuite
    (DTLS1.2)-(PSK)-(AES-256-GCM).'"""
    tls = re.findall(r"with ciphersuite ((?:\([^)]*\)-?)+)", text)
    dtls = re.findall(r"Established DTLS connection.*?Ciphersuite ((?:\([^)]*\)-?)+)", text)
    if not tls:
        return None
    version, kx, auth, cipher, *mac = re.findall(r"\(([^)]*)\)", tls[-1])
    values = {"control": version.replace("TLS", "TLS "), "key_exchange": group_name(kx.replace("ECDHE-", "")),
              "authentication": auth.replace("-SHA", " SHA-"), "control_cipher": _gnutls_cipher(cipher, mac)}
    if dtls:
        d_version, d_kx, d_cipher, *d_mac = re.findall(r"\(([^)]*)\)", dtls[-1])
        values["data"] = d_version.replace("DTLS", "DTLS ") + (" (PSK from the TLS session)" if d_kx == "PSK" else "")
        values["data_cipher"] = _gnutls_cipher(d_cipher, [])
        values["data_integrity"] = AEAD if d_cipher.endswith(("GCM", "POLY1305")) else (
            integrity_name(d_mac[0]) if d_mac else "")
    else:
        values["data"] = values["control"] + " (CSTP)"
        values["data_cipher"] = values["control_cipher"].split(" ")[0]
        values["data_integrity"] = AEAD if cipher.endswith(("GCM", "POLY1305")) else (
            integrity_name(mac[0]) if mac else "")
    return Algorithms(**values, source="openconnect log")


def _gnutls_cipher(cipher: str, mac: list[str]) -> str:
    name = cipher_name(cipher)
    return name if not mac or name.endswith(("GCM", "Poly1305")) else f"{name} {integrity_name(mac[0])}"


def parse_pppd_log(text: str) -> Algorithms | None:
    """pppd (debug): 'MPPE 128-bit stateless compression enabled' and the CHAP exchange
    ('CHAP authentication succeeded', MS-CHAPv2 as negotiated in 'auth chap MS-v2')."""
    mppe = re.findall(r"MPPE (\d+)-bit (stateless|stateful) compression enabled", text)
    chap = re.search(r"auth chap MS-v2|MS-CHAP-?[vV]2|CHAP authentication succeeded", text)
    if not mppe and not chap:
        return None
    values = {}
    if chap:
        values["authentication"] = "MS-CHAPv2"
    if mppe:
        bits, mode = mppe[-1]
        values["data_cipher"] = f"RC4-{bits} (MPPE {mode})"
        values["data_integrity"] = "none"
    elif "nomppe" in text or "MPPE" not in text:
        values["data_cipher"], values["data_integrity"] = "none", "none"
    return Algorithms(**values, source="pppd log")


def parse_xfrm_state(text: str) -> Algorithms | None:
    """The kernel's ESP states (`ip xfrm state`): 'aead rfc4106(gcm(aes)) 0x... 128', 'enc cbc(aes) 0x...',
    'auth-trunc hmac(sha256) 0x... 128', 'encap type espinudp ...', an IPComp state ('proto comp ...
    comp deflate'). The first ESP state is read."""
    blocks = re.split(r"\n(?=src )", text.strip())
    ipcomp = any("proto comp" in block and "deflate" in block for block in blocks)
    for block in blocks:
        if "proto esp" not in block:
            continue
        values = {"data": ("ESP in UDP" if "encap type espinudp" in block else "ESP")
                  + (" + IPComp (DEFLATE)" if ipcomp else "")}
        aead = re.search(r"aead (\S+) 0x([0-9a-f]+) (\d+)", block)
        enc = re.search(r"enc (\S+) 0x([0-9a-f]+)", block)
        auth = re.search(r"auth(?:-trunc)? (\S+) 0x[0-9a-f]+(?: (\d+))?", block)
        if aead:
            algo, key, _icv = aead.groups()
            if "chacha" in algo:
                values["data_cipher"] = "ChaCha20-Poly1305"
            else:  # rfc4106: the key carries a 4-byte salt
                values["data_cipher"] = f"AES-{(len(key) // 2 - 4) * 8}-GCM"
            values["data_integrity"] = AEAD
        elif enc:
            algo, key = enc.groups()
            bits = len(key) * 4
            values["data_cipher"] = ("3DES-CBC" if "des3" in algo else f"AES-{bits}-CBC" if "aes" in algo
                                     else "none" if "null" in algo else algo)
            if auth:
                name, trunc = auth.groups()
                digest = re.search(r"hmac\((\w+)\)", name)
                values["data_integrity"] = (integrity_name(digest.group(1)) if digest else name) + (
                    f"-{trunc}" if trunc else "")
        return Algorithms(**values, source="ip xfrm state")
    return None


# --- reading a live tunnel --------------------------------------------------------------------------

def logs_of(tunnel, word: str) -> list[Path]:
    """The tunnel's daemon logs whose name holds `word`, the client's (started last) first."""
    return [log for _, _, log in reversed(tunnel.processes) if word in log.name]


def read_logs(tunnel, word: str, parser) -> Algorithms | None:
    """The first of the tunnel's `word` logs the parser reads something from."""
    for log in logs_of(tunnel, word):
        try:
            found = parser(log.read_text(errors="replace"))
        except OSError:
            continue
        if found:
            return found
    return None


def read_path(path: Path, parser) -> Algorithms | None:
    """What the parser reads from one file (a log a daemon writes itself, as pppd's `logfile`)."""
    try:
        return parser(Path(path).read_text(errors="replace"))
    except OSError:
        return None


def read_xfrm(tunnel) -> Algorithms | None:
    """The kernel's ESP state in the namespace of the tunnel's client daemon (kernel ESP only); kept
    beside the daemons' logs, its keys blanked, as the evidence of what was read."""
    if not tunnel.processes:
        return None
    node = tunnel.processes[-1][0]
    try:
        out = node.run(["ip", "xfrm", "state"], check=False, timeout=10).stdout
    except (VpnlabError, subprocess.SubprocessError, OSError):
        return None
    try:
        tunnel.env.log("xfrm-state").write_text(blank_keys(out))
    except (AttributeError, OSError):
        pass
    return parse_xfrm_state(out)


def blank_keys(text: str) -> str:
    """`ip xfrm state` with every key replaced by zeros of its length (SPIs, 8 hex digits, kept)."""
    return re.sub(r"0x([0-9a-f]{16,})", lambda m: "0x" + "0" * len(m.group(1)), text)


def record(stage, scenario, sample) -> None:
    """Declared and negotiated algorithms of every layer of this repetition's tunnel, stored with the
    repetition (raw output TOOL); a difference between the two flags the sample. Never fails the
    repetition: what cannot be read stays unknown."""
    from .drivers import REGISTRY as DRIVERS

    layers = []
    for layer, (config, implementation, tunnel) in enumerate(zip(scenario.vpn.layers, scenario.implementations,
                                                                  stage.tunnels)):
        driver = DRIVERS[config.driver]
        declared = driver.algorithms(config.options, config.profile, implementation)
        try:
            negotiated = driver.negotiated(tunnel, config.options, config.profile)
        except (VpnlabError, subprocess.SubprocessError, OSError, ValueError) as exc:
            negotiated, error = None, str(exc)[:200]
        else:
            error = ""
        differ = mismatches(declared, negotiated)
        if differ:
            sample.flags.append(f"algorithms negotiated differ from the declared ones (layer {layer}, "
                                f"{config.driver}): {'; '.join(differ)}")
        layers.append({"layer": layer, "driver": config.driver, "profile": config.profile,
                       "implementation": implementation,
                       "declared": declared.as_dict() if declared else None,
                       "negotiated": negotiated.as_dict() if negotiated else None,
                       **({"error": error} if error else {})})
    if layers:
        sample.raw[TOOL] = json.dumps(layers, sort_keys=True)


# --- the report's table and what a profile changed ---------------------------------------------------

def read(store) -> dict[str, list[list[dict]]]:
    """Scenario id -> per stored repetition, its layers as `record` stored them."""
    out: dict[str, list] = defaultdict(list)
    for row in store.raw_outputs(TOOL):
        try:
            out[row["scenario_id"]].append(json.loads(row["output"]))
        except (TypeError, ValueError):
            continue
    return out


def declared_layers(scenario_row) -> list[tuple[str, str, Algorithms | None]]:
    """(driver, profile, declared) of each layer of a stored scenario, outermost first, from its
    stored configuration (for stores written before algorithms were recorded)."""
    from .drivers import REGISTRY as DRIVERS

    layers, config = [], scenario_row.config
    implementations = scenario_row.implementation.split("+")
    while config:
        driver = DRIVERS.get(config["driver"])
        if driver and not driver.baseline:
            i = len(layers)
            try:
                options = driver.Options(**config.get("options", {}))
                declared = driver.algorithms(options, config.get("profile", "default"),
                                             implementations[i] if i < len(implementations) else "")
            except ValueError:
                declared = None
            layers.append((config["driver"], config.get("profile", "default"), declared))
        config = config.get("inner")
    return layers


@dataclass
class Layer:
    """One configuration's layer, over all its repetitions."""

    driver: str
    profile: str
    declared: Algorithms | None
    negotiated: dict[str, Counter] = field(default_factory=dict)  # field -> values seen
    sources: set = field(default_factory=set)
    read: int = 0    # repetitions it was read from
    total: int = 0   # repetitions stored

    def effective(self) -> dict[str, str]:
        """Per field: the value negotiated most often, else the declared one."""
        out = dict(self.declared.values()) if self.declared else {}
        out.update({k: c.most_common(1)[0][0] for k, c in self.negotiated.items() if c})
        return out

    def cell(self, key: str) -> dict:
        """One cell of the table: text, and why to read it with care (warn), and its style."""
        declared = (self.declared.values() if self.declared else {}).get(key, "")
        seen = self.negotiated.get(key)
        fips = self.profile == "fips"
        if seen:
            text = " / ".join(v for v, _ in seen.most_common())
            warn = []
            if len(seen) > 1:
                warn.append("different values in different repetitions: " + ", ".join(
                    f"{v} ({n})" for v, n in seen.most_common()))
            if declared and any(v != declared for v in seen):
                warn.append(f"declared: {declared}")
            if fips and any(bad in text for bad in NOT_FIPS):
                warn.append("not FIPS 140-approved, under the fips profile")
            return {"text": text, "warn": "; ".join(warn + weak(text)), "css": "mismatch" if warn else ""}
        if declared:
            bad = ["not FIPS 140-approved, under the fips profile"] if fips and any(
                word in declared for word in NOT_FIPS) else []
            return {"text": declared, "warn": "; ".join(bad + weak(declared)), "css": "declared"}
        return {"text": "-", "warn": "", "css": ""}


@dataclass
class Section:
    headings: list
    rows: list          # {"vpn", "layer", "profile", "cells", "source", "read"}
    changes: list       # sentences: what each fips profile changed against default


def _without_profile(config: dict) -> str:
    def strip(c):
        return {k: (strip(v) if k == "inner" else v) for k, v in c.items() if k not in ("profile", "label")}
    return json.dumps(strip(config), sort_keys=True)


def configurations(scenarios, records: dict, labels) -> dict[str, tuple[object, list[Layer]]]:
    """Label as shown -> (a scenario row of it, its layers over every repetition of every scenario)."""
    groups: dict[str, list] = defaultdict(list)
    for sc in scenarios:
        if not sc.is_baseline:
            groups[labels.of(sc)].append(sc)
    out = {}
    for label, members in groups.items():
        layers = [Layer(d, p, a) for d, p, a in declared_layers(members[0])]
        for sc in members:
            for rep in records.get(sc.id, []):
                for entry in rep:
                    i = entry.get("layer", 0)
                    if i >= len(layers):
                        continue
                    layer = layers[i]
                    layer.total += 1
                    if entry.get("declared"):  # as declared when it ran, which its flags compared with
                        layer.declared = Algorithms.from_dict(entry["declared"])
                    found = Algorithms.from_dict(entry.get("negotiated"))
                    if found:
                        layer.read += 1
                        layer.sources.add(found.source)
                        for k, v in found.values().items():
                            layer.negotiated.setdefault(k, Counter())[v] += 1
        out[label] = (members[0], layers)
    return out


def change_text(driver: str, a_label: str, b_label: str, a: Layer, b: Layer, measured: bool) -> str:
    """What b's profile changed against a's, channel by channel, in one sentence."""
    ea, eb = a.effective(), b.effective()
    how = "negotiated" if measured else "declared (not read from a live tunnel)"
    differ = [k for k in HEADINGS if ea.get(k, "") != eb.get(k, "")]
    if not differ:
        return (f"{driver}: {b_label} and {a_label} use the same algorithms on both channels ({how}): "
                f"the {b.profile} profile changes no algorithm in use")
    parts = [f"{HEADINGS[k]} {ea.get(k) or '-'} -> {eb.get(k) or '-'}" for k in differ]
    text = f"{driver}: {b_label} against {a_label} ({how}): " + "; ".join(parts)
    if not any(k in DATA for k in differ):
        data = ", ".join(v for v in (ea.get("data_cipher"), ea.get("data_integrity")) if v)
        text += (f"; the data channel is the same in both ({data}): every packet is protected alike, so only "
                 "the control channel, which runs at set-up and on rekeying, differs")
    elif not any(k in CONTROL for k in differ):
        text += "; the control channel is the same in both: the difference is in the data channel, paid per packet"
    else:
        text += "; both channels differ, the data channel's per packet"
    return text


def profile_changes(configs: dict) -> list[str]:
    """For each configuration with a twin that differs only in its profile: what the profile changed."""
    out = []
    items = list(configs.items())
    for i, (label_a, (sa, layers_a)) in enumerate(items):
        for label_b, (sb, layers_b) in items[i + 1:]:
            if sa.profile == sb.profile or sa.measured_in != sb.measured_in:
                continue
            if _without_profile(sa.config) != _without_profile(sb.config) or len(layers_a) != len(layers_b):
                continue
            if sa.profile != "default":  # default first
                (label_a, layers_a), (label_b, layers_b) = (label_b, layers_b), (label_a, layers_a)
            for la, lb in zip(layers_a, layers_b):
                measured = la.read > 0 and lb.read > 0
                out.append(change_text(la.driver, label_a, label_b, la, lb, measured))
    return out


def table(store, scenarios, labels) -> Section | None:
    """The report's "Algorithms per profile": per configuration and layer, the negotiated algorithms
    (declared ones where none were read, marked), and what each profile changed."""
    records = read(store)
    configs = configurations(scenarios, records, labels)
    if not configs:
        return None
    rows = []
    order = sorted(configs.items(), key=lambda kv: (kv[1][0].vpn, _without_profile(kv[1][0].config),
                                                    kv[1][0].profile != "default", kv[0]))
    for label, (sc, layers) in order:
        for i, layer in enumerate(layers):
            where = "" if len(layers) == 1 else ("outer" if i == 0 else "inner") + f" ({layer.driver})"
            rows.append({"vpn": label, "layer": where, "profile": layer.profile,
                         "cells": [layer.cell(k) for k in HEADINGS],
                         "source": ", ".join(sorted(layer.sources)) or "declared only",
                         "read": f"{layer.read}/{layer.total}" if layer.total else "-"})
    return Section(list(HEADINGS.values()), rows, profile_changes(dict(order)))


def explain_profiles(judgements, store) -> None:
    """Append to the verdict of each finding that sets one configuration's two profiles against each
    other what the profiles changed, channel by channel, and so which part of the seed's difference
    can remain here."""
    from .findings import _pick, _side_rows
    from .labels import for_scenarios

    rows = store.scenarios()
    records = None
    for j in judgements:
        f = j.finding
        if f.a is None or f.b is None:
            continue
        # one scenario a side (a side averaged over several compares no single pair of profiles)
        sa, sb = (one[0] if len(one) == 1 else None for one in _pick(_side_rows(f.a, rows), _side_rows(f.b, rows)))
        if sa is None or sb is None or sa.profile == sb.profile or sa.is_baseline:
            continue
        if _without_profile(sa.config) != _without_profile(sb.config):
            continue
        records = read(store) if records is None else records
        labels = for_scenarios(rows)
        both = (labels.of(sa), labels.of(sb))  # every repetition of the two, whatever the workload
        configs = configurations([r for r in rows if labels.of(r) in both], records, labels)
        pairs = list(zip(configs[both[0]][1], configs[both[1]][1]))
        texts = [change_text(la.driver, "A", "B", la, lb, la.read > 0 and lb.read > 0) for la, lb in pairs]
        differ = {k for la, lb in pairs for k in HEADINGS if la.effective().get(k) != lb.effective().get(k)}
        if not differ:
            remains = "none of the seed's difference can come from the algorithms here"
        elif differ & set(DATA):
            remains = ("the part of the seed's difference that the data channel's algorithms cause, paid per "
                       "packet, can remain here")
        else:
            remains = "none of a difference measured while data flows can come from the algorithms here"
        j.reason += (f"; what the profiles changed: {'; '.join(texts)}; {remains} (vpnlab's fips profile restricts "
                     "the algorithms; it does not switch to a FIPS-validated crypto module, as a seed's FIPS mode "
                     "may have, so what such a module costs is not reproduced)")
