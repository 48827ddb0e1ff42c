"""How ``dsgraph partition`` builds a store: METIS in memory where the graph fits, out of core beyond.

The in-memory path (the whole graph, METIS' symmetric adjacency, a relabelled copy) peaks at about
``EDGE_BYTES`` per edge plus ``NODE_BYTES`` and three copies of the features per node; the
out-of-core path (``store_stream.py``, contiguous ranges) holds a few N-sized arrays and one chunk.
``choose`` compares the estimate with the memory budget (by default half the available memory)
and says what it chose and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsgraph.graph.rmat import NUM_FEATURES, parse_rmat_spec
from dsgraph.graph.rmat_stream import streamed
from dsgraph.graph.store_stream import STREAM_METHODS

AUTO = "auto"
EDGE_BYTES = 280
"""In-memory METIS partitioning per edge: the edge arrays, METIS' symmetric adjacency (int64 keys,
their quotient and remainder), METIS' coarsened graphs and a relabelled copy. Measured over the
process: ``dsgraph partition --method metis`` peaked at 1,216 and 4,691 MB at rmat:18 and 20 (about
245 and 276 bytes per edge), and training's rank 0 grows by 216-253 bytes per edge while it
partitions the structure (``agp/run_memory.py``)."""
NODE_BYTES = 100  # per node, besides three copies of its features
BUDGET_SHARE = 0.5  # of the available memory, when no budget is given


@dataclass(frozen=True)
class GraphSize:
    num_nodes: int
    num_edges: int  # of the file, or requested by an R-MAT spec not generated yet (an upper bound)
    num_features: int
    path: str | None  # the dataset file, None for an R-MAT spec generated in memory


@dataclass(frozen=True)
class Choice:
    method: str
    out_of_core: bool
    reason: str


def in_memory_bytes(size: GraphSize) -> int:
    """Estimated peak of partitioning ``size`` in memory."""
    return size.num_edges * EDGE_BYTES + size.num_nodes * (NODE_BYTES + 3 * 4 * size.num_features)


def default_budget() -> int:
    from dsgraph.runtime.host_memory import available_memory_bytes

    return int(BUDGET_SHARE * available_memory_bytes())


def graph_size(spec: str, seed: int, progress: bool) -> GraphSize:
    """The size of dataset ``spec``; an R-MAT spec built out of core is generated into the cache first."""
    from dsgraph.graph.datasets import cached_dataset, dataset_file
    from dsgraph.graph.rank_reader import DatasetFile

    path, exists = dataset_file(spec, seed)
    if spec.startswith("rmat:") and not exists and not streamed(spec):
        scale, edge_factor = parse_rmat_spec(spec)
        return GraphSize(1 << scale, edge_factor << scale, NUM_FEATURES, None)
    if not exists:
        path = cached_dataset(spec, seed, progress=progress)
    data = DatasetFile(path)
    edges = data.arrays["src"].size if "src" in data.arrays else 2 * data.arrays["edges"].shape[0]
    return GraphSize(data.num_nodes, int(edges), data.num_features, path)


def choose(method: str, size: GraphSize, budget: int, spec: str) -> Choice:
    """The method and the path for ``method`` (or 'auto') on a graph of ``size`` under ``budget`` bytes."""
    need = in_memory_bytes(size)
    figures = f"in-memory peak about {need / 2**30:.1f} GiB, budget {budget / 2**30:.1f} GiB"
    fits = need <= budget
    can_stream = size.path is not None
    if method == AUTO:
        if fits or not can_stream:
            return Choice("metis", False, f"auto: metis in memory ({figures})")
        return Choice(
            "balanced", True, f"auto: balanced ranges out of core, the graph is too big for metis ({figures})"
        )
    if method in STREAM_METHODS and can_stream and (not fits or streamed(spec)):
        why = "the file is in CSR order" if fits else "the graph does not fit the budget"
        return Choice(method, True, f"{method} out of core: {why} ({figures})")
    warning = "" if fits else "; over the budget: --method auto or balanced builds out of core"
    return Choice(method, False, f"{method} in memory ({figures}{warning})")
