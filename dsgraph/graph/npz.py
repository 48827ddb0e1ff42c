"""Loading and saving graphs as plain NumPy archives (no pickle).

The format is the one of the bundled ``cora.npz``: ``src``, ``dst`` (int, edges src -> dst), ``x``
[N, F] numeric features, ``y`` [N] int labels (-1 = unlabelled), and bool ``train_mask``,
``val_mask``, ``test_mask`` [N] or [S, N], and optionally ``edge_attr`` [E, F_e] (the features of
edge src[e] -> dst[e]); or the published benchmark layout (``layout.py``). The stored node
encodings' arrays (``rwse``, ``lappe``, ...; ``encodings/``) may be stored beside them; other extra
arrays are ignored.
"""

from __future__ import annotations

import os

import numpy as np

from dsgraph.graph.encodings import stored_arrays
from dsgraph.graph.graph import Graph
from dsgraph.graph.label_checks import SplitChoice

REQUIRED = ("src", "dst", "x", "y", "train_mask", "val_mask", "test_mask")  # dsgraph's own layout


def load_npz(path: str | os.PathLike, name: str | None = None, choice: SplitChoice | None = None) -> Graph:
    """The whole dataset of a .npz in either layout (``layout.py``), labels and the split ``choice``
    of its masks checked (``label_checks.py``); read as a rank reads its rows (``rank_reader.py``)."""
    from dsgraph.graph.rank_reader import DatasetFile  # it builds Graphs too

    path = os.fspath(path)
    data = DatasetFile(path, choice=choice or SplitChoice())
    return data.graph(name or os.path.splitext(os.path.basename(path))[0])


def save_npz(graph: Graph, path: str | os.PathLike, masks: dict | None = None) -> None:
    """Writes ``graph`` in the format ``load_npz`` reads (edges as src/dst in CSR order, and its
    edge features as edge_attr) with its stored encodings (``encodings.stored_arrays``); ``masks``: [S, N]
    masks (every fixed split) to write instead of the graph's one split."""
    masks = masks or {}
    if graph.added_loops is not None and bool(graph.added_loops.any()):
        raise ValueError(
            f"{os.fspath(path)}: the graph has self loops added for the model (added_loops); save it before "
            "with_self_loops"
        )
    dst = np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy())
    edge_attr = {} if graph.edge_attr is None else {"edge_attr": graph.edge_attr.numpy()}
    np.savez(
        path,
        src=graph.col.numpy().astype(np.int64),
        dst=dst,
        x=graph.x.numpy(),
        y=graph.y.numpy(),
        train_mask=masks.get("train_mask", graph.train_mask.numpy()),
        val_mask=masks.get("val_mask", graph.val_mask.numpy()),
        test_mask=masks.get("test_mask", graph.test_mask.numpy()),
        **edge_attr,
        **{name: array.numpy() for name, array in graph.enc.items() if name in stored_arrays()},
    )
