"""WAN shaping: tbf for the rate, netem for delay, jitter and loss.

Commands are iproute2 batch lines for the namespace that owns the interface.
With impairment, netem is the root and tbf its child, so packets are delayed
and then rate-limited; netem's packet limit is sized for rate x delay so that
it never drops by itself.
"""

from __future__ import annotations

MTU_FRAME = 1514  # tbf counts the Ethernet header


def tbf_params(rate_mbit: float, queue_ms: float) -> tuple[int, int]:
    """(burst, limit) in bytes for a rate and a buffer depth."""
    bytes_per_s = rate_mbit * 1e6 / 8
    burst = max(int(bytes_per_s * 0.004), 2 * MTU_FRAME)  # at least one timer tick (HZ>=250) of data
    limit = max(int(bytes_per_s * queue_ms / 1000), 3 * MTU_FRAME) + burst
    return burst, limit


def netem_limit(rate_mbit: float | None, delay_ms: float, jitter_ms: float) -> int:
    """Packets netem must hold so that its own queue never drops."""
    rate = rate_mbit or 100_000  # unshaped veth: size for a fast link
    in_flight = rate * 1e6 / 8 / MTU_FRAME * (delay_ms + 2 * jitter_ms) / 1000
    return max(1000, int(in_flight * 1.5) + 100)


def shape_commands(dev: str, link) -> list[str]:
    """iproute2 batch lines that shape the egress of `dev` as `link` says."""
    tbf = ""
    if link.rate_mbit:
        burst, limit = tbf_params(link.rate_mbit, link.queue_ms)
        tbf = f"tbf rate {link.rate_mbit:g}mbit burst {burst} limit {limit}"
    if not link.needs_netem:
        return [f"qdisc add dev {dev} root handle 1: {tbf}"] if tbf else []
    netem = f"netem limit {netem_limit(link.rate_mbit, link.delay_ms, link.jitter_ms)}"
    if link.delay_ms or link.jitter_ms:
        netem += f" delay {link.delay_ms:g}ms"
        if link.jitter_ms:
            netem += f" {link.jitter_ms:g}ms"
            if link.jitter_distribution != "uniform":  # netem's default is uniform and has no table
                netem += f" distribution {link.jitter_distribution}"
    if link.loss_pct:
        netem += f" loss random {link.loss_pct:g}%"
    lines = [f"qdisc add dev {dev} root handle 1: {netem}"]
    if tbf:
        lines.append(f"qdisc add dev {dev} parent 1:1 handle 2: {tbf}")
    return lines
