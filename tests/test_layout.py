"""Where nodes, the WAN and tunnel layers sit, and what each tunnel end routes; and the code's own
layout: vpnlab's imports point one way, and both kinds of node keep the node contract."""

import ast
import functools
import inspect
import re
import sys
from pathlib import Path

import pytest

import vpnlab
from vpnlab.hosts.node import RemoteNode
from vpnlab.testbed import contract
from vpnlab.testbed.node import Node
from vpnlab.testbed.topology import Layout
from vpnlab.testbed.topology import Testbed as Bed


def bed(topology, layers):
    layout = Layout.for_topology(topology, layers)
    testbed = Bed(state=None, layout=layout)
    testbed.nodes = [Node(role, f"ns-{role}", None) for role in layout.roles]
    return testbed


def test_remote_access():
    b = bed("remote-access", 1)
    assert b.layout.roles == ["client", "gw", "server"]
    assert b.layout.wan == 0
    left, right = b.tunnel_sites(0)
    assert (left.node.role, right.node.role) == ("client", "gw")
    assert (left.underlay_ip, right.underlay_ip) == ("198.19.0.1", "198.19.0.2")
    assert (left.tunnel_ip, right.tunnel_ip) == ("198.19.1.1", "198.19.1.2")
    assert left.subnets == [] and left.prefix is None
    assert right.subnets == ["198.18.128.0/24"] and right.prefix == "198.18.128.0/17"
    assert b.sink_ip == "198.18.128.2"


def test_site_to_site():
    b = bed("site-to-site", 1)
    assert b.layout.roles == ["host-a", "gw-a0", "gw-b0", "host-b"]
    assert b.layout.wan == 1
    left, right = b.tunnel_sites(0)
    assert left.subnets == ["198.18.0.0/24"] and right.subnets == ["198.18.128.0/24"]
    assert (left.prefix, right.prefix) == ("198.18.0.0/17", "198.18.128.0/17")
    assert (left.underlay_ip, right.underlay_ip) == ("198.19.0.1", "198.19.0.2")


def test_nested_site_to_site_puts_the_inner_tunnel_on_the_outer_gateways_lans():
    b = bed("site-to-site", 2)
    assert b.layout.roles == ["host-a", "gw-a1", "gw-a0", "gw-b0", "gw-b1", "host-b"]
    assert b.layout.wan == 2
    outer_l, outer_r = b.tunnel_sites(0)
    inner_l, inner_r = b.tunnel_sites(1)
    assert (outer_l.node.role, outer_r.node.role) == ("gw-a0", "gw-b0")
    assert (inner_l.node.role, inner_r.node.role) == ("gw-a1", "gw-b1")
    # the inner tunnel's endpoints talk across the outer tunnel
    assert inner_r.underlay_ip == "198.18.129.2" and "198.18.129.0/24" in outer_r.subnets
    assert (outer_l.prefix, outer_r.prefix) == ("198.18.0.0/17", "198.18.128.0/17")
    assert (inner_l.prefix, inner_r.prefix) == ("198.18.0.0/24", "198.18.128.0/24")
    # each tunnel end has an address inside the prefix it stands for (IPsec selectors need it)
    assert b.address(4, 3) == "198.18.129.2" and b.address(1, 1) == "198.18.1.1"
    assert inner_l.tunnel_ip == "198.19.2.1"


def test_baseline_has_no_tunnel_layers():
    assert Layout.for_topology("site-to-site", 0).tunnels == []
    assert Layout.for_topology("remote-access", 0).roles == ["client", "gw", "server"]


# --- the code's own layout: imports point one way, both nodes keep one contract -----------------

