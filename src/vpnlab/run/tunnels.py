"""The tunnel stage of a scenario: bring every layer up, prove the traffic really goes through
it encrypted, and measure what it costs once (set-up time, bytes per packet, MTU).

MTU of nested tunnels, decided here and nowhere else: a tunnel inside another gets the largest
MTU whose full-size packets, once it has encapsulated them, the layer around it still carries
without fragmenting its own outer packets on the WAN (by the drivers' `overhead()` arithmetic).
The outermost layer keeps its driver's default. A study may set any layer's `mtu` by hand, to see
what a wrong one costs (`wan_fragments`); the scenario's notes then say which layer is too big.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog import DRIVERS
from ..drivers.base import Tunnel, TunnelEnv, wait_for
from ..core.errors import TunnelError
from .proof import PROBE_INNER_LEN, WIDE_PROBE_GAP_S, prove
from ..testbed.state import RunState
from ..testbed.topology import Testbed

SETUP_TIMEOUT_S = 30
PING_GAP_S = 0.05  # between pings until one is answered: the resolution of set-up and join times


@dataclass
class TunnelStage:
    """The layers of one scenario's VPN, outermost first, and what they cost."""

    tunnels: list[Tunnel] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def health(self) -> str | None:
        """None while every daemon of every layer runs, else what is wrong."""
        return next(filter(None, (t.health() for t in self.tunnels)), None)

    def down(self) -> None:
        for tunnel in reversed(self.tunnels):
            tunnel.down()
        self.tunnels.clear()


def bring_up(stage: TunnelStage, bed: Testbed, scenario, state: RunState, log_dir: Path) -> None:
    """Start every layer, outermost first, each inside one with an MTU that fits it; record the
    seconds until the first packet got through."""
    started = time.monotonic()
    carried = wan_mtu(bed) if scenario.vpn.layers else None  # the largest packet the path takes whole
    placement = getattr(bed, "placement", None)
    for layer, (config, impl) in enumerate(zip(scenario.vpn.layers, scenario.implementations)):
        left, right = bed.tunnel_sites(layer)
        driver = DRIVERS[config.driver]
        fits = fitting_mtu(driver, config.options, config.profile, impl, carried,
                           0 if layer else nat_traversal(scenario, driver, config.options, impl))
        env = TunnelEnv(state, layer, log_dir, impl, auto_mtu=fits if layer else None)
        with placement.starting() if placement else contextlib.nullcontext():  # the ends' cgroups and cores
            tunnel = driver.up(left, right, config.options, config.profile, env)
        stage.tunnels.append(tunnel)
        if tunnel.mtu and tunnel.mtu > fits and (layer or getattr(config.options, "mtu", None)):
            stage.notes.append(f"layer {layer} ({config.driver}) has MTU {tunnel.mtu}: its full-size packets do not"
                               f" fit the {carried} bytes " + ("the WAN" if layer == 0 else f"layer {layer - 1}")
                               + f" carries whole ({fits} would): expect IP fragments on the WAN")
        carried = min(fits, tunnel.mtu or fits)
    if not stage.tunnels:
        return
    path_note(stage, scenario)
    if placement and not placement.pinned:
        stage.notes.append(f"tunnel ends {placement.text}: they shared the CPUs")
    wait_for(lambda: first_packet(bed, scenario.link_as_run), SETUP_TIMEOUT_S, f"the first packet through {scenario.vpn.label}",
             stage.tunnels[-1], interval=0)
    stage.values["setup_s"] = time.monotonic() - started


def path_note(stage: TunnelStage, scenario) -> None:
    """A path narrower in the middle of the WAN (a link's `mtu`) than the outer layer's full-size packets:
    what they need to cross it, said on the scenario."""
    link, outer = scenario.link_as_run, stage.tunnels[0]
    if not link.mtu or not outer.mtu:
        return
    config, impl = scenario.vpn.layers[0], scenario.implementations[0]
    driver = DRIVERS[config.driver]
    size = outer.mtu + driver.full_packet_overhead(config.options, config.profile, impl, outer.mtu) + nat_traversal(
        scenario, driver, config.options, impl)
    if size > link.mtu:
        stage.notes.append(f"layer 0 ({config.driver}) has MTU {outer.mtu}: its full-size packets ({size} B on the "
                           f"WAN) are bigger than the path's MTU of {link.mtu} in the middle of the WAN: they cross "
                           "only fragmented or once the VPN finds the path's MTU (ICMP "
                           + ("blocked there)" if link.icmp == "blocked" else "allowed there)"))


