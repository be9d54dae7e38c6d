"""Study files: what a user asks for, validated before anything is created.

A study is YAML. Its `vpns`, `links` and `workloads` are lists whose cartesian
product is the plan. Inside one entry, a list where a single value is expected
is a sweep: `window: [8K, 16K, 32K, 64K]` makes four workloads. Every error
names the file, the field and what was expected.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from .errors import StudyError
from .testbed.topology import MAX_LAYERS


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- sizes -------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)[bB]?\s*$")


def parse_size(value: Any) -> int:
    """'64K' -> 65536 (binary multiples, as iperf3 reads them)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 65536, 64K or 1M")
    if isinstance(value, (int, float)):
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 65536, 64K or 1M, got {value!r}")
    number, unit = match.groups()
    return int(float(number) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()])


Size = Annotated[int, Field(gt=0)]


# --- background traffic ------------------------------------------------------

BACKGROUND_PROTOCOLS = ("http", "ftp", "smtp", "pop3", "dns")
# One transaction of each protocol: a web object, a file, a mail sent, a mail fetched.
DEFAULT_OBJECT = {"http": 64 * 1024, "ftp": 256 * 1024, "smtp": 32 * 1024, "pop3": 32 * 1024}


class BackgroundFlow(Strict):
    """Transactions of one protocol at a mean offered rate (Poisson arrivals), source <- sink
    except SMTP, which sends. DNS is given in queries per second, the rest in kbit/s."""

    protocol: Literal["http", "ftp", "smtp", "pop3", "dns"]
    rate_kbit: float | None = Field(None, gt=0, le=10_000_000)
    queries_per_s: float | None = Field(None, gt=0, le=10_000)
    size: Size | None = Field(None, le=1024**3, description="bytes per transaction (not for dns)")

    @field_validator("size", mode="before")
    @classmethod
    def parse_object_size(cls, value):
        return None if value is None else parse_size(value)

    @model_validator(mode="after")
    def rate_given_once(self):
        if self.protocol == "dns":
            if self.queries_per_s is None or self.rate_kbit is not None or self.size is not None:
                raise ValueError("a dns flow takes queries_per_s (and no rate_kbit or size)")
        elif self.rate_kbit is None or self.queries_per_s is not None:
            raise ValueError(f"a {self.protocol} flow takes rate_kbit (and no queries_per_s)")
        return self

    @property
    def object_size(self) -> int:
        return self.size or DEFAULT_OBJECT[self.protocol]

    @property
    def per_s(self) -> float:
        """Mean transactions per second."""
        if self.protocol == "dns":
            return self.queries_per_s
        return self.rate_kbit * 1000 / 8 / self.object_size


class Background(Strict):
    """A mix of flows run alongside every measurement of the scenarios on this link."""

    name: str = Field(min_length=1)
    flows: list[BackgroundFlow] = Field(min_length=1)


# The small-business study's router-generated office mix, about 0.8 Mbit/s offered.
BACKGROUND_PRESETS = {
    "office": Background(name="office", flows=[
        BackgroundFlow(protocol="http", rate_kbit=400),
        BackgroundFlow(protocol="ftp", rate_kbit=200),
        BackgroundFlow(protocol="pop3", rate_kbit=120),
        BackgroundFlow(protocol="smtp", rate_kbit=60),
        BackgroundFlow(protocol="dns", queries_per_s=5),
    ]),
}


# --- links -----------------------------------------------------------------

class Link(Strict):
    """The WAN between the two sides. Unset rate means an unshaped veth."""

    name: str = ""
    rate_mbit: float | None = Field(None, gt=0, le=100_000)
    delay_ms: float = Field(0, ge=0, le=10_000, description="one-way delay added in each direction")
    jitter_ms: float = Field(0, ge=0, le=10_000, description="delay variation in each direction")
    jitter_distribution: Literal["uniform", "normal", "pareto", "paretonormal"] = "normal"
    loss_pct: float = Field(0, ge=0, le=100, description="random loss in each direction")
    queue_ms: float = Field(50, gt=0, le=10_000, description="bottleneck buffer, in ms at the link rate")
    background: Background | None = Field(None, description="'office', 'none' or {name, flows}")

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
            return self.name + self.background_label
        parts = [f"{self.rate_mbit:g}mbit" if self.rate_mbit else "unshaped"]
        if self.delay_ms:
            parts.append(f"{self.delay_ms:g}ms")
        if self.jitter_ms:
            parts.append(f"j{self.jitter_ms:g}ms")
        if self.loss_pct:
            parts.append(f"loss{self.loss_pct:g}%")
        return "-".join(parts) + self.background_label

    @property
    def background_label(self) -> str:
        return f"+{self.background.name}" if self.background else ""

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms or self.jitter_ms or self.loss_pct)


# --- workloads ---------------------------------------------------------------



