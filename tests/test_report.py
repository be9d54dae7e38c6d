"""The HTML report of a real (small) run: its contents, and how a real browser shows it."""

import json
from types import SimpleNamespace
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vpnlab import report
from vpnlab.capabilities import detect
from vpnlab.plan import check_plan, make_plan
from vpnlab.runner import Runner
from vpnlab.study import parse_study

pytestmark = pytest.mark.integration

STUDY = """
name: report-test
repetitions: 2
vpns: [{driver: none}, {driver: wireguard}, {driver: openvpn}, {driver: openvpn, profile: fips}]
links: [{name: wan, rate_mbit: 50}]
workloads:
  - {kind: tcp, duration_s: 1, omit_s: 0}
  - {kind: udp, rate_mbit: 10, duration_s: 1}
  - {kind: ping, size: [56, 1000], count: 5, interval_s: 0.02}
"""
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:|//)|url\(\s*["']?\s*(https?:|//)|@import""", re.I)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    plan = make_plan(parse_study(STUDY))
    caps = detect()
    assert check_plan(plan, caps) == {}
    Runner(plan, out, caps, progress=False).run()
    report.write(out)
    return out


def test_report_contents(results):
    html = (results / "report.html").read_text()
    built = report.build(results)
    assert "Grades against no VPN" in html
    headings, rows = built.table_vi["wan"]
    assert headings == ["TCP throughput", "RTT", "UDP throughput", "jitter", "loss"]
    assert [vpn for vpn, _ in rows] == sorted(["wireguard", "openvpn aes-256-gcm udp", "openvpn aes-256-gcm udp fips"])
    assert all(cell.text != "-" for _, cells in rows for cell in cells[:3])
    assert html.count("<svg") == len(built.figures) >= 4
    assert any("versus size" in f.title for f in built.figures)  # the ping size sweep
    assert any("throughput by interval" in f.title for f in built.figures)
    assert "Recommendation" in html and "best FIPS-only choice is openvpn" in html
    assert ">72<" in html  # WireGuard's measured overhead in the tunnel table
    assert not EXTERNAL.search(html), EXTERNAL.search(html)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_in_headless_chromium(results, tmp_path):
    browser = chromium()
    if not browser:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: install Debian's chromium")
        pytest.skip("chromium is not installed")
    netlog = tmp_path / "netlog.json"
    artefacts = Path(os.environ.get("VPNLAB_ARTIFACTS", Path(__file__).parent.parent / "artifacts"))
    artefacts.mkdir(exist_ok=True)
    shot = artefacts / "report.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={tmp_path / 'profile'}", f"--log-net-log={netlog}"]
    url = (results / "report.html").as_uri()
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    subprocess.run([*common, "--window-size=1300,3000", f"--screenshot={shot}", url],
                   capture_output=True, timeout=120)
    figures = len(report.build(results).figures)
    # every plot is in the rendered page and drew something
    svgs = re.findall(r"<svg.*?</svg>", dom, re.S)
    assert len(svgs) == figures
    assert all("<path" in svg for svg in svgs)
    assert shot.stat().st_size > 50_000
    # the page asked for nothing: every network request in the log is the browser's own
    # (Chromium marks those with the initiator "not an origin")
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    from_page = {e["params"].get("url") for e in log["events"] if e["type"] == start_job
                 and e.get("params", {}).get("initiator") != "not an origin"
                 and not e.get("params", {}).get("url", "file:").startswith(("file:", "data:"))}
    assert from_page == set()


def test_a_note_shared_by_many_scenarios_is_listed_once():
    vm_note = "measured in a VM (software emulation (TCG): slow)"
    scenarios = [SimpleNamespace(label=f"{vpn} | l | w", notes=notes)
                 for vpn, notes in (("a", vm_note), ("b", f"{vm_note}; overhead 80 B measured"), ("c", ""))]
    assert report._grouped_notes(scenarios) == [(vm_note, ["a | l | w", "b | l | w"]),
                                                ("overhead 80 B measured", ["b | l | w"])]
