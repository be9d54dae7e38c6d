"""The read-only check that a file is an intact store this vpnlab reads, which every reader and
writer of a store goes through first: SQLite, undamaged pages, vpnlab's tables with the columns of
the schema version the store claims, and in every row what its column holds (a number, text, JSON,
a time, a study that parses). The values are checked in one SQL pass a table, so that a store of
100,000 samples is checked in a fraction of a second; the first damage found is refused with
`damaged: <table>.<column> row N: <why>`."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

from ..core.errors import StudyError
from ..plan.stored import StoredStudy
from .database import SCHEMA, SCHEMA_VERSION, TABLES, UPGRADES, StoreError, read_only_uri

TIMES = {("runs", "started_at"), ("runs", "finished_at"), ("repetitions", "completed_at"), ("samples", "measured_at")}
JSON_OBJECTS = {("runs", "capabilities"), ("runs", "tool_versions"), ("runs", "hosts"), ("scenarios", "vpn_options"),
                ("scenarios", "workload_params"), ("scenarios", "hosts"), ("scenarios", "as_run"),
                ("raw_outputs", "output")}
# when a JSON column's value is JSON: '' is "not recorded" in these two; of the raw outputs, only these
# tools' are JSON records the readers parse (the others are the tools' own text)
JSON_WHEN = {("scenarios", "hosts"): "{c} != ''", ("scenarios", "as_run"): "{c} != ''",
             ("raw_outputs", "output"): "tool IN ('cpu', 'pairs')"}
TYPES = {"REAL": ("('real', 'integer')", "a number"), "INTEGER": ("('integer')", "a whole number"),
         "TEXT": ("('text')", "text")}
MISSING = "'missing (NULL)'"
NOT_JSON = " is not JSON"  # SQLite's JSON is strict; Python's (which wrote it) also reads NaN: asked again


def _declared() -> dict[str, dict[str, tuple[str, bool]]]:
    """Table -> column -> (declared type, whether a value is required), as SQLite reads SCHEMA."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        return {table: {name: (kind, bool(notnull or key)) for _, name, kind, notnull, _, key
                        in db.execute(f"PRAGMA table_info({table})")} for table in sorted(TABLES)}
    finally:
        db.close()


