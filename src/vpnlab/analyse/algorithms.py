"""What each configuration's cryptography was, as the run recorded it (run/algorithms.py `record`).

Per configuration and layer, the algorithms negotiated over every repetition (the declared ones
where none were read), which the report's "Algorithms per profile" table shows, and what each
driver's `fips` profile changed against `default`; the verdict on a seed's finding that sets two
profiles against each other says which channel differs (`explain_profiles`, for findings.py). The
types and the vocabulary are algorithms.py's; each driver reads its own daemons' logs.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..algorithms import CONTROL, DATA, HEADINGS, TOOL, Algorithms, fips_approved, weak
from ..catalog import DRIVERS
from .labels import for_scenarios
from ..plan.seed_findings import pick, side_rows


def read(store) -> dict[str, list[list[dict]]]:
    """Scenario id -> per stored repetition, its layers as `record` stored them."""
    out: dict[str, list] = defaultdict(list)
    for row in store.raw_outputs(TOOL):
        try:
            out[row["scenario_id"]].append(json.loads(row["output"]))
        except (TypeError, ValueError):
            continue
    return out


def declared_layers(scenario_row) -> list[tuple[str, str, Algorithms | None]]:
    """(driver, profile, declared) of each layer of a stored scenario, outermost first, from its
    stored configuration (for stores written before algorithms were recorded)."""
    layers, config = [], scenario_row.config
    implementations = scenario_row.implementation.split("+")
    while config:
        driver = DRIVERS.get(config["driver"])
        if driver and not driver.baseline:
            i = len(layers)
            try:
                options = driver.Options(**config.get("options", {}))
                declared = driver.algorithms(options, config.get("profile", "default"),
                                             implementations[i] if i < len(implementations) else "")
            except ValueError:
                declared = None
            layers.append((config["driver"], config.get("profile", "default"), declared))
        config = config.get("inner")
    return layers


def weak_in(scenario_row) -> list[str]:
    """The broken or deprecated algorithms a stored configuration runs, by its driver's declaration."""
    found = []
    for _, _, declared in declared_layers(scenario_row):
        for value in (declared.values().values() if declared else ()):
            found += [w for w in weak(value) if w not in found]
    return found


@dataclass
class Layer:
    """One configuration's layer, over all its repetitions."""

    driver: str
    profile: str
    declared: Algorithms | None
    negotiated: dict[str, Counter] = field(default_factory=dict)  # field -> values seen
    sources: set = field(default_factory=set)
    read: int = 0    # repetitions it was read from
    total: int = 0   # repetitions stored

    def effective(self) -> dict[str, str]:
        """Per field: the value negotiated most often, else the declared one."""
        out = dict(self.declared.values()) if self.declared else {}
        out.update({k: c.most_common(1)[0][0] for k, c in self.negotiated.items() if c})
        return out

    def cell(self, key: str) -> dict:
        """One cell of the table: text, and why to read it with care (warn), and its style."""
        declared = (self.declared.values() if self.declared else {}).get(key, "")
        seen = self.negotiated.get(key)
        fips = self.profile == "fips"
        if seen:
            text = " / ".join(v for v, _ in seen.most_common())
            warn = []
            if len(seen) > 1:
                warn.append("different values in different repetitions: " + ", ".join(
                    f"{v} ({n})" for v, n in seen.most_common()))
            if declared and any(v != declared for v in seen):
                warn.append(f"declared: {declared}")
            if fips and not fips_approved(text):
                warn.append("not FIPS 140-approved, under the fips profile")
            return {"text": text, "warn": "; ".join(warn + weak(text)), "css": "mismatch" if warn else ""}
        if declared:
            bad = ["not FIPS 140-approved, under the fips profile"] if fips and not fips_approved(declared) else []
            return {"text": declared, "warn": "; ".join(bad + weak(declared)), "css": "declared"}
        return {"text": "-", "warn": "", "css": ""}


def without_profile(config: dict) -> str:
    def strip(c):
        return {k: (strip(v) if k == "inner" else v) for k, v in c.items() if k not in ("profile", "label")}
    return json.dumps(strip(config), sort_keys=True)


