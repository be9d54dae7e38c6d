"""Study files: what a user asks for, validated before anything is created.

A study is YAML. Its `vpns`, `links` and `workloads` are lists whose cartesian
product is the plan. Inside one entry, a list where a single value is expected
is a sweep: `window: [8K, 16K, 32K, 64K]` makes four workloads. Every error
names the file, the field and what was expected.
"""

from __future__ import annotations

import itertools
import json
import math
import stat
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator, model_validator

from ..catalog import DRIVERS
from ..core.errors import StudyError
from ..core.files import file_kind
from .analysis_settings import AnalysisSettings
from ..core.schema import CONTROL, Strict, TrueOrFalse, shorten, socket_buffer_limit
from ..testbed.nat import NAT_UDP_TIMEOUT_MAX_S
from ..testbed.router import IPV6_MTU_MIN, PATH_MTU_MAX, PATH_MTU_MIN
from ..testbed.topology import HOST_ROLES, MAX_LAYERS
from ..testbed.mesh import IDLE_WINDOW_S, MAX_PEERS, MIN_PEERS
from ..catalog import KINDS
from ..workloads.background import PRESETS as BACKGROUND_PRESETS
from ..workloads.background import Background
from ..workloads.base import NAT_EVENTS

MAX_FILE_BYTES = 1024 * 1024  # a study is a few KB: sweeps are lists, not copies
MAX_SCENARIOS = 10_000        # counted from the sweeps' sizes before any is expanded
MAX_DEPTH = 32                # YAML nesting; a study needs fewer than 10 levels
SHOWN_PROBLEMS = 20           # an invalid study's message lists this many problems, then counts the rest
NAME_FIELDS = {"name", "label", "id", "vpn", "link", "workload"}  # printed in tables: no control character


class _TooDeep(yaml.composer.ComposerError):
    pass


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


class _Loader(yaml.SafeLoader):
    """yaml.safe_load's loader with a nesting limit: PyYAML composes nodes recursively, and a
    few thousand nested brackets would end in a RecursionError rather than a message."""

    def compose_node(self, parent, index):
        path = self.__dict__.setdefault("path", [])  # where the node is: keys and list indices
        path.append(f"[{index}]" if isinstance(index, int) else
                    f".{index.value}" if isinstance(index, yaml.ScalarNode) else "" if index is None else ".?")
        try:
            if len(path) > MAX_DEPTH:
                where = "".join(path[:6]).lstrip(".") + "..."
                raise _TooDeep(None, None, f"{where}: nested more than {MAX_DEPTH} levels deep (a study needs "
                                           f"fewer than 10)", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            path.pop()

    def construct_mapping(self, node, deep=False):
        """A mapping that names a key twice is an error, not "the last one wins" (a merge key's
        values, `<<: *defaults`, may still be overridden)."""
        first: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the constructor says so
                continue
            if earlier is not key_node.start_mark:
                raise _DuplicateKey(None, None, f"duplicate key {shorten(key)} (also at line {earlier.line + 1}, "
                                    f"column {earlier.column + 1}): YAML would keep only the last; remove one",
                                    key_node.start_mark)
        return super().construct_mapping(node, deep)


# --- links -----------------------------------------------------------------

class Link(Strict):
    """The WAN between the two sides. Unset rate means an unshaped veth."""

    name: str = ""
    rate_mbit: float | None = Field(None, gt=0, le=100_000)
    delay_ms: float = Field(0, ge=0, le=10_000, description="one-way delay added in each direction")
    jitter_ms: float = Field(0, ge=0, le=10_000, description="delay variation in each direction")
    jitter_distribution: Literal["uniform", "normal", "pareto", "paretonormal"] = "normal"
    loss_pct: float = Field(0, ge=0, lt=100, description="random loss in each direction (below 100: at 100 "
                            "nothing arrives)")
    queue_ms: float = Field(50, gt=0, le=10_000, description="bottleneck buffer, in ms at the link rate")
    background: Background | None = Field(None, description="'office', 'none' or {name, flows}")
    shape: bool = Field(False, description="on real hosts (a study with `hosts:`), shaping is opt-in: rate, delay, "
                        "jitter and loss then shape the hosts' WAN interfaces (recorded there, always removed)")
    mtu: int | None = Field(None, ge=PATH_MTU_MIN, le=PATH_MTU_MAX, description="the underlay's MTU on the path, "
                            f"set on a router in the middle of the WAN, not on the VPN's own interfaces "
                            f"({PATH_MTU_MIN} to {PATH_MTU_MAX}; an IPv6 path at least {IPV6_MTU_MIN}: the WAN "
                            "here carries IPv4)")
    icmp: Literal["allowed", "blocked"] = Field("allowed", description="blocked: that router drops the ICMP "
                                                "'fragmentation needed' and ICMPv6 'packet too big' it would send "
                                                "back (nftables), as a misconfigured firewall does")
    nat: Literal["none", "masquerade"] = Field("none", description="masquerade: the client side sits behind a NAT "
                                               "(nftables masquerade on that router, nothing forwarded inwards), as "
                                               "at home or on a mobile network")
    nat_udp_timeout_s: int | None = Field(None, ge=1, le=NAT_UDP_TIMEOUT_MAX_S, description="how long that NAT "
                                          "keeps an idle UDP mapping (its namespace's conntrack UDP timeouts; "
                                          "default the kernel's: 30 s one way, 120 s both ways); only with nat: "
                                          "masquerade")

    @model_validator(mode="after")
    def timeout_needs_nat(self):
        if self.nat_udp_timeout_s is not None and not self.behind_nat:
            raise ValueError("nat_udp_timeout_s: a NAT's UDP timeout needs nat: masquerade on this link")
        return self

    @field_validator("background", mode="before")
    @classmethod
    def preset(cls, value):
        if value in (None, "none"):
            return None
        if isinstance(value, str):
            if value not in BACKGROUND_PRESETS:
                raise ValueError(f"unknown background mix {value!r}; built-in: {', '.join(BACKGROUND_PRESETS)}, "
                                 f"none, or {{name, flows}}")
            return BACKGROUND_PRESETS[value]
        return value

    @property
    def label(self) -> str:
        if self.name:
            return self.name + self.path_label + self.background_label
        parts = [f"{self.rate_mbit:g}mbit" if self.rate_mbit else "unshaped"]
        if self.delay_ms:
            parts.append(f"{self.delay_ms:g}ms")
        if self.jitter_ms:
            parts.append(f"j{self.jitter_ms:g}ms")
        if self.loss_pct:
            parts.append(f"loss{self.loss_pct:g}%")
        return "-".join(parts) + self.path_label + self.background_label

    @property
    def path_label(self) -> str:
        """What the router in the middle of the WAN does, in the label (a named link's too)."""
        nat = "-nat" + (f"{self.nat_udp_timeout_s}s" if self.nat_udp_timeout_s else "") if self.behind_nat else ""
        return (f"-mtu{self.mtu}" if self.mtu else "") + ("-icmp-blocked" if self.icmp == "blocked" else "") + nat

    @property
    def needs_router(self) -> bool:
        """A router in the middle of the WAN (testbed/router.py) enforces the path's MTU, filters its ICMP and
        is the client side's NAT (testbed/nat.py)."""
        return self.mtu is not None or self.icmp == "blocked" or self.behind_nat

    @property
    def behind_nat(self) -> bool:
        """The client side sits behind a NAT (testbed/nat.py)."""
        return self.nat == "masquerade"

    @property
    def background_label(self) -> str:
        return f"+{self.background.name}" if self.background else ""

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms or self.loss_pct)


