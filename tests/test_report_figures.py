"""The report's figures, from a store a seed-like study would leave (fake samples): a categorical
sweep is grouped bars with error bars and no line between categories, a numeric sweep is lines with
error bars, no legend covers data, and every label is short and the same in figures, tables and
`vpnlab show`."""

import itertools

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from vpnlab.report import html as report
from vpnlab.analyse.labels import LIMIT, shorten
from vpnlab.plan.scenarios import make_plan
from vpnlab.store import Store
from vpnlab.plan.study import parse_study

# taneja-2019's shape: nested tunnels with 60-70 character labels, a categorical data sweep, and a
# numeric window sweep beside it
STUDY = """
name: figures
topology: site-to-site
repetitions: 3
vpns:
  - driver: none
  - {driver: openvpn, options: {cipher: AES-128-CBC, auth: SHA256, compression: ["off", lz4-v2]}}
  - {driver: openvpn, options: {cipher: AES-128-CBC, auth: SHA256},
     inner: {driver: openvpn, options: {cipher: AES-128-CBC, auth: SHA256, port: 1195}}}
  - {driver: strongswan, options: {esp: aes128-sha256},
     inner: {driver: openvpn, options: {cipher: AES-128-CBC, auth: SHA256}}}
links: [{name: lan, rate_mbit: 100}]
workloads:
  - {kind: transfer, protocol: ftp, data: [random, text], size: 1M}
  - {kind: tcp, duration_s: 5, window: [8K, 64K]}
  - {kind: tcp, duration_s: 5, streams: [2, 4]}
"""
METRICS = {"transfer": {"transfer_s": 0.2, "throughput_mbps": 40.0},
           "tcp": {"throughput_mbps": 80.0, "cpu_vpn_gateway_pct": 30.0, "cpu_s_per_gb": 2.0}}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A store written as the runner writes one; the nested strongSwan tunnel measured in the VM."""
    out = tmp_path_factory.mktemp("figures")
    rng = np.random.default_rng(3)
    plan = make_plan(parse_study(STUDY))
    store = Store.open_dir(out)
    run = store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                          study_name="figures", study_text=STUDY)
    for scenario in plan.scenarios:
        store.add_scenario(scenario, measured_in="vm" if scenario.vpn.driver == "strongswan" else "host")
    for round_no, (position, scenario) in itertools.product((1, 2, 3), enumerate(plan.scenarios)):
        factor = 1 + position % 5 / 10
        values = {m: v * factor * rng.lognormal(0, 0.05) for m, v in METRICS[scenario.workload.kind].items()}
        store.record_repetition(run, scenario.id, round_no, values, {}, [], round_no, position)
    store.finish_run(run, "done")
    store.close()
    return out


@pytest.fixture(scope="module")
def built(results):
    return report.build(results)


def figure(built, words: str):
    (found,) = [f for f in built.figures if words in f.title]
    return found.drawn


def connecting_lines(ax) -> list:
    """Lines drawn between data points (markers alone, as error-bar caps are, connect nothing)."""
    return [line for line in ax.get_lines() if line.get_linestyle() not in ("None", "none", "", " ")
            and len(line.get_xdata()) > 1]


def test_a_categorical_sweep_is_grouped_bars_with_intervals(built):
    fig = figure(built, "transfer_s by data")
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 2 and sorted(b.get_label() for b in bars) == ["random", "text"]
    assert all(len(b.patches) == 5 for b in bars)  # one bar per configuration and data type
    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == 2  # each bar's interval
    assert connecting_lines(ax) == []  # never a line from "random" to "text"
    assert not any("versus data" in f.title for f in built.figures)


def test_a_numeric_sweep_is_lines_with_error_bars(built):
    ax = figure(built, "throughput_mbps versus window").axes[0]
    lines = connecting_lines(ax)
    assert len(lines) == 5 and all(list(line.get_xdata()) == [8192, 65536] for line in lines)
    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == 5
    assert not [c for c in ax.containers if isinstance(c, BarContainer)]


def test_two_sweeps_of_one_kind_are_each_drawn_along_their_own_axis(built):
    """jaha-2014's shape: a window sweep at one stream beside a streams sweep at the default window."""
    streams = connecting_lines(figure(built, "throughput_mbps versus streams").axes[0])
    assert len(streams) == 5 and all(list(line.get_xdata()) == [2, 4] for line in streams)


