"""Resolves a dataset name to a Graph: 'cora' (bundled), 'rmat:S[:EF]' (synthetic), or a .npz path;
or to the .npz file that holds it, for readers that take only their rows (``rank_reader.py``).

Synthetic graphs become files in the cache folder (``$DSGRAPH_CACHE``, default ~/.cache/dsgraph),
written once and renamed into place, so later runs read rows instead of generating the graph again.
Large plain R-MAT specs are generated out of core (``rmat_stream.py``), the others in memory (``rmat.py``);
the file name says which generator (and its version) made the file.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time
from importlib import resources

from dsgraph.graph.graph import Graph
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.graph.npz import load_npz, save_npz
from dsgraph.graph.rmat import (
    GENERATOR_VERSION,
    parse_rmat_spec,
    rmat_edge_types,
    rmat_graph,
    rmat_labels,
    rmat_regression,
    rmat_structural,
)
from dsgraph.graph.rmat_stream import STREAM_VERSION, streamed, write_rmat_npz

BUNDLED = ("cora",)
LOCK_POLL_S = 1.0  # how often a process waiting for another's build looks again


def bundled_path(name: str) -> str:
    return str(resources.files("dsgraph.data").joinpath(f"{name}.npz"))


def load_dataset(spec: str, seed: int = 0, choice: SplitChoice | None = None) -> Graph:
    """The whole dataset; ``choice``: which of a file's fixed splits, and whether they may overlap."""
    if spec in BUNDLED:
        return load_npz(bundled_path(spec), name=spec, choice=choice)
    if spec.startswith("rmat:"):  # the cached file when there is one: it may hold encodings (`dsgraph encode`)
        path, exists = dataset_file(spec, seed)
        if exists or streamed(spec):
            return load_npz(cached_dataset(spec, seed), name=spec, choice=choice)
        return rmat_graph(spec, seed=seed)
    if spec.endswith(".npz") or os.path.exists(spec):
        return load_npz(spec, choice=choice)
    raise _unknown(spec)


def _unknown(spec: str) -> ValueError:
    return ValueError(
        f"dataset '{spec}': expected one of {', '.join(BUNDLED)}, "
        "rmat:SCALE[:EDGE_FACTOR][:labels=T|:edge_types=T|:structural|:regression] or a path to a .npz file"
    )


def cache_dir() -> str:
    return os.environ.get("DSGRAPH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsgraph")


def dataset_file(spec: str, seed: int = 0) -> tuple[str, bool]:
    """(the .npz that holds dataset ``spec``, whether it exists). Synthetic graphs live in the cache
    under a name with their parameters, seed and generator version (``write_synthetic`` makes it)."""
    if spec in BUNDLED:
        return bundled_path(spec), True
    if spec.startswith("rmat:"):
        scale, edge_factor = parse_rmat_spec(spec)
        labels = f"_labels{rmat_labels(spec)}" if rmat_labels(spec) else "_structural" if rmat_structural(spec) else ""
        labels += f"_etypes{rmat_edge_types(spec)}" if rmat_edge_types(spec) else ""
        labels += "_regression" if rmat_regression(spec) else ""
        version = f"stream{STREAM_VERSION}" if streamed(spec) else f"v{GENERATOR_VERSION}"
        path = os.path.join(cache_dir(), f"rmat_s{scale}_ef{edge_factor}{labels}_seed{seed}_{version}.npz")
        return path, os.path.isfile(path)
    if spec.endswith(".npz") or os.path.exists(spec):
        if not os.path.isfile(spec):
            raise FileNotFoundError(f"{spec}: no such dataset file")
        return spec, True
    raise _unknown(spec)


def cached_dataset(spec: str, seed: int = 0, *, heartbeat=None, progress: bool = False) -> str:
    """The .npz of ``spec`` (``dataset_file``), a synthetic graph generated into the cache first if it
    is not there yet. Safe for many processes at once: one builds (under a file lock beside the file)
    and the others wait for the lock, outside any collective; a builder that dies frees the lock and
    the next waiter builds. ``heartbeat(phase)``: called about once a second while building (then in
    a child process, so its memory does not stay with the caller) or waiting; ``progress``: bars."""
    path, exists = dataset_file(spec, seed)
    if exists:
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        while not _try_lock(lock):
            if heartbeat is not None:
                heartbeat(f"start-up: waiting for another process to generate {spec} into {path}")
            time.sleep(LOCK_POLL_S)
        try:
            if not os.path.isfile(path):
                _generate(spec, seed, path, heartbeat, progress)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def _try_lock(handle) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _generate(spec: str, seed: int, path: str, heartbeat, progress: bool) -> None:
    """``write_synthetic``, in a child process beating ``heartbeat`` while it runs when one is given."""
    if heartbeat is None:
        write_synthetic(spec, seed, path, progress)
        return
    child = multiprocessing.get_context("spawn").Process(target=write_synthetic, args=(spec, seed, path, progress))
    child.start()
    while child.is_alive():
        heartbeat(f"start-up: generating {spec} into {path}")
        child.join(timeout=1.0)
    if child.exitcode != 0 or not os.path.isfile(path):
        raise ValueError(f"generating {spec} into {path} failed (exit code {child.exitcode})")


def write_synthetic(spec: str, seed: int, path: str, progress: bool = False) -> None:
    """Generates ``spec`` and writes it to ``path`` (uncompressed, so readers can memory-map it),
    under a temporary name renamed at the end: a reader never sees half a file. ``progress``: bars
    for the phases of an out-of-core build."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.npz"
    try:
        if streamed(spec):
            write_rmat_npz(spec, seed, tmp, progress=progress)
        else:
            save_npz(rmat_graph(spec, seed=seed), tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
