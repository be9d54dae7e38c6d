"""One place per fact: programs, packages, metrics and workload kinds are declared once, and
everything that lists them (bootstrap, doctor, the docs) reads the declarations."""

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from vpnlab.machines import capabilities
from vpnlab import catalog
from vpnlab.catalog import DRIVERS, KINDS
from vpnlab.tools import find

ROOT = Path(__file__).resolve().parent.parent


def test_every_program_an_implementation_or_kind_needs_is_declared_by_it():
    for driver in DRIVERS.values():
        own = {t.command for t in driver.tools}
        for impl in driver.implementations(driver.Options()):
            assert set(impl.tools) <= own, (driver.name, impl.name, set(impl.tools) - own)
    for kind in KINDS.values():
        assert set(kind.needs(kind.Options())) <= {t.command for t in kind.tools}, kind.kind


def test_what_runs_on_hosts_is_what_needs_no_go_build():
    """Builds live in this machine's cache: an implementation that needs one is never offered on real
    hosts (the run's placement and docs/real-hosts.md both ask Driver.on_hosts)."""
    names = {name: [way.name for way in driver.on_hosts(driver.Options())] for name, driver in DRIVERS.items()}
    assert names["wireguard"] == ["kernel", "wireguard-go"] and names["nebula"] == ["nebula"], names
    assert names["yggdrasil"] == names["tailscale"] == [], names


def test_bootstrap_installs_what_the_declarations_name():
    listed = subprocess.run([sys.executable, "-m", "vpnlab.catalog", "packages", "--with", str(ROOT / "tests/needs.py")],
                            capture_output=True, text=True, check=True).stdout.split()
    assert {"nftables", "chromium", "strongswan-charon", "libcharon-extra-plugins", "iperf3"} <= set(listed)
    assert "libreswan" not in listed  # unpacked privately: it conflicts with strongSwan's packages
    assert "vpnlab.catalog packages" in (ROOT / "bootstrap.sh").read_text()


def test_recorded_versions_are_versions():
    versions, tools = capabilities.tool_versions(), catalog.declared()
    for name in ("iperf3", "openvpn", "swanctl", "charon", "pppd", "pptpd", "xl2tpd", "pluto"):
        if tools[name].private and name not in versions:
            continue  # bootstrap.sh unpacks it privately when it can fetch it, and says so when not
        assert name in versions, f"{name} is declared but not found here: {tools[name].hint}"
        assert re.search(r"\d+\.\d+", versions[name]), (name, versions[name])
        assert "failed" not in versions[name], (name, versions[name])
    # a program without a version flag gets its package's version, asked of dpkg with the others at once
    coreutils = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "coreutils"], capture_output=True, text=True)
    assert versions["env"] == versions["nproc"] == f"coreutils {coreutils.stdout}"
    # ansible, installed with vpnlab, from its distribution's metadata: what the program itself says
    said = subprocess.run([find(tools["ansible-playbook"]), "--version"], capture_output=True, text=True, check=True)
    assert re.search(r"core ([^]]+)]", said.stdout)[1] in versions["ansible-playbook"]


def test_metric_registry_is_consistent_and_the_docs_table_is_generated_from_it():
    registry = catalog.METRICS
    for kind in KINDS.values():
        assert kind.primary in {m.name for m in kind.metrics}, kind.kind
        for metric, _ in kind.graded:
            assert registry[metric].graded, metric
        assert set(kind.plotted) <= set(registry), kind.kind
    assert catalog.markdown_table() in (ROOT / "docs" / "metrics.md").read_text(), \
        "docs/metrics.md's metric table differs from the registry: paste `python -m vpnlab.catalog metrics` into it"
    printed = subprocess.run([sys.executable, "-m", "vpnlab.catalog", "metrics"], capture_output=True, text=True, check=True)
    assert printed.stdout.strip() == catalog.markdown_table()


def test_one_baseline_driver_and_no_module_names_it():
    assert [d.name for d in DRIVERS.values() if d.baseline] == ["none"]
    src = ROOT / "src" / "vpnlab"
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if re.search(r"""[=!]= ?["']none["']|["']none["'] ?[=!]=""", p.read_text())]
    assert offenders == [], offenders


def test_what_bootstrap_imports_of_vpnlab_exists():
    """bootstrap.sh's Python one-liners (the VM kernel, libreswan's private copy) name modules that a
    move of the package must keep true: a wrong one only prints a note, and the machine lacks a piece."""
    names = re.findall(r"from (vpnlab[\w.]*) import (\w+)", (ROOT / "bootstrap.sh").read_text())
    assert len(names) >= 3
    for module, name in names:
        found = importlib.import_module(module)
        assert hasattr(found, name) or importlib.util.find_spec(f"{module}.{name}"), (module, name)
