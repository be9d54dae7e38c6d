"""A repetition's stored flags, read: each "<kind>: <text>" as core.flags writes it, and those that
vpnlab wrote before flags had kinds (stores of 2026-12-01 and earlier: prose, one producer's words
each) given the kind their producer now declares, so an old store is judged as a new one would be.
The words below are those old producers wrote; no flag written since matches them (each starts with
its kind and ': ')."""

from __future__ import annotations

import re

from ..core.flags import SEPARATOR, Flag, parse

LEGACY = (
    (re.compile(r"disturbed: busy machine: (.*)"), "busy-machine"),
    (re.compile(r"disturbed: (another vpnlab run .*)"), "shared-machine"),
    (re.compile(r"((?:core|thread|cpu) .*(?:saturated|single-threaded daemon).*)"), "cpu-saturated"),
    (re.compile(r"pptpd's 0\.3 s GRE reorder hold: (.*)"), "pptpd-hold"),
    (re.compile(r"fragmented on the WAN: (.*)"), "fragmented"),
    (re.compile(r"retransmits (\d.*% of segments)"), "retransmits"),
    (re.compile(r"(iperf3 measured .*)"), "short-window"),
    (re.compile(r"background (?:traffic: )?(\S+ .*)"), "background"),
    (re.compile(r"(all echo requests lost)"), "all-lost"),
    (re.compile(r"algorithms negotiated differ from the declared ones (\(.*)"), "algorithms-differ"),
    (re.compile(r"(\S+ was .*, not a finite number: stored as missing)"), "not-finite"),
)
_PAIR = re.compile(r"(pair \S+): (.*)")  # a mesh's: the pair that raised it, then the flag


def read_flags(text: str) -> tuple[Flag, ...]:
    return tuple(_read_one(part.strip()) for part in text.split(SEPARATOR) if part.strip())


def _read_one(part: str) -> Flag:
    pair = _PAIR.fullmatch(part)
    if pair:
        return _read_one(pair[2]).within(pair[1])
    for words, kind in LEGACY:
        if found := words.fullmatch(part):
            return Flag(kind, found[1])
    return parse(part)[0]
