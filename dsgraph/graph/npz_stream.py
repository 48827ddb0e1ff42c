"""Writing a dataset ``.npz`` piece by piece, without holding its arrays in memory.

``np.savez`` needs every array whole. ``NpzWriter.member`` opens one member of the archive (stored
uncompressed, so readers memory-map it: ``npz_map.py``), writes its ``.npy`` header for the shape
given, and takes the rows in as many pieces as the caller likes; the size written is checked when
the member is closed. Members are written one after the other.
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from collections.abc import Iterator

import numpy as np


class NpzWriter:
    """An uncompressed ``.npz`` written member by member (``with NpzWriter(path) as npz: ...``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.archive = zipfile.ZipFile(self.path, "w", compression=zipfile.ZIP_STORED, allowZip64=True)

    def __enter__(self) -> NpzWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.archive.close()

    @contextlib.contextmanager
    def member(self, name: str, dtype, shape: tuple[int, ...]) -> Iterator[MemberStream]:
        """A stream for member ``name`` (dtype, shape): its ``write`` takes consecutive C-order pieces."""
        header = np.lib.format.header_data_from_array_1_0(np.empty(0, dtype=dtype))
        header["shape"] = tuple(int(s) for s in shape)
        with self.archive.open(f"{name}.npy", mode="w", force_zip64=True) as handle:
            np.lib.format.write_array_header_2_0(handle, header)
            stream = MemberStream(handle, np.dtype(dtype), int(np.prod(shape, dtype=np.int64)))
            yield stream
            if stream.written != stream.expected:
                raise ValueError(
                    f"{self.path}: member {name} got {stream.written} values, its shape {tuple(shape)} needs "
                    f"{stream.expected}"
                )

    def array(self, name: str, array: np.ndarray) -> None:
        """A whole (small) array as member ``name``."""
        with self.member(name, array.dtype, array.shape) as stream:
            stream.write(array)


class MemberStream:
    """Consecutive pieces of one member; each is converted to the member's dtype."""

    def __init__(self, handle, dtype: np.dtype, expected: int):
        self.handle, self.dtype, self.expected, self.written = handle, dtype, expected, 0

    def write(self, piece: np.ndarray) -> None:
        piece = np.ascontiguousarray(piece, dtype=self.dtype)
        self.handle.write(piece.reshape(-1).view(np.uint8).data)
        self.written += int(piece.size)
