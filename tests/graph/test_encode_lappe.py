"""LapPE (``dsgraph/graph/encode/lappe.py``) against a dense eigendecomposition of each connected
component: several components, isolated nodes, components smaller than k, eigenvalues of high
multiplicity (compared as eigenspace projectors, never as signed vectors), the sparse solver, its
fallback to LOBPCG, and the error that names the options to change."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from dsgraph.graph.encode import lappe as lap
from dsgraph.graph.encode.adjacency import from_edges
from dsgraph.graph.encode.lappe import SolverSettings, lappe
from dsgraph.graph.rmat import rmat_graph


def cycle(nodes):
    return list(zip(nodes, nodes[1:] + nodes[:1]))


def complete(nodes):
    return [(a, b) for a in nodes for b in nodes if a != b]


def components_graph():
    """A 30-cycle (eigenvalues in pairs), K6 (one eigenvalue, multiplicity 5), a path of 3, a pair,
    a directed star read as undirected, with a self loop and a doubled edge; nodes 54-63 isolated."""
    edges = cycle(list(range(30))) + complete(list(range(30, 36))) + [(36, 37), (37, 38), (39, 40)]
    edges += [(41, 42 + i) for i in range(12)] + [(41, 41), (41, 42)]
    src, dst = (np.array(v) for v in zip(*edges))
    return src, dst, 64


def dense_reference(src, dst, n):
    """Per component (list of node arrays): the eigenvalues and eigenvectors of its normalised
    Laplacian from numpy.linalg.eigh, trivial pair included."""
    w = np.zeros((n, n))
    np.add.at(w, (src, dst), 1.0)
    w = w + w.T
    np.fill_diagonal(w, 0.0)
    seen, out = np.zeros(n, bool), []
    for start in range(n):
        if seen[start]:
            continue
        comp, frontier = {start}, [start]
        while frontier:
            frontier = [j for i in frontier for j in np.flatnonzero(w[i]) if j not in comp and not comp.add(j)]
        comp = np.array(sorted(comp))
        seen[comp] = True
        sub = w[np.ix_(comp, comp)]
        d = sub.sum(1)
        lap_c = np.eye(comp.size) - sub / np.sqrt(np.outer(d, d)) if comp.size > 1 else np.zeros((1, 1))
        vals, vecs = np.linalg.eigh(lap_c)
        out.append((comp, vals, vecs))
    return out


def assert_matches_reference(vecs, vals, src, dst, n, k, tol=1e-5):
    """Eigenvalues equal; for every eigenvalue cluster inside the first k, the projector onto the
    returned vectors equals the reference's; a cluster cut by k: the vectors lie in its eigenspace."""
    for comp, ref_vals, ref_vecs in dense_reference(src, dst, n):
        kept = min(k, comp.size - 1)
        got_v, got_l = vecs[comp].astype(np.float64), vals[comp].astype(np.float64)
        assert not got_v[:, kept:].any() and not got_l[:, kept:].any()  # zero padding
        assert np.allclose(got_l, got_l[0])  # one set of eigenvalues per component
        np.testing.assert_allclose(got_l[0, :kept], ref_vals[1 : 1 + kept], atol=tol)
        np.testing.assert_allclose(np.linalg.norm(got_v[:, :kept], axis=0), 1.0, atol=tol)
        j = 0
        while j < kept:
            same = np.flatnonzero(np.abs(ref_vals - ref_vals[1 + j]) < 1e-6)  # the whole eigenspace of this value
            ours = [i for i in range(kept) if abs(got_l[0, i] - ref_vals[1 + j]) < 1e-4]
            basis, mine = ref_vecs[:, same], got_v[:, ours]
            if len(ours) == same.size:  # the whole cluster: equal projectors
                np.testing.assert_allclose(mine @ mine.T, basis @ basis.T, atol=50 * tol)
            else:  # cut by k: inside the eigenspace
                np.testing.assert_allclose(basis @ (basis.T @ mine), mine, atol=50 * tol)
            j += len(ours)


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("dense_max", [512, 8])  # dense everywhere / the sparse solver on the cycle and the star
def test_lappe_matches_dense_eigendecompositions(k, dense_max):
    src, dst, n = components_graph()
    vecs, vals, sizes = lappe(from_edges(src, dst, n), k, SolverSettings(dense_max=dense_max, tol=1e-10))
    assert vecs.shape == vals.shape == (n, k) and vecs.dtype == np.float32
    assert sorted(sizes.tolist()) == [1] * 10 + [2, 3, 6, 13, 30]
    assert not vecs[54:].any() and not vals[54:].any()
    assert_matches_reference(vecs, vals, src, dst, n, k)


def test_lappe_on_a_power_law_graph_with_the_sparse_solver():
    graph = rmat_graph("rmat:9:4", seed=0)
    src, dst = graph.col.numpy(), np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy())
    vecs, vals, sizes = lappe(from_edges(src, dst, graph.num_nodes), 6, SolverSettings(dense_max=16, tol=1e-10))
    assert sizes.max() > 16 and (sizes == 1).sum() > 0
    assert_matches_reference(vecs, vals, src, dst, graph.num_nodes, 6, tol=1e-4)


def test_signs_are_fixed_first_largest_entry_positive():
    src, dst, n = components_graph()
    vecs, _, _ = lappe(from_edges(src, dst, n), 4)
    for col in vecs[:30].T:  # the cycle: ties in magnitude everywhere
        size = np.abs(col)
        assert col[np.flatnonzero(size >= size.max() * (1 - 1e-5))[0]] > 0


def _arpack_fails(monkeypatch) -> list[int]:
    """ARPACK reports no convergence on every call; returns the ncv of each call."""
    calls = []

    def failing_eigsh(*args, **kwargs):
        calls.append(kwargs["ncv"])
        raise spla.ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((args[0].shape[0], 0)))

    monkeypatch.setattr(lap, "eigsh", failing_eigsh)
    return calls


def test_arpack_trouble_falls_back_to_lobpcg(monkeypatch):
    calls = _arpack_fails(monkeypatch)
    src, dst, n = components_graph()
    lines = []
    vecs, vals, _ = lappe(
        from_edges(src, dst, n), 3, SolverSettings(dense_max=8, tol=1e-8, maxiter=2000), log=lines.append
    )
    assert len(calls) == 4 and calls[1] > calls[0]  # two components, each tried twice, the retry with more vectors
    assert any("LOBPCG converged" in line for line in lines)
    assert_matches_reference(vecs, vals, src, dst, n, 3, tol=1e-4)


def test_no_convergence_is_an_error_naming_the_options(monkeypatch):
    _arpack_fails(monkeypatch)
    graph = rmat_graph("rmat:10:4", seed=0)
    src, dst = graph.col.numpy(), np.repeat(np.arange(graph.num_nodes), graph.in_degrees().numpy())
    with pytest.raises(ValueError, match=r"did not converge.*--lappe-maxiter \(now 1\).*--lappe-tol.*--lappe 4"):
        lappe(from_edges(src, dst, graph.num_nodes), 4, SolverSettings(tol=1e-14, maxiter=1))
