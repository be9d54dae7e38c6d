"""Files to transfer, made once per run: as compressible or not as the seed studies' data.

- text:    English-like words (compresses several-fold, like the 710 MB text file of Taneja & Tyagi)
- random:  random bytes (incompressible, like encoded video)
- archive: gzip-compressed text (already compressed, like the zip files of the small-business study)
- image:   a series of JPEG photos of smooth scenes with noise (already compressed, like photos)
Content is seeded, so a size and kind give the same bytes in every run.

The files are made on the node that serves them, by this module run there as a program
(`make_on`): a file of gigabytes is never shipped over SSH. It imports only the standard library,
numpy and Pillow, so it runs under a host's own Python (python3-numpy, python3-pil).
"""

from __future__ import annotations

import gzip
import inspect
import io
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have "
         "an they you were her she there been one all we their has would when if so no will can more out up "
         "network tunnel packet cipher gateway office branch server client latency throughput security traffic "
         "report file transfer encryption protocol bandwidth video photo archive message mail domain").split()
CHUNK = 1 << 20


def _text(size: int, rng: np.random.Generator) -> bytes:
    """Lines of 6-14 words. Drawn in blocks of lines (one word at a time through `random` took
    18 s per MB under the VM's software emulation)."""
    out = io.BytesIO()
    while out.tell() < size:
        lengths = rng.integers(6, 15, 1024).tolist()
        picks = rng.integers(0, len(WORDS), sum(lengths)).tolist()
        start = 0
        for n in lengths:
            out.write(" ".join([WORDS[i] for i in picks[start:start + n]]).capitalize().encode() + b".\n")
            start += n
    return out.getvalue()[:size]


def _archive(size: int, rng: np.random.Generator) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as archive:
        while out.tell() < size:
            archive.write(_text(CHUNK, rng))
    return out.getvalue()[:size]


def _image(size: int, rng: np.random.Generator) -> bytes:
    import numpy as np
    from PIL import Image

    out = io.BytesIO()
    while out.tell() < size:
        y, x = np.mgrid[0:768, 0:1024]
        base = np.stack([np.sin(x / rng.uniform(40, 200) + rng.uniform(0, 6)) for _ in range(3)], axis=-1)
        pixels = (127 + 100 * base + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()[:size]


def make(folder: Path, kind: str, size: int, part: int = 0) -> Path:
    """The file for (kind, size) in `folder`, created if it is not there yet; `part` numbers the
    files of a transfer of several, each with its own content."""
    name = f"{kind}-{size}" + (f"-{part}" if part else "")
    path = folder / f"{name}.bin"
    if path.exists() and path.stat().st_size == size:
        return path
    import numpy as np  # here, not above: the controller only ships this module (make_on), at every command's start

    seed = zlib.crc32(name.encode())
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as fh:
        if kind == "random":
            rng = np.random.default_rng(seed)
            for start in range(0, size, CHUNK):
                fh.write(rng.bytes(min(CHUNK, size - start)))
        elif kind == "text":
            fh.write(_text(size, np.random.default_rng(seed)))
        elif kind == "archive":
            fh.write(_archive(size, np.random.default_rng(seed)))
        elif kind == "image":
            fh.write(_image(size, np.random.default_rng(seed)))
        else:
            raise ValueError(f"unknown data kind {kind!r}")
    tmp.chmod(0o644)
    tmp.rename(path)
    return path


def make_on(node, folder: str, kind: str, sizes: list[int]) -> list[str]:
    """The files for (kind, size) in `folder` on `node` (a testbed Node), made there if they are not
    yet: one for each size, numbered as `make`'s parts; their paths there."""
    source = inspect.getsource(sys.modules[__name__])
    # No time limit, as when they were made in-process: here random data came at 420 MB/s, text at 11,
    # images at 1.1 and archives at 0.7 MB/s, and the VM's emulation is tens of times slower.
    made = node.run([node.python, "-c", source, folder, kind, *map(str, sizes)], timeout=None)
    return made.stdout.split()


if __name__ == "__main__":  # on the node: folder, kind, the size of each file
    for number, wanted in enumerate(map(int, sys.argv[3:])):
        print(make(Path(sys.argv[1]), sys.argv[2], wanted, number))
