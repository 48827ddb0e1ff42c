"""The ``lappe`` encoding: the k lowest non-trivial eigenvectors of the normalised Laplacian of each
node's connected component (array ``lappe`` float32 [N, k]) and their eigenvalues (``lappe_eigvals``
float32 [N, k]: row i holds the eigenvalues of node i's component), computed once by ``dsgraph
encode --lappe k`` (``dsgraph/graph/encode/lappe.py``) and stored beside the features. An
eigenvector's sign is arbitrary, so the model flips each one at random in training."""

from __future__ import annotations

import time

from dsgraph.graph.encodings.spec import EncodingSpec


class LapPE(EncodingSpec):
    name = "lappe"
    title = "LapPE"
    arrays = ("lappe", "lappe_eigvals")
    signed = ("lappe",)
    metavar = "k"
    help = (
        "the k lowest non-trivial Laplacian eigenvectors of each connected component and their "
        "eigenvalues (arrays 'lappe' and 'lappe_eigvals' [N, k])"
    )
    default_width = 8

    def add_settings(self, parser) -> None:
        from dsgraph.graph.encode import lappe as lap

        parser.add_argument(
            "--lappe-tol",
            type=float,
            default=lap.DEFAULT_TOL,
            help=f"eigensolver tolerance for components above --lappe-dense-max nodes (default: {lap.DEFAULT_TOL:g})",
        )
        parser.add_argument(
            "--lappe-maxiter",
            type=int,
            default=lap.DEFAULT_MAXITER,
            help=f"ARPACK restarts (tripled on its retry) and LOBPCG iterations (default: {lap.DEFAULT_MAXITER})",
        )
        parser.add_argument(
            "--lappe-dense-max",
            type=int,
            default=lap.DENSE_MAX,
            help=f"components up to this many nodes are solved densely (default: {lap.DENSE_MAX})",
        )

    def check_settings(self, args) -> None:
        for flag, value in (("--lappe-maxiter", args.lappe_maxiter), ("--lappe-dense-max", args.lappe_dense_max)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        if not args.lappe_tol > 0:
            raise ValueError(f"--lappe-tol must be > 0, got {args.lappe_tol}")

    def compute(self, adjacency, width: int, args, bar, log):
        from dsgraph.graph.encode import lappe as lap

        n = adjacency.num_nodes
        settings = lap.SolverSettings(tol=args.lappe_tol, maxiter=args.lappe_maxiter, dense_max=args.lappe_dense_max)
        update, progress = bar("lappe")
        start = time.perf_counter()
        status = progress.set_postfix_str if progress is not None else None
        vectors, values, sizes = lap.lappe(adjacency, width, settings, progress=update, log=log, status=status)
        if progress is not None:
            progress.close()
        log(
            f"lappe [{n:,}, {width}] over {sizes.size:,} connected components (largest {int(sizes.max()):,} nodes, "
            f"{int((sizes == 1).sum()):,} isolated) in {time.perf_counter() - start:.1f}s"
        )
        return {"lappe": vectors, "lappe_eigvals": values}
