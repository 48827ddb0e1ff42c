"""LapPE: the k lowest non-trivial eigenvectors of the symmetric normalised Laplacian
L = I - D^-1/2 W D^-1/2 and their eigenvalues (Dwivedi et al. 2020; GraphGPS; PyG's
``AddLaplacianEigenvectorPE``), one connected component at a time.

W = A + A^T over the dataset's edges without self loops (a directed graph is read as undirected;
duplicate edges weigh more). A component of s nodes has one trivial eigenvector (eigenvalue 0,
proportional to D^1/2 1); node i gets the next min(k, s - 1) eigenvectors of its own component
(unit norm over the component) in ``lappe`` [N, k] and their eigenvalues in ``lappe_eigvals`` [N, k],
zero-padded: an isolated node's row is all zeros. The basis of an eigenspace with multiplicity is
arbitrary (compare subspaces, not vectors); each vector's sign is fixed so that its first entry of
largest magnitude is positive, and training flips signs at random anyway.

Solvers: components of up to ``dense_max`` nodes are solved densely (batched ``numpy.linalg.eigh``
over components of one size). Larger ones go to ARPACK (``eigsh``, largest eigenvalues of
B = (I + D^-1/2 W D^-1/2) / 2 - u0 u0^T, whose top k are 1 - lambda / 2 for the wanted lambdas and
whose trivial direction u0 is deflated to 0), never a shift-invert factorisation, which fills in on
power-law graphs. If ARPACK does not converge it is run again with a larger Krylov space and three
times the iterations, then LOBPCG starts from what it found; when that fails too, the error names
the options to change.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh, lobpcg

from dsgraph.graph.encode.adjacency import Adjacency

DENSE_MAX = 512  # components up to this many nodes: dense eigh
DEFAULT_TOL = 1e-6
DEFAULT_MAXITER = 3000  # ARPACK restarts; LOBPCG iterations
DENSE_BATCH_ELEMENTS = 1 << 24  # matrix entries per batched eigh call (128 MB in float64)
STATUS_EVERY = 20  # products with B between two status notes


@dataclass(frozen=True, slots=True)
class SolverSettings:
    """How large components are solved (``dsgraph encode --lappe-tol/--lappe-maxiter/--lappe-dense-max``)."""

    tol: float = DEFAULT_TOL
    """Relative accuracy of the eigenvalues (ARPACK's tol); LOBPCG must bring every residual
    ||B x - theta x|| below it."""
    maxiter: int = DEFAULT_MAXITER
    """ARPACK restarts on the first attempt (the retry gets three times as many), LOBPCG iterations."""
    dense_max: int = DENSE_MAX
    """Components up to this many nodes are solved densely."""
    seed: int = 0
    """Seeds the solvers' start vectors."""


def symmetric_weights(adj: Adjacency) -> sp.csr_matrix:
    """W = A + A^T without self loops, float64 CSR (built from the two neighbour lists: A's CSR
    is ``out``, A^T's is ``in``)."""
    n = adj.num_nodes

    def part(ptr, col):
        rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(ptr))
        return sp.csr_matrix(((col != rows).astype(np.float64), col, ptr), shape=(n, n))

    w = part(adj.out_ptr, adj.out_col) + part(adj.in_ptr, adj.in_col)
    w.eliminate_zeros()
    return w


def _fix_signs(vecs: np.ndarray) -> np.ndarray:
    """Flips each column (or each [..., :, j]) so that its first entry of largest magnitude (within
    a relative 1e-6: ties are common, e.g. on cycles) is positive."""
    size = np.abs(vecs)
    index = (size >= (1.0 - 1e-6) * size.max(axis=-2, keepdims=True)).argmax(axis=-2)[..., None, :]
    return vecs * np.where(np.take_along_axis(vecs, index, axis=-2) < 0, -1.0, 1.0)


def _normalised(w_block: np.ndarray) -> np.ndarray:
    """D^-1/2 W D^-1/2 of dense blocks [..., s, s] (every node of a component has a neighbour)."""
    scale = 1.0 / np.sqrt(w_block.sum(axis=-1))
    return w_block * scale[..., :, None] * scale[..., None, :]