# --- workloads ---------------------------------------------------------------

Workload = Annotated[Union[tuple(k.Options for k in KINDS.values())], Field(discriminator="kind")]
WORKLOAD_ADAPTER = TypeAdapter(Workload)


# --- VPN configurations ------------------------------------------------------

@dataclass(frozen=True)
class VpnConfig:
    """One concrete VPN configuration: a driver, its options, maybe a tunnel inside it."""

    driver: str
    options: BaseModel
    profile: str = "default"
    label: str = ""
    inner: "VpnConfig | None" = None
    cores: int | None = None   # each tunnel end's daemons on this many cores (None: one each where there are enough)

    @property
    def is_baseline(self) -> bool:
        return DRIVERS[self.driver].baseline

    @property
    def layers(self) -> list["VpnConfig"]:
        """Outermost first; the baseline has no layers."""
        own = [] if self.is_baseline else [self]
        return own + (self.inner.layers if self.inner else [])

    def as_dict(self) -> dict:
        data = {"driver": self.driver, "profile": self.profile, "options": self.options.model_dump(mode="json")}
        if self.inner:
            data["inner"] = self.inner.as_dict()
        if self.cores is not None:  # (absent otherwise: scenarios stored before it keep their ids)
            data["cores"] = self.cores
        return data


class _VpnEntry(Strict):
    driver: str
    label: str = ""
    profile: Literal["default", "fips"] = "default"
    options: dict[str, Any] = Field(default_factory=dict)
    inner: "_VpnEntry | None" = None
    cores: int | list[int] | None = Field(None, description="each tunnel end's daemons pinned to this many cores "
                                          "(a list sweeps them): how the VPN scales with cores")

    @field_validator("cores")
    @classmethod
    def some_cores(cls, value):
        for n in value if isinstance(value, list) else [value] if value is not None else []:
            if isinstance(n, bool) or not 1 <= n <= 1024:
                raise ValueError(f"a number of cores from 1 to 1024, got {n!r}")
        return value


