"""Rank 0's growth while it partitions a graph with METIS before training, as training does it
(``file_loading._partition``): the structure read from the dataset file, then ``partition_nodes``
into 2 parts balanced by edges. Prints one JSON line.

    python docs/benchmarks/2026-12-05-memory-model/metis_mem.py rmat:20
"""

import json
import resource
import sys
import time

import pymetis  # noqa: F401 (imported before the baseline, as a rank has it)
import torch  # noqa: F401

from dsgraph.graph.datasets import cached_dataset
from dsgraph.graph.partition import partition_nodes
from dsgraph.graph.rank_reader import DatasetFile


def main(spec: str) -> dict:
    path = cached_dataset(spec)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    began = time.perf_counter()
    data = DatasetFile(path)
    graph = data.structure(True)
    partition_nodes(graph, 2, "metis", seed=0, metis_balance="edges")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "spec": spec,
        "nodes": data.num_nodes,
        "edges": int(graph.num_edges),
        "base_mb": round(base),
        "peak_mb": round(peak),
        "grew_mb": round(peak - base),
        "s": round(time.perf_counter() - began, 1),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
