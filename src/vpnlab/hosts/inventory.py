"""Hosts from an Ansible inventory, read by Ansible itself.

`ansible-inventory -i FILE --list` is run as a program: Ansible's Python API is
internal (and GPLv3, while vpnlab is MIT), and a program's JSON is what users
see too. Whatever the inventory format (YAML, INI, a directory, a plugin),
Ansible resolves groups and group variables; we only read the result. An
executable inventory file is a dynamic inventory: Ansible runs it, as the user
running vpnlab (root), so it is a program to trust, not data.

A host's name and address reach SSH (asyncssh here, ssh under Ansible's
playbook): one that SSH or a shell would misread (`-oProxyCommand=...`,
`b;touch x`, control characters) is refused before vpnlab connects.

The host-key policy is Ansible's: `ansible_host_key_checking` (a host or group
variable) wins over ANSIBLE_HOST_KEY_CHECKING, and checking is on by default.
When it is off, Ansible puts `-o StrictHostKeyChecking=no` first on ssh's command
line; otherwise the `-o` options of ansible_ssh_args, ansible_ssh_common_args and
ansible_ssh_extra_args decide, in that order, and, as in OpenSSH, the first value
of an option wins. ansible.cfg and ~/.ssh/config are not read.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import StudyError
from ..core.files import file_kind
from ..core.schema import shorten

# Hidden groups that every inventory has.
IMPLICIT_GROUPS = {"all", "ungrouped"}
MAX_INVENTORY_BYTES = 16 << 20   # thousands of hosts; Ansible takes some 6 bytes of memory per byte read
# How long ansible-inventory may take: an executable inventory is a program that can hang; a static one
# cannot, but Ansible's own start-up takes 25 s in an emulated guest and over a minute under load there.
INVENTORY_TIMEOUT_S = 60
STATIC_INVENTORY_TIMEOUT_S = 600
# A host name or address SSH reads as one: a DNS name, IPv4, IPv6 (with a zone: fe80::1%eth0).
SSH_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:%-]*$")

# The known-hosts file OpenSSH reads for the user running vpnlab, unless UserKnownHostsFile says otherwise.
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
# Where Ansible's ssh finds the options that set the host-key policy, in the order it passes them.
SSH_ARGS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
HOST_KEY_CHECKING_VARS = ("ansible_host_key_checking", "ansible_ssh_host_key_checking")
HOST_KEY_CHECKING_ENV = ("ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_SSH_HOST_KEY_CHECKING")
# OpenSSH's StrictHostKeyChecking values; "ask" cannot ask without a terminal, so it refuses as "yes".
STRICT_VALUES = {"yes": "yes", "true": "yes", "ask": "yes", "no": "no", "false": "no", "off": "no",
                 "accept-new": "accept-new"}
# Ansible's boolean().
TRUE_WORDS, FALSE_WORDS = {"y", "yes", "on", "1", "true", "t"}, {"n", "no", "off", "0", "false", "f"}
SSH_OPTION = re.compile(r"^\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*?)\s*$")


@dataclass(frozen=True)
class HostKeyPolicy:
    """How a host's SSH key is checked, as Ansible's ssh would with the same inventory."""

    checking: str = "yes"                          # "yes", "no" or "accept-new" (StrictHostKeyChecking)
    known_hosts: tuple[str, ...] = (USER_KNOWN_HOSTS,)  # the user's files, expanded; () = none (/dev/null)
    why: str = "checking is on by default"         # what set `checking`, for messages


@dataclass(frozen=True)
class Host:
    """One inventory host, as vpnlab connects to it."""

    name: str                       # the inventory name
    address: str                    # ansible_host, else the name
    port: int = 22
    user: str | None = None         # None: the controller's user name, as ssh does
    key_file: str | None = None     # ansible_ssh_private_key_file
    become: bool = False            # ansible_become: commands go through `sudo -n`
    host_keys: HostKeyPolicy = HostKeyPolicy()
    groups: tuple[str, ...] = ()
    vars: dict = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        return f"{self.name} ({self.user + '@' if self.user else ''}{self.address}:{self.port})"


def ansible_program(name: str) -> str:
    """An Ansible program: beside this Python (installed with vpnlab), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise StudyError(f"{name} not found: install vpnlab with its dependencies (ansible-core)")
    return found


