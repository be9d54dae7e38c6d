"""Debian packages unpacked into vpnlab's cache rather than installed.

Some parts vpnlab needs cannot be installed next to others: the VM's kernel (this
machine boots another one) and libreswan (Debian's package conflicts with
strongSwan's, and both must be comparable in one study). `apt-get download`
fetches the real package and `dpkg-deb -x` unpacks it, untouched, under
/var/cache/vpnlab; its library dependencies are ordinary packages that bootstrap
installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from ..core.errors import VpnlabError

CACHE = Path(os.environ.get("VPNLAB_CACHE", "/var/cache/vpnlab"))


class UnpackError(VpnlabError):
    pass


def unpack(package: str, folder: Path, after: Callable[[Path], None] | None = None) -> Path:
    """Download `package` and unpack it into `folder` (whole, or not at all); `after` may
    finish the tree before it is put in place. Returns `folder`."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(["apt-get", "download", package], cwd=folder.parent, capture_output=True, text=True)
    debs = sorted(folder.parent.glob(f"{package}_*.deb"))
    if got.returncode != 0 or not debs:
        raise UnpackError(f"apt-get download {package} failed: {got.stderr.strip()[-300:]}")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        subprocess.run(["dpkg-deb", "-x", debs[-1], partial], check=True, capture_output=True)
        if after:
            after(partial)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        for deb in debs:
            deb.unlink()
    return folder


def package_folder(package: str) -> Path:
    return CACHE / "packages" / package


def provide(package: str, installed: Path) -> Path | None:
    """The root a package's files live under: "/" when `installed` (one of its files) is there,
    else its unpacked copy, unpacking it now. None when neither can be had."""
    if installed.exists():
        return Path("/")
    folder = package_folder(package)
    if not (folder / installed.relative_to("/")).exists():
        try:
            unpack(package, folder)
        except (UnpackError, subprocess.CalledProcessError, OSError):
            return None
    return folder
