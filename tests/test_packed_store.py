"""A store compressed with xz (results.sqlite.xz, as runs/ keeps the seeds' stores: 36 MB of SQLite
in 3 MB) is read as it is by every reading command, and never written; a damaged one is refused."""

import hashlib
import lzma
import subprocess
import sys

from test_results_dir import make_store

VPNLAB = [sys.executable, "-m", "vpnlab"]


def vpnlab(*args):
    return subprocess.run([*VPNLAB, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_a_compressed_store_reads_as_the_store_itself(tmp_path):
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    make_store(plain)
    packed.mkdir()
    (packed / "study.yaml").write_text((plain / "study.yaml").read_text())
    (packed / "results.sqlite.xz").write_bytes(lzma.compress((plain / "results.sqlite").read_bytes()))
    before = hashlib.sha256((packed / "results.sqlite.xz").read_bytes()).hexdigest()
    for command in (("export", "--format", "json"), ("show",)):
        a, b = vpnlab(command[0], plain, *command[1:]), vpnlab(command[0], packed, *command[1:])
        assert a.returncode == b.returncode == 0, b.stderr
        assert a.stdout.replace(str(plain), "D") == b.stdout.replace(str(packed), "D")
    assert sorted(p.name for p in packed.iterdir()) == ["results.sqlite.xz", "study.yaml"]
    assert hashlib.sha256((packed / "results.sqlite.xz").read_bytes()).hexdigest() == before


def test_a_damaged_compressed_store_is_refused(tmp_path):
    (tmp_path / "results.sqlite.xz").write_bytes(b"\xfd7zXZ\x00 not really")
    proc = vpnlab("show", tmp_path)
    assert proc.returncode == 2 and "not a store compressed with xz" in proc.stderr and "Traceback" not in proc.stderr
