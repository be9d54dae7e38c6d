"""IPsec IKEv2 with strongSwan (charon + swanctl), tunnel mode.

The data plane is kernel ESP where the kernel has it, otherwise strongSwan's
userspace ESP (kernel-libipsec, over a TUN device, always UDP-encapsulated).
IPComp needs kernel ESP: kernel-libipsec cannot allocate an IPComp CPI (its get_cpi answers
NOT_SUPPORTED), and charon then logs "unable to allocate a CPI from kernel, IPComp disabled"
and carries on uncompressed, so `compression: on` never runs on libipsec.
Remote access gives the client a virtual IP from a pool; site-to-site joins
the two LANs. Each charon runs on its gateway's node (a namespace here, or a real host) with a
private /run (its pid file is fixed there) and its own vici socket; its configuration, keys and
certificates are written there (env.write) and swanctl runs there, so nothing is local but its log.
"""

from __future__ import annotations

import json
import re
import secrets as random_secrets
from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field

from ..algorithms import AEAD, Algorithms, cipher_and_integrity, group_name, merged, read_logs, read_xfrm
from ..core.errors import CommandError, TunnelError
from ..testbed.node import private_run
from .base import Driver, Implementation, Ports, Tunable, Tunnel, TunnelEnv, wait_for
from .ipsec import (CHARON, ESP_MODULES, ESP_TUNABLE, IKE_PORTS, IPCOMP_MODULES, IPCOMP_TUNABLE, IPSEC_PACKAGES,
                    IPSEC_TOOLS, NAT_T, UDP_HEADER, IpsecOptions, configured_esp, esp_algorithms, esp_overhead,
                    fips_problem)
from .pki import make_pki

# What two strongSwan 5.9 peers with no proposals configured negotiate (checked by the tests).
DEFAULT_ESP = "aes128gcm16"
# kernel-libipsec's TUN device: strongSwan 5.9 fixes its MTU at 1400 and reads each packet into a
# buffer of that size, so it can be lowered (with `ip link`) but not raised.
LIBIPSEC_MTU = 1400
FIPS_IKE = "aes256-sha256-ecp256"

PLUGINS = ("random nonce openssl aes sha1 sha2 md5 hmac gcm chapoly curve25519 kdf pem pkcs1 pkcs8 x509 "
           "pubkey revocation constraints socket-default vici updown kernel-netlink")
# swanctl's own: without a list it loads every plugin installed (curl, ldap, pkcs11, test-vectors and
# their libraries), which took 34 s on its first start in a VM under emulation, past its time limit.
SWANCTL_PLUGINS = " ".join(p for p in PLUGINS.split() if p not in ("socket-default", "vici", "updown",
                                                                   "kernel-netlink"))


class StrongSwanOptions(IpsecOptions):
    omit_at_default = (*IpsecOptions.omit_at_default, "mobike")

    implementation: Literal["auto", "kernel", "libipsec"] = "auto"  # libipsec always uses ESP-in-UDP
    mobike: bool = Field(True, description=(
        "MOBIKE (RFC 4555, strongSwan's default): the gateway moves the SAs only when the client says its "
        "address changed, which a NAT's new outer address never makes it say; off, any authenticated IKE "
        "message from a new address moves them (with `dpd_delay_s`, the first probe after the move)"))