def configurations(scenarios, records: dict, labels) -> dict[str, tuple[object, list[Layer]]]:
    """Label as shown -> (a scenario row of it, its layers over every repetition of every scenario)."""
    groups: dict[str, list] = defaultdict(list)
    for sc in scenarios:
        if not sc.is_baseline:
            groups[labels.of(sc)].append(sc)
    out = {}
    for label, members in groups.items():
        layers = [Layer(d, p, a) for d, p, a in declared_layers(members[0])]
        for sc in members:
            for rep in records.get(sc.id, []):
                for entry in rep:
                    i = entry.get("layer", 0)
                    if i >= len(layers):
                        continue
                    layer = layers[i]
                    layer.total += 1
                    if entry.get("declared"):  # as declared when it ran, which its flags compared with
                        layer.declared = Algorithms.from_dict(entry["declared"])
                    found = Algorithms.from_dict(entry.get("negotiated"))
                    if found:
                        layer.read += 1
                        layer.sources.add(found.source)
                        for k, v in found.values().items():
                            layer.negotiated.setdefault(k, Counter())[v] += 1
        out[label] = (members[0], layers)
    return out


def change_text(driver: str, a_label: str, b_label: str, a: Layer, b: Layer, measured: bool) -> str:
    """What b's profile changed against a's, channel by channel, in one sentence."""
    ea, eb = a.effective(), b.effective()
    how = "negotiated" if measured else "declared (not read from a live tunnel)"
    differ = [k for k in HEADINGS if ea.get(k, "") != eb.get(k, "")]
    if not differ:
        return (f"{driver}: {b_label} and {a_label} use the same algorithms on both channels ({how}): "
                f"the {b.profile} profile changes no algorithm in use")
    parts = [f"{HEADINGS[k]} {ea.get(k) or '-'} -> {eb.get(k) or '-'}" for k in differ]
    text = f"{driver}: {b_label} against {a_label} ({how}): " + "; ".join(parts)
    if not any(k in DATA for k in differ):
        data = ", ".join(v for v in (ea.get("data_cipher"), ea.get("data_integrity")) if v)
        text += (f"; the data channel is the same in both ({data}): every packet is protected alike, so only "
                 "the control channel, which runs at set-up and on rekeying, differs")
    elif not any(k in CONTROL for k in differ):
        text += "; the control channel is the same in both: the difference is in the data channel, paid per packet"
    else:
        text += "; both channels differ, the data channel's per packet"
    return text


def profile_changes(configs: dict) -> list[str]:
    """For each configuration with a twin that differs only in its profile: what the profile changed."""
    out = []
    items = list(configs.items())
    for i, (label_a, (sa, layers_a)) in enumerate(items):
        for label_b, (sb, layers_b) in items[i + 1:]:
            if sa.profile == sb.profile or sa.measured_in != sb.measured_in:
                continue
            if without_profile(sa.config) != without_profile(sb.config) or len(layers_a) != len(layers_b):
                continue
            if sa.profile != "default":  # default first
                (label_a, layers_a), (label_b, layers_b) = (label_b, layers_b), (label_a, layers_a)
            for la, lb in zip(layers_a, layers_b):
                measured = la.read > 0 and lb.read > 0
                out.append(change_text(la.driver, label_a, label_b, la, lb, measured))
    return out


def explain_profiles(judgements, store) -> None:
    """Append to the verdict of each finding that sets one configuration's two profiles against each
    other what the profiles changed, channel by channel, and so which part of the seed's difference
    can remain here."""
    rows = store.scenarios()
    records = None
    for j in judgements:
        f = j.finding
        if f.a is None or f.b is None:
            continue
        # one scenario a side (a side averaged over several compares no single pair of profiles)
        sa, sb = (one[0] if len(one) == 1 else None for one in pick(side_rows(f.a, rows), side_rows(f.b, rows)))
        if sa is None or sb is None or sa.profile == sb.profile or sa.is_baseline:
            continue
        if without_profile(sa.config) != without_profile(sb.config):
            continue
        records = read(store) if records is None else records
        labels = for_scenarios(rows)
        both = (labels.of(sa), labels.of(sb))  # every repetition of the two, whatever the workload
        configs = configurations([r for r in rows if labels.of(r) in both], records, labels)
        pairs = list(zip(configs[both[0]][1], configs[both[1]][1]))
        texts = [change_text(la.driver, "A", "B", la, lb, la.read > 0 and lb.read > 0) for la, lb in pairs]
        differ = {k for la, lb in pairs for k in HEADINGS if la.effective().get(k) != lb.effective().get(k)}
        if not differ:
            remains = "none of the seed's difference can come from the algorithms here"
        elif differ & set(DATA):
            remains = ("the part of the seed's difference that the data channel's algorithms cause, paid per "
                       "packet, can remain here")
        else:
            remains = "none of a difference measured while data flows can come from the algorithms here"
        j.reason += (f"; what the profiles changed: {'; '.join(texts)}; {remains} (vpnlab's fips profile restricts "
                     "the algorithms; it does not switch to a FIPS-validated crypto module, as a seed's FIPS mode "
                     "may have, so what such a module costs is not reproduced)")
