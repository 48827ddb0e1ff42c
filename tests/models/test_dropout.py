"""Rank-independent dropout: masks depend only on (seed, step, layer, site, node id, feature)."""

import torch

from dsgraph.models import NodeDropout


def _drop(x, ids, p=0.5, step=0, seed=1, site=0):
    d = NodeDropout(p, site=site)
    d.train()
    return d(x, ids, seed, step, layer=0)


def test_rate_and_scale():
    x = torch.ones(500, 64)
    out = _drop(x, torch.arange(500), p=0.3)
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.02
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / 0.7))


def test_mask_is_a_function_of_global_node_id_not_of_the_slice():
    x = torch.randn(100, 16)
    ids = torch.arange(100)
    whole = _drop(x, ids)
    parts = torch.cat([_drop(x[:37], ids[:37]), _drop(x[37:], ids[37:])])
    assert torch.equal(whole, parts)
    assert not torch.equal(whole, _drop(x, ids, step=1)) and not torch.equal(whole, _drop(x, ids, site=2))


def test_sparse_and_dense_paths_agree():
    x = (torch.rand(200, 300) < 0.05).float()  # bag-of-words-like: hashed only at nonzeros
    ids = torch.arange(1000, 1200)
    sparse = _drop(x, ids)
    dense = _drop(x.requires_grad_(True), ids).detach()  # a tensor needing grad takes the dense path
    assert torch.equal(sparse, dense)


def test_masks_are_not_correlated_across_features_or_nodes():
    keep = (_drop(torch.ones(2000, 64), torch.arange(2000)) != 0).float()
    corr_features = torch.corrcoef(keep.T)
    corr_nodes = torch.corrcoef(keep[:64])
    off = ~torch.eye(64, dtype=torch.bool)
    assert corr_features[off].abs().max() < 0.12 and corr_nodes[off].abs().max() < 0.6


def test_eval_mode_is_identity():
    d = NodeDropout(0.5, site=0).eval()
    x = torch.randn(4, 4)
    assert d(x, torch.arange(4), 0, 0, 0) is x


def test_per_head_mask_for_three_dimensional_inputs():
    x = torch.ones(300, 8, 4)  # [n, H, D]: one decision per (node, head), shared by the head's D features
    out = _drop(x, torch.arange(300), p=0.5)
    per_head = out[:, :, 0]
    assert torch.equal(out, per_head[:, :, None].expand_as(out))
    assert 0.4 < (per_head != 0).float().mean() < 0.6


def _float_mask_dropout(x, ids, p, seed, step, layer, site):
    """The formula written out: x * float mask * 1/(1-p), differentiated by autograd."""
    from dsgraph.models.dropout import dropout_key, hash_bits

    keep = hash_bits(dropout_key(seed, step, layer, site), ids[:, None], torch.arange(x.shape[1])[None, :]) >= int(p * 2**32)
    if x.dim() == 3:
        keep = keep[:, :, None]
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))


def test_blocked_mask_and_bool_saved_mask_give_the_formula_and_its_gradient(monkeypatch):
    import dsgraph.models.dropout as dropout

    monkeypatch.setattr(dropout, "HASH_BLOCK", 40)  # 40 elements per block: many blocks, one partial
    for shape in ((103, 16), (103, 4, 8)):
        x = torch.randn(*shape, requires_grad=True)
        ids = torch.arange(500, 603)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            out = _drop(x, ids, p=0.3, step=2, seed=5, site=1)
        assert [t.dtype for t in saved] == [torch.bool]  # no float mask, no copy of x kept for backward
        grad = torch.randn(*shape)
        (got,) = torch.autograd.grad(out, x, grad)
        want_out = _float_mask_dropout(x, ids, 0.3, 5, 2, 0, 1)
        (want,) = torch.autograd.grad(want_out, x, grad)
        assert torch.equal(out, want_out) and torch.equal(got, want)