SRC = Path(__file__).parent.parent / "src"


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the vpnlab package (a package by its __init__)."""
    out = {}
    for path in (SRC / "vpnlab").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(modules: dict[str, Path]) -> list[tuple[str, list[str], bool, int]]:
    """(module, vpnlab modules one import statement names, whether it sits inside a function, line)."""
    return _parsed_imports(SRC, tuple(sorted(modules.items())))


@functools.cache
def _parsed_imports(src: Path, modules: tuple) -> list[tuple[str, list[str], bool, int]]:
    known, out = dict(modules), []
    for name, path in modules:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node, inside in _import_statements(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            named = [t for t in targets if t in known and t != name]
            if named:
                out.append((name, named, inside, node.lineno))
    return out


def _import_statements(tree: ast.AST):
    """Every import statement of a module, and whether it sits inside a function."""
    stack = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, inside
        inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        stack.extend((child, inside) for child in ast.iter_child_nodes(node))


def test_no_vpnlab_import_inside_a_function_outside_the_cli():
    modules = _modules()
    hidden = [f"{modules[name].relative_to(SRC)}:{line}" for name, _, inside, line in _imports(modules)
              if inside and not name.startswith("vpnlab.cli")]
    assert not hidden, f"vpnlab imports inside functions (move them to the top; a cycle means a layer is wrong): {hidden}"


def test_no_import_cycle_among_vpnlab_modules():
    modules = _modules()
    edges = {name: set() for name in modules}
    for name, named, _, _ in _imports(modules):
        edges[name].update(named)
    cycles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (the graph is a few hundred edges)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                out.append(sorted(component))
    return out


# The packages (and top-level modules) of vpnlab from the bottom up: each imports only those below it.
# The pipeline runs study file -> plan -> testbed -> tunnel -> workload -> samples -> store ->
# analysis -> report; the imports run the other way round where a later stage is what an earlier one
# needs to know about (the plan validates a study by the drivers' and workloads' own models).
LAYERS = [
    "vpnlab",       # __init__: the version
    "core",         # errors, files, signals, sessions, the shared schema, sample flags, where this runs, the kernel probe
    "metrics",      # what a metric is, and `declare`
    "tools",        # what a program is, where it is, its version; packages unpacked or built for vpnlab
    "algorithms",   # one vocabulary of cryptography
    "testbed",      # the node contract, namespaces, links, shaping, cgroups, the run's state record
    "drivers",      # one module a VPN
    "workloads",    # one module a workload kind
    "measure",      # one sample: the workload with its CPU meter, observers and background
    "catalog",      # the registries: every driver, workload kind, metric and program
    "hosts",        # real hosts over SSH and Ansible, keeping the node contract
    "machines",     # this machine's capabilities, the VM backend, provenance
    "plan",         # the study file and its scenarios, and where each runs
    "store",        # the results directory and its SQLite store
    "analyse",      # from stored samples to summaries, comparisons, verdicts, recommendations
    "run",          # running a plan: rounds of repetitions, tunnels, proof, stopping rules
    "report",       # the HTML report, the export, the verdict table
    "tune",         # the race for the best settings
    "cli",          # the command line
    "__main__",
]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_import_between_packages_points_down_the_layers():
    modules = _modules()
    assert {_unit(m) for m in modules} == set(LAYERS), "every package and top-level module has its place in LAYERS"
    upward = sorted({f"{name} -> {target}" for name, named, _, _ in _imports(modules) for target in named
                     if LAYERS.index(_unit(target)) > LAYERS.index(_unit(name))})
    assert not upward, f"imports that point up the layers: {upward}"


def test_the_import_checks_catch_a_local_import_and_a_cycle(tmp_path, monkeypatch):
    """The two checks above on a package made to break both rules."""
    package = tmp_path / "vpnlab"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def late():\n    from .. import a\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    with pytest.raises(AssertionError, match=r"vpnlab/sub/b.py:2"):
        test_no_vpnlab_import_inside_a_function_outside_the_cli()
    with pytest.raises(AssertionError, match=r"vpnlab.a.*vpnlab.sub.b"):
        test_no_import_cycle_among_vpnlab_modules()


def test_the_layer_check_catches_an_import_up_the_layers(tmp_path, monkeypatch):
    package = tmp_path / "vpnlab"
    for folder in ("core", "store"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "low.py").write_text("from ..store import high\n")
    (package / "store" / "high.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "LAYERS", ["vpnlab", "core", "store"])
    with pytest.raises(AssertionError, match=r"vpnlab.core.low -> vpnlab.store.high"):
        test_every_import_between_packages_points_down_the_layers()


def _contract_problems(implementation) -> list[str]:
    """What `implementation` lacks of the node contract: a method, its parameters (names, kinds,
    defaults) or an attribute."""
    problems = []
    for name, member in vars(contract.Node).items():
        if not inspect.isfunction(member) or name.startswith("_"):
            continue
        found = getattr(implementation, name, None)
        if not callable(found):
            problems.append(f"no {name}")
            continue
        wanted = [(p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()]
        if [(p.name, p.kind, p.default) for p in inspect.signature(found).parameters.values()] != wanted:
            problems.append(f"{name}{inspect.signature(found)}, not {name}{inspect.signature(member)}")
    attributes = set(getattr(implementation, "__dataclass_fields__", {})) | set(dir(implementation))
    problems += [f"no attribute {name}" for name in inspect.get_annotations(contract.Node) if name not in attributes]
    return problems


@pytest.mark.parametrize("implementation", [Node, RemoteNode], ids=["namespace", "remote"])
def test_both_nodes_keep_the_node_contract(implementation):
    assert {"run", "ip", "tc", "spawn", "stop", "listening", "read_net", "sysctl", "exists", "write_file", "read_file",
            "record_file", "remove_file"} <= set(vars(contract.Node))
    assert _contract_problems(implementation) == []


def test_the_contract_check_catches_a_node_that_drifted():
    class Drifted(Node):
        def stop(self, proc, grace: float = 5.0) -> None:  # another default
            pass

        def exists(self, path, follow) -> bool:  # another parameter
            return True

    problems = _contract_problems(Drifted)
    assert [p.split("(")[0] for p in problems] == ["stop", "exists"], problems

    class Bare:
        role = "client"

    assert {"no run", "no write_file", "no attribute namespace", "no attribute python"} <= set(_contract_problems(Bare))


# Programs vpnlab ships to a node and runs there with the node's Python: their files are the node's.
RUN_ON_NODES = {"workloads/datasets.py", "workloads/office.py"}
LOCAL_WRITES = re.compile(r"\bimport subprocess\b|from subprocess import|\.(write_text|write_bytes|mkdir|touch|chmod|"
                          r"unlink|symlink_to)\(|\bshutil\.|\bos\.(open|mkdir|makedirs|remove|chmod)\(|"
                          r"\bopen\([^)]*[\"'][wax]")


def test_drivers_and_workloads_act_only_through_their_nodes():
    """No driver or workload module starts a program or writes a file on this machine itself: the node
    contract is the only way out (what a program writes to the local log `node.spawn` streams into, and
    a copy of a daemon's own log beside it in the run's log folder, are the run's records)."""
    package = Path(vpnlab.__file__).parent
    offenders = []
    for path in sorted([*package.glob("drivers/*.py"), *package.glob("workloads/*.py")]):
        name = str(path.relative_to(package))
        if name in RUN_ON_NODES:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            # Tunnel.fetch_logs' copy of a daemon's own log into the run's log folder is the run's record
            if LOCAL_WRITES.search(line) and not (name == "drivers/base.py" and "local.write_text(text)" in line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []
