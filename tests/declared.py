"""Which programs a command line runs, through the wrappers vpnlab uses (ip netns exec, env,
sh -c with "$@"), for the suite's check that every program run is declared."""

from __future__ import annotations

import os
import re
import shlex

SHELL_BUILTINS = {"set", "exec", "cd", "export", "shift", "test", "[", "echo", "read", "trap", "wait", "printf",
                  ":", "{", "}", "!", "if", "then", "fi", "else", "for", "do", "done", "while", "return", "local",
                  "continue", "break"}


def programs(argv: list[str] | str) -> set[str]:
    """Every program a command line runs: the command itself and what its wrappers run."""
    if isinstance(argv, str):  # shell=True
        return _script_programs(argv, [])
    if not argv:
        return set()
    name = _normal(argv[0])
    found = {name}
    rest = argv[1:]
    if name == "ip" and rest[:2] == ["netns", "exec"]:
        found |= programs(rest[3:])
    elif name == "env":
        found |= programs(_after_options(rest, assignments=True))
    elif name in ("nsenter", "unshare", "timeout", "setsid"):
        found |= programs(_after_options(rest, skip_first=name == "timeout"))
    elif name == "taskset":  # taskset [options] LIST COMMAND...
        found |= programs(_after_options(rest, skip_first=True))
    elif name in ("sh", "bash", "dash") and "-c" in rest:
        at = rest.index("-c")
        found |= _script_programs(rest[at + 1], rest[at + 3:])  # after the script: $0, then $1...
    return found


def _normal(path: str) -> str:
    name = os.path.basename(path)
    return "python3" if re.fullmatch(r"python[\d.]*", name) else name


def _after_options(args: list[str], assignments: bool = False, skip_first: bool = False) -> list[str]:
    rest = list(args)
    while rest and (rest[0].startswith("-") or (assignments and "=" in rest[0] and not rest[0].startswith("/"))):
        rest.pop(0)
    return rest[1:] if skip_first else rest


def _script_programs(script: str, positional: list[str]) -> set[str]:
    found = set()
    for command in re.split(r"&&|\|\||[;|\n]", script):
        words = _words(command)
        while words and (words[0] in ("exec", "{", "!") or re.match(r"\d*[<>]", words[0])
                         or ("=" in words[0] and not words[0].startswith(("'", '"')))):
            words.pop(0)  # `exec cmd`, a group, a redirection, VAR=value before a command
        if not words or words[0] in SHELL_BUILTINS or words[0].startswith(("$", '"$')):
            continue
        found.add(_normal(words[0]))
    if '"$@"' in script:
        shifts = sum(int(n or 1) for n in re.findall(r"\bshift(?:\s+(\d+))?", script))
        found |= programs(positional[shifts:])
    return found


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command.replace("{", " ").replace("}", " "), posix=False)
    except ValueError:
        return command.split()