# --- repetitions ---------------------------------------------------------------

class RepetitionRule(Strict):
    """A fixed count (min == max, no target), or adaptive: Stein's two-stage rule on the log scale
    (stopping.py): the first `min` repetitions fix how many a 95% interval within `ci_target_pct`
    of the geometric mean needs, at most `max`."""

    min: int = Field(3, ge=1, le=1000)
    max: int = Field(20, ge=1, le=1000)
    ci_target_pct: float | None = Field(5.0, gt=0, le=100)

    @model_validator(mode="after")
    def ordered(self):
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.adaptive and self.min < 2:
            raise ValueError("an adaptive rule needs min >= 2: a confidence interval needs two values")
        return self

    @classmethod
    def fixed(cls, count: int) -> "RepetitionRule":
        return cls.model_construct(min=count, max=count, ci_target_pct=None)

    @property
    def adaptive(self) -> bool:
        return self.ci_target_pct is not None

    def describe(self) -> str:
        if not self.adaptive:
            return f"{self.max} repetitions"
        return (f"{self.min} to {self.max} repetitions by Stein's two-stage rule: the first {self.min} fix "
                f"the total for a 95% interval within {self.ci_target_pct:g}% of the geometric mean")


# --- the study ---------------------------------------------------------------

from .seed_findings import Choices, Findings  # noqa: E402  (a seed's published findings, judged by vpnlab/findings.py)


class _StudyFile(Strict):
    findings: Findings = Field(default_factory=list, description="the seed's published findings (findings.py)")
    choices: Choices = Field(default_factory=list, description="conditions vpnlab chose where the seed states "
                             "none or another: shown in the report apart from the seed's (findings.py)")
    name: str = Field(min_length=1)
    description: str = ""
    topology: Literal["remote-access", "site-to-site", "mesh"] = "remote-access"
    peers: int | None = Field(None, ge=MIN_PEERS, le=MAX_PEERS, description=f"topology mesh: how many peers "
                              f"({MIN_PEERS} to {MAX_PEERS} on one machine), each behind its own link to a core")
    idle_window_s: float = Field(IDLE_WINDOW_S, ge=1, le=600, description="topology mesh: the idle window in which "
                                 "the overlay's own control bytes on the WAN links are counted")
    repetitions: RepetitionRule = Field(default_factory=lambda: RepetitionRule.fixed(3),
                                        description="a count, or {min, max, ci_target_pct}")
    order: Literal["listed", "shuffled"] = "shuffled"   # within each round
    seed: int = 0
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings,
                                       description="how the data are judged, fixed before the run (judging.py)")
    pin_tunnel_ends: bool = Field(True, description="each tunnel end's daemons on a core of their own when the "
                                  "machine has a core per end (placement.py); false: they share every core")
    vpns: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("repetitions", mode="before")
    @classmethod
    def count(cls, value):
        return repetition_count(value)

    links: list[dict[str, Any]] = Field(default_factory=lambda: [{}], min_length=1)
    workloads: list[dict[str, Any]] = Field(min_length=1)
    hosts: dict[str, str] | list[dict[str, str]] | None = Field(
        None, description="the two ends of the WAN on real hosts: {client, gateway} or {left, right} -> inventory "
        "host names (vpnlab run --inventory); a list of such pairs runs the study on each, in parallel where they "
        "share no host")


