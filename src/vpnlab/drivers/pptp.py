"""PPTP: pptpd on the gateway, pptp-linux + pppd on the client; MS-CHAPv2 and MPPE (RC4).

Needs PPP in the kernel (and MPPE): on a host without it the VM backend runs it. GRE is done
in userspace by pptp and pptpd; the control connection is TCP 1723.

Each userspace GRE end holds the packets that follow a lost one for 0.3 s, waiting for the
missing one to arrive out of order. The client's hold is turned off (`--nobuffer`); pptpd's
cannot be (a constant in PoPToP 1.4.0, released only when the next GRE packet arrives
after 0.3 s), so over a link that drops, TCP towards the gateway stalls on every loss: that
direction measures pptpd, not what PPTP allows.
"""

from __future__ import annotations

from typing import Literal

from ..algorithms import Algorithms
from ..core.flags import declare as declare_flag
from ..tools import Tool
from .base import Driver, Implementation, Options, Ports, Tunnel, TunnelEnv, route_into
from .ppp import (CLIENT_NAME, COMMON, MTU, PPP_MODULES, PPPD, SERVER_NAME, auth_options, negotiated_ppp, private_etc,
                  wait_for_link, write_etc)

# A sample's own evidence that the link dropped packets (each > 0: something was lost on the way).
LOSS_EVIDENCE = ("retransmits", "udp_loss_pct", "ping_loss_pct")
PPTPD_HOLD = declare_flag("pptpd-hold", "pptpd's 0.3 s GRE reorder hold: data went towards the gateway over a link "
                          "that dropped, so the figure measures pptpd's hold after each loss, not PPTP (not comparable "
                          "with a seed's)", not_comparable=True)


def held_by_pptpd(kind: str, params: dict, loss_pct: float, values: dict[str, float]) -> bool:
    """Whether pptpd's hold shaped a sample: data towards the gateway (iperf3 TCP or UDP not reversed,
    ping's echo requests; a transfer downloads, towards the client) over a link set to lose packets or
    whose sample lost some."""
    towards_gateway = kind == "ping" or (kind in ("tcp", "udp") and not params.get("reverse"))
    dropped = loss_pct > 0 or any(values.get(metric, 0) > 0 for metric in LOSS_EVIDENCE)
    return towards_gateway and dropped

CONTROL_PORT = 1723


class PptpOptions(Options):
    mppe: Literal["128", "40"] = "128"
    # MPPE's stateful mode (the RC4 key changes every 256 packets, not every packet): refused, since pppd
    # asks for stateless first and accepts the peer's stateless request, so two pppds always settle there
    stateful: bool = False


