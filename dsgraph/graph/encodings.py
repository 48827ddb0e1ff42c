"""Node encodings: per-node arrays that ride with the features (docs/guides/encodings.md).

Three encodings exist; the model's ``encodings`` option names the ones a run feeds in:

- ``rwse``: random-walk return probabilities, float32 [N, K] (``rwse`` array), computed once by
  ``dsgraph encode`` and stored beside the features in the dataset's ``.npz`` or partition store.
- ``lappe``: the k lowest non-trivial eigenvectors of the normalised Laplacian of each node's
  connected component (``lappe`` float32 [N, k]) and their eigenvalues (``lappe_eigvals`` float32
  [N, k]: row i holds the eigenvalues of node i's component), stored the same way.
- ``degree``: the dataset's in- and out-degree of every node (``degree`` int64 [N, 2]), counted over
  the whole graph's edges as the file stores them (self loops the model adds are not counted), so
  every rank, strategy and mode sees the same numbers. Computed when a graph is read; a partition
  store keeps it per part, since a rank there never sees the other parts' edges.

A ``Graph`` holds such arrays in ``Graph.enc`` and a rank's ``NodeData`` in ``NodeData.enc``
(name -> array), under the array names above.
"""

from __future__ import annotations

import numpy as np
import torch

ENCODINGS = {"rwse": ("rwse",), "lappe": ("lappe", "lappe_eigvals"), "degree": ("degree",)}
"""encoding name (the model's ``encodings`` option) -> the node arrays it reads."""
STORED = ("rwse", "lappe", "lappe_eigvals")
"""Arrays ``dsgraph encode`` computes and writes beside the features."""
ARRAYS = (*STORED, "degree")
DEFAULT_WIDTH = {"rwse": 16, "lappe": 8}  # what the suggested ``dsgraph encode`` command asks for


def arrays_of(names) -> tuple[str, ...]:
    """The node arrays that the encodings ``names`` read, in a fixed order."""
    unknown = [name for name in names if name not in ENCODINGS]
    if unknown:
        raise ValueError(f"unknown encoding(s) {', '.join(map(repr, unknown))}; choose from {', '.join(ENCODINGS)}")
    return tuple(array for name in ENCODINGS if name in names for array in ENCODINGS[name])


def degrees(src: np.ndarray, dst: np.ndarray, num_nodes: int, out: np.ndarray | None = None) -> np.ndarray:
    """int64 [N, 2]: in-degree (column 0) and out-degree (column 1) of every node over the edges
    src -> dst, added to ``out`` when given (for edges read in chunks)."""
    out = np.zeros((num_nodes, 2), dtype=np.int64) if out is None else out
    out[:, 0] += np.bincount(np.asarray(dst, dtype=np.int64), minlength=num_nodes)
    out[:, 1] += np.bincount(np.asarray(src, dtype=np.int64), minlength=num_nodes)
    return out


def encode_command(dataset: str, arrays, seed: int = 0) -> str:
    """The ``dsgraph encode`` command that writes ``arrays`` into ``dataset`` (a synthetic one
    generated with ``seed``)."""
    options = [f"--seed {seed}"] if seed and dataset.startswith("rmat:") else []
    if "rwse" in arrays:
        options.append(f"--rwse {DEFAULT_WIDTH['rwse']}")
    if "lappe" in arrays or "lappe_eigvals" in arrays:
        options.append(f"--lappe {DEFAULT_WIDTH['lappe']}")
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
    """Finite encodings, non-negative degrees; ValueError naming ``source`` and the array."""
    if name == "degree":
        if array.size and int(array.min()) < 0:
            raise ValueError(f"{source}: array 'degree' holds a negative degree")
        return
    if not bool(np.isfinite(array).all()):
        raise ValueError(f"{source}: array '{name}' contains NaN or Inf; recompute it with `dsgraph encode`")


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
    """Writable tensors of node arrays (float32 encodings, int64 degrees)."""
    return {name: torch.from_numpy(np.array(a, dtype=np.int64 if name == "degree" else np.float32)) for name, a in arrays.items()}