def dense_blocks(w: sp.csr_matrix, comps: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of components of one size s (``comps``: m arrays of s node ids): (vectors
    [m, s, k'], eigenvalues [m, k']) with k' = min(k, s - 1), eigenvalues ascending, trivial dropped."""
    s = comps[0].size
    nodes = np.concatenate(comps)
    sub = w[nodes][:, nodes].tocoo()  # block diagonal: component j holds rows and columns [j s, (j+1) s)
    stack = np.zeros((len(comps), s, s))
    stack[sub.row // s, sub.row % s, sub.col % s] = sub.data
    vals, vecs = np.linalg.eigh(np.eye(s) - _normalised(stack))
    kept = min(k, s - 1)
    return _fix_signs(vecs[:, :, 1 : 1 + kept]), vals[:, 1 : 1 + kept]


def _operator(w_comp: sp.csr_matrix, status=None) -> tuple[LinearOperator, np.ndarray]:
    """B = (I + D^-1/2 W D^-1/2) / 2 - u0 u0^T of one component (``w_comp``, CSR, is scaled in
    place), and u0 (unit, ~ D^1/2 1); ``status(text)`` hears the count of products with B every
    ``STATUS_EVERY`` of them."""
    d = np.asarray(w_comp.sum(axis=1)).ravel()
    scale = 1.0 / np.sqrt(d)
    s_mat = w_comp  # scaled in place (the caller's slice): D^-1/2 W D^-1/2 without two more copies of W
    s_mat.data *= np.repeat(scale, np.diff(s_mat.indptr)) * scale[s_mat.indices]
    u0 = np.sqrt(d) / np.linalg.norm(np.sqrt(d))

    products = [0]

    def apply(x):
        x2 = x.reshape(x.shape[0], -1)
        products[0] += x2.shape[1]
        if status is not None and products[0] % STATUS_EVERY < x2.shape[1]:
            status(f"{products[0]} products with a {x2.shape[0]:,}-node component")
        y = 0.5 * (x2 + s_mat @ x2) - np.outer(u0, u0 @ x2)
        return y.reshape(x.shape)

    n = w_comp.shape[0]
    return LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np.float64), u0


def _residuals(op: LinearOperator, theta: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    return np.linalg.norm(op.matmat(vecs) - vecs * theta, axis=0)


def sparse_component(
    w_comp: sp.csr_matrix, k: int, settings: SolverSettings = SolverSettings(), log=lambda line: None, status=None
):
    """(vectors [s, k], eigenvalues [k] ascending) of one large component (its weights ``w_comp``,
    scaled in place), with the fallbacks of the module docstring; ValueError when none converges.
    ``status``: see ``_operator``."""
    op, u0 = _operator(w_comp, status)
    n = w_comp.shape[0]
    rng = np.random.default_rng(settings.seed)
    v0 = rng.standard_normal(n)
    v0 -= u0 * (u0 @ v0)
    start = None
    for ncv, maxiter in (
        (min(n - 1, max(2 * k + 1, 20)), settings.maxiter),
        (min(n - 1, max(4 * k + 1, 64)), 3 * settings.maxiter),
    ):
        try:
            theta, vecs = eigsh(op, k=k, which="LA", tol=settings.tol, v0=v0, ncv=ncv, maxiter=maxiter)
            return _finish(theta, vecs)
        except ArpackNoConvergence as err:
            log(
                f"LapPE: ARPACK (ncv {ncv}, maxiter {maxiter}) found {len(err.eigenvalues)} of {k} eigenvectors "
                f"on a component of {n:,} nodes; retrying"
            )
            start = err.eigenvectors if err.eigenvectors.size else start
    x0 = rng.standard_normal((n, k))
    if start is not None:
        x0[:, : start.shape[1]] = start[:, :k]
    x0 -= np.outer(u0, u0 @ x0)
    with warnings.catch_warnings():  # it warns when it stops short; the residuals below decide
        warnings.simplefilter("ignore", UserWarning)
        theta, vecs = lobpcg(op, x0, tol=settings.tol, maxiter=settings.maxiter, largest=True)
    worst = float(_residuals(op, theta, vecs).max())
    if worst <= settings.tol * 10:  # lobpcg's own tol is on the same residuals, not always met exactly
        log(f"LapPE: LOBPCG converged (largest residual {worst:.1e})")
        return _finish(theta, vecs)
    raise ValueError(
        f"LapPE: the eigensolver did not converge on a connected component of {n:,} nodes: ARPACK twice, then "
        f"LOBPCG left a residual of {worst:.1e} (tolerance {settings.tol:g}); raise --lappe-maxiter (now "
        f"{settings.maxiter}), loosen --lappe-tol (now {settings.tol:g}) or ask for fewer eigenvectors (--lappe {k})"
    )


def _finish(theta: np.ndarray, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues of L (lambda = 2 (1 - theta)) ascending, with their sign-fixed vectors."""
    order = np.argsort(-theta, kind="stable")
    return _fix_signs(vecs[:, order]), np.clip(2.0 * (1.0 - theta[order]), 0.0, 2.0)


def lappe(
    adj: Adjacency,
    k: int,
    settings: SolverSettings = SolverSettings(),
    progress=None,
    log=lambda line: None,
    status=None,
):
    """(vectors float32 [N, k], eigenvalues float32 [N, k], component sizes int64 [C]) as the module
    docstring says. ``progress(nodes)`` is called as components are done, ``status(text)`` while
    the sparse solver runs."""
    if k < 1:
        raise ValueError(f"LapPE needs k >= 1 eigenvectors, got {k}")
    n = adj.num_nodes
    w = symmetric_weights(adj)
    _, labels = connected_components(w, directed=False)
    sizes = np.bincount(labels)
    vecs_out = np.zeros((n, k), dtype=np.float32)
    vals_out = np.zeros((n, k), dtype=np.float32)
    order = np.argsort(labels, kind="stable")
    members = np.split(order, np.cumsum(sizes)[:-1])  # node ids of each component, ascending
    dense_limit = max(settings.dense_max, k + 1)
    if progress is not None:
        progress(int((sizes == 1).sum()))  # isolated nodes: nothing to solve
    for s in np.unique(sizes[(sizes > 1) & (sizes <= dense_limit)]):
        comps = [members[c] for c in np.flatnonzero(sizes == s)]
        batch = max(1, DENSE_BATCH_ELEMENTS // (int(s) * int(s)))
        for lo in range(0, len(comps), batch):
            group = comps[lo : lo + batch]
            vecs, vals = dense_blocks(w, group, k)
            nodes = np.concatenate(group)
            vecs_out[nodes, : vecs.shape[2]] = vecs.reshape(-1, vecs.shape[2])
            vals_out[nodes, : vals.shape[1]] = np.repeat(vals, s, axis=0)
            if progress is not None:
                progress(nodes.size)
    for c in np.flatnonzero(sizes > dense_limit):
        nodes = members[c]
        vecs, vals = sparse_component(w[nodes][:, nodes].tocsr(), k, settings, log, status)
        vecs_out[nodes] = vecs
        vals_out[nodes] = vals
        if progress is not None:
            progress(nodes.size)
    return vecs_out, vals_out, sizes
