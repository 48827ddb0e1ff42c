"""The partition store on disk: writing it, and memory-mapping one rank's part of it.

Layout (format version 1)::

    DIR/META.json          format_version, method, num_parts, num_nodes, num_edges, num_features,
                           feature_dtype, num_classes, node_ranges, part_num_edges, part_num_halo,
                           permutation_file, sha256 {relative path: hex}, file_bytes {relative path: n}
    DIR/perm.npy           int64 [N]      new (relabelled) id -> original id
    DIR/part_0000/         one folder per part r, owning relabelled rows [start_r, end_r)
        rowptr.npy         int64 [n_r+1]  CSR by destination, rebased to 0
        col.npy            int32 [e_r]    source of each in-edge, global relabelled id
        x.npy              float32 [n_r, F]
        y.npy              int64 [n_r]    -1 = unlabelled
        train_mask.npy, val_mask.npy, test_mask.npy   bool [n_r]
        halo.npy           int32 [h_r]    sorted unique sources outside [start_r, end_r)
        edge_attr.npy      float32 [e_r, F_e]  edge features of col's edges (only with num_edge_features > 0)
        added_loops.npy    bool [e_r]     self loops added for the model (their edge_attr rows are 0); likewise
        degree.npy         int64 [n_r, 2] in- and out-degree in the whole graph (``encodings/degree.py``)
        rwse.npy, lappe.npy, lappe_eigvals.npy   float32 [n_r, w], when the dataset has them

META.json's ``encodings`` maps each encoding array the parts hold to its width (``dsgraph encode``
adds arrays to a store).

``META.json`` is written last, so an interrupted write leaves no loadable store. ``num_edge_features``
(absent in stores written before edge features: 0) says whether the parts hold edge features. Loading checks
every file it opens (present, size, sha256, .npy header, dtype, shape, contents) and raises
``FileNotFoundError``/``ValueError`` naming the file before any training starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from dsgraph.graph import encodings
from dsgraph.graph.graph import Graph
from dsgraph.graph.partition import halo_ids

FORMAT_VERSION = 1
META_FILE = "META.json"
PERM_FILE = "perm.npy"
PART_ARRAYS = ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask", "halo")
EDGE_ARRAYS = ("edge_attr", "added_loops")  # parts of a store with edge features also hold these
HASH_CHUNK = 1 << 22  # bytes read per step while hashing; the buffer is reused so RSS stays flat
CHECK_CHUNK = 1 << 22  # elements checked per step while validating array contents


def part_dir_name(rank: int) -> str:
    return f"part_{rank:04d}"


def write_store(
    graph: Graph,
    perm: np.ndarray,
    node_ranges: np.ndarray,
    out_dir: str | os.PathLike,
    method: str,
    *,
    dataset: str | None = None,
    seed: int = 0,
    halos: list[np.ndarray] | None = None,
    extra: dict | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> dict:
    """Writes a relabelled graph (part r owns rows ``node_ranges[r]``) as a partition store.

    ``perm`` int64 [N] maps relabelled id -> original id; ``halos`` (one ``halo_ids`` array per
    part) is computed when not given; ``extra`` adds JSON-serialisable entries to META.json (for
    example the partition quality). Returns the META dictionary.
    """
    out_dir = os.fspath(out_dir)
    perm, node_ranges = _checked_layout(graph.num_nodes, perm, node_ranges)
    prepare_out_dir(out_dir, overwrite)

    files = StoreFiles(out_dir)
    files.save(PERM_FILE, perm.astype(np.int64, copy=False))
    part_edges, part_halo = [], []
    for r, (start, end) in enumerate(_progress(node_ranges.tolist(), progress, "writing parts")):
        os.makedirs(os.path.join(out_dir, part_dir_name(r)))
        arrays = _part_arrays(graph, start, end, halos[r] if halos is not None else None)
        for name in (*PART_ARRAYS, *(EDGE_ARRAYS if graph.edge_attr is not None else ()), *graph.enc):
            files.save(f"{part_dir_name(r)}/{name}.npy", arrays[name])
        part_edges.append(int(arrays["col"].size))
        part_halo.append(int(arrays["halo"].size))

    meta = store_meta(
        files,
        dataset=dataset if dataset is not None else graph.name,
        method=method,
        seed=seed,
        node_ranges=node_ranges,
        part_edges=part_edges,
        part_halo=part_halo,
        sizes={
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "num_features": graph.num_features,
            "feature_dtype": str(graph.x.numpy().dtype),
            "num_classes": graph.num_classes,
            "num_edge_features": graph.num_edge_features,
        },
        encodings={name: int(array.shape[1]) for name, array in graph.enc.items()},
        extra=extra,
    )
    write_meta(out_dir, meta)
    return meta


def store_meta(
    files: StoreFiles,
    *,
    dataset: str,
    method: str,
    seed: int,
    node_ranges: np.ndarray,
    part_edges: list[int],
    part_halo: list[int],
    sizes: dict,
    encodings: dict[str, int],
    extra: dict | None,
) -> dict:
    """META.json's dictionary; ``sizes``: num_nodes, num_edges, num_features, feature_dtype,
    num_classes and num_edge_features; ``encodings``: the width of each encoding array the parts hold."""
    return {
        "format_version": FORMAT_VERSION,
        "dataset": dataset,
        "method": method,
        "seed": int(seed),
        "num_parts": int(node_ranges.shape[0]),
        **sizes,
        "node_ranges": node_ranges.tolist(),
        "part_num_edges": part_edges,
        "part_num_halo": part_halo,
        "permutation_file": PERM_FILE,
        "encodings": encodings,
        "sha256": files.sha256,
        "file_bytes": files.file_bytes,
        **(extra or {}),
    }


def write_meta(out_dir: str, meta: dict) -> None:
    """META.json, written last and atomically: a store without it is unfinished."""
    tmp = os.path.join(out_dir, META_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, META_FILE))


@dataclass
class StoreFiles:
    """Saves a store's .npy files and records each one's checksum and size for META.json."""

    out_dir: str
    sha256: dict[str, str] = field(default_factory=dict)
    file_bytes: dict[str, int] = field(default_factory=dict)

    def save(self, relpath: str, array: np.ndarray) -> None:
        np.save(os.path.join(self.out_dir, relpath), np.ascontiguousarray(array), allow_pickle=False)
        self.record(relpath)

    def record(self, relpath: str) -> None:
        """Records a file written to ``relpath`` by other means (a memory-mapped .npy filled in pieces)."""
        path = os.path.join(self.out_dir, relpath)
        self.sha256[relpath], self.file_bytes[relpath] = file_sha256(path), os.path.getsize(path)


def _checked_layout(n: int, perm, node_ranges) -> tuple[np.ndarray, np.ndarray]:
    perm = np.asarray(perm)
    node_ranges = np.asarray(node_ranges, dtype=np.int64).reshape(-1, 2)
    if perm.shape != (n,):
        raise ValueError(f"perm has shape {perm.shape} but the graph has {n} nodes")
    if node_ranges.size and (
        node_ranges[0, 0] != 0 or node_ranges[-1, 1] != n or (node_ranges[1:, 0] != node_ranges[:-1, 1]).any()
    ):
        raise ValueError(f"node_ranges must tile [0, {n}) in order, got {node_ranges.tolist()}")
    return perm, node_ranges


def _part_arrays(graph: Graph, start: int, end: int, halo: np.ndarray | None) -> dict[str, np.ndarray]:
    """The arrays of the part owning rows [start, end); its halo is computed when not given."""
    rowptr, col = graph.rows(start, end)
    col = col.numpy()
    if halo is None:
        halo = halo_ids(col, start, end)
    edges = {}
    if graph.edge_attr is not None:
        lo, hi = graph.edge_range(start, end)
        added = graph.added_loops[lo:hi] if graph.added_loops is not None else torch.zeros(hi - lo, dtype=torch.bool)
        edges = {"edge_attr": graph.edge_attr[lo:hi].numpy(), "added_loops": added.numpy()}
    return {
        **edges,
        "rowptr": rowptr.numpy(),
        "col": col,
        "x": graph.x[start:end].numpy(),
        "y": graph.y[start:end].numpy(),
        "train_mask": graph.train_mask[start:end].numpy(),
        "val_mask": graph.val_mask[start:end].numpy(),
        "test_mask": graph.test_mask[start:end].numpy(),
        "halo": np.asarray(halo, dtype=np.int32),
        **{name: array[start:end].numpy() for name, array in graph.enc.items()},
    }


def prepare_out_dir(out_dir: str, overwrite: bool) -> None:
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        if not overwrite:
            raise FileExistsError(f"{out_dir}: output folder exists and is not empty; pass --force to replace it")
        if not os.path.isfile(os.path.join(out_dir, META_FILE)):
            raise FileExistsError(f"{out_dir}: refusing to replace a non-empty folder that is not a partition store")
        shutil.rmtree(out_dir)
    os.makedirs(out_dir, exist_ok=True)


def _progress(items: list, enabled: bool, desc: str) -> Iterable:
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="part")


def file_sha256(path: str) -> str:
    """sha256 of a file, read in fixed chunks into one reused buffer (no memory growth)."""
    digest = hashlib.sha256()
    buf = bytearray(HASH_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(buf)
            if not got:
                break
            digest.update(view[:got])
    return digest.hexdigest()


def read_meta(store_dir: str | os.PathLike) -> dict:
    """Reads and checks META.json of a partition store (format version and required keys)."""
    path = os.path.join(os.fspath(store_dir), META_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path}: no partition store here (META.json missing); create one with `dsgraph partition`"
        )
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable JSON file ({err})") from None
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if not isinstance(version, int):
        raise ValueError(f"{path}: missing integer 'format_version'")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {version} is newer than this dsgraph supports ({FORMAT_VERSION}); "
            "upgrade dsgraph or rewrite the store with this version's `dsgraph partition`"
        )
    required = (
        "num_parts",
        "num_nodes",
        "num_edges",
        "num_features",
        "feature_dtype",
        "node_ranges",
        "part_num_edges",
        "part_num_halo",
        "permutation_file",
        "sha256",
        "file_bytes",
    )
    missing = [key for key in required if key not in meta]
    if missing:
        raise ValueError(f"{path}: missing key(s) {', '.join(missing)}")
    if len(meta["node_ranges"]) != meta["num_parts"]:
        raise ValueError(f"{path}: {len(meta['node_ranges'])} node ranges for {meta['num_parts']} parts")
    return meta


@dataclass(kw_only=True)
class LocalPart:
    """One rank's part of a store: rows [start, end) of the relabelled graph, memory-mapped read-only.

    Arrays are read-only NumPy memmaps (wrap with ``torch.from_numpy(np.array(a))`` or
    ``torch.as_tensor`` when a writable tensor is needed).
    """

    rank: int
    num_parts: int
    start: int
    end: int
    num_nodes: int  # global node count
    rowptr: np.ndarray  # int64 [n_r+1], rebased to 0
    col: np.ndarray  # int32 [e_r], global relabelled source ids
    x: np.ndarray  # float32 [n_r, F]
    y: np.ndarray  # int64 [n_r]
    train_mask: np.ndarray  # bool [n_r]
    val_mask: np.ndarray  # bool [n_r]
    test_mask: np.ndarray  # bool [n_r]
    halo: np.ndarray  # int32 [h_r], sorted remote source ids
    meta: dict = field(repr=False)
    edge_attr: np.ndarray | None = None  # float32 [e_r, F_e] (stores with edge features)
    added_loops: np.ndarray | None = None  # bool [e_r]
    enc: dict[str, np.ndarray] = field(default_factory=dict)  # encoding arrays asked for: [n_r, w]

    @property
    def num_local_nodes(self) -> int:
        return self.end - self.start

    @property
    def num_local_edges(self) -> int:
        return int(self.col.shape[0])


def load_part(
    store_dir: str | os.PathLike,
    rank: int,
    world_size: int,
    verify: bool = True,
    encodings: tuple[str, ...] | None = (),
) -> LocalPart:
    """Memory-maps part ``rank`` of the store, opening no other part's files, and the encoding
    arrays ``encodings`` (None: every one the store holds; a missing one is an error that says the
    ``dsgraph encode`` command to run).

    Checks, in order: META.json (version), part count == ``world_size``, and for each file: present,
    size as recorded, sha256 as recorded (when ``verify``), a valid .npy with the expected dtype and
    shape, and its contents (rowptr monotone, ids in range, finite features and encodings, labels).
    """
    store_dir = os.fspath(store_dir)
    meta = read_meta(store_dir)
    num_parts = meta["num_parts"]
    if num_parts != world_size:
        raise ValueError(
            f"{os.path.join(store_dir, META_FILE)}: store {store_dir} has {num_parts} parts but the job has "
            f"{world_size} ranks; repartition with `dsgraph partition --dataset {meta.get('dataset', 'SPEC')} "
            f"--method {meta.get('method', 'metis')} --parts {world_size} --out NEW_DIR`"
        )
    if not 0 <= rank < num_parts:
        raise ValueError(f"rank {rank} is outside [0, {num_parts})")
    start, end = (int(v) for v in meta["node_ranges"][rank])
    n_r, e_r, h_r = end - start, int(meta["part_num_edges"][rank]), int(meta["part_num_halo"][rank])
    f = int(meta["num_features"])
    expected = {  # name -> (dtype, shape)
        "rowptr": (np.int64, (n_r + 1,)),
        "col": (np.int32, (e_r,)),
        "x": (np.dtype(meta["feature_dtype"]), (n_r, f)),
        "y": (np.int64, (n_r,)),
        "train_mask": (np.bool_, (n_r,)),
        "val_mask": (np.bool_, (n_r,)),
        "test_mask": (np.bool_, (n_r,)),
        "halo": (np.int32, (h_r,)),
    }
    f_e = int(meta.get("num_edge_features", 0))
    if f_e:
        expected.update({"edge_attr": (np.float32, (e_r, f_e)), "added_loops": (np.bool_, (e_r,))})
    arrays = {
        name: open_array(store_dir, f"{part_dir_name(rank)}/{name}.npy", meta, dtype, shape, verify)
        for name, (dtype, shape) in expected.items()
    }
    part = LocalPart(
        rank=rank,
        num_parts=num_parts,
        start=start,
        end=end,
        num_nodes=int(meta["num_nodes"]),
        meta=meta,
        enc=_open_encodings(store_dir, meta, rank, encodings, verify),
        **arrays,
    )
    _check_part_contents(part, os.path.join(store_dir, part_dir_name(rank)))
    return part


def _open_encodings(
    store_dir: str, meta: dict, rank: int, names: tuple[str, ...] | None, verify: bool
) -> dict[str, np.ndarray]:
    """The encoding arrays ``names`` of part ``rank`` (None: all the store holds), checked."""
    held = meta.get("encodings", {})
    names = tuple(held) if names is None else names
    missing = [name for name in names if name not in held]
    if missing:
        raise encodings.missing_error(store_dir, os.path.join(store_dir, META_FILE), missing)
    start, end = (int(v) for v in meta["node_ranges"][rank])
    out = {}
    for name in names:
        relpath = f"{part_dir_name(rank)}/{name}.npy"
        dtype = encodings.spec_of_array(name).dtype
        out[name] = open_array(store_dir, relpath, meta, dtype, (end - start, int(held[name])), verify)
        for c in _chunks(out[name]):
            encodings.check_values(os.path.join(store_dir, relpath), name, c)
    return out


def open_array(store_dir: str, relpath: str, meta: dict, dtype, shape: tuple, verify: bool = True) -> np.ndarray:
    """Memory-maps one array file of the store after checking it against META.json."""
    path = os.path.join(store_dir, relpath)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path}: array file missing from partition store {store_dir}; rerun `dsgraph partition`"
        )
    if relpath not in meta["sha256"] or relpath not in meta["file_bytes"]:
        raise ValueError(f"{path}: META.json records no checksum or size for this file")
    size, recorded = os.path.getsize(path), int(meta["file_bytes"][relpath])
    if size != recorded:
        problem = "truncated" if size < recorded else "longer than recorded"
        raise ValueError(
            f"{path}: file is {problem} ({size} bytes, META.json records {recorded}); rerun `dsgraph partition`"
        )
    if verify:
        digest = file_sha256(path)
        if digest != meta["sha256"][relpath]:
            raise ValueError(
                f"{path}: sha256 checksum mismatch (file {digest[:16]}..., META.json "
                f"{meta['sha256'][relpath][:16]}...); "
                "the file was modified or corrupted; rerun `dsgraph partition`"
            )
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"{path}: not a readable .npy array, possibly truncated ({err})") from None
    if array.dtype != np.dtype(dtype) or array.shape != tuple(shape):
        raise ValueError(
            f"{path}: expected {np.dtype(dtype)} {tuple(shape)} from META.json, found {array.dtype} {array.shape}"
        )
    return array


def _chunks(array: np.ndarray) -> Iterable[np.ndarray]:
    step = max(1, CHECK_CHUNK // max(1, int(np.prod(array.shape[1:]))))
    for lo in range(0, array.shape[0], step):
        yield array[lo : lo + step]


def _check_part_contents(part: LocalPart, folder: str) -> None:
    """Validates the contents of a mapped part chunk by chunk (no array-sized temporaries)."""
    where = lambda name: os.path.join(folder, f"{name}.npy")  # noqa: E731
    rowptr = part.rowptr
    if rowptr[0] != 0 or rowptr[-1] != part.num_local_edges:
        raise ValueError(f"{where('rowptr')}: must start at 0 and end at the part's edge count {part.num_local_edges}")
    overlapping = (rowptr[lo : lo + CHECK_CHUNK + 1] for lo in range(0, rowptr.shape[0] - 1, CHECK_CHUNK))
    if any(bool((np.diff(c) < 0).any()) for c in overlapping):
        raise ValueError(f"{where('rowptr')}: row pointers are not monotone")
    for name in ("col", "halo"):
        for c in _chunks(getattr(part, name)):
            if c.size and (int(c.min()) < 0 or int(c.max()) >= part.num_nodes):
                raise ValueError(f"{where(name)}: a node id is outside [0, {part.num_nodes})")
    halo = part.halo
    if halo.size and (bool((np.diff(halo) <= 0).any()) or bool(((halo >= part.start) & (halo < part.end)).any())):
        raise ValueError(f"{where('halo')}: halo ids must be sorted, unique and outside [{part.start}, {part.end})")
    for name in ("x", "edge_attr"):
        for c in _chunks(getattr(part, name)) if getattr(part, name) is not None else ():
            if not bool(np.isfinite(c).all()):
                raise ValueError(f"{where(name)}: features contain NaN or Inf")
    classes = int(part.meta.get("num_classes", 0)) or None
    if part.y.size and (int(part.y.min()) < -1 or (classes is not None and int(part.y.max()) >= classes)):
        raise ValueError(f"{where('y')}: labels must be class ids in [0, {classes}) (or -1 for unlabelled)")
    for name in ("train_mask", "val_mask", "test_mask"):
        if bool((getattr(part, name) & (part.y < 0)).any()):
            raise ValueError(f"{where(name)}: selects a node whose label is -1 (unlabelled)")


def load_permutation(store_dir: str | os.PathLike, verify: bool = True) -> np.ndarray:
    """perm int64 [N]: relabelled id -> original id, checked like every other store file."""
    store_dir = os.fspath(store_dir)
    meta = read_meta(store_dir)
    perm = open_array(store_dir, meta["permutation_file"], meta, np.int64, (int(meta["num_nodes"]),), verify)
    if perm.size and (int(perm.min()) < 0 or int(perm.max()) >= perm.size):
        raise ValueError(f"{os.path.join(store_dir, meta['permutation_file'])}: ids outside [0, {perm.size})")
    return perm


def load_store_graph(store_dir: str | os.PathLike, verify: bool = True) -> Graph:
    """Reassembles the whole relabelled graph from every part, encodings included (for tests,
    evaluation and tools)."""
    meta = read_meta(store_dir)
    parts = [load_part(store_dir, r, meta["num_parts"], verify, encodings=None) for r in range(meta["num_parts"])]
    offsets = np.cumsum([0] + [p.num_local_edges for p in parts])
    rowptr = np.concatenate([[0]] + [p.rowptr[1:] + offsets[r] for r, p in enumerate(parts)]).astype(np.int64)

    def cat(name: str) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([getattr(p, name) for p in parts]))

    f_e = int(meta.get("num_edge_features", 0))
    graph = Graph(
        rowptr=torch.from_numpy(rowptr),
        col=cat("col"),
        x=cat("x").reshape(meta["num_nodes"], meta["num_features"]),
        y=cat("y"),
        train_mask=cat("train_mask"),
        val_mask=cat("val_mask"),
        test_mask=cat("test_mask"),
        name=str(meta.get("dataset", "graph")),
        edge_attr=cat("edge_attr").reshape(-1, f_e) if f_e else None,
        added_loops=cat("added_loops") if f_e else None,
        enc={
            name: torch.from_numpy(np.concatenate([p.enc[name] for p in parts])) for name in meta.get("encodings", {})
        },
    )
    graph.validate(os.fspath(store_dir))
    return graph
