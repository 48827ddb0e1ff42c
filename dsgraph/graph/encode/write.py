"""Writing encodings beside the features: into a dataset ``.npz`` (members added or replaced, the
other members copied unchanged in 16 MB pieces, the new archive renamed into place) or into every
part of a partition store (one ``.npy`` per part and array, META.json's sha256, sizes and
``encodings`` entry updated, META.json written last)."""

from __future__ import annotations

import os
import shutil
import zipfile

import numpy as np

from dsgraph.graph.store import file_sha256, part_dir_name, read_meta, write_meta

COPY_CHUNK = 1 << 24


def write_npz_arrays(path: str, arrays: dict[str, np.ndarray], out: str | None = None) -> str:
    """Writes ``arrays`` into a copy of the .npz ``path`` (members of the same name replaced), saved
    as ``out`` (default: ``path`` itself, replaced atomically). New members are stored uncompressed,
    so readers memory-map them. Returns the path written."""
    out = path if out is None else out
    tmp = f"{out}.{os.getpid()}.tmp"
    try:
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", allowZip64=True) as dst:
            for info in src.infolist():
                if os.path.splitext(info.filename)[0] in arrays:
                    continue
                target = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                target.compress_type = info.compress_type
                with src.open(info) as fin, dst.open(target, "w", force_zip64=True) as fout:
                    shutil.copyfileobj(fin, fout, COPY_CHUNK)
            for name, array in arrays.items():
                target = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                target.compress_type = zipfile.ZIP_STORED
                with dst.open(target, "w", force_zip64=True) as fout:
                    np.lib.format.write_array(fout, np.ascontiguousarray(array), allow_pickle=False)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return out


def write_store_arrays(store_dir: str, arrays: dict[str, np.ndarray]) -> dict:
    """Writes node arrays ``arrays`` ([N, w] each, in the store's relabelled node order) into every
    part of the store and records them in META.json (checksums, sizes, ``encodings``); returns META."""
    meta = read_meta(store_dir)
    held = dict(meta.get("encodings", {}))
    for name, array in arrays.items():
        if array.ndim != 2 or array.shape[0] != int(meta["num_nodes"]):
            raise ValueError(
                f"array '{name}' of shape {array.shape} does not fit the store's {meta['num_nodes']} nodes"
            )
        for rank, (start, end) in enumerate(meta["node_ranges"]):
            relpath = f"{part_dir_name(rank)}/{name}.npy"
            path = os.path.join(store_dir, relpath)
            np.save(path, np.ascontiguousarray(array[start:end]), allow_pickle=False)
            meta["sha256"][relpath], meta["file_bytes"][relpath] = file_sha256(path), os.path.getsize(path)
        held[name] = int(array.shape[1])
    meta["encodings"] = held
    write_meta(store_dir, meta)
    return meta
