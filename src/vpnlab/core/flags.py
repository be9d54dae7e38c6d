"""A sample's flags: what to read with care about one repetition, each of a declared kind.

Whoever raises a flag declares its kind once (`FlagKind`, at module level), with the traits the
analysis acts on; a flag is a kind and a text. The store keeps each as "<kind>: <text>", the flags of
a repetition joined by ';' (a text holds none). Readers act on a flag's kind and its traits, never on
its words; a kind this vpnlab does not declare (a store from another version) has no traits.
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = ";"


@dataclass(frozen=True)
class FlagKind:
    name: str                 # stored before the text; lower-case words joined by '-'
    meaning: str
    disturbed: bool = False   # the machine was busy with something else than the run
    cpu_bound: bool = False   # a core, a thread or the whole machine set the figures
    not_comparable: bool = False  # the figure measures something else than the VPN (no seed is judged by it)

    def __call__(self, text: str) -> Flag:
        return Flag(self.name, text.replace(SEPARATOR, ","))


KINDS: dict[str, FlagKind] = {}
UNDECLARED = "note"   # a stored flag without a kind of the form above


def declare(name: str, meaning: str, **traits: bool) -> FlagKind:
    kind = FlagKind(name, meaning, **traits)
    if not _is_name(name) or KINDS.get(name, kind) != kind:
        raise ValueError(f"flag kind {name!r}: not a lower-case name, or declared twice")
    KINDS[name] = kind
    return kind


@dataclass(frozen=True)
class Flag:
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"

    @property
    def declared(self) -> FlagKind:
        """The kind's declaration, looked up when asked (the producers declare theirs as they are
        imported); a kind no producer declares has no traits."""
        return KINDS.get(self.kind) or FlagKind(self.kind, "")

    def within(self, scope: str) -> Flag:
        """The same flag, its text saying where it was raised (a mesh's pair)."""
        return Flag(self.kind, f"{scope}: {self.text}")


def stored(flags: list[Flag]) -> str:
    return SEPARATOR.join(map(str, flags))


def parse(text: str) -> tuple[Flag, ...]:
    """A repetition's stored flags."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(SEPARATOR))):
        kind, sep, rest = part.partition(": ")
        out.append(Flag(kind, rest) if sep and _is_name(kind) else Flag(UNDECLARED, part))
    return tuple(out)


def _is_name(word: str) -> bool:
    return bool(word) and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in word)


def any_of(flags: tuple[Flag, ...], trait: str) -> bool:
    """Whether one of the flags is of a kind with this trait ('disturbed', 'cpu_bound', 'not_comparable')."""
    return any(getattr(flag.declared, trait) for flag in flags)