def load_inventory(path: str | Path) -> dict[str, Host]:
    """Every host of the inventory at `path`, by inventory name."""
    path = Path(path)
    if not path.exists():
        raise StudyError(f"inventory {path}: no such file or directory")
    mode = path.stat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # Ansible would block reading a FIFO until killed
        raise StudyError(f"inventory {path}: not a regular file or directory ({file_kind(mode)})")
    # An inventory Ansible cannot parse is otherwise only a warning and an empty host list.
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
           "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true"}
    _check_size(path)
    argv = [ansible_program("ansible-inventory"), "-i", str(path), "--list"]
    returncode, stdout, stderr = _listing(argv, env, path, _time_limit(path))
    if returncode != 0:
        raise StudyError(f"inventory {path}: Ansible cannot read it:\n  " + _reason(stderr))
    try:
        listing = json.loads(stdout)
    except ValueError as exc:
        raise StudyError(f"inventory {path}: ansible-inventory printed no JSON ({exc})") from exc
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    if not hostvars:
        raise StudyError(f"inventory {path}: it lists no hosts")
    groups = _groups_of(listing)
    return {name: _host(path, name, variables, groups.get(name, ()))
            for name, variables in sorted(hostvars.items())}


def _files(path: Path) -> list[Path]:
    """The inventory file, or the files of an inventory folder (links within it not followed)."""
    return [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]


def _check_size(path: Path) -> None:
    """An inventory's files within MAX_INVENTORY_BYTES, before Ansible reads them (a 2 GB one took 12.6
    GB of memory); an executable one is a program, and its output is limited by _listing instead."""
    files = _files(path)
    total = sum(p.stat().st_size for p in files if not os.access(p, os.X_OK))
    if total > MAX_INVENTORY_BYTES:
        raise StudyError(f"inventory {path}: {total:,} bytes, more than an inventory may hold here "
                         f"({MAX_INVENTORY_BYTES >> 20} MiB)")


def _time_limit(path: Path) -> int:
    """INVENTORY_TIMEOUT_S for an inventory holding a program Ansible would run, else the static limit."""
    files = _files(path)
    runs_a_program = any(os.access(p, os.X_OK) for p in files)
    return INVENTORY_TIMEOUT_S if runs_a_program else STATIC_INVENTORY_TIMEOUT_S


def _listing(argv: list[str], env: dict, path: Path, limit_s: int) -> tuple[int, str, str]:
    """ansible-inventory's exit code, output and errors, within `limit_s`: an executable inventory that
    hangs is stopped with everything it started (its own process group)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise StudyError(f"inventory {path}: Ansible did not finish reading it within {limit_s} s "
                             "(an executable inventory that hangs?); stopped it") from None
        if os.fstat(out.fileno()).st_size > MAX_INVENTORY_BYTES:
            raise StudyError(f"inventory {path}: Ansible's listing of it is more than {MAX_INVENTORY_BYTES >> 20} MiB")
        out.seek(0), err.seek(0)
        return proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def _port(value, where: str) -> int:
    """A TCP port as Ansible's ssh would take it: a whole number 1-65535, as a number or its digits."""
    text = str(value).strip()
    if isinstance(value, bool) or not (isinstance(value, int) or (text.isascii() and text.isdigit())):
        raise StudyError(f"{where}: {shorten(value)} is not a whole number (a TCP port, 1-65535)")
    if not 1 <= (port := int(text)) <= 65535:
        raise StudyError(f"{where}: {shorten(value)} is not a TCP port (1-65535)")
    return port


def _reason(stderr: str) -> str:
    """Ansible's own words, without its repeated per-plugin warnings."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("[ERROR]")]
    causes = [line for line in lines if "Failed to parse" in line or "Origin:" in line]
    return "\n  ".join((causes[:2] + errors) or lines[-5:])


def _groups_of(listing: dict) -> dict[str, tuple[str, ...]]:
    """host -> the groups it is in, directly or through child groups."""
    def members(group: str, seen: frozenset = frozenset()) -> set[str]:
        entry = listing.get(group, {})
        found = set(entry.get("hosts", []))
        for child in entry.get("children", []):
            if child not in seen:
                found |= members(child, seen | {group})
        return found

    out: dict[str, list[str]] = {}
    for group in sorted(k for k in listing if k != "_meta" and k not in IMPLICIT_GROUPS):
        for host in members(group):
            out.setdefault(host, []).append(group)
    return {host: tuple(groups) for host, groups in out.items()}


def _host(path: Path, name: str, variables: dict, groups: tuple[str, ...]) -> Host:
    used = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file", "ansible_become",
            *SSH_ARGS, *HOST_KEY_CHECKING_VARS)
    for key in used:
        if "{{" in str(variables.get(key, "")):
            raise StudyError(f"inventory {path}: host {name}: {key} is a template "
                             f"({variables[key]}); vpnlab needs a literal value")
    port = _port(variables.get("ansible_port", 22), f"inventory {path}: host {name}: ansible_port")
    key_file = variables.get("ansible_ssh_private_key_file") or variables.get("ansible_private_key_file")
    become = str(variables.get("ansible_become", False)).lower() in ("true", "yes", "1")
    return Host(name=name, address=str(variables.get("ansible_host", name)), port=port,
                user=variables.get("ansible_user"), key_file=str(Path(key_file).expanduser()) if key_file else None,
                become=become, host_keys=host_key_policy(variables, os.environ, f"inventory {path}: host {name}"),
                groups=groups, vars=variables)


def host_key_policy(variables: dict, environ, where: str) -> HostKeyPolicy:
    """The host-key policy Ansible's ssh would follow for a host with these variables."""
    options: dict[str, tuple[str, str]] = {}  # option (lower case) -> (value, the variable it came from)
    for var in SSH_ARGS:
        for key, value in ssh_options(str(variables.get(var) or ""), f"{where}: {var}").items():
            options.setdefault(key, (value, var))
    checking, checking_why = _host_key_checking(variables, environ, where)
    if not checking:
        strict = ("no", checking_why)
    elif "stricthostkeychecking" in options:
        value, var = options["stricthostkeychecking"]
        if value.lower() not in STRICT_VALUES:
            raise StudyError(f"{where}: {var}: StrictHostKeyChecking={value}: expected one of "
                             f"{', '.join(STRICT_VALUES)}")
        strict = (STRICT_VALUES[value.lower()], f"{var} has -o StrictHostKeyChecking={value}")
    else:
        strict = ("yes", checking_why)
    files = options.get("userknownhostsfile", (USER_KNOWN_HOSTS,))[0].split()
    known = tuple(os.path.expanduser(f) for f in files if f.lower() not in ("/dev/null", "none"))
    return HostKeyPolicy(strict[0], known, strict[1])


