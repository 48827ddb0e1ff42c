"""What a converted graph looks like: a text summary and an optional degree histogram (PNG).

matplotlib is imported only by :func:`save_degree_histogram` (``pip install dsgraph[plot]``).
"""

from __future__ import annotations

import os

import numpy as np

from dsgraph.graph.graph import Graph


def degree_stats(degrees: np.ndarray) -> str:
    if degrees.size == 0:
        return "none"
    return (
        f"min {int(degrees.min())}, mean {degrees.mean():.2f}, median {np.median(degrees):g}, max {int(degrees.max())}"
    )


def graph_degrees(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(in-degree, out-degree) of every node, int64 [N] each."""
    in_deg = graph.in_degrees().numpy()
    out_deg = np.bincount(graph.col.numpy(), minlength=graph.num_nodes)
    return in_deg, out_deg


def format_summary(result) -> str:
    """Multi-line summary of an :class:`~dsgraph.graph.ingest.Ingested` graph."""
    graph, stats = result.graph, result.stats
    in_deg, out_deg = graph_degrees(graph)
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int32), in_deg)
    self_loops = int((graph.col.numpy() == dst).sum())
    del dst
    isolated = int(((in_deg == 0) & (out_deg == 0)).sum())
    y = graph.y.numpy()
    labelled = int((y >= 0).sum())
    classes = int(np.unique(y[y >= 0]).size)
    lines = [
        f"graph '{graph.name}' ({result.format})",
        f"  nodes          {graph.num_nodes:,}",
        f"  edges          {graph.num_edges:,} (read {stats.input_edges:,}; self loops dropped "
        f"{stats.self_loops_dropped:,}, reverse edges added {stats.reverse_edges_added:,}, duplicates dropped "
        f"{stats.duplicates_dropped:,})",
        f"  self loops     {self_loops:,}",
        f"  in-degree      {degree_stats(in_deg)}",
        f"  out-degree     {degree_stats(out_deg)}",
        f"  isolated nodes {isolated:,} (no in- or out-edges)",
        f"  features       {graph.num_features}",
        f"  classes        {classes} ({labelled:,} labelled nodes)",
        f"  split          train {int(graph.train_mask.sum()):,}, val {int(graph.val_mask.sum()):,}, "
        f"test {int(graph.test_mask.sum()):,}" + (f" (scheme '{result.split}')" if result.split else ""),
    ]
    if result.header:
        lines.append(f"  header skipped '{result.header}'")
    if result.node_ids is not None:
        lines.append(
            f"  relabelled     ids {int(result.node_ids[0]):,}..{int(result.node_ids[-1]):,} -> "
            f"0..{graph.num_nodes - 1:,}"
            if graph.num_nodes
            else "  relabelled     (no nodes)"
        )
    return "\n".join(lines)


def degree_histogram(degrees: np.ndarray, bins: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """(bin edges, counts) over log-spaced bins of the degrees >= 1 (zero degrees are not counted)."""
    positive = degrees[degrees > 0]
    top = max(int(positive.max()) if positive.size else 1, 2)
    edges = np.unique(np.floor(np.logspace(0, np.log10(top + 1), bins + 1)).astype(np.int64))
    counts, _ = np.histogram(positive, bins=edges)
    return edges, counts


def save_degree_histogram(graph: Graph, path: str | os.PathLike) -> None:
    """Writes a log-log PNG of the in- and out-degree distributions to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("the degree histogram needs matplotlib: pip install 'dsgraph[plot]'") from None
    in_deg, out_deg = graph_degrees(graph)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for name, degrees in (("in-degree", in_deg), ("out-degree", out_deg)):
        edges, counts = degree_histogram(degrees)
        zero = int((degrees == 0).sum())
        ax.stairs(counts, edges, label=f"{name} ({zero:,} nodes with 0)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("degree")
    ax.set_ylabel("nodes")
    ax.set_title(f"{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")
    plt.close(fig)
