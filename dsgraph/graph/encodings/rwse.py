"""The ``rwse`` encoding: random-walk return probabilities, float32 [N, K] (array ``rwse``), computed
once by ``dsgraph encode --rwse K`` (``dsgraph/graph/encode/rwse.py``) and stored beside the features."""

from __future__ import annotations

import time

from dsgraph.graph.encodings.spec import EncodingSpec


class Rwse(EncodingSpec):
    name = "rwse"
    title = "RWSE"
    arrays = ("rwse",)
    metavar = "K"
    help = "random-walk return probabilities for walk lengths 1..K (array 'rwse' [N, K])"
    default_width = 16

    def add_settings(self, parser) -> None:
        from dsgraph.graph.encode import rwse as walks

        parser.add_argument(
            "--rwse-method",
            choices=walks.METHODS,
            default="auto",
            help="exact (K sparse products per block of nodes, work K*E*N), walks (Monte-Carlo "
            "estimate), or auto: exact while K*E*N <= --rwse-max-exact-work (default: auto)",
        )
        parser.add_argument(
            "--rwse-walks",
            type=int,
            default=walks.DEFAULT_WALKS,
            help=f"walks per node of the estimator (default: {walks.DEFAULT_WALKS}; error ~ 1/sqrt(walks))",
        )
        parser.add_argument(
            "--rwse-max-exact-work",
            type=float,
            default=walks.MAX_EXACT_WORK,
            help=f"auto: the largest K*E*N computed exactly (default: {walks.MAX_EXACT_WORK:g})",
        )
        parser.add_argument("--rwse-seed", type=int, default=0, help="seed of the estimator's walks (default: 0)")

    def check_settings(self, args) -> None:
        if args.rwse_walks < 1:
            raise ValueError(f"--rwse-walks must be at least 1, got {args.rwse_walks}")

    def compute(self, adjacency, width: int, args, bar, log):
        from dsgraph.graph.encode import rwse as walks

        n = adjacency.num_nodes
        method = walks.choose_method(adjacency, width, args.rwse_method, args.rwse_max_exact_work)
        update, progress = bar(f"rwse ({method})")
        start = time.perf_counter()
        values, _ = walks.rwse(
            adjacency, width, method=method, walks=args.rwse_walks, seed=args.rwse_seed, progress=update
        )
        if progress is not None:
            progress.close()
        detail = f"{args.rwse_walks} walks per node" if method == "walks" else "exact"
        log(f"rwse [{n:,}, {width}] ({detail}) in {time.perf_counter() - start:.1f}s")
        return {"rwse": values}
