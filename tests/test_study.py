"""Study files: valid ones plan as written, invalid ones name the field."""

import pytest

from vpnlab.core.errors import StudyError
from vpnlab.core.schema import parse_size
from vpnlab.plan.study import builtin_studies, load_builtin, parse_study

MINIMAL = """
name: t
vpns: [{driver: none}, {driver: wireguard}]
links: [{rate_mbit: 8}]
workloads: [{kind: tcp}]
"""


def errors_of(text: str) -> str:
    with pytest.raises(StudyError) as info:
        parse_study(text, "study.yaml")
    return str(info.value)


def test_minimal_study_has_defaults():
    study = parse_study(MINIMAL)
    assert study.topology == "remote-access"
    assert study.repetitions.max == 3 and not study.repetitions.adaptive
    assert [v.label for v in study.vpns] == ["none", "wireguard"]
    assert study.links[0].rate_mbit == 8
    assert study.workloads[0].duration_s == 10


def test_every_builtin_study_is_valid():
    for name in builtin_studies():
        assert load_builtin(name).vpns


def test_sweeps_expand_in_file_order():
    study = parse_study("""
name: sweep
vpns: [{driver: none}]
links: [{rate_mbit: [2, 8]}]
workloads: [{kind: tcp, window: [8K, 64K], streams: [1, 4]}]
""")
    assert [l.rate_mbit for l in study.links] == [2, 8]
    assert [(w.window, w.streams) for w in study.workloads] == [
        (8192, 1), (8192, 4), (65536, 1), (65536, 4)]


def test_unknown_key_is_named():
    message = errors_of(MINIMAL.replace("{kind: tcp}", "{kind: tcp, windw: 8K}"))
    assert "study.yaml" in message
    assert "workloads[0].windw: unknown field" in message


def test_unknown_top_level_key():
    assert "repetition: unknown field" in errors_of(MINIMAL + "repetition: 3\n")


def test_wrong_type_is_named():
    message = errors_of(MINIMAL.replace("rate_mbit: 8", "rate_mbit: fast"))
    assert "links[0].rate_mbit" in message


def test_unknown_driver_lists_known_ones():
    message = errors_of(MINIMAL.replace("driver: wireguard", "driver: wirgaurd"))
    assert "vpns[1].driver: unknown VPN driver 'wirgaurd'" in message
    assert "wireguard" in message.split("known:")[1]


def test_unknown_driver_option_is_named():
    message = errors_of(MINIMAL.replace("{driver: wireguard}", "{driver: wireguard, options: {cipher: aes}}"))
    assert "vpns[1].options.cipher: unknown field" in message


def test_unknown_workload_kind():
    assert "workloads[0]" in errors_of(MINIMAL.replace("kind: tcp", "kind: quic"))


def test_fips_wireguard_is_refused():
    message = errors_of(MINIMAL.replace("{driver: wireguard}", "{driver: wireguard, profile: fips}"))
    assert "vpns[1].profile" in message and "FIPS" in message


def test_nesting_needs_site_to_site():
    text = MINIMAL.replace("{driver: wireguard}", "{driver: wireguard, inner: {driver: wireguard, options: {port: 51821}}}")
    assert "nested tunnels need topology 'site-to-site'" in errors_of(text)
    study = parse_study(text + "topology: site-to-site\n")
    assert study.vpns[1].label == "wireguard in wireguard"
    assert len(study.vpns[1].layers) == 2


def test_duplicate_labels_are_refused():
    assert "both labelled 'wireguard'" in errors_of(MINIMAL.replace("{driver: none}", "{driver: wireguard}"))


def test_not_yaml():
    assert "not valid YAML" in errors_of("name: [unclosed\n")


def test_empty_sweep_is_refused():
    assert "links[0].rate_mbit: empty list" in errors_of(MINIMAL.replace("rate_mbit: 8", "rate_mbit: []"))


def test_all_problems_reported_at_once():
    message = errors_of(MINIMAL.replace("rate_mbit: 8", "rate_mbit: -1").replace("kind: tcp", "kind: tcp, streams: 0"))
    assert "links[0].rate_mbit" in message and "workloads[0].streams" in message


def test_a_missing_section_is_reported_with_the_other_sections_problems():
    message = errors_of(MINIMAL.replace("workloads: [{kind: tcp}]\n", "").replace("driver: wireguard", "driver: wg")
                        .replace("rate_mbit: 8", "rate_mbit: [8, -1]"))
    assert "workloads: Field required" in message
    assert "vpns[1].driver: unknown VPN driver 'wg'" in message
    assert "links[0].rate_mbit" in message


def test_a_section_faulted_at_the_top_level_is_not_reported_twice():
    message = errors_of(MINIMAL.replace("links: [{rate_mbit: 8}]", "links: [7]").replace("kind: tcp", "kind: nope"))
    assert message.count("links[0]") == 1 and "workloads[0]" in message


def test_a_huge_sweep_in_an_invalid_file_is_not_expanded():
    sweep = "[" + ", ".join(str(n) for n in range(1, 200)) + "]"  # 199 x 199 links: more than MAX_SCENARIOS
    text = (MINIMAL.replace("name: t\n", "").replace("rate_mbit: 8", f"rate_mbit: {sweep}, delay_ms: {sweep}")
            .replace("[1, ", "[-1, ", 1)
            .replace("kind: tcp", "kind: tcp, streams: 0"))
    message = errors_of(text)
    assert "name: Field required" in message and "workloads[0].streams" in message
    assert "links[0]" not in message


@pytest.mark.parametrize("text,expected", [("64K", 65536), ("1M", 1048576), (8192, 8192), ("1.5k", 1536)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError):
        parse_size("lots")


def test_the_study_format_example_is_a_valid_study():
    import re
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "study-format.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", page, re.S).group(1)
    study = parse_study(example, "docs/study-format.md")
    assert len(study.vpns) == 1 + 6 + 1 + 1 + 1
    assert {v.options.compression for v in study.vpns if v.driver == "openvpn"} == {"off", "lzo"}
    assert len(study.workloads) == 2 + 1 + 3


def test_repetition_rules():
    fixed = parse_study(MINIMAL + "repetitions: 4\n").repetitions
    assert (fixed.min, fixed.max, fixed.adaptive) == (4, 4, False)
    adaptive = parse_study(MINIMAL + "repetitions: {min: 3, max: 12, ci_target_pct: 2}\n").repetitions
    assert (adaptive.min, adaptive.max, adaptive.ci_target_pct) == (3, 12, 2)
    assert "Stein's two-stage rule: the first 3 fix the total for a 95% interval within 2% of the geometric mean" \
        in adaptive.describe()
    assert "repetitions: max (2) is below min (5)" in errors_of(MINIMAL + "repetitions: {min: 5, max: 2}\n")
    assert "repetitions: expected a count" in errors_of(MINIMAL + "repetitions: 0\n")
    assert "needs min >= 2" in errors_of(MINIMAL + "repetitions: {min: 1}\n")