class StrongSwan(Driver):
    name = "strongswan"
    summary = "IPsec IKEv2 (strongSwan): kernel ESP or userspace libipsec, PSK or certificates"
    rekeys = "swanctl --rekey --child on the client: a new CHILD_SA (new ESP keys and SPIs)"
    tools = IPSEC_TOOLS
    packages = IPSEC_PACKAGES
    guest_modules = (*ESP_MODULES, *IPCOMP_MODULES)
    Options = StrongSwanOptions
    tunables = (ESP_TUNABLE, IPCOMP_TUNABLE, Tunable("implementation", ("kernel", "libipsec")))
    # No mesh yet: its hub would need one charon with a connection per spoke, while the two-site `up` starts
    # a charon per tunnel, and two charons in the hub's namespace collide on UDP 500 and 4500.
    mesh = None

    def check(self, options, profile):
        if options.implementation == "libipsec":
            if options.compression == "on":
                return ("options.compression: IPComp needs kernel ESP: strongSwan's userspace ESP (kernel-libipsec) "
                        "cannot allocate an IPComp CPI and would send everything uncompressed; use implementation "
                        "auto or kernel (the VM backend has kernel ESP)")
            if options.mtu and options.mtu > LIBIPSEC_MTU:
                return f"options.mtu: kernel-libipsec's TUN device carries at most {LIBIPSEC_MTU} bytes per packet"
        return fips_problem(options, profile)

    def describe(self, options, profile):
        parts = ["strongswan", configured_esp(options, profile) or "default", options.auth]
        if options.compression == "on":
            parts.append("ipcomp")
        if options.mtu:
            parts.append(f"mtu-{options.mtu}")
        if options.dpd_delay_s:
            parts.append(f"dpd-{options.dpd_delay_s}s")
        if not options.mobike:
            parts.append("no-mobike")
        if options.implementation != "auto":
            parts.append(options.implementation)
        if profile != "default":
            parts.append(profile)
        return " ".join(parts)

    def settings(self, options, profile):
        """The CHILD_SA's lines of swanctl.conf and, for userspace ESP, strongswan.conf's plugin line."""
        lines = [f"# {self.describe(options, profile)}", "# swanctl.conf, in connections.<conn>.children.<child>:"]
        lines += [f"esp_proposals = {esp}"] if (esp := configured_esp(options, profile)) else []
        lines += ["ipcomp = yes"] if options.compression == "on" else []
        connection = ([f"dpd_delay = {options.dpd_delay_s}s"] if options.dpd_delay_s else []) + (
            [] if options.mobike else ["mobike = no"])
        if connection:
            lines += ["# swanctl.conf, in connections.<conn>:", *connection]
        if options.implementation == "libipsec":
            lines += ["# strongswan.conf, in charon.plugins:", "kernel-libipsec { load = yes }"]
        elif options.implementation == "kernel":
            lines += ["# ESP in the kernel: strongswan.conf's default plugin, kernel-netlink"]
        return "\n".join(lines) + "\n"

    def from_settings(self, text):
        """The options of a fragment as `settings` writes it."""
        found = {}
        for line in text.splitlines():
            key, _, value = line.split("#", 1)[0].partition("=")
            key, value = key.strip(), value.strip()
            if key == "esp_proposals":
                found["esp"] = value
            elif key == "ipcomp":
                found["compression"] = "on" if value == "yes" else "off"
            elif key == "dpd_delay":
                found["dpd_delay_s"] = value.removesuffix("s")
            elif key == "mobike":
                found["mobike"] = value != "no"
            elif key.startswith("kernel-libipsec"):
                found["implementation"] = "libipsec"
            elif "kernel-netlink" in line:
                found["implementation"] = "kernel"
        return StrongSwanOptions.model_validate(found)

    def implementations(self, options):
        kernel = Implementation("kernel", features=("esp",), tools=("charon", "swanctl"))
        if options.compression == "on":  # IPComp: kernel ESP only (see the module's docstring)
            return [kernel]
        return [kernel, Implementation("libipsec", features=("tun",), tools=("charon", "swanctl"))]

    def ports(self, options):
        return Ports(gateway=IKE_PORTS, client=IKE_PORTS)  # charon's socket-default, at both ends

    def esp_proposal(self, options, profile) -> str:
        return configured_esp(options, profile) or DEFAULT_ESP

    def overhead(self, options, profile, implementation, inner_len):
        # The same with IPComp: an incompressible packet (the proof's random probe) is sent as it is,
        # without an IPComp header (RFC 3173, 2.2); compressible ones shrink instead.
        return esp_overhead(self.esp_proposal(options, profile), implementation == "libipsec" or options.udp_encap,
                            inner_len)

    def nat_traversal_overhead(self, options, implementation):
        return 0 if implementation == "libipsec" or options.udp_encap else UDP_HEADER

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        libipsec = env.implementation == "libipsec"
        encap = libipsec or options.udp_encap
        mtu = env.mtu(options, None)  # None: libipsec's TUN keeps its 1400, kernel ESP follows the path
        if libipsec and mtu and mtu > LIBIPSEC_MTU:
            if options.mtu:
                raise TunnelError(f"strongSwan: options.mtu: kernel-libipsec's TUN device carries at most "
                                  f"{LIBIPSEC_MTU} bytes per packet, not {mtu}")
            mtu = LIBIPSEC_MTU  # an automatic MTU above it: smaller packets still fit
        tunnel = Tunnel(env, NAT_T if encap else ("esp", None), mtu=mtu or (LIBIPSEC_MTU if libipsec else None),
                        control=list(self.ports(options).gateway))  # IKE
        remote_access = not left.subnets
        pki = make_pki(right.underlay_ip) if options.auth == "cert" else None
        psk = "0x" + random_secrets.token_hex(32)
        esp = configured_esp(options, profile)
        homes = []
        for site, peer, is_client in ((right, left, False), (left, right, True)):
            home = site.node.role  # swanctl's directory, in the tunnel's folder there: swanctl.conf, its credentials
            if pki:  # in swanctl's folders: its own certificate, the CA's, its own key (never the peer's)
                cert, key = pki.own("client" if is_client else "server")
                for name, content in (("x509/own.pem", cert), ("x509ca/ca.pem", pki.ca), ("private/own.pem", key)):
                    env.write(site.node, f"{home}/{name}", content)
            if remote_access:  # the client's side is its virtual IP
                local_ts, remote_ts = (("dynamic", peer.prefix) if is_client else (site.prefix, "dynamic"))
            else:
                local_ts, remote_ts = site.prefix, peer.prefix
            conf = env.write(site.node, f"{home}/swanctl.conf", self._swanctl_conf(
                site, peer, is_client, remote_access, local_ts, remote_ts, esp, profile, encap,
                psk if not pki else None, options.compression == "on", options.dpd_delay_s, options.mobike))
            homes.append((site, str(PurePosixPath(conf).parent)))
        start_charons(homes, env, tunnel, libipsec, child="net", mtu=mtu)
        tunnel.rekey = lambda: self._swanctl(*homes[-1], ["--rekey", "--child", "net"], tunnel)
        return tunnel

    # -- configuration ---------------------------------------------------------
    @staticmethod
    def _strongswan_conf(vici: str, libipsec: bool, mtu: int | None = None) -> str:
        # The first kernel interface loaded handles the SAs: libipsec must come before netlink.
        plugins = ("kernel-libipsec " if libipsec else "") + PLUGINS
        # kernel-netlink puts this MTU on the routes it installs (for kernel ESP towards the remote
        # subnets, for libipsec into its TUN device, whose own MTU start_charons sets).
        netlink_mtu = f"\n    kernel-netlink {{\n      mtu = {mtu}\n    }}" if mtu else ""
        return f"""swanctl {{
  load = {SWANCTL_PLUGINS}
}}
charon {{
  load_modular = no
  load = {plugins}
  install_routes = yes
  retransmit_tries = 3
  filelog {{
    stderr {{
      default = 1
      ike = 1
      time_format = %T
    }}
  }}
  plugins {{
    vici {{
      socket = unix://{vici}
    }}
    kernel-libipsec {{
      allow_peer_ts = yes
    }}{netlink_mtu}
  }}
}}
"""

    @staticmethod
    def _swanctl_conf(site, peer, is_client, remote_access, local_ts, remote_ts, esp, profile, encap, psk,
                      ipcomp: bool = False, dpd_delay_s: int | None = None, mobike: bool = True) -> str:
        my_id, peer_id = ("client", "server") if is_client else ("server", "client")
        # the gateway answers the client from wherever it comes: behind a NAT (a link's `nat`) from the NAT's
        # address, after an address change from its new one, as a road-warrior gateway does
        remote = peer.underlay_ip if is_client else "%any"
        lines = ["connections {", "  net {", "    version = 2",
                 f"    local_addrs = {site.underlay_ip}", f"    remote_addrs = {remote}"]
        if profile == "fips":
            lines.append(f"    proposals = {FIPS_IKE}")
        if encap:
            lines.append("    encap = yes")
        if dpd_delay_s:
            lines.append(f"    dpd_delay = {dpd_delay_s}s")
        if not mobike:
            lines.append("    mobike = no")
        if remote_access:
            lines.append("    vips = 0.0.0.0" if is_client else "    pools = clients")
        if psk:
            lines += ["    local {", "      auth = psk", f"      id = {my_id}@vpnlab", "    }",
                      "    remote {", "      auth = psk", f"      id = {peer_id}@vpnlab", "    }"]
        else:  # certificates from this site's x509/, x509ca/ and private/ folders
            lines += ["    local {", "      auth = pubkey", "      certs = own.pem", "    }",
                      "    remote {", "      auth = pubkey", "    }"]
        lines += ["    children {", "      net {", f"        local_ts = {local_ts}", f"        remote_ts = {remote_ts}",
                  "        mode = tunnel"]
        if esp:
            lines.append(f"        esp_proposals = {esp}")
        if ipcomp:
            lines.append("        ipcomp = yes")
        lines += ["      }", "    }", "  }", "}"]
        if remote_access and not is_client:
            lines += ["pools {", "  clients {", f"    addrs = {peer.tunnel_ip}/32", "  }", "}"]
        if psk:
            lines += ["secrets {", "  ike-vpnlab {", "    id-1 = client@vpnlab", "    id-2 = server@vpnlab",
                      f"    secret = {psk}", "  }", "}"]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _swanctl(site, home: str, args: list, tunnel: Tunnel) -> str:
        argv = ["swanctl", *args, "--uri", f"unix://{home}/charon.vici"]
        try:
            return site.node.run(argv, timeout=40, env={"SWANCTL_DIR": home,
                                                         "STRONGSWAN_CONF": f"{home}/strongswan.conf"}).stdout
        except CommandError as exc:
            raise TunnelError(f"strongSwan: swanctl {args[0]} failed in {site.node.role}: {exc}\n{tunnel.logs()}") from exc

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """IKEv2: strongSwan 5.9's default proposal between two strongSwan peers (AES-128-CBC,
        HMAC-SHA256-128, X25519), under fips FIPS_IKE; ESP: the configured proposal or the default one."""
        cipher, integrity = esp_algorithms(self.esp_proposal(options, profile))
        data = "ESP in UDP" if implementation == "libipsec" or options.udp_encap else "ESP"
        if options.compression == "on":
            data += " + IPComp (DEFLATE)"
        fips = profile == "fips"
        return Algorithms(control="IKEv2", key_exchange="ECDH P-256" if fips else "X25519",
                          authentication="PSK" if options.auth == "psk" else "ECDSA SHA-256",
                          control_cipher=f"AES-{256 if fips else 128}-CBC HMAC-SHA256-128", data=data,
                          data_cipher=cipher, data_integrity=integrity, source="strongswan driver")

    def negotiated(self, tunnel, options, profile):
        """charon's log ('selected proposal: IKE:...', 'ESP:...'); with kernel ESP also the kernel's state."""
        kernel = read_xfrm(tunnel) if tunnel.env.implementation == "kernel" else None
        return merged(kernel, read_logs(tunnel, "charon", parse_charon_log))


