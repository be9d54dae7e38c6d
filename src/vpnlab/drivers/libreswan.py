"""IPsec IKEv2 with libreswan (pluto), tunnel mode: the second IPsec implementation, so a
study can set it against strongSwan with the same ESP proposal.

Libreswan has no userspace data plane: it needs kernel ESP (xfrm), so on a host without
it the VM backend runs it. Debian's package conflicts with strongSwan's, so bootstrap
unpacks it privately (see unpacked.py) unless it is installed. Each pluto runs in its
gateway's node with its own configuration, secrets, NSS database and control socket in the
tunnel's folder there (everything goes through the node, so a real host serves as well); its
real updown script adds the routes (and, for remote access, the client's leased address).
"""

from __future__ import annotations

import re
import secrets as random_secrets
from pathlib import Path, PurePosixPath

from ..algorithms import AEAD, Algorithms, cipher_name, group_name, integrity_name, merged, read_logs, read_xfrm
from ..core.errors import CommandError, TunnelError
from ..testbed.contract import Node
from ..testbed.node import private_run
from ..tools import Tool, places
from .base import Driver, Implementation, Ports, Tunnel, TunnelEnv, wait_for
from .ipsec import (ESP_MODULES, ESP_TUNABLE, IKE_PORTS, IPCOMP_MODULES, IPCOMP_TUNABLE, NAT_T, UDP_HEADER,
                    IpsecOptions, configured_esp, esp_algorithms, esp_overhead, fips_problem)
from .pki import OPENSSL, make_pki

PLUTO = "/usr/libexec/ipsec/pluto"  # libreswan's IKE daemon, installed or unpacked

# vpnlab's ESP names (shared with strongSwan, so both compare like for like) -> libreswan's
ESP_SYNTAX = {
    "3des-md5": "3des-md5",
    "3des-sha1": "3des-sha1",
    "aes128-sha1": "aes128-sha1",
    "aes256-sha1": "aes256-sha1",
    "aes128-sha256": "aes128-sha2_256",
    "aes256-sha256": "aes256-sha2_256",
    "aes128gcm16": "aes_gcm128",
    "aes256gcm16": "aes_gcm256",
    "chacha20poly1305": "chacha20_poly1305",
}
# What two libreswan 4 peers with no proposals configured negotiate (checked by the tests).
DEFAULT_ESP = "aes256gcm16"
FIPS_IKE = "aes256-sha2_256-dh19"
CONN = "vpnlab"
LIBEXEC = str(Path(PLUTO).parent)  # where pluto looks for its helpers (addconn), built in
PLUTO_TOOL = Tool("pluto", "libreswan", ("pluto", "--version"), path=PLUTO, private=True)
FIRST_EXECUTABLE = 'for p in "$@"; do [ -x "$p" ] && { echo "$p"; exit 0; }; done; exit 1'


def _pluto_on(node: Node) -> str:
    """pluto's path on this node (installed, or unpacked by bootstrap.sh), or a TunnelError saying it is missing."""
    try:
        return node.run(["sh", "-c", FIRST_EXECUTABLE, "sh", *places(PLUTO_TOOL)], timeout=10).stdout.strip()
    except CommandError as exc:
        raise TunnelError(f"libreswan: no pluto in {node.role} (looked at {', '.join(places(PLUTO_TOOL))})") from exc


def _at_built_in_path(libexec: str, argv: list) -> list:
    """Wrap pluto so an unpacked libreswan is found where pluto was built to look: bind it over
    /usr/libexec/ipsec in pluto's own mount namespace (private_run gives it one)."""
    if libexec == LIBEXEC:
        return argv
    script = ('mount -t tmpfs vpnlab-libexec "${1%/*}" && mkdir "$1" && mount --bind "$2" "$1" && shift 2 '
              '&& exec "$@"')
    return ["sh", "-c", script, "sh", LIBEXEC, libexec, *argv]


