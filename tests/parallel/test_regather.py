"""GP-AG with ``regather_kv``: the gathered K and V are not kept for backward but all-gathered
again there. On 2 and 4 gloo processes the block outputs, logits and gradients are bit-identical to
the run that keeps them (with one and two head groups, on the reference and the CPU kernels), and
with the CPU kernels (which save K and V) the bytes sent grow by exactly the forward's K/V
all-gathers (what a checkpointed run sends too)."""

import pytest
import torch

from dsgraph.comm import GraphParallelGroup, RowSplit, gather_rows_padded
from dsgraph.comm.gather import regathered_in_backward
from tests.distributed import run
from tests.graphs import random_graph
from tests.parallel.test_conformance import SPLITS, declared_bytes, forward_backward

pytestmark = pytest.mark.slow  # every test here starts processes


def _bytes_max(pg) -> float:
    import deepspeed.comm as dist

    sent = torch.tensor([float(pg.stats.bytes_sent)])
    dist.all_reduce(sent, op=dist.ReduceOp.MAX)
    return sent.item()


def _check_regather(rank, world, tmp, backend):
    graph, split = random_graph(), RowSplit(SPLITS[world])
    for chunks in (1, 2):
        kept = forward_backward(
            graph, GraphParallelGroup.from_world().with_split(split), "ag", chunks=chunks, backend=backend
        )
        again = forward_backward(
            graph,
            GraphParallelGroup.from_world().with_split(split),
            "ag",
            chunks=chunks,
            backend=backend,
            regather=True,
        )
        for a, b in zip(kept[0], again[0]):
            assert torch.equal(a, b), (backend, chunks)
        for name, grad in kept[1].items():
            assert torch.equal(grad, again[1][name]), (backend, chunks, name)
        assert _bytes_max(kept[2]) == declared_bytes("ag", graph, split, chunks=chunks)
        regathered = backend != "reference"  # the reference saves per-edge rows k[col], v[col], not the gathered K/V
        assert _bytes_max(again[2]) == declared_bytes("ag", graph, split, checkpointed=regathered, chunks=chunks), (
            backend,
            chunks,
        )


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("world", [2, 4])
def test_regathered_kv_gives_the_same_outputs_and_gradients(world, backend, tmp_path):
    run(_check_regather, world, tmp_path, backend)


def _check_hooks(rank, world, tmp):
    pg = GraphParallelGroup.from_world().with_split(RowSplit(SPLITS[world]))
    torch.manual_seed(rank)
    x = torch.randn(pg.counts[rank], 3, dtype=torch.float64, requires_grad=True)
    results = []
    for regather in (False, True):
        gathered = gather_rows_padded(x, pg)
        calls = pg.stats.calls
        with regathered_in_backward([(gathered, x)] if regather else [], pg):
            loss = gathered.pow(3).sum() + gathered.exp().sum()  # pow saves the gathered rows, exp its output
        forward_calls = pg.stats.calls - calls
        results.append((torch.autograd.grad(loss, x)[0], pg.stats.calls - calls - forward_calls))
    (grad_kept, backward_kept), (grad_again, backward_again) = results
    assert torch.equal(grad_kept, grad_again)
    assert backward_again == backward_kept + 1  # x gathered again once, for pow


def test_hooks_replace_only_the_gathered_tensor(tmp_path):
    run(_check_hooks, 2, tmp_path)
