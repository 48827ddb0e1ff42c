"""Writing predictions in the dataset's node order without any rank holding all rows.

Rank 0 preallocates one ``.npy`` per array (``np.lib.format.open_memmap``) in a folder beside the
output; every rank writes its own rows at their dataset ids into the memory maps; rank 0 then
stores the ``.npy`` files, uncompressed and unchanged, as the members of the ``.npz`` (a zip of
``.npy`` files, which ``np.load`` and dsgraph's memory-mapped reader open) and removes the folder.
Copying a file into the zip streams it, so no rank ever holds more than its own rows.
"""

from __future__ import annotations

import os
import shutil
import zipfile

import numpy as np


def parts_dir(out: str) -> str:
    return out.removesuffix(".npz") + ".parts"


def allocate(out: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> None:
    """Rank 0: the empty ``.npy`` of every array, ``shapes``: name -> (shape, dtype)."""
    folder = parts_dir(out)
    os.makedirs(folder, exist_ok=True)
    for name, (shape, dtype) in shapes.items():
        np.lib.format.open_memmap(os.path.join(folder, f"{name}.npy"), mode="w+", dtype=dtype, shape=shape).flush()


def write_rows(out: str, rows: np.ndarray, arrays: dict[str, np.ndarray]) -> None:
    """Any rank: writes ``arrays[name][i]`` at dataset row ``rows[i]`` of each allocated array."""
    for name, values in arrays.items():
        target = np.lib.format.open_memmap(os.path.join(parts_dir(out), f"{name}.npy"), mode="r+")
        target[rows] = values
        target.flush()
        del target


def merge(out: str, names) -> None:
    """Rank 0, after every rank wrote: the ``.npz`` from the ``.npy`` files (stored, streamed)."""
    folder = parts_dir(out)
    tmp = f"{out}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name in names:
            archive.write(os.path.join(folder, f"{name}.npy"), arcname=f"{name}.npy")
    os.replace(tmp, out)
    shutil.rmtree(folder)