def start_charons(homes: list, env: TunnelEnv, tunnel: Tunnel, libipsec: bool, child: str,
                  mtu: int | None = None) -> None:
    """One charon per (site, home), gateway first, `home` a folder of this tunnel's on the site's node
    (under env.folder) that holds its swanctl.conf: start them, load their configuration, and have the
    last one (the client) initiate `child`."""
    for site, home in homes:
        name = PurePosixPath(home).relative_to(env.folder(site.node))
        conf = env.write(site.node, f"{name}/strongswan.conf",
                         StrongSwan._strongswan_conf(f"{home}/charon.vici", libipsec, mtu))
        log = env.log(f"charon-{site.node.role}")
        # its fixed pid file goes to a private /run; the tunnel's folder (under the node's scratch) stays
        proc = site.node.spawn(private_run([CHARON], keep=site.node.scratch()), log,
                               env={"STRONGSWAN_CONF": conf}, what="charon")
        tunnel.processes.append((site.node, proc, log))

    wait_for(lambda: all(site.node.accepts(f"{home}/charon.vici") for site, home in homes), 15,
             "charon's vici sockets", tunnel)
    if libipsec and mtu:  # the plugin created its TUN device as charon started
        for site, _ in homes:
            names = [link["ifname"] for link in json.loads(site.node.run(["ip", "-j", "link", "show"]).stdout)]
            site.node.ip(*(f"link set dev {name} mtu {mtu}" for name in names if re.fullmatch(r"ipsec\d+", name)))
    for site, home in homes:
        StrongSwan._swanctl(site, home, ["--load-all"], tunnel)
    StrongSwan._swanctl(*homes[-1], ["--initiate", "--child", child, "--timeout", "20"], tunnel)


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
        values["authentication"] = charon_auth(auth[-1])
    elif re.search(r"ID_PROT response \d+ \[ ID HASH", text) and re.search(r"IKE_SA \S+ established", text):
        values["authentication"] = "PSK"  # IKEv1 main mode: a HASH, not a signature, authenticated the peer
    if esp:
        values["data_cipher"], values["data_integrity"] = cipher_and_integrity(esp[-1].split("/"))
    return Algorithms(**values, source="charon log")


def charon_auth(text: str) -> str:
    """'pre-shared key' -> PSK; 'ECDSA_WITH_SHA256_DER' (an IKEv2 signature) -> 'ECDSA SHA-256';
    'ECDSA-256 signature' -> 'ECDSA P-256'."""
    if "pre-shared key" in text:
        return "PSK"
    m = re.search(r"(ECDSA|RSA\w*?)_WITH_SHA(\d+)", text, re.I)
    if m:
        return f"{m.group(1).upper()} SHA-{m.group(2)}"
    m = re.search(r"ECDSA[-_](\d+)", text, re.I)
    return f"ECDSA P-{m.group(1)}" if m else text