class Pptp(Driver):
    name = "pptp"
    summary = "PPTP (pptpd + pptp-linux + pppd), MS-CHAPv2, MPPE-128/40 over GRE"
    tools = (Tool("pptpd", "pptpd", ("pptpd", "--version"), path="/usr/sbin/pptpd"),
             Tool("pptp", "pptp-linux", path="/usr/sbin/pptp"), PPPD)
    guest_modules = (*PPP_MODULES, "ppp_mppe", "pptp", "gre", "ip_gre", "arc4", "sha1_generic")
    Options = PptpOptions
    proposed = False  # MS-CHAPv2 and MPPE are broken: `vpnlab tune` tries PPTP only when a spec names it

    def check(self, options, profile):
        if profile == "fips":
            return "profile: PPTP has no FIPS 140 configuration (MPPE is RC4; MS-CHAPv2 is MD4 and DES)"
        if options.stateful:
            return ("options.stateful: pppd cannot be made to use stateful MPPE (it asks for stateless first and "
                    "accepts the peer's stateless request, so two pppds always run stateless)")
        return None

    def describe(self, options, profile):
        return f"pptp mppe-{options.mppe}"

    def implementations(self, options):
        return [Implementation("pptpd", features=("ppp",), tools=("pptpd", "pptp", "pppd"))]

    def ports(self, options):
        return Ports(gateway=(("tcp", CONTROL_PORT),))  # pptpd's; the client connects out (GRE is no port)

    def overhead(self, options, profile, implementation, inner_len: int) -> int:
        # outer IPv4 20 + enhanced GRE 8 + sequence 4 + acknowledgement 4 (piggybacked on nearly
        # every packet while the peer sends too; 4 bytes less on the others) + PPP address/control 2
        # + protocol 2 (MPPE) + MPPE header 2 + the inner protocol 2
        return 20 + 16 + 2 + 2 + 2 + 2

    def up(self, left, right, options, profile, env: TunnelEnv) -> Tunnel:
        names = (f"pp{env.unique}a", f"pp{env.unique}b")
        tunnel = Tunnel(env, ("gre", None), control=list(self.ports(options).gateway))
        gateway = right.node
        write_etc(env, [gateway, left.node])
        server_options = env.write(gateway, "options.pptpd", "\n".join(
            [f"name {SERVER_NAME}", *auth_options(True, options.mppe), *COMMON,
             f"ifname {names[1]}", f"logfile {tunnel.own_log(gateway, 'pppd-gateway')}"]) + "\n")
        config = env.write(gateway, "pptpd.conf", f"option {server_options}\nlocalip {right.tunnel_ip}\n"
                                                  f"remoteip {left.tunnel_ip}\nlisten {right.underlay_ip}\n")
        log = env.log("pptpd")
        pid_file = f"{env.folder(gateway)}/pptpd.pid"
        proc = gateway.spawn(private_etc(env, gateway, ["pptpd", "--fg", "-c", config, "-p", pid_file]),
                             log, what="pptpd")
        tunnel.processes.append((gateway, proc, log))
        gateway.wait_listening(CONTROL_PORT, proc, log)

        lines = ["nodetach", f"user {CLIENT_NAME}", f"remotename {SERVER_NAME}",
                 *auth_options(False, options.mppe), *COMMON,
                 f"ifname {names[0]}", f"logfile {tunnel.own_log(left.node, 'pppd-client')}"]
        # --nobuffer: a GRE packet that follows a lost one goes straight to pppd, as RFC 2637 4.4
        # allows and as the kernel's own PPTP driver does. By default pptp-linux holds it for 0.3 s
        # in case the missing one turns up late; behind a shaper that drops, every drop then stalls
        # TCP for 0.3 s or more (measured at 2 Mbit/s: 1.20 Mbit/s towards the client, 65% of no
        # VPN, against 1.82 with it). pptpd's own buffer, on the way to the gateway, has no such
        # switch (see above).
        argv = ["pppd", "pty", f"pptp {right.underlay_ip} --nolaunchpppd --nobuffer",
                *(w for line in lines for w in line.split())]
        log = env.log("pptp-client")
        proc = left.node.spawn(private_etc(env, left.node, argv), log, what="pppd")
        tunnel.processes.append((left.node, proc, log))
        wait_for_link(left.node, names[0], tunnel)
        wait_for_link(gateway, names[1], tunnel)
        route_into(left.node, right.subnets, names[0])
        route_into(gateway, left.subnets, names[1])
        tunnel.mtu = MTU
        return tunnel

    # -- algorithms (algorithms.py) --------------------------------------------
    def algorithms(self, options, profile, implementation=""):
        """PPTP's control connection (TCP 1723) is not encrypted; MS-CHAPv2 authenticates and derives
        MPPE's RC4 keys (MD4, SHA-1); the data has no integrity protection."""
        return Algorithms(control="PPTP (TCP 1723)", key_exchange="MPPE keys from MS-CHAPv2",
                          authentication="MS-CHAPv2", control_cipher="none", data="GRE + PPP",
                          data_cipher=f"RC4-{options.mppe} (MPPE stateless)", data_integrity="none",
                          source="pptp driver")

    def negotiated(self, tunnel, options, profile):
        """pppd's log (debug): 'MPPE 128-bit stateless compression enabled', the MS-CHAPv2 exchange."""
        return negotiated_ppp(tunnel)

    def sample_flags(self, implementation, workload, params, loss_pct, values):
        held = implementation == "pptpd" and held_by_pptpd(workload, params, loss_pct, values)
        return [PPTPD_HOLD("data towards pptpd over a link that dropped")] if held else []