def repetition_count(value):
    """`repetitions: N` as the rule it stands for (a fixed count); anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if not 1 <= value <= 1000:
        raise ValueError("expected a count from 1 to 1000, or {min, max, ci_target_pct}")
    return {"min": value, "max": value, "ci_target_pct": None}


def study_fields(names: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """Name -> (type, default) of these top-level fields of a study file, as the study model has them."""
    fields = _StudyFile.model_fields
    return {name: (fields[name].annotation if not fields[name].metadata else
                   Annotated[(fields[name].annotation, *fields[name].metadata)],
                   fields[name].get_default(call_default_factory=True)) for name in names}


@dataclass
class Study:
    name: str
    description: str
    topology: str
    repetitions: RepetitionRule
    order: str
    seed: int
    vpns: list[VpnConfig]
    links: list[Link]
    workloads: list[Any]
    source_text: str = ""
    source_path: str = ""
    hosts: list[dict[str, str]] = field(default_factory=list)  # pairs: role -> inventory host (HOST_ROLES); [] here
    pin_tunnel_ends: bool = True
    peers: int | None = None          # topology mesh only
    idle_window_s: float = IDLE_WINDOW_S
    analysis: AnalysisSettings = field(default_factory=AnalysisSettings)
    findings: list = field(default_factory=list)   # a seed's published findings (seed_findings.Finding)
    choices: list = field(default_factory=list)    # what vpnlab chose where the seed is silent (seed_findings.Choice)
    nesting: int = field(init=False)

    def __post_init__(self) -> None:
        self.nesting = max((len(v.layers) for v in self.vpns), default=0)


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def validation_problems(exc: ValidationError, prefix: str, skip_tags: bool = False) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        if skip_tags and loc and loc[0] in KINDS:
            loc = loc[1:]  # the discriminator tag pydantic adds is not a field
        where = ".".join(p for p in (prefix, _format_loc(tuple(loc)) if loc else "") if p)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "union_tag_invalid":
            message = f"unknown kind; expected one of: {', '.join(KINDS)}"
        elif err["type"] == "union_tag_not_found":
            message = f"missing field 'kind' (one of: {', '.join(KINDS)})"
        elif isinstance(err.get("input"), TrueOrFalse):
            message = "expected a number, not true/false"
        lines.append(f"{where}: {message}")
    return lines


LIST_FIELDS = {"events"}  # a workload's: its value is a list, not a sweep


def expand_sweeps(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A list value in an entry is a sweep (but for LIST_FIELDS'): one entry per combination, in file order."""
    keys = list(entry)
    values = [[v] if k in LIST_FIELDS or not isinstance(v, list) else v for k, v in entry.items()]
    if any(len(v) == 0 for v in values):
        empty = next(k for k, v in zip(keys, values) if len(v) == 0)
        raise ValueError(f"{empty}: empty list (a sweep needs at least one value)")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _sweep_label(entry: dict, variant: dict) -> str:
    swept = [k for k, v in entry.items() if isinstance(v, list) and k not in LIST_FIELDS]
    return ",".join(f"{k}={variant[k]}" for k in swept)


def _build_vpn(entry: _VpnEntry, where: str, problems: list[str], inner: bool = False) -> list[VpnConfig]:
    driver = DRIVERS.get(entry.driver)
    if driver is None:
        problems.append(f"{where}.driver: unknown VPN driver {entry.driver!r}; known: {', '.join(sorted(DRIVERS))}")
        return []
    if inner and driver.baseline:
        problems.append(f"{where}.driver: '{entry.driver}' is the no-VPN baseline, not a tunnel to nest inside "
                        f"another; leave 'inner' out to measure the outer VPN alone")
        return []
    inner_configs: list[VpnConfig | None] = [None]
    if entry.inner is not None:
        if driver.baseline:
            problems.append(f"{where}.inner: the '{entry.driver}' driver has no tunnel to nest another inside")
            return []
        inner_configs = _build_vpn(entry.inner, where + ".inner", problems, inner=True) or []
    try:
        variants = expand_sweeps(entry.options)
    except ValueError as exc:
        problems.append(f"{where}.options.{exc}")
        return []
    configs = []
    for variant in variants:
        try:
            options = driver.Options.model_validate(variant)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, where + ".options"))
            continue
        problem = driver.check(options, entry.profile)
        if problem:
            problems.append(f"{where}.{problem}")
            continue
        sweep = _sweep_label(entry.options, variant)
        base = entry.label or driver.describe(options, entry.profile)
        label = f"{base}[{sweep}]" if sweep and entry.label else base
        for inner in inner_configs:
            full_label = f"{inner.label} in {label}" if inner else label
            for cores in _cores(entry, driver):
                shown = f"{full_label} on {cores} core{'s' if cores > 1 else ''}" if cores else full_label
                configs.append(VpnConfig(entry.driver, options, entry.profile, shown, inner, cores))
    return configs


def _cores(entry: _VpnEntry, driver) -> list[int | None]:
    if entry.cores is None or driver.baseline:  # no VPN has no tunnel ends to pin
        return [None]
    return entry.cores if isinstance(entry.cores, list) else [entry.cores]


def _sweeps(entry: Any) -> list[tuple[str, int]]:
    """(field, number of values) of each sweep in a raw entry, read before anything is expanded."""
    if not isinstance(entry, dict):
        return []
    return [(str(key), len(value)) for key, value in entry.items() if isinstance(value, list) and key not in LIST_FIELDS]


def _vpn_sweeps(entry: Any, prefix: str = "") -> list[tuple[str, int]]:
    """The same for a VPN entry: the sweeps in its options, and in its inner tunnels' options."""
    if not isinstance(entry, dict):
        return []
    options = entry.get("options")
    found = [(f"{prefix}options.{key}", len(value)) for key, value in options.items()
             if isinstance(value, list)] if isinstance(options, dict) else []
    if isinstance(entry.get("cores"), list):
        found.append((f"{prefix}cores", len(entry["cores"])))
    if prefix.count("inner.") <= MAX_LAYERS:  # deeper nesting is refused later; a YAML alias may even loop
        found += _vpn_sweeps(entry.get("inner"), prefix + "inner.")
    return found


