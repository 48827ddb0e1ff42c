"""What makes a node encoding an encoding: the spec every encoding file defines.

An ``EncodingSpec`` says

- ``name``: the entry of the model's ``encodings`` option, and ``arrays``: the node arrays it reads
  ([N, w] each, under these names in ``Graph.enc``, ``NodeData.enc``, a dataset's ``.npz`` and a
  partition store);
- ``stored``: whether ``dsgraph encode`` computes it once, over every edge of the file, and stores it
  beside the features (``compute`` and the command's options), or whether it is counted from the
  edges whenever a graph is read (``count``, over edge chunks);
- what the model does with it (``dsgraph/models/encodings.py`` reads only these attributes): the
  columns of float arrays enter as they are (``signed`` ones with a random sign per column in
  training), and the columns of an int64 array of counts are each embedded by a learned table
  (``embeddings`` names the tables).

Registering the spec (``registry.py``) is all the model options, the model's encoder, the loaders,
the partition store, the link task's check and ``dsgraph encode`` need.
"""

from __future__ import annotations

import numpy as np


class EncodingSpec:
    """One node encoding. Subclasses set the class attributes and, for a stored encoding,
    ``add_settings``/``check_settings``/``compute``; for a counted one, ``count``."""

    name: str = ""
    """The model's name for it (``"model": {"encodings": [name, ...]}``) and ``dsgraph encode``'s
    ``--name`` option."""
    title: str = ""
    """How the docs and ``dsgraph encode --help`` call it ("RWSE")."""
    arrays: tuple[str, ...] = ()
    """The node arrays it reads, in the order the model concatenates them; the arrays of one
    encoding share one width."""
    stored: bool = True
    """True: computed once by ``dsgraph encode`` over every edge of the dataset file and stored beside
    the features; False: counted from the edges a graph is built from, when it is read (so a link
    task's graph of training edges counts only those)."""
    embeddings: tuple[str, ...] = ()
    """Empty: float32 arrays whose columns the model reads as they are. Otherwise one int64 array of
    counts [N, len(embeddings)]; the model embeds column i with a learned table named
    ``embeddings[i]`` (counts above ``model.max_degree`` share its last row) and sums them."""
    signed: tuple[str, ...] = ()
    """Arrays whose columns' signs are arbitrary (eigenvectors): each column's sign flips at random
    in training, drawn from (seed, step) only."""
    metavar: str = "K"
    """The width's name in ``dsgraph encode --name K`` (stored encodings)."""
    help: str = ""
    """The help of ``dsgraph encode --name`` (stored encodings)."""
    default_width: int = 0
    """The width the ``dsgraph encode`` command suggested by a missing-array error asks for."""

    @property
    def dtype(self):
        """Of its arrays: int64 counts with ``embeddings``, else float32."""
        return np.int64 if self.embeddings else np.float32

    def check_values(self, source: str, name: str, array: np.ndarray) -> None:
        """Non-negative counts, finite floats; ValueError naming ``source`` and the array."""
        if self.embeddings:
            if array.size and int(array.min()) < 0:
                raise ValueError(f"{source}: array '{name}' holds a negative {self.name}")
            return
        if not bool(np.isfinite(array).all()):
            raise ValueError(f"{source}: array '{name}' contains NaN or Inf; recompute it with `dsgraph encode`")

    def add_settings(self, parser) -> None:
        """Adds ``dsgraph encode``'s options that tune the computation (``--name-...``)."""

    def check_settings(self, args) -> None:
        """ValueError for a setting of ``add_settings`` out of range."""

    def compute(self, adjacency, width: int, args, bar, log) -> dict[str, np.ndarray]:
        """A stored encoding of ``width`` over ``adjacency`` (``dsgraph/graph/encode/adjacency.py``),
        tuned by ``args``: array name -> float32 [N, width]. ``bar(desc)`` gives (a progress
        callback taking a node count, the bar or None); ``log(line)`` prints a message."""
        raise TypeError(f"encoding {self.name!r} is counted when a graph is read, not stored")

    def count(self, src: np.ndarray, dst: np.ndarray, num_nodes: int, out: np.ndarray | None) -> np.ndarray:
        """A counted encoding: its array over the edges src -> dst added to ``out`` (a new zero array
        when None), so that edges read in chunks add up."""
        raise TypeError(f"encoding {self.name!r} is stored by `dsgraph encode`, not counted")
