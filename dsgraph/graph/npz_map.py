"""The arrays of a dataset ``.npz`` without reading them: memory maps of its members.

``np.load`` reads a member of an ``.npz`` whole. A member stored without compression (``np.savez``
writes them so) is a plain ``.npy`` at a fixed offset of the zip file, so it can be memory-mapped
read-only: a rank then touches only the pages of the rows it reads. A compressed member
(``np.savez_compressed``) cannot be mapped and is read whole; the bundled Cora is small enough.
Nothing is unpickled: object arrays are refused.
"""

from __future__ import annotations

import mmap
import os
import struct
import tokenize
import zipfile
import zlib

import numpy as np

LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a zip local file header (30 bytes)


def _member_offset(handle, info: zipfile.ZipInfo) -> int:
    """Byte offset of a stored member's data in the zip file (after its local header)."""
    handle.seek(info.header_offset)
    fields = LOCAL_HEADER.unpack(handle.read(LOCAL_HEADER.size))
    name_len, extra_len = fields[-2], fields[-1]
    return info.header_offset + LOCAL_HEADER.size + name_len + extra_len


def _map_member(path: str, handle, info: zipfile.ZipInfo) -> np.ndarray:
    offset = _member_offset(handle, info)
    handle.seek(offset)
    version = np.lib.format.read_magic(handle)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise ValueError(f"member {info.filename} is a .npy of format version {version}, not 1.0 or 2.0")
    shape, fortran, dtype = readers[version](handle)
    if dtype.hasobject:
        raise ValueError(f"{path}: member {info.filename} holds Python objects; dsgraph reads no pickled data")
    if not shape or int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=handle.tell(), shape=shape, order="F" if fortran else "C")


def open_arrays(path: str | os.PathLike, names) -> dict[str, np.ndarray]:
    """The members ``names`` of the .npz at ``path``: memory maps where stored uncompressed, else
    arrays read whole. FileNotFoundError / ValueError name the file and the problem."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such dataset file")
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: not a readable .npz archive ({err})") from None
    with archive, open(path, "rb") as handle:
        members = {os.path.splitext(i.filename)[0]: i for i in archive.infolist()}
        missing = [name for name in names if name not in members]
        if missing:
            raise ValueError(f"{path}: missing array(s) {', '.join(missing)}; a dataset needs {', '.join(names)}")
        out = {}
        for name in names:
            info = members[name]
            try:
                if info.compress_type == zipfile.ZIP_STORED:
                    out[name] = _map_member(path, handle, info)
                else:
                    with archive.open(info) as member:
                        out[name] = np.lib.format.read_array(member, allow_pickle=False)
            except (
                ValueError,
                OSError,
                EOFError,
                SyntaxError,
                tokenize.TokenError,
                zipfile.BadZipFile,
                zlib.error,
            ) as err:
                raise ValueError(
                    f"{path}: array '{name}' is corrupt or cannot be read without pickle ({err})"
                ) from None
    return out


def release_pages(array: np.ndarray) -> None:
    """Lets the kernel take back the pages of the memory map behind ``array`` (written pages are
    flushed first; they stay in the file), so a pass that streams through a large map keeps a flat
    resident size. Arrays that are not memory maps are left alone."""
    mapping = getattr(array, "_mmap", None)
    if mapping is None or mapping.closed:
        return
    if array.flags.writeable:
        mapping.flush()
    mapping.madvise(mmap.MADV_DONTNEED)