def _check_size(top: "_StudyFile", source: str) -> None:
    """Refuse a plan of more than MAX_SCENARIOS scenarios from the sweeps' sizes alone: YAML
    aliases let a few lines ask for billions of combinations."""
    sections = {"vpns": [_vpn_sweeps(e) for e in top.vpns],
                "links": [_sweeps(e) for e in top.links],
                "workloads": [_sweeps(e) for e in top.workloads]}
    entries = []  # (count, where, sweeps)
    totals = {}
    for section, sweeps in sections.items():
        counts = [math.prod(max(n, 1) for _, n in s) for s in sweeps]
        totals[section] = sum(counts)
        entries += [(c, f"{section}[{i}]", s) for i, (c, s) in enumerate(zip(counts, sweeps)) if c > 1]
    scenarios = math.prod(totals.values())
    if scenarios <= MAX_SCENARIOS:
        return
    lines = [f"plan: {totals['vpns']:,} VPN configuration(s) x {totals['links']:,} link(s) x "
             f"{totals['workloads']:,} workload(s) = {scenarios:,} scenarios, more than {MAX_SCENARIOS:,}; make the "
             f"sweeps shorter or split the study"]
    for count, where, sweeps in sorted(entries, key=lambda e: -e[0])[:3]:
        lines.append(f"{where}: " + " x ".join(f"{name} ({n:,} values)" for name, n in sweeps) + f" = {count:,}")
    raise StudyError(f"{source}: invalid study\n  " + "\n  ".join(lines))


def parse_study(text: str, source: str = "<study>", here: bool = False) -> Study:
    """Validate a study's YAML text; raise StudyError listing every problem. `here`: the study
    is to run on this machine, so refuse what this machine's kernel cannot give too."""
    try:
        return _parse(text, source, here)
    except RecursionError as exc:  # the YAML loader limits nesting; this is a last resort
        raise StudyError(f"{source}: nested too deeply to read") from exc


def _parse(text: str, source: str, here: bool) -> Study:
    top = _load(text, source)
    problems: list[str] = []
    placed_vpns = _vpns(top.vpns, problems)
    vpns = [vpn for _, vpn in placed_vpns]
    context = {"socket_buffer_max": socket_buffer_limit()} if here else None
    placed_links = _expand("links", top.links, Link.model_validate, problems)
    links = [link for _, link in placed_links]
    placed = _expand("workloads", top.workloads, lambda v: WORKLOAD_ADAPTER.validate_python(v, context=context),
                     problems)
    nesting = max((len(v.layers) for v in vpns), default=0)
    if nesting > MAX_LAYERS:
        problems.append(f"vpns: at most {MAX_LAYERS} tunnel layers (one VPN inside another)")
    if nesting > 1 and top.topology != "site-to-site":
        problems.append("topology: nested tunnels need topology 'site-to-site' (two gateway layers per side)")
    # A scenario's id hashes its configuration, not its label: two entries that differ only in
    # their labels would be measured once, as one scenario.
    _check_distinct("the same configuration (driver, profile, options)",
                    [(w, v.label, v.as_dict()) for w, v in placed_vpns], problems)
    _check_unique("vpns", [v.label for v in vpns], problems)
    _check_distinct("the same workload", [(w, x.label, x.model_dump(mode="json")) for w, x in placed],
                    problems)
    _check_unique("links", [l.label for l in links], problems)
    _check_mesh(top, placed_vpns, placed, problems)
    if top.hosts is not None and top.topology != "mesh":
        _check_hosts(top, placed_links, problems)
    else:
        problems += dict.fromkeys(f"{where}.shape: only for a study on real hosts (with `hosts:`); the testbed "
                                  "here always shapes its WAN as the link says" for where, link in placed_links
                                  if link.shape)
    _check_path(top, placed_links, problems)
    _check_events(top, placed_links, placed, placed_vpns, problems)
    if problems:
        raise _invalid(source, problems)
    return Study(
        name=top.name,
        description=top.description,
        topology=top.topology,
        repetitions=top.repetitions,
        order=top.order,
        seed=top.seed,
        vpns=vpns,
        links=links,
        workloads=[workload for _, workload in placed],
        source_text=text,
        source_path=source,
        hosts=[dict(top.hosts)] if isinstance(top.hosts, dict) else list(top.hosts or []),
        pin_tunnel_ends=top.pin_tunnel_ends,
        peers=top.peers,
        idle_window_s=top.idle_window_s,
        analysis=top.analysis,
        findings=top.findings,
        choices=top.choices,
    )