class Libreswan(Driver):
    name = "libreswan"
    summary = "IPsec IKEv2 (libreswan pluto, kernel ESP): PSK or certificates"
    tools = (PLUTO_TOOL, Tool("certutil", "libnss3-tools"), Tool("pk12util", "libnss3-tools"), OPENSSL)
    # the privately unpacked package comes without its dependencies: its libraries
    packages = ("libnss3-tools", "libldns3", "libevent-core-2.1-7", "libevent-pthreads-2.1-7", "libcurl3-nss",
                "libunbound8", "libcap-ng0")
    guest_modules = (*ESP_MODULES, *IPCOMP_MODULES)
    Options = IpsecOptions
    tunables = (ESP_TUNABLE, IPCOMP_TUNABLE)

    def check(self, options, profile):
        return fips_problem(options, profile)

    def settings(self, options, profile):
        """The lines of the conn section of ipsec.conf."""
        lines = [f"# {self.describe(options, profile)}: in ipsec.conf's conn section"]
        lines += [f"esp={ESP_SYNTAX[esp]}"] if (esp := configured_esp(options, profile)) else []
        lines += ["compress=yes"] if options.compression == "on" else []
        lines += [f"dpddelay={options.dpd_delay_s}"] if options.dpd_delay_s else []
        return "\n".join(lines) + "\n"

    def from_settings(self, text):
        """The options of a fragment as `settings` writes it."""
        ours = {theirs: mine for mine, theirs in ESP_SYNTAX.items()}
        found = {}
        for line in text.splitlines():
            key, _, value = line.split("#", 1)[0].partition("=")
            if key.strip() == "esp":
                found["esp"] = ours.get(value.strip(), value.strip())
            elif key.strip() == "compress":
                found["compression"] = "on" if value.strip() == "yes" else "off"
            elif key.strip() == "dpddelay":
                found["dpd_delay_s"] = value.strip()
        return IpsecOptions.model_validate(found)

    def describe(self, options, profile):
        parts = ["libreswan", configured_esp(options, profile) or "default", options.auth]
        if options.compression == "on":
            parts.append("ipcomp")
        if options.mtu:
            parts.append(f"mtu-{options.mtu}")
        if options.dpd_delay_s:
            parts.append(f"dpd-{options.dpd_delay_s}s")
        if profile != "default":
            parts.append(profile)
        return " ".join(parts)

    def implementations(self, options):
        return [Implementation("kernel", features=("esp",), tools=("pluto", "certutil"))]

    def ports(self, options):
        return Ports(gateway=IKE_PORTS, client=IKE_PORTS)  # pluto's, at both ends

    def esp_proposal(self, options, profile) -> str:
        return configured_esp(options, profile) or DEFAULT_ESP

    def overhead(self, options, profile, implementation, inner_len):
        # The same with IPComp: an incompressible packet (the proof's random probe) is sent as it is,
        # without an IPComp header (RFC 3173, 2.2); compressible ones shrink instead.
        return esp_overhead(self.esp_proposal(options, profile), options.udp_encap, inner_len)

    def nat_traversal_overhead(self, options, implementation):
        return 0 if options.udp_encap else UDP_HEADER

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        mtu = env.mtu(options, None)  # None: the path's, as kernel ESP finds it
        tunnel = Tunnel(env, NAT_T if options.udp_encap else ("esp", None), mtu=mtu,
                        control=list(self.ports(options).gateway))  # IKE
        remote_access = not left.subnets
        pki = make_pki(right.underlay_ip) if options.auth == "cert" else None
        psk = random_secrets.token_urlsafe(32)
        esp = configured_esp(options, profile)
        homes = []
        for site, peer, is_client in ((right, left, False), (left, right, True)):
            conf = self._conf(site, peer, is_client, remote_access, esp, profile, options.udp_encap, pki is not None,
                              options.compression == "on", mtu, options.dpd_delay_s)
            secrets = "" if pki else f'@client@vpnlab @server@vpnlab : PSK "{psk}"\n'
            homes.append(self._start(site, conf, secrets, pki, "client" if is_client else "server", env, tunnel))

        def answering(site, home, libexec) -> bool:
            try:
                return site.node.run([f"{libexec}/whack", "--ctlsocket", f"{home}/run/pluto.ctl", "--status"],
                                     check=False, timeout=10).returncode == 0
            except CommandError:  # no answer yet
                return False

        wait_for(lambda: all(answering(*h) for h in homes), 20, "pluto's control sockets", tunnel)
        for site, home, libexec in homes:
            self._control(site, [f"{libexec}/addconn", "--config", f"{home}/ipsec.conf",
                                 "--ctlsocket", f"{home}/run/pluto.ctl", CONN], tunnel)
        client, home, libexec = homes[-1]
        self._control(client, [f"{libexec}/whack", "--ctlsocket", f"{home}/run/pluto.ctl",
                               "--name", CONN, "--initiate"], tunnel, timeout=40)
        if remote_access:
            # The client's updown script routes the gateway's prefix from the leased address; the
            # testbed's own routes to the links behind the gateway are more specific, so they get
            # it too. The gateway has no default route to send the replies to the lease along.
            # (strongSwan needs neither: it routes from a table of its own, looked up first.)
            limit = f" mtu {mtu}" if mtu else ""
            left.node.ip(*(f"route replace {net} via {right.underlay_ip} src {left.tunnel_ip}{limit}"
                           for net in right.subnets))
            right.node.ip(f"route replace {left.tunnel_ip} via {left.underlay_ip}")
        return tunnel

    @staticmethod
    def _start(site, conf: str, secrets: str, pki, end: str, env: TunnelEnv, tunnel: Tunnel) -> tuple:
        """One end's pluto, its files in the tunnel's folder on its node: the configuration, the
        secrets, an NSS database (with this end's certificate and the CA when `pki` is given);
        returns (site, that folder, the folder of pluto's helpers there)."""
        role = site.node.role
        home = str(PurePosixPath(env.write(site.node, f"{role}/ipsec.conf", conf)).parent)
        secrets_file = env.write(site.node, f"{role}/ipsec.secrets", secrets)
        site.node.run(["mkdir", "-m", "700", f"{home}/nss", f"{home}/run"])
        installed = pki.install(end, lambda name, data: env.write(site.node, f"{role}/{name}", data)) if pki else None
        Libreswan._nss(site, home, installed)
        pluto = _pluto_on(site.node)
        libexec = str(PurePosixPath(pluto).parent)  # whack, addconn and the updown script sit next to pluto
        log = env.log(f"pluto-{role}")
        # No --config: pluto would run addconn from its built-in path to read "config setup".
        argv = [pluto, "--nofork", "--stderrlog", "--rundir", f"{home}/run", "--secretsfile", secrets_file,
                "--ipsecdir", home, "--nssdir", f"{home}/nss", "--no-dnssec"]
        proc = site.node.spawn(private_run(_at_built_in_path(libexec, argv), keep=site.node.scratch()), log,
                               what="pluto")
        tunnel.processes.append((site.node, proc, log))
        return site, home, libexec

    # -- configuration ---------------------------------------------------------
    @staticmethod
    def _conf(site, peer, is_client, remote_access, esp, profile, encap, cert, compress=False, mtu=None,
              dpd_delay_s=None) -> str:
        me, them = ("client", "server") if is_client else ("server", "client")
        # the gateway answers the client from wherever it comes (behind a NAT from the NAT's address), as
        # a road-warrior gateway does; the IDs, not the addresses, say who it is
        right = peer.underlay_ip if is_client else "%any"
        lines = [f"conn {CONN}", "  ikev2=yes", "  type=tunnel", f"  left={site.underlay_ip}",
                 f"  right={right}", "  auto=add",
                 f'  leftupdown="{LIBEXEC}/_updown.xfrm"']  # the real script, without the `ipsec` front end
        if cert:
            lines += ["  authby=ecdsa", "  leftcert=own", "  leftid=%fromcert", f'  rightid="CN=vpnlab-{them}"',
                      "  rightca=%same"]
        else:
            lines += ["  authby=secret", f"  leftid=@{me}@vpnlab", f"  rightid=@{them}@vpnlab"]
        if remote_access:  # the client asks for an address (IKEv2 configuration payload)
            if is_client:
                lines += ["  leftmodecfgclient=yes", f"  rightsubnet={peer.prefix}", "  narrowing=yes"]
            else:
                lines += [f"  leftsubnet={site.prefix}", f"  rightaddresspool={peer.tunnel_ip}-{peer.tunnel_ip}",
                          "  narrowing=yes"]
        else:
            lines += [f"  leftsubnet={site.prefix}", f"  rightsubnet={peer.prefix}"]
        if profile == "fips":
            lines.append(f"  ike={FIPS_IKE}")
        if esp:
            lines.append(f"  esp={ESP_SYNTAX[esp]}")
        if encap:
            lines.append("  encapsulation=yes")
        if compress:
            lines.append("  compress=yes")
        if mtu:  # the updown script puts it on the routes to the remote subnet
            lines.append(f"  mtu={mtu}")
        if dpd_delay_s:  # libreswan 4.x's IKEv2 arms no NAT-T keepalive (fixed in 5.1): only this refreshes a NAT
            lines.append(f"  dpddelay={dpd_delay_s}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _nss(site, home: str, installed) -> None:
        """An empty NSS database (libreswan keeps keys there), with this end's certificate
        and the CA it trusts when certificates are used (`installed`: their files on the node, pki.py)."""
        nss = f"sql:{home}/nss"
        site.node.run(["certutil", "-N", "-d", nss, "--empty-password"])
        if not installed:
            return
        bundle, password = f"{home}/own.p12", random_secrets.token_hex(16)
        site.node.run(["openssl", "pkcs12", "-export", "-in", installed.cert, "-inkey", installed.key, "-name", "own",
                       "-out", bundle, "-passout", f"pass:{password}"])
        site.node.run(["pk12util", "-i", bundle, "-d", nss, "-W", password])
        site.node.remove_file(bundle)
        site.node.run(["certutil", "-A", "-d", nss, "-n", "ca", "-t", "CT,,", "-a", "-i", installed.ca])

    @staticmethod
    def _control(site, argv: list, tunnel: Tunnel, timeout: float = 20) -> None:
        try:
            site.node.run(argv, timeout=timeout)
        except CommandError as exc:
            raise TunnelError(f"libreswan: {PurePosixPath(argv[0]).name} failed in {site.node.role}: {exc}\n{tunnel.logs()}") from exc

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """IKEv2: libreswan 4.10's default proposal between two libreswan peers (AES-256-GCM with
        PRF-HMAC-SHA512 and MODP-2048), under fips FIPS_IKE (AES-256-CBC, HMAC-SHA256-128, P-256); ESP: the
        configured proposal or libreswan's default (AES-256-GCM). Certificates sign with SHA-512."""
        cipher, integrity = esp_algorithms(self.esp_proposal(options, profile))
        data = "ESP in UDP" if options.udp_encap else "ESP"
        if options.compression == "on":
            data += " + IPComp (DEFLATE)"
        fips = profile == "fips"
        return Algorithms(control="IKEv2", key_exchange="ECDH P-256" if fips else "MODP-2048",
                          authentication="PSK" if options.auth == "psk" else "ECDSA P-256 SHA-512",
                          control_cipher="AES-256-CBC HMAC-SHA256-128" if fips else "AES-256-GCM", data=data,
                          data_cipher=cipher, data_integrity=integrity, source="libreswan driver")

    def negotiated(self, tunnel, options, profile):
        """The kernel's ESP state, then pluto's log (its established IKE and Child SAs)."""
        return merged(read_xfrm(tunnel), read_logs(tunnel, "pluto", parse_log))


def parse_log(text: str) -> Algorithms | None:
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
