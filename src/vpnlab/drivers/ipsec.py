"""What the IPsec drivers share (strongSwan, libreswan, L2TP/IPsec): the ESP proposals by one
set of names, their overhead, the FIPS rule, IPComp, and the programs and kernel modules ESP needs.

IPComp (RFC 3173, DEFLATE) compresses each inner packet before ESP encrypts it. A packet that
does not shrink is sent as it is, without the IPComp header (the RFC's non-expansion policy), so
incompressible traffic costs what plain ESP costs. Under the fips profile IPComp is allowed:
DEFLATE is not a cryptographic algorithm, so FIPS 140 neither approves nor forbids it, and the
profile still fixes the ESP and IKE algorithms. (Compressing before encrypting lets packet sizes
tell something about the contents, as with TLS compression; a study of security should say so.)"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ..algorithms import AEAD, fips_approved
from ..tools import Tool
from .base import Options, Tunable

CHARON = "/usr/lib/ipsec/charon"
# strongSwan's daemon and its control tool; the plugin packages carry no program of their own
# (kernel-libipsec, the userspace ESP data plane, is in libcharon-extra-plugins).
IPSEC_TOOLS = (Tool("charon", "strongswan-charon", path=CHARON),
               Tool("swanctl", "strongswan-swanctl", ("swanctl", "--version")))
IPSEC_PACKAGES = ("libcharon-extra-plugins", "libstrongswan-standard-plugins", "libstrongswan-extra-plugins")
# What charon and pluto bind at every end: IKE, and NAT-T's port (IKE, and ESP in UDP, RFC 3948).
NAT_T = ("udp", 4500)
UDP_HEADER = 8  # what ESP in UDP (NAT-T, RFC 3948) adds to each packet
IKE_PORTS = (("udp", 500), NAT_T)
# What kernel ESP needs in the VM guest (no udev there): xfrm, ESP and its accelerated ciphers.
ESP_MODULES = ("esp4", "xfrm_user", "xfrm_interface", "af_key", "authenc", "authencesn", "gcm", "ccm", "seqiv",
               "echainiv", "cbc", "ecb", "aesni_intel", "ghash_clmulni_intel", "sha1_ssse3", "sha256_ssse3",
               "sha512_ssse3", "des3_ede_x86_64", "des_generic", "sha1_generic", "md5", "chacha20poly1305",
               "chacha_x86_64", "poly1305_x86_64")
# What IPComp needs in the VM guest: the transform, DEFLATE, and the IPIP state that receives
# tunnel-mode packets IPComp left uncompressed.
IPCOMP_MODULES = ("xfrm_ipcomp", "ipcomp", "deflate", "tunnel4", "xfrm4_tunnel")

# ESP proposal -> (IV bytes, block/alignment bytes, ICV bytes)
ESP = {
    "3des-md5": (8, 8, 12),
    "3des-sha1": (8, 8, 12),
    "aes128-sha1": (16, 16, 12),
    "aes256-sha1": (16, 16, 12),
    "aes128-sha256": (16, 16, 16),
    "aes256-sha256": (16, 16, 16),
    "aes128gcm16": (8, 4, 16),
    "aes256gcm16": (8, 4, 16),
    "chacha20poly1305": (8, 4, 16),
}
ESP_ALGORITHMS = {  # ESP proposal -> (cipher, integrity), in algorithms.py's vocabulary
    "3des-md5": ("3DES-CBC", "HMAC-MD5-96"), "3des-sha1": ("3DES-CBC", "HMAC-SHA1-96"),
    "aes128-sha1": ("AES-128-CBC", "HMAC-SHA1-96"), "aes256-sha1": ("AES-256-CBC", "HMAC-SHA1-96"),
    "aes128-sha256": ("AES-128-CBC", "HMAC-SHA256-128"), "aes256-sha256": ("AES-256-CBC", "HMAC-SHA256-128"),
    "aes128gcm16": ("AES-128-GCM", AEAD), "aes256gcm16": ("AES-256-GCM", AEAD),
    "chacha20poly1305": ("ChaCha20-Poly1305", AEAD),
}


def esp_algorithms(proposal: str) -> tuple[str, str]:
    return ESP_ALGORITHMS.get(proposal, (proposal, ""))


FIPS_ESP = {proposal for proposal in ESP if all(map(fips_approved, esp_algorithms(proposal)))}
FIPS_DEFAULT_ESP = "aes256gcm16"
WEAK_ESP = {"3des-md5", "3des-sha1"}  # 64-bit blocks (Sweet32), MD5
ESP_NAMES = Literal["3des-md5", "3des-sha1", "aes128-sha1", "aes256-sha1", "aes128-sha256", "aes256-sha256",
                    "aes128gcm16", "aes256gcm16", "chacha20poly1305"]


class IpsecOptions(Options):
    """What both IPsec drivers (strongSwan, libreswan) take, with the same names."""

    omit_at_default = ("compression", "mtu", "dpd_delay_s")

    esp: ESP_NAMES | None = Field(None, description="ESP proposal (default: the implementation's own)")
    auth: Literal["psk", "cert"] = "psk"
    udp_encap: bool = Field(False, description="force ESP-in-UDP (NAT-T) with kernel ESP")
    compression: Literal["off", "on"] = Field("off", description="IPComp (DEFLATE) before ESP; needs kernel ESP")
    mtu: int | None = Field(None, ge=576, le=9000, description="MTU of the routes into the tunnel (by hand; "
                            "default: the implementation's, or for a tunnel inside another what fits in it)")
    dpd_delay_s: int | None = Field(None, ge=1, le=3600, description=(
        "dead-peer detection: an IKE probe after this many seconds without traffic from the peer (default: off, "
        "both implementations' default); behind a NAT each probe also refreshes the mapping, and with "
        "strongSwan's `mobike: false` moves the gateway to the NAT's new address"))

    @field_validator("esp", mode="before")
    @classmethod
    def lower_case(cls, value):
        return value.lower() if isinstance(value, str) else value

    @field_validator("compression", mode="before")
    @classmethod
    def yaml_on_off(cls, value):
        return ("on" if value else "off") if isinstance(value, bool) else value  # YAML 1.1: bare on/off


def configured_esp(options: IpsecOptions, profile: str) -> str | None:
    """The ESP proposal to configure: the study's, else AES-256-GCM under the fips profile, else
    none (the implementation proposes its own)."""
    return options.esp or (None if profile == "default" else FIPS_DEFAULT_ESP)


def fips_problem(options: IpsecOptions, profile: str) -> str | None:
    if profile == "fips" and options.esp and options.esp not in FIPS_ESP:
        return f"options.esp: {options.esp} is not FIPS 140-approved (3DES, MD5 and ChaCha20 are not)"
    return None


def esp_overhead(esp: str, udp_encap: bool, inner_len: int) -> int:
    """Bytes tunnel-mode ESP adds to a packet of `inner_len` bytes."""
    iv, block, icv = ESP[esp]
    encrypted = -(-(inner_len + 2) // block) * block  # payload + pad length + next header, padded
    return 20 + (8 if udp_encap else 0) + 8 + iv + encrypted + icv - inner_len


# What `vpnlab tune` varies in both IPsec drivers. IPComp compresses before ESP encrypts, so packet
# sizes betray the contents as with any compression under encryption: weak, as OpenVPN's is.
ESP_TUNABLE = Tunable("esp", ("aes128gcm16", "aes256gcm16", "chacha20poly1305", "aes256-sha256", "3des-sha1"),
                      {esp: "fips" if esp in FIPS_ESP else "weak" if esp in WEAK_ESP else "strong" for esp in ESP})
IPCOMP_TUNABLE = Tunable("compression", ("off", "on"), {"on": "weak"})
