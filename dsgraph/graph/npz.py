"""Loading and saving graphs as plain NumPy archives (no pickle).

The format is the one of the bundled ``cora.npz``: ``src``, ``dst`` (int, edges src -> dst), ``x``
[N, F] numeric features, ``y`` [N] int labels (-1 = unlabelled), and bool ``train_mask``,
``val_mask``, ``test_mask`` [N]. Extra arrays are ignored.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from dsgraph.graph.graph import Graph

REQUIRED = ("src", "dst", "x", "y", "train_mask", "val_mask", "test_mask")


def load_npz(path: str | os.PathLike, name: str | None = None) -> Graph:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such dataset file")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: not a readable .npz archive ({err})") from None
    with archive:
        missing = [key for key in REQUIRED if key not in archive.files]
        if missing:
            raise ValueError(
                f"{path}: missing array(s) {', '.join(missing)}; a dataset needs {', '.join(REQUIRED)}"
            )
        try:
            arrays = {key: archive[key] for key in REQUIRED}
        except ValueError as err:  # object arrays need pickle, which we refuse
            raise ValueError(f"{path}: an array could not be read without pickle ({err})") from None
    num_nodes = arrays["x"].shape[0] if arrays["x"].ndim else 0
    return Graph.from_edges(
        arrays["src"],
        arrays["dst"],
        x=arrays["x"],
        y=arrays["y"],
        train_mask=arrays["train_mask"],
        val_mask=arrays["val_mask"],
        test_mask=arrays["test_mask"],
        num_nodes=num_nodes,
        name=name or os.path.splitext(os.path.basename(path))[0],
        source=path,
    )


def save_npz(graph: Graph, path: str | os.PathLike) -> None:
    """Writes ``graph`` in the format ``load_npz`` reads (edges as src/dst)."""
    dst = np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy())
    np.savez(
        path,
        src=graph.col.numpy().astype(np.int64),
        dst=dst,
        x=graph.x.numpy(),
        y=graph.y.numpy(),
        train_mask=graph.train_mask.numpy(),
        val_mask=graph.val_mask.numpy(),
        test_mask=graph.test_mask.numpy(),
    )
