"""The README is a front door and docs/ holds the rest: every relative link in them resolves (a file
that exists and, for `#anchor`, a heading of it, by GitHub's slugs), the README stays short, every
docs page is reachable from it, and the README's worked example is the study file it names."""
import re
from pathlib import Path

import pytest

from vpnlab.plan.study import parse_study

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (where brackets are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text()))


def test_the_slugs_are_githubs():
    assert slug("Current releases from their Go modules") == "current-releases-from-their-go-modules"
    assert slug("What the VPN software does here, found and explained") == \
        "what-the-vpn-software-does-here-found-and-explained"
    assert slug("The `fips` profile: what it changes") == "the-fips-profile-what-it-changes"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
            continue
        file, _, anchor = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= 250, f"README.md has {lines} lines: move the detail into docs/"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README)}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_each_docs_page_has_a_title_and_a_way_back(page):
    first, _, back = page.read_text().splitlines()[:3]
    assert first.startswith("# ") and back == "[Back to the README](../README.md)", page.name


def test_the_worked_example_is_the_study_file_it_names_and_runs():
    text = README.read_text()
    example = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    assert example == (ROOT / "docs" / "examples" / "capacity-mini.yaml").read_text()
    study = parse_study(example, "docs/examples/capacity-mini.yaml")
    assert len(study.workloads) == 2 and {v.driver for v in study.vpns} == {"none", "wireguard", "openvpn"}
    assert "sudo ./bootstrap.sh run " in text and "sudo ./bootstrap.sh test " in text
    figure = ROOT / "docs" / "img" / "capacity-mini.png"
    assert "](docs/img/capacity-mini.png)" in text and figure.stat().st_size < 100_000


CAPACITY_RUN = ROOT / "runs" / "capacity-2026"
FIELD_RUN = ROOT / "runs" / "field-2026"
FIELD_TABLE = "python -m vpnlab.report.field_table runs/field-2026"
FIELD_OTHERS_RUN = ROOT / "runs" / "field-2026-others"
CAPACITY_TABLE = "python -m vpnlab.report.capacity_table runs/capacity-2026"


def _generated(text: str, command: str) -> str:
    """What a page holds between `<!-- generated: COMMAND -->` and the end mark."""
    start = f"<!-- generated: {command} -->\n"
    return text[text.index(start) + len(start):text.index("<!-- end of generated -->", text.index(start))].strip()


def test_the_field_page_and_the_readme_quote_the_committed_run():
    """docs/field.md's table and the README's rows of the 1400-byte path are what vpnlab computes from the
    committed store of field-2026, whose every scenario was measured: regenerate them with the command
    each page names when either changes."""
    from vpnlab.analyse.analysed import analyse
    from vpnlab.report.field_table import markdown

    analysed = analyse(FIELD_RUN)
    assert {s.status for s in analysed.scenarios} == {"done"}
    assert _generated((ROOT / "docs" / "field.md").read_text(), FIELD_TABLE) == markdown(analysed)
    assert _generated(README.read_text(), f"{FIELD_TABLE} --only mtu1400") == markdown(analysed, only="mtu1400")
    # the study's other six VPNs, one repetition each: every scenario measured or failed (a tunnel that did
    # not come up under its condition), none left unfinished
    others = analyse(FIELD_OTHERS_RUN)
    assert {s.status for s in others.scenarios} <= {"done", "failed"}
    assert _generated((ROOT / "docs" / "field.md").read_text(), f"{FIELD_TABLE}-others") == markdown(others)
    assert _generated(README.read_text(), f"{FIELD_TABLE}-others --only mtu1400") == markdown(others, only="mtu1400")
    # the three VPNs that ran in the VM, one repetition each, in two stores (all three on the 1400-byte path;
    # libreswan and L2TP/IPsec on the others): their tables on the page, the 1400-byte one in the README too
    for store in ("vm", "vm-1500-1280"):
        vm = analyse(ROOT / "runs" / f"field-2026-{store}")
        assert {s.status for s in vm.scenarios} <= {"done", "failed"}
        assert {s.vpn for s in vm.scenarios} <= {"libreswan", "l2tp", "pptp"}
        assert {s.measured_in for s in vm.scenarios} == {"vm"}
        assert _generated((ROOT / "docs" / "field.md").read_text(), f"{FIELD_TABLE}-{store}") == markdown(vm)
    assert _generated(README.read_text(), f"{FIELD_TABLE}-vm") == markdown(analyse(ROOT / "runs" / "field-2026-vm"))


def test_the_reports_field_section_gives_each_vpn_a_word_per_condition_and_the_figures_under_it():
    """The report of the committed field-2026 run: the at-a-glance table (a row per VPN, a column per
    condition), then the figures each word rests on with their 95% intervals, e.g. WireGuard's path MTU
    through a 1400-byte path with ICMP blocked, 1328 B in each of its three repetitions."""
    from vpnlab.report.html import render

    page = render(FIELD_RUN)
    section = page[page.index('<h2 id="field">'):]
    section = section[:section.index("<h2", 4)]
    glance, figures = section.split("The figures each word rests on")
    assert glance.count("<tr>") == 1 + 5 and glance.count("<th") == 1 + 18  # five VPNs, eighteen conditions
    assert "<td class=\"label\">black hole</td>" in glance
    row = next(r for r in figures.split("<tr>") if "wan-mtu1400-icmp-blocked-nat30s path-mtu-4M" in r
               and ">wireguard<" in r)
    assert '<td class="label">black hole</td>' in row and "1328 [1328, 1328]" in row and "<td>3</td>" in row


def test_the_capacity_page_and_the_readme_quote_the_committed_run():
    """docs/capacity.md's tables and the README's builds table are what vpnlab computes from the committed
    store of capacity-2026: regenerate them with the command each page names when either changes."""
    from vpnlab.analyse.analysed import analyse
    from vpnlab.report.capacity_table import builds_markdown, page_parts

    analysed = analyse(CAPACITY_RUN)
    assert _generated((ROOT / "docs" / "capacity.md").read_text(), CAPACITY_TABLE) == page_parts(analysed)
    assert _generated(README.read_text(), f'{CAPACITY_TABLE} --builds "on 1 core"') == builds_markdown(
        analysed, only="on 1 core")
    assert (ROOT / "docs" / "img" / "capacity-2026.png").stat().st_size < 150_000