class TcpWorkload(Strict):
    """iperf3 TCP bulk transfer."""

    kind: Literal["tcp"] = "tcp"
    duration_s: float = Field(10, gt=0, le=3600)
    omit_s: float = Field(1, ge=0, le=600, description="warm-up seconds left out of the result")
    window: Size | None = Field(None, description="socket buffer (iperf3 -w); the namespace limits are raised to allow it")
    streams: int = Field(1, ge=1, le=128)
    reverse: bool = Field(False, description="server sends, client receives")

    @field_validator("window", mode="before")
    @classmethod
    def parse_window(cls, value):
        return None if value is None else parse_size(value)

    @property
    def label(self) -> str:
        parts = ["tcp"]
        if self.window:
            parts.append(f"w{_human(self.window)}")
        if self.streams > 1:
            parts.append(f"P{self.streams}")
        if self.reverse:
            parts.append("rev")
        return "-".join(parts)


class UdpWorkload(Strict):
    """iperf3 UDP at a fixed send rate."""

    kind: Literal["udp"] = "udp"
    rate_mbit: float = Field(10, gt=0, le=100_000)
    size: Size = Field(1400, le=65507, description="datagram payload bytes")
    duration_s: float = Field(5, gt=0, le=3600)
    reverse: bool = False

    @field_validator("size", mode="before")
    @classmethod
    def parse_datagram_size(cls, value):
        return parse_size(value)

    @property
    def label(self) -> str:
        return f"udp-{self.rate_mbit:g}M-{self.size}B" + ("-rev" if self.reverse else "")


class PingWorkload(Strict):
    """ICMP echo: round-trip time and loss for one payload size."""

    kind: Literal["ping"] = "ping"
    size: int = Field(56, ge=0, le=65507, description="ICMP payload bytes (ping -s)")
    count: int = Field(20, ge=1, le=100_000)
    interval_s: float = Field(0.2, ge=0.002, le=60)

    @property
    def label(self) -> str:
        return f"ping-{self.size}B"


class TransferWorkload(Strict):
    """Download one file from the sink over a real protocol server."""

    kind: Literal["transfer"] = "transfer"
    protocol: Literal["http", "https", "ssh", "ftp"] = "http"
    data: Literal["text", "random", "archive", "image"] = Field(
        "random", description="text compresses; random (like video), archive and image do not")
    size: Size = Field(10 * 1024 * 1024, le=64 * 1024**3)
    timeout_s: float = Field(600, gt=0, le=86400)

    @field_validator("size", mode="before")
    @classmethod
    def parse_file_size(cls, value):
        return parse_size(value)

    @property
    def label(self) -> str:
        return f"{self.protocol}-{self.data}-{_human(self.size)}"


WORKLOAD_KINDS = ("tcp", "udp", "ping", "transfer")
Workload = Annotated[Union[TcpWorkload, UdpWorkload, PingWorkload, TransferWorkload], Field(discriminator="kind")]
_workload_adapter = TypeAdapter(Workload)