def wan_mtu(bed: Testbed) -> int:
    """The WAN link's MTU (every link of the chain has the same)."""
    out = bed.wan_nodes[0].run(["ip", "-j", "link", "show", bed.wan_device(0)]).stdout
    return int(json.loads(out)[0]["mtu"])


def fitting_mtu(driver, options, profile: str, implementation: str, path_mtu: int, extra: int = 0) -> int:
    """The largest inner packet this layer sends across a path of `path_mtu` bytes unfragmented:
    `path_mtu` less its overhead for a packet that size, and `extra` (block padding makes it depend on
    the size, so the sizes are tried from the largest down)."""
    mtu = path_mtu
    while mtu > 0 and mtu + driver.full_packet_overhead(options, profile, implementation, mtu) + extra > path_mtu:
        mtu -= 1
    return mtu


def nat_traversal(scenario, driver, options, implementation: str) -> int:
    """What a NAT between the ends (the link's `nat`) adds to each packet of the outermost layer."""
    return driver.nat_traversal_overhead(options, implementation) if scenario.link_as_run.behind_nat else 0


def answer_deadline(link) -> int:
    """How long pings may wait for their first reply: a second and two round trips (a handshake's and the
    ping's) of the link as run, in whole seconds (ping's -w takes no fraction)."""
    return 1 + math.ceil(4 * (link.delay_ms + link.jitter_ms) / 1000)


def answered(node, address: str, deadline_s: int) -> bool:
    """Does `address` answer a ping within the deadline? One every PING_GAP_S until the first reply, which
    ends it: the time to a reply is the path's (a long round trip included), not a fixed wait's."""
    argv = ["ping", "-n", "-c", "1", "-i", PING_GAP_S, "-w", deadline_s, address]
    return node.run(argv, check=False, timeout=deadline_s + 5).returncode == 0


def first_packet(bed: Testbed, link) -> bool:
    """Does an echo request from the source reach the sink and come back, over `link` as run (a fixed
    short wait never saw the reply of a link whose round trip is longer)?"""
    return answered(bed.source, bed.sink_ip, answer_deadline(link))


def prove_and_measure(stage: TunnelStage, bed: Testbed, scenario, log_dir: Path) -> None:
    """Proof of tunnel and its measured overhead; raises TunnelError if the traffic bypassed it."""
    tunnels = stage.tunnels
    channels = tunnels[0].channels if tunnels else None
    underlay = bed.tunnel_sites(0)[0].underlay_ip if tunnels else None
    encrypted = not tunnels or any(t.encrypted for t in tunnels)
    result = prove(bed, channels, underlay, log_dir / "proof.pcap", encrypted)
    if result.ok and result.overhead_bytes is None and channels and channels[0][0] == "tcp":
        # the stream merged the probes (proof.WIDE_PROBE_GAP_S): its capture stays in the logs beside this one
        result = prove(bed, channels, underlay, log_dir / "proof-spaced.pcap", encrypted, WIDE_PROBE_GAP_S)
    if not result.ok:
        raise TunnelError("proof of tunnel failed: " + "; ".join(result.problems))
    if not tunnels:
        return
    if not encrypted:
        stage.notes.append("not encrypted: the probes crossed the WAN inside the tunnel, readable")
    model = overhead_model(scenario)
    stage.values["overhead_model_bytes"] = float(model)
    if result.overhead_bytes is None:
        stage.notes.append("overhead not measured: no probe of the expected size seen on the WAN")
    else:
        stage.values["overhead_bytes"] = float(result.overhead_bytes)
        if result.overhead_bytes != model:
            stage.notes.append(f"overhead {result.overhead_bytes} B per {PROBE_INNER_LEN}-byte packet"
                               f" measured, the encapsulation model says {model} B")
    if tunnels[-1].mtu:
        stage.values["tunnel_mtu"] = float(tunnels[-1].mtu)


def overhead_model(scenario) -> int:
    """What the drivers' arithmetic says all layers add to a probe, innermost first."""
    size = PROBE_INNER_LEN
    for layer, impl in reversed(list(zip(scenario.vpn.layers, scenario.implementations))):
        size += DRIVERS[layer.driver].overhead(layer.options, layer.profile, impl, size)
    if scenario.vpn.layers:
        outer = scenario.vpn.layers[0]
        size += nat_traversal(scenario, DRIVERS[outer.driver], outer.options, scenario.implementations[0])
    return size - PROBE_INNER_LEN