def ssh_options(args: str, where: str) -> dict[str, str]:
    """The `-o Key=Value`, `-oKey=Value` and `-o "Key Value"` options of an ssh argument string,
    by lower-case key; the first value of a key wins, as in OpenSSH."""
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise StudyError(f"{where}: cannot split {args!r} as ssh arguments ({exc})") from None
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        text = words[i + 1] if word == "-o" and i + 1 < len(words) else word[2:] if word.startswith("-o") else None
        match = SSH_OPTION.match(text) if text else None
        if match:
            found.setdefault(match[1].lower(), match[2])
    return found


def _host_key_checking(variables: dict, environ, where: str) -> tuple[bool, str]:
    """Ansible's host_key_checking: the host's variable, else the environment, else on."""
    for name, value, source in [*((v, variables.get(v), "the inventory") for v in HOST_KEY_CHECKING_VARS),
                                *((e, environ.get(e), "the environment") for e in HOST_KEY_CHECKING_ENV)]:
        if value is None or value == "":
            continue
        word = str(value).strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise StudyError(f"{where}: {name}={value!r} is not a boolean (true/false, yes/no, 1/0)")
        return word in TRUE_WORDS, f"{name}={value} in {source}"
    return True, "checking is on by default"


def reachable_safely(host: Host, inventory: str | Path) -> Host:
    """The host, if its name and address reach SSH as what they are; else a StudyError naming it."""
    for what, value in (("host name", host.name), ("address (ansible_host)", host.address)):
        if not SSH_SAFE.match(value):
            raise StudyError(f"inventory {inventory}: {what} {value!r}: not a host name or IP address that SSH "
                             "would read as one (it may start with neither '-' nor hold spaces, quotes, ';' or "
                             "other shell characters); vpnlab does not connect to it")
    return host


def select(hosts: dict[str, Host], names, inventory: str | Path) -> list[Host]:
    """The named hosts, or a clear error naming the first unknown (or unsafe) one and what the
    inventory has."""
    chosen = []
    for name in names:
        if name not in hosts:
            raise StudyError(f"inventory {inventory}: no host named {name!r} "
                             f"(it has: {', '.join(sorted(hosts))})")
        chosen.append(reachable_safely(hosts[name], inventory))
    return chosen


def limit(hosts: dict[str, Host], pattern: str | None, inventory: str | Path, to_connect: bool = True) -> list[Host]:
    """Hosts matching an Ansible-style --limit: comma-separated host or group names; each checked
    for SSH (reachable_safely) when they are `to_connect` to."""
    check = (lambda host: reachable_safely(host, inventory)) if to_connect else (lambda host: host)
    if not pattern:
        return [check(host) for host in hosts.values()]
    wanted = [p.strip() for p in pattern.split(",") if p.strip()]
    known_groups = {g for host in hosts.values() for g in host.groups}
    for word in wanted:
        if word not in hosts and word not in known_groups and word != "all":
            raise StudyError(f"inventory {inventory}: --limit {word!r} is neither a host nor a group "
                             f"(hosts: {', '.join(sorted(hosts))})")
    return [check(host) for host in hosts.values()
            if "all" in wanted or host.name in wanted or set(host.groups) & set(wanted)]