DECLARED = _declared()
ADDED = {step: {re.match(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", statement).groups() for statement in statements}
         for step, statements in UPGRADES.items()}  # the (table, column)s each upgrade step adds
VERSIONS = range(min(UPGRADES), SCHEMA_VERSION + 1)


def columns_of(version: int) -> set[tuple[str, str]]:
    """The (table, column)s a store of this schema version has."""
    later = {column for step in range(version, SCHEMA_VERSION) for column in ADDED[step]}
    return {(table, column) for table, columns in DECLARED.items() for column in columns} - later


def check_store(path: Path) -> list[dict]:
    """Check, without writing anything, that `path` is an undamaged vpnlab results store this
    vpnlab can read; its runs (id, status, study_name, study_text), oldest first. Raises
    StoreError saying what is wrong otherwise."""
    return inspect_store(Path(path))[1]


def inspect_store(path: Path) -> tuple[int, list[dict]]:
    """check_store's work: the store's schema version and its runs."""
    # Only SQLite opens the file: closing any other descriptor of it would drop every POSIX lock
    # this process holds on it (a store it has open), and another process could then delete that
    # store's write-ahead log as abandoned, with what was committed since.
    if not os.access(path, os.R_OK):
        raise StoreError(f"{path}: cannot be read ({'no such file' if not path.exists() else 'permission denied'})")
    if not path.stat().st_size:
        raise StoreError(f"{path}: an empty file, not a vpnlab results store; left untouched")
    db = None
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True)
        _check_file(db, path)
        version = _version(db, path)
        _check_values(db, path)
        return version, [dict(zip(("id", "status", "study_name", "study_text"), r))
                         for r in db.execute("SELECT id, status, study_name, study_text FROM runs ORDER BY id")]
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise StoreError(f"{path}: not a vpnlab results store (not an SQLite database); left untouched") from exc
        raise StoreError(f"{path}: the results store is damaged or unreadable ({exc}); left untouched") from exc
    finally:
        if db is not None:
            db.close()


def _check_file(db: sqlite3.Connection, path: Path) -> None:
    """SQLite's own check of its pages, and vpnlab's tables."""
    problems = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
    if problems != ["ok"]:
        raise StoreError(f"{path}: the results store is damaged ({'; '.join(problems)}); left untouched")
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not TABLES <= tables:
        raise StoreError(f"{path}: an SQLite database but not a vpnlab results store (it has no "
                         f"{', '.join(sorted(TABLES - tables))} table); left untouched")


def damaged(path: Path, table: str, column: str, row: int, why: str) -> StoreError:
    return StoreError(f"{path}: damaged: {table}.{column} row {row}: {why}; left untouched")


def _version(db: sqlite3.Connection, path: Path) -> int:
    """The schema version the store claims, if its tables are that version's."""
    row = db.execute("SELECT rowid, value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:
        raise StoreError(f"{path}: the results store is damaged (no schema version); left untouched")
    try:
        version = int(row[1])
    except (TypeError, ValueError):
        raise damaged(path, "meta", "value", row[0], f"the results schema {row[1]!r} is not a number") from None
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: results schema {version}, this vpnlab reads up to {SCHEMA_VERSION}: "
                         "use the vpnlab that wrote it (or a newer one); left untouched")
    if version not in VERSIONS:
        raise damaged(path, "meta", "value", row[0], f"results schema {version}, which no vpnlab writes")
    held = {(table, info[1]) for table in TABLES for info in db.execute(f"PRAGMA table_info({table})")}
    if held != columns_of(version):
        # an upgrade from the version claimed would add columns that are there, or miss ones that are not
        raise damaged(path, "meta", "value", row[0], f"results schema {version} claimed, but its tables are "
                                                     f"{_whose(held, columns_of(version))}")
    return version


def _whose(held: set, claimed: set) -> str:
    """Which schema version's tables the store's are, or how they differ from the version claimed."""
    version = next((v for v in VERSIONS if columns_of(v) == held), None)
    if version is not None:
        return f"those of schema {version}"
    differ = [f"without {', '.join(f'{t}.{c}' for t, c in sorted(claimed - held))}" if claimed - held else "",
              f"with {', '.join(f'{t}.{c}' for t, c in sorted(held - claimed))}" if held - claimed else ""]
    return f"those of no results schema ({'; '.join(filter(None, differ))})"


def _check_values(db: sqlite3.Connection, path: Path) -> None:
    """Every value as its column declares it, then every run's study: the first damage found refused."""
    for table in sorted(TABLES):
        columns = [info[1] for info in db.execute(f"PRAGMA table_info({table})")]
        whys = ", ".join(_why(table, column) for column in columns)
        # one pass finds the rows with something to say (coalesce stops at the first); only those are read whole
        for (row,) in db.execute(f"SELECT rowid FROM {table} WHERE coalesce({whys}) IS NOT NULL"):
            found = db.execute(f"SELECT {whys} FROM {table} WHERE rowid=?", (row,)).fetchone()
            for column, why in zip(columns, found):
                if why is not None and not (why.endswith(NOT_JSON) and _python_reads(db, table, column, row)):
                    raise damaged(path, table, column, row, why)
    _check_references(db, path)
    _check_studies(db, path)


def _check_references(db: sqlite3.Connection, path: Path) -> None:
    """Every row that names a scenario or a run names one the store holds (the schema's REFERENCES,
    by SQLite's own check: it reads, never enforces)."""
    for table, row, parent, key in db.execute("PRAGMA foreign_key_check"):
        column = next(ref[3] for ref in db.execute(f"PRAGMA foreign_key_list({table})") if ref[0] == key)
        value = db.execute(f"SELECT {column} FROM {table} WHERE rowid=?", (row,)).fetchone()[0]
        raise damaged(path, table, column, row, f"names {value!r}, which is no row of {parent} here")


def _check_studies(db: sqlite3.Connection, path: Path) -> None:
    """Each run's study, as the readers parse it: YAML (no tag but the safe ones), a mapping."""
    for row, text in db.execute("SELECT rowid, study_text FROM runs"):
        try:
            StoredStudy.read(text, "the study")
        except StudyError as exc:
            raise damaged(path, "runs", "study_text", row, " ".join(str(exc).split())) from None


def _why(table: str, column: str) -> str:
    """An SQL expression: why `column`'s value in a row is not what the column holds, or NULL."""
    kind, required = DECLARED[table][column]
    types, what = TYPES[kind]
    c, shown = f'"{column}"', f'substr(quote("{column}"), 1, 40)'
    cases = [f"WHEN {c} IS NULL THEN {MISSING if required else 'NULL'}",
             f"WHEN typeof({c}) NOT IN {types} THEN {shown} || ' is not {what}'"]
    if (table, column) in TIMES:
        cases.append(f"WHEN NOT ({c} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' AND julianday({c}) IS NOT NULL)"
                     f" THEN {shown} || ' is not a time'")
    if (table, column) in JSON_OBJECTS:  # (a CASE of its own: json_type fails on what is not JSON)
        when = JSON_WHEN.get((table, column), "1").format(c=c)
        cases.append(f"WHEN {when} THEN CASE WHEN NOT json_valid({c}) THEN {shown} || '{NOT_JSON}'"
                     f" WHEN json_type({c}) != 'object' THEN {shown} || ' is JSON but not an object' END")
    return f"CASE {' '.join(cases)} END"


def _python_reads(db: sqlite3.Connection, table: str, column: str, row: int) -> bool:
    """Whether what SQLite found not JSON is a JSON object to Python's reader (NaN and Infinity are)."""
    text = db.execute(f'SELECT "{column}" FROM {table} WHERE rowid=?', (row,)).fetchone()[0]
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
