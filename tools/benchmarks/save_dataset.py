#!/usr/bin/env python
"""Writes a dataset spec (cora, rmat:SCALE[:EF] or a .npz) as a dsgraph .npz, so several tools can
load a large synthetic graph in seconds instead of generating it each time:

    python -m tools.benchmarks.save_dataset rmat:22 /tmp/rmat22.npz     # then --dataset /tmp/rmat22.npz

The file holds the same edges, features, labels and masks as the spec (seed 0 unless --seed). It
is written under another name and renamed, so a reader waiting for it never sees half a file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from dsgraph.graph import load_dataset
from dsgraph.graph.npz import save_npz


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", help="cora | rmat:SCALE[:EDGE_FACTOR] | PATH.npz")
    p.add_argument("out", help=".npz file to write")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    began = time.perf_counter()
    graph = load_dataset(args.spec, seed=args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.stem + ".partial.npz")  # readers never see a half-written file
    save_npz(graph, partial)
    os.replace(partial, out)
    print(
        f"save_dataset: {args.spec} -> {args.out}: N={graph.num_nodes:,} E={graph.num_edges:,} in "
        f"{time.perf_counter() - began:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
