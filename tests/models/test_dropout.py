"""Rank-independent dropout: masks depend only on (seed, step, layer, site, node id, feature)."""

import pytest
import torch
import torch.utils._python_dispatch

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

    keep = hash_bits(dropout_key(seed, step, layer, site), ids[:, None], torch.arange(x.shape[1])[None, :]) >= int(
        p * 2**32
    )
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
        with torch.autograd.graph.saved_tensors_hooks(lambda t, saved=saved: saved.append(t) or t, lambda t: t):
            out = _drop(x, ids, p=0.3, step=2, seed=5, site=1)
        assert [t.dtype for t in saved] == [torch.bool]  # no float mask, no copy of x kept for backward
        grad = torch.randn(*shape)
        (got,) = torch.autograd.grad(out, x, grad)
        want_out = _float_mask_dropout(x, ids, 0.3, 5, 2, 0, 1)
        (want,) = torch.autograd.grad(want_out, x, grad)
        assert torch.equal(out, want_out) and torch.equal(got, want)


def _legacy_keep_mask(key, threshold, node_ids, width, block=1 << 18):
    """keep_mask as it was before issue 27 (hash_bits on blocks of 2^18 elements): the oracle for
    'the masks keep their bits'."""
    from dsgraph.models.dropout import hash_bits

    cols = torch.arange(width, device=node_ids.device)[None, :]
    keep = torch.empty((node_ids.numel(), width), dtype=torch.bool, device=node_ids.device)
    rows = max(1, block // max(width, 1))
    for start in range(0, node_ids.numel(), rows):
        torch.ge(hash_bits(key, node_ids[start : start + rows, None], cols), threshold, out=keep[start : start + rows])
    return keep


GPU_FREE_BYTES = 100 * 2**30  # what an H200 has free beside a model: the whole-tensor block


@pytest.mark.parametrize("whole_tensor", [False, True], ids=["cpu-blocks", "gpu-block"])
def test_keep_mask_bits_are_unchanged(monkeypatch, whole_tensor):
    import dsgraph.models.dropout as dropout

    if whole_tensor:
        monkeypatch.setattr(dropout, "_free_device_bytes", lambda device: GPU_FREE_BYTES)
    gen = torch.Generator().manual_seed(0)
    for n, width in ((1, 1), (103, 16), (3000, 128), (70_001, 5), (0, 4), (5, 0)):
        ids = torch.randint(0, 2**40, (n,), generator=gen)
        for key in (0, 1, dropout.dropout_key(7, 3, 2, 1), 0xFFFFFFFF):
            for p in (0.1, 0.5, 0.9):
                threshold = int(p * 2**32)
                assert torch.equal(
                    dropout.keep_mask(key, threshold, ids, width), _legacy_keep_mask(key, threshold, ids, width)
                )


class _CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts ATen ops (each elementwise one a kernel launch on a GPU; views and allocations too)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.slow  # long: a mask of a GPU-sized activation on the CPU
def test_a_gpu_sized_mask_is_a_few_kernels(monkeypatch):
    """4M nodes x 128 features, on meta tensors (shapes, no memory) standing in for a GPU with 100 GiB
    free: the mask is a constant few tens of ops; the blocked hash before issue 27 was ~70k."""
    import dsgraph.models.dropout as dropout

    monkeypatch.setattr(dropout, "_free_device_bytes", lambda device: GPU_FREE_BYTES)
    ids = torch.arange(4 * 2**20, device="meta")
    counts = {}
    for name, fn in (("fused", dropout.keep_mask), ("legacy", _legacy_keep_mask)):
        with _CountOps() as counter:
            fn(12345, 2**31, ids, 128)
        counts[name] = counter.ops
    print(f"ops per 4M x 128 mask: {counts}")
    assert counts["fused"] <= 64, counts  # one block: the same few tens whatever the size
    assert counts["legacy"] > 50_000, counts