def data_extents(ax, renderer) -> list:
    extents = []
    for artist in ax.get_children():
        if isinstance(artist, (Rectangle, Line2D)) and artist is not ax.patch and artist.get_visible():
            extents.append(artist.get_window_extent(renderer))
        elif isinstance(artist, LineCollection):
            extents += [path.get_extents(artist.get_transform()) for path in artist.get_paths()]
    return [e for e in extents if e.width > 0 or e.height > 0]


def test_no_legend_covers_data(built):
    legends = 0
    for f in built.figures:
        fig = f.drawn
        canvas = FigureCanvasAgg(fig)  # the report closed it once its SVG was written
        canvas.draw()
        renderer = canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            legends += 1
            box = legend.get_window_extent(renderer)
            assert not box.overlaps(ax.get_window_extent(renderer)), f.title  # beside the axes
            for extent in data_extents(ax, renderer):
                assert not box.overlaps(extent), f.title
    assert legends >= 4


def test_labels_are_short_and_the_same_in_figures_tables_and_show(built, results, capsys):
    full = {s.shown for s in built.scenarios}
    assert max(map(len, full)) > 60  # what they would have been
    shown = {built.labels.of(s) for s in built.scenarios}
    assert max(map(len, shown)) <= LIMIT
    assert "openvpn in openvpn" in shown and "openvpn in strongswan (VM)" in shown
    assert "every openvpn here is aes-128-cbc-sha256 udp" in built.labels.note
    in_figures = set()
    for f in built.figures:
        for ax in f.drawn.axes:
            if any(isinstance(c, BarContainer) for c in ax.containers):  # VPNs on the y axis
                in_figures |= {t.get_text() for t in ax.get_yticklabels()} - {""}
            if ax.get_legend():
                in_figures |= {t.get_text() for t in ax.get_legend().get_texts()}
    vpn_labels = in_figures - {"random", "text"}
    assert vpn_labels == shown and all(len(label) <= LIMIT for label in in_figures)
    (headings, rows), = built.table_vi.values()
    assert {vpn for vpn, _ in rows} == shown - {"none"}
    assert {row["vpn"] for row in built.tunnel_rows} == shown  # no VPN's too: the CPU floor
    assert {cell for row in built.comparison_rows for cell in row[3:5]} <= shown
    html = (results / "report.html")
    report.write(results)
    assert all(label in html.read_text() for label in shown)
    from vpnlab.cli.results import _show

    _show(results)
    printed = capsys.readouterr().out
    assert all(f"{label} | lan |" in printed for label in shown)
    assert built.labels.note in printed.replace("\n", " ")


def test_shortening_keeps_labels_apart():
    short = shorten(["none", "openvpn aes-256-gcm udp", "openvpn aes-256-gcm udp fips"])
    assert short("openvpn aes-256-gcm udp fips") == "openvpn aes-256-gcm udp fips"  # short enough: unchanged
    assert short.note == ""
    long = [f"openvpn aes-256-cbc-sha512 tcp {c} mtu-1400 fips in strongswan aes256gcm16 cert ipcomp (in the VM)"
            for c in ("lzo", "lz4-v2")] + ["openvpn aes-256-cbc-sha512 tcp lzo mtu-1400 fips"]
    mapped = shorten(long)
    assert len({mapped(label) for label in long}) == 3
    assert all(len(mapped(label)) <= LIMIT for label in long)