def read_yaml(text: str, source: str) -> Any:
    """A study file's (or tune spec's) YAML, read as a careful parser would: nesting limited, a key
    given twice refused; StudyError naming the source otherwise."""
    try:
        return yaml.load(text, Loader=_Loader)
    except (_TooDeep, _DuplicateKey) as exc:
        raise StudyError(f"{source}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise StudyError(f"{source}: not valid YAML: {exc}") from exc
    except ValueError as exc:  # Python's own limit on an integer's digits
        raise StudyError(f"{source}: a number of more than {sys.get_int_max_str_digits()} digits; "
                         "no field takes one") from exc


def _load(text: str, source: str) -> "_StudyFile":
    """The file's top level, validated, within the size limits: before any sweep is expanded."""
    if len(text) > MAX_FILE_BYTES:
        raise StudyError(f"{source}: {len(text):,} characters, more than a study file may hold "
                         f"({MAX_FILE_BYTES // 1024**2} MB); sweeps are lists, not copies")
    raw = read_yaml(text, source)
    if not isinstance(raw, dict):
        if raw is None:
            found = "the file holds nothing (empty, or only comments)"
        else:
            found = "found a list" if isinstance(raw, list) else f"found the value {shorten(raw)}"
        raise StudyError(f"{source}: (top level): expected a mapping with name, vpns, links and workloads; {found}")
    refuse_control_characters(raw, source)
    try:
        top = _StudyFile.model_validate(raw)
    except ValidationError as exc:
        problems = validation_problems(exc, "")
        raise _invalid(source, problems + _entry_problems(raw, problems)) from exc
    _check_size(top, source)
    return top


def _entry_problems(raw: dict, found: list[str]) -> list[str]:
    """For a file whose top level is invalid (`found`): the problems of each section's entries, so
    that one report lists them all. A section `found` already faults is left at that, as is one
    whose sweeps alone would expand past MAX_SCENARIOS."""
    problems: list[str] = []
    checks = {"vpns": (_vpn_sweeps, lambda entries: _vpns(entries, problems)),
              "links": (_sweeps, lambda entries: _expand("links", entries, Link.model_validate, problems)),
              "workloads": (_sweeps, lambda entries: _expand("workloads", entries, WORKLOAD_ADAPTER.validate_python,
                                                             problems))}
    for section, (sweeps, check) in checks.items():
        entries = raw.get(section)
        if not isinstance(entries, list) or any(p.startswith((f"{section}:", f"{section}[")) for p in found):
            continue
        if sum(math.prod(max(n, 1) for _, n in sweeps(entry)) for entry in entries) <= MAX_SCENARIOS:
            check(entries)
    return problems


def _invalid(source: str, problems: list[str]) -> StudyError:
    """The error listing a study's problems: the first SHOWN_PROBLEMS, and how many more there are."""
    more = len(problems) - SHOWN_PROBLEMS
    return StudyError(f"{source}: invalid study\n  " + "\n  ".join(problems[:SHOWN_PROBLEMS])
                      + (f"\n  ... and {more:,} more" if more > 0 else ""))


def refuse_control_characters(raw: Any, source: str) -> None:
    """Refuse control characters (escape sequences, NUL, line breaks in a name) anywhere they
    could colour a terminal or forge a line of vpnlab's output: in every key, in every name, label,
    id and host, and in any other text but for line breaks and tabs."""
    problems: list[str] = []
    seen: set[int] = set()  # each mapping and list once: YAML aliases share them

    def walk(value: Any, where: str, strict: bool) -> None:
        if isinstance(value, str):
            found = [c for c in CONTROL.findall(value) if strict or c not in "\n\t"]
            if found:
                shown = found[0].encode("unicode_escape").decode()
                problems.append(f"{where or '(top level)'}: control character {shown} in {shorten(value)}; "
                                f"{'names and labels hold' if strict else 'text holds'} none"
                                f"{'' if strict else ' but line breaks and tabs'}")
        elif isinstance(value, (dict, list)) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                here = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip(".")
                if isinstance(key, str) and CONTROL.search(key):
                    here = f"{where}.{shorten(key)}".lstrip(".")
                    walk(key, here, True)
                walk(item, here, strict or key in NAME_FIELDS or here == "hosts")

    walk(raw, "", False)
    if problems:
        raise _invalid(source, problems)


def _vpns(entries: list, problems: list[str]) -> list[tuple[str, VpnConfig]]:
    """Each VPN configuration with where in the file it came from (an entry may sweep several)."""
    out = []
    for i, entry in enumerate(entries):
        where = f"vpns[{i}]"
        try:
            parsed = _VpnEntry.model_validate(entry)
        except ValidationError as exc:
            problems.extend(validation_problems(exc, where))
            continue
        out += [(where, vpn) for vpn in _build_vpn(parsed, where, problems)]
    return out


def _expand(section: str, entries: list[dict], validate, problems: list[str]) -> list[tuple[str, Any]]:
    """Each entry's sweeps expanded and validated, with where in the file it came from."""
    out = []
    for i, entry in enumerate(entries):
        where = f"{section}[{i}]"
        try:
            variants = expand_sweeps(entry)
        except ValueError as exc:
            problems.append(f"{where}.{exc}")
            continue
        for variant in variants:
            try:
                out.append((where, validate(variant)))
            except ValidationError as exc:
                problems.extend(validation_problems(exc, where, skip_tags=True))
                break  # one report per entry is enough
    return out


SHAPED_FIELDS = ("rate_mbit", "delay_ms", "jitter_ms", "loss_pct")


def _check_hosts(top: "_StudyFile", links: list, problems: list[str]) -> None:
    """A study on real hosts: its `hosts:` names the two ends of the WAN, its links shape them only
    when asked to (`shape: true`)."""
    roles = HOST_ROLES[top.topology]
    pairs = [("hosts", top.hosts)] if isinstance(top.hosts, dict) else [(f"hosts[{i}]", p) for i, p in enumerate(top.hosts)]
    if not pairs:
        problems.append("hosts: an empty list; give a pair of hosts, or several")
    for where, pair in pairs:
        for role, name in pair.items():
            if role not in roles:
                problems.append(f"{where}.{role}: not a role of a {top.topology} study; map {' and '.join(roles)} "
                                f"(the two ends of the WAN) to inventory hosts")
            elif not name.strip():
                problems.append(f"{where}.{role}: expected an inventory host name")
        missing = [role for role in roles if role not in pair]
        if missing:
            problems.append(f"{where}: a {top.topology} study on real hosts maps both {' and '.join(roles)}; "
                            f"{' and '.join(missing)} missing")
        elif pair[roles[0]] == pair[roles[1]]:
            problems.append(f"{where}.{roles[1]}: {pair[roles[1]]!r} is {roles[0]} too: the two ends of the WAN "
                            "are two hosts")
        elif [p for _, p in pairs].index(pair) != [w for w, _ in pairs].index(where):
            problems.append(f"{where}: the same pair as hosts[{[p for _, p in pairs].index(pair)}]")
    for i, entry in enumerate(top.vpns):
        if isinstance(entry, dict) and entry.get("cores") is not None:
            problems.append(f"vpns[{i}].cores: pins the tunnel ends of this machine's testbed; on real hosts "
                            "their daemons run on the cores the hosts give them")
    for where, link in links:
        shaped = [name for name in SHAPED_FIELDS if getattr(link, name)]
        if shaped and not link.shape:
            problems.append(f"{where}.{shaped[0]}: on real hosts shaping is opt-in: add `shape: true` to this link "
                            f"(it shapes the hosts' WAN interfaces, and is removed afterwards), or leave "
                            f"{' and '.join(shaped)} out to measure the real path as it is")


PATH_FIELDS = ("mtu", "icmp", "nat", "nat_udp_timeout_s")  # the router's in the middle of the WAN


def _check_path(top: "_StudyFile", links: list, problems: list[str]) -> None:
    """A link's `mtu`, `icmp` and `nat` are a router's in the middle of the WAN, which only the two-sided
    topologies here have, the NAT on their client (left) side: not a mesh (its peers' links meet at a core,
    no side is the client's), not real hosts (their path is what it is)."""
    if top.topology != "mesh" and top.hosts is None:
        return
    where_not = "a mesh's links meet at its core" if top.topology == "mesh" else \
        "on real hosts the path between them is the real one"
    problems += dict.fromkeys(f"{where}.{name}: only for a remote-access or site-to-site study on this machine, "
                              f"whose WAN gets a router in the middle that sets it; {where_not}"
                              for where, link in links for name in PATH_FIELDS if name in link.model_fields_set)


def _check_events(top: "_StudyFile", links: list, workloads: list, vpns: list, problems: list[str]) -> None:
    """A workload's events happen within it, on a testbed of this machine with a client side, those that
    act on a NAT on links that have one, a rekey to VPNs whose software can be made to (the outer layer's)."""
    without_nat = [where for where, link in links if not link.behind_nat]
    cannot_rekey = [(where, vpn) for where, vpn in vpns if vpn.layers and not DRIVERS[vpn.layers[0].driver].rekeys]
    can = ", ".join(sorted(name for name, driver in DRIVERS.items() if driver.rekeys))
    for where, workload in workloads:
        for i, event in enumerate(workload.events):
            here = f"{where}.events[{i}]"
            if top.topology == "mesh" or top.hosts is not None:
                problems.append(f"{here}: events happen to the WAN of a remote-access or site-to-site study on this "
                                "machine; " + ("a mesh has no client side" if top.topology == "mesh" else
                                               "on real hosts the path is the real one"))
                continue
            lasts = KINDS[workload.kind].estimate_s(workload, None)
            if event.at_s >= lasts:
                problems.append(f"{here}.at_s: {event.at_s:g} s is past the workload's end (it lasts about "
                                f"{lasts:.3g} s); an event happens during it")
            if event.kind in NAT_EVENTS and without_nat:
                problems.append(f"{here}.{event.kind}: acts on the client side's NAT, and {without_nat[0]} has none "
                                "(nat: masquerade)")
            if event.rekey and cannot_rekey:
                where_vpn, vpn = cannot_rekey[0]
                problems.append(f"{here}.rekey: {where_vpn} ({vpn.label}): {vpn.layers[0].driver} offers no way to "
                                f"force a rekey here; drivers that do: {can}")


def _check_mesh(top: "_StudyFile", vpns: list, workloads: list, problems: list[str]) -> None:
    """A mesh has its peers, one machine, and VPNs that can join N peers; `pairs` only in a mesh."""
    if top.topology != "mesh":
        if top.peers is not None:
            problems.append("peers: only for topology 'mesh'")
        problems += [f"{where}.pairs: only for topology 'mesh' (the other topologies have one pair)"
                     for where, workload in workloads if workload.pairs != "one"]
        return
    if top.peers is None:
        problems.append(f"peers: topology 'mesh' needs how many peers ({MIN_PEERS} to {MAX_PEERS})")
    if top.hosts is not None:
        problems.append("hosts: a mesh runs in namespaces on one machine (or its VM), not on real hosts")
    problems += [f"{where}.kind: a mesh runs {', '.join(k for k, kind in KINDS.items() if kind.in_mesh)}, not "
                 f"{workload.kind}" for where, workload in workloads if not KINDS[workload.kind].in_mesh]
    for where, vpn in vpns:
        driver = DRIVERS[vpn.driver]
        if vpn.inner:
            problems.append(f"{where}.inner: a mesh has one tunnel layer")
        elif driver.mesh == "hub" and top.peers and getattr(vpn.options, "port", 0) + top.peers - 2 > 65535:
            problems.append(f"{where}.options.port: a hub listens on {top.peers - 1} ports from it, past 65535")
        elif not driver.baseline and driver.mesh is None:
            capable = sorted(name for name, d in DRIVERS.items() if d.mesh)
            problems.append(f"{where}.driver: '{vpn.driver}' cannot join a mesh (it declares neither a full mesh nor "
                            f"hub and spoke); drivers that can: {', '.join(capable)}")


def _check_distinct(same: str, items: list[tuple[str, str, dict]], problems: list[str]) -> None:
    """Refuse two entries (where, label, configuration) of one configuration."""
    first: dict[str, tuple[str, str]] = {}
    for where, label, config in items:
        key = json.dumps(config, sort_keys=True)
        if key not in first:
            first[key] = (where, label)
            continue
        other, other_label = first[key]
        if other == where:
            problems.append(f"{where}: its sweeps give {same} twice ({label!r}); both would be one scenario")
        else:
            problems.append(f"{where} ({label!r}) and {other} ({other_label!r}) are {same}, so they would be "
                            f"one scenario; remove one or make them differ")


def _check_unique(section: str, labels: list[str], problems: list[str]) -> None:
    seen = set()
    for label in labels:
        if label in seen:
            problems.append(f"{section}: two entries are both labelled {label!r}; give one a distinct 'label'/'name'")
        seen.add(label)


def load_study(path: str | Path) -> Study:
    """A study file to run on this machine: at most MAX_FILE_BYTES of UTF-8 YAML."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a FIFO would block the read until killed
            raise StudyError(f"{path}: not a regular file ({file_kind(mode)}); a study is a YAML file")
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise StudyError(f"{path}: cannot read study file: {exc.strerror}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise StudyError(f"{path}: more than {MAX_FILE_BYTES // 1024**2} MB, refused before reading it as YAML "
                         f"(a study is a few KB: sweeps are lists, not copies)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise StudyError(f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column}; "
                         f"save the file as UTF-8") from exc
    return parse_study(text, str(path), here=True)


def builtin_studies() -> dict[str, str]:
    """Name -> YAML text of the studies shipped with vpnlab."""
    folder = resources.files("vpnlab") / "studies"
    return {p.name.removesuffix(".yaml"): p.read_text() for p in folder.iterdir() if p.name.endswith(".yaml")}


def load_builtin(name: str, here: bool = False) -> Study:
    studies = builtin_studies()
    if name not in studies:
        raise StudyError(f"no built-in study {name!r}; built-in: {', '.join(sorted(studies))}")
    return parse_study(studies[name], f"builtin:{name}", here)