def _human(n: int) -> str:
    for unit, size in (("M", 1024**2), ("K", 1024)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# --- VPN configurations ------------------------------------------------------

@dataclass(frozen=True)
class VpnConfig:
    """One concrete VPN configuration: a driver, its options, maybe a tunnel inside it."""

    driver: str
    options: BaseModel
    profile: str = "default"
    label: str = ""
    inner: "VpnConfig | None" = None

    @property
    def layers(self) -> list["VpnConfig"]:
        """Outermost first; `none` has no layers."""
        own = [] if self.driver == "none" else [self]
        return own + (self.inner.layers if self.inner else [])

    def as_dict(self) -> dict:
        data = {"driver": self.driver, "profile": self.profile, "options": self.options.model_dump(mode="json")}
        if self.inner:
            data["inner"] = self.inner.as_dict()
        return data


class _VpnEntry(Strict):
    driver: str
    label: str = ""
    profile: Literal["default", "fips"] = "default"
    options: dict[str, Any] = Field(default_factory=dict)
    inner: "_VpnEntry | None" = None


# --- repetitions ---------------------------------------------------------------

class RepetitionRule(Strict):
    """A fixed count (min == max, no target), or adaptive: repeat until the 95% confidence
    interval's half-width is within `ci_target_pct` of the mean, between min and max times."""

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
        return (f"{self.min} to {self.max} repetitions, until the 95% CI half-width is within "
                f"{self.ci_target_pct:g}% of the mean")


# --- the study ---------------------------------------------------------------

class _StudyFile(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    topology: Literal["remote-access", "site-to-site"] = "remote-access"
    repetitions: RepetitionRule = Field(default_factory=lambda: RepetitionRule.fixed(3),
                                        description="a count, or {min, max, ci_target_pct}")
    order: Literal["listed", "shuffled"] = "listed"
    seed: int = 0
    vpns: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("repetitions", mode="before")
    @classmethod
    def count(cls, value):
        if isinstance(value, bool) or not isinstance(value, int):
            return value
        if not 1 <= value <= 1000:
            raise ValueError("expected a count from 1 to 1000, or {min, max, ci_target_pct}")
        return {"min": value, "max": value, "ci_target_pct": None}

    links: list[dict[str, Any]] = Field(default_factory=lambda: [{}], min_length=1)
    workloads: list[dict[str, Any]] = Field(min_length=1)


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


def _errors(exc: ValidationError, prefix: str, skip_tags: bool = False) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        if skip_tags and loc and loc[0] in WORKLOAD_KINDS:
            loc = loc[1:]  # the discriminator tag pydantic adds is not a field
        where = ".".join(p for p in (prefix, _format_loc(tuple(loc)) if loc else "") if p)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "union_tag_invalid":
            message = f"unknown kind; expected one of: {', '.join(WORKLOAD_KINDS)}"
        elif err["type"] == "union_tag_not_found":
            message = f"missing field 'kind' (one of: {', '.join(WORKLOAD_KINDS)})"
        lines.append(f"{where}: {message}")
    return lines


def expand_sweeps(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A list value in an entry is a sweep: one entry per combination, in file order."""
    keys = list(entry)
    values = [v if isinstance(v, list) else [v] for v in entry.values()]
    if any(len(v) == 0 for v in values):
        empty = next(k for k, v in zip(keys, values) if len(v) == 0)
        raise ValueError(f"{empty}: empty list (a sweep needs at least one value)")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _sweep_label(entry: dict, variant: dict) -> str:
    swept = [k for k, v in entry.items() if isinstance(v, list)]
    return ",".join(f"{k}={variant[k]}" for k in swept)


def _build_vpn(entry: _VpnEntry, where: str, problems: list[str]) -> list[VpnConfig]:
    from .drivers import REGISTRY  # the registry imports drivers, which import this module

    driver = REGISTRY.get(entry.driver)
    if driver is None:
        problems.append(f"{where}.driver: unknown VPN driver {entry.driver!r}; known: {', '.join(sorted(REGISTRY))}")
        return []
    inner_configs: list[VpnConfig | None] = [None]
    if entry.inner is not None:
        if entry.driver == "none":
            problems.append(f"{where}.inner: the 'none' driver has no tunnel to nest another inside")
            return []
        inner_configs = _build_vpn(entry.inner, where + ".inner", problems) or []
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
            problems.extend(_errors(exc, where + ".options"))
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
            configs.append(VpnConfig(entry.driver, options, entry.profile, full_label, inner))
    return configs


def parse_study(text: str, source: str = "<study>") -> Study:
    """Validate a study's YAML text; raise StudyError listing every problem."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StudyError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise StudyError(f"{source}: expected a mapping with name, vpns, links and workloads at the top level")
    try:
        top = _StudyFile.model_validate(raw)
    except ValidationError as exc:
        raise StudyError(f"{source}: invalid study\n  " + "\n  ".join(_errors(exc, ""))) from exc

    problems: list[str] = []
    vpns: list[VpnConfig] = []
    for i, entry in enumerate(top.vpns):
        where = f"vpns[{i}]"
        try:
            parsed = _VpnEntry.model_validate(entry)
        except ValidationError as exc:
            problems.extend(_errors(exc, where))
            continue
        vpns.extend(_build_vpn(parsed, where, problems))

    def expand(section: str, entries: list[dict], validate) -> list:
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
                    out.append(validate(variant))
                except ValidationError as exc:
                    problems.extend(_errors(exc, where, skip_tags=True))
                    break  # one report per entry is enough
        return out

    links = expand("links", top.links, Link.model_validate)
    workloads = expand("workloads", top.workloads, _workload_adapter.validate_python)

    nesting = max((len(v.layers) for v in vpns), default=0)
    if nesting > MAX_LAYERS:
        problems.append(f"vpns: at most {MAX_LAYERS} tunnel layers (one VPN inside another)")
    if nesting > 1 and top.topology != "site-to-site":
        problems.append("topology: nested tunnels need topology 'site-to-site' (two gateway layers per side)")
    _check_unique("vpns", [v.label for v in vpns], problems)
    _check_unique("links", [l.label for l in links], problems)
    if problems:
        raise StudyError(f"{source}: invalid study\n  " + "\n  ".join(problems))
    return Study(
        name=top.name,
        description=top.description,
        topology=top.topology,
        repetitions=top.repetitions,
        order=top.order,
        seed=top.seed,
        vpns=vpns,
        links=links,
        workloads=workloads,
        source_text=text,
        source_path=source,
    )


def _check_unique(section: str, labels: list[str], problems: list[str]) -> None:
    seen = set()
    for label in labels:
        if label in seen:
            problems.append(f"{section}: two entries are both labelled {label!r}; give one a distinct 'label'/'name'")
        seen.add(label)


def load_study(path: str | Path) -> Study:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise StudyError(f"{path}: cannot read study file: {exc.strerror}") from exc
    return parse_study(text, str(path))


def builtin_studies() -> dict[str, str]:
    """Name -> YAML text of the studies shipped with vpnlab."""
    folder = resources.files("vpnlab") / "studies"
    return {p.name.removesuffix(".yaml"): p.read_text() for p in folder.iterdir() if p.name.endswith(".yaml")}


def load_builtin(name: str) -> Study:
    studies = builtin_studies()
    if name not in studies:
        raise StudyError(f"no built-in study {name!r}; built-in: {', '.join(sorted(studies))}")
    return parse_study(studies[name], f"builtin:{name}")
