"""The node arrays of the encodings: counted from edges, selected, checked, converted, and the error
(with the ``dsgraph encode`` command) of a dataset that lacks one. Every encoding-specific choice is
asked of its spec (``registry.py``)."""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.graph.encodings.registry import spec_of_array, specs

CSR_CHUNK_EDGES = 1 << 24


def counted(edge_chunks, num_nodes: int) -> dict[str, np.ndarray]:
    """The array of every counted (not stored) encoding over the edges of ``edge_chunks`` ((src, dst)
    pairs of id arrays), by array name."""
    counting = [spec for spec in specs() if not spec.stored]
    none = np.zeros(0, dtype=np.int64)
    out = {spec.arrays[0]: spec.count(none, none, num_nodes, None) for spec in counting}
    for src, dst in edge_chunks:
        for spec in counting:
            spec.count(src, dst, num_nodes, out[spec.arrays[0]])
    return out


def csr_edges(ptr: np.ndarray, col: np.ndarray, chunk_edges: int = CSR_CHUNK_EDGES):
    """(src, dst) chunks of the edges of a CSR grouped by destination (row v: its sources
    ``col[ptr[v]:ptr[v+1]]``), about ``chunk_edges`` edges each."""
    ptr = np.asarray(ptr, dtype=np.int64)
    rows, start = ptr.size - 1, 0
    while start < rows:
        end = max(int(np.searchsorted(ptr, ptr[start] + chunk_edges, side="right")) - 1, start + 1)
        end = min(end, rows)
        dst = np.repeat(np.arange(start, end, dtype=np.int64), np.diff(ptr[start : end + 1]))
        yield col[ptr[start] : ptr[end]], dst
        start = end


def encode_command(dataset: str, arrays, seed: int = 0) -> str:
    """The ``dsgraph encode`` command that writes ``arrays`` into ``dataset`` (a synthetic one
    generated with ``seed``)."""
    options = [f"--seed {seed}"] if seed and dataset.startswith("rmat:") else []
    for spec in specs():
        if spec.stored and set(spec.arrays) & set(arrays):
            options.append(f"--{spec.name} {spec.default_width}")
    if dataset == "cora":  # the bundled file is part of the package: write a copy
        return f"dsgraph encode cora {' '.join(options)} --out cora_enc.npz` and train on 'cora_enc.npz'"
    return f"dsgraph encode {dataset} {' '.join(options)}".rstrip() + "`"


def missing_error(dataset: str, source: str, missing, seed: int = 0) -> ValueError:
    """The error of a run whose model asks for encodings that ``source`` (the file or store read
    for ``dataset``, generated with ``seed`` if synthetic) does not hold: it says which, and the
    command that computes them."""
    missing = list(missing)
    them = "them" if len(missing) > 1 else "it"
    return ValueError(
        f"{source}: no {', '.join(repr(m) for m in missing)} array, which the model's encodings need; compute "
        f"{them} once with `{encode_command(dataset, missing, seed)} (or drop {them} from 'model.encodings')"
    )


def check_values(source: str, name: str, array: np.ndarray) -> None:
    """The values of encoding array ``name`` as its spec wants them; ValueError naming ``source``."""
    spec_of_array(name).check_values(source, name, array)


def select(graph, arrays, dataset: str, seed: int = 0):
    """``graph`` (dataset ``dataset``, made with ``seed`` if synthetic) with only the encoding
    ``arrays`` in ``graph.enc`` (the ones a run reads); ValueError (``missing_error``) when it
    lacks one."""
    missing = [name for name in arrays if name not in graph.enc]
    if missing:
        raise missing_error(dataset, dataset, missing, seed)
    graph.enc = {name: graph.enc[name] for name in arrays}
    return graph


def widths(enc: dict) -> dict[str, int]:
    """array name -> width of the encoding arrays ``enc`` ([n, w] each)."""
    return {name: int(array.shape[1]) for name, array in enc.items()}


def as_tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Writable tensors of encoding arrays, in their spec's dtype (float32, int64 counts)."""
    return {name: torch.from_numpy(np.array(a, dtype=spec_of_array(name).dtype)) for name, a in arrays.items()}
