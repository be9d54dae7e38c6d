"""One way to shorten the labels of a run's VPN configurations, for every figure, table and
`vpnlab show` alike.

A driver's label names everything about its configuration ("openvpn aes-128-cbc-sha256 udp lz4-v2";
nested: "libreswan aes128-sha256 psk in openvpn aes-128-cbc-sha256 udp (in the VM)"): 70 characters
no legend or axis can hold. When any label of a run is longer than LIMIT, every label of that run is
shortened the same way:

1. " (in the VM)" becomes " (VM)";
2. a word every configuration of one driver in the run shares is left out of that driver's layers
   ("openvpn aes-128-cbc-sha256 udp" and "openvpn aes-128-cbc-sha256 udp lz4-v2" become "openvpn"
   and "openvpn lz4-v2"), and `note` says which words were left out;
3. what is still longer than LIMIT loses its middle ("…"), and labels that would then read the same
   are numbered.

The mapping depends only on the run's set of labels, so the report's figures and tables and
`vpnlab show` of one results directory name each configuration identically. Exports keep the full
labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

LIMIT = 32
VM_LONG, VM_SHORT = " (in the VM)", " (VM)"
LAYER = " in "  # "inner in outer", as the study loader names nested tunnels
ELLIPSIS = "…"


def _layers(label: str) -> list[list[str]]:
    return [part.split(" ") for part in label.split(LAYER)]


def _truncate(label: str, limit: int) -> str:
    """At most `limit` characters: the start and the end (where "(VM)" is) kept, the middle elided."""
    if len(label) <= limit:
        return label
    tail = (limit - 1) // 3
    head = limit - 1 - tail
    return label[:head].rstrip() + ELLIPSIS + label[len(label) - tail:].lstrip()


@dataclass
class Labels:
    """A run's label mapping: call it with a full label (a scenario's `shown` or `vpn_label`)."""

    limit: int = LIMIT
    common: dict[str, list[str]] = field(default_factory=dict)  # driver word -> words left out
    fixed: dict[str, str] = field(default_factory=dict)          # full -> short, numbered where needed
    active: bool = False

    def __call__(self, label: str) -> str:
        if label in self.fixed:
            return self.fixed[label]
        return self._short(label) if self.active else label

    def of(self, scenario) -> str:
        """A stored scenario's label for people (its `shown`: saying when it ran in the VM)."""
        return self(scenario.shown)

    def _short(self, label: str, truncate: bool = True) -> str:
        vm = label.endswith(VM_LONG)
        core = label[: -len(VM_LONG)] if vm else label
        layers = []
        for words in _layers(core):
            dropped = set(self.common.get(words[0], ()))
            layers.append(" ".join([words[0], *(w for w in words[1:] if w not in dropped)]))
        short = LAYER.join(layers) + (VM_SHORT if vm else "")
        return _truncate(short, self.limit) if truncate else short

    @property
    def note(self) -> str:
        """What a reader needs to read the short labels, or ''."""
        if not self.active:
            return ""
        parts = [f"every {driver} here is {' '.join(words)}" for driver, words in sorted(self.common.items())]
        return (f"labels shortened to at most {self.limit} characters"
                + (": " + "; ".join(parts) if parts else "") + f"; {VM_SHORT.strip()}: measured in the VM")


def shorten(labels: Iterable[str], limit: int = LIMIT) -> Labels:
    """The mapping for one run's labels (all of them: every figure and table uses the same one)."""
    full = sorted(set(labels))
    if all(len(label) <= limit for label in full):
        return Labels(limit)
    words_of: dict[str, list[set[str]]] = {}
    for label in full:
        core = label[: -len(VM_LONG)] if label.endswith(VM_LONG) else label
        for words in _layers(core):
            words_of.setdefault(words[0], []).append(set(words[1:]))
    common = {}
    for driver, sets in words_of.items():
        shared = set.intersection(*sets) if sets else set()
        if shared:  # in the order the driver's label gives them
            example = next(w for label in full for w in _layers(label) if w[0] == driver)
            common[driver] = [w for w in example[1:] if w in shared]
    result = Labels(limit, common, active=True)
    if len({result._short(label, truncate=False) for label in full}) < len(full):
        result.common = {}  # words left out made two alike: keep every word
    shortened = {label: result._short(label) for label in full}
    count: dict[str, int] = {}
    for label in full:  # alike once their middles were elided: numbered
        short = shortened[label]
        if list(shortened.values()).count(short) > 1:
            count[short] = count.get(short, 0) + 1
            suffix = f" #{count[short]}"
            short = result._short(label, truncate=False)
            short = _truncate(short, limit - len(suffix)) + suffix
        result.fixed[label] = short
    return result


def for_scenarios(scenarios) -> Labels:
    """The mapping of a run: every scenario's label as shown, and its plain VPN label."""
    return shorten([s.shown for s in scenarios] + [s.vpn_label for s in scenarios])
