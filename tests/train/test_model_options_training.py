"""The model options of issue 41 through the DeepSpeed engine (ZeRO-2, dropout on): ego 'sep',
blocks 'gcn' and 'sage', BatchNorm and jumping knowledge take the same training steps on 1, 2 and 4
ranks in full-graph training (several strategies, checkpointing) and in sampled mode (not 'gcn'
there: its degrees are those of the rank's sampled subgraph, ``dsgraph/models/conv.py``); isolated
(Grappa) mode, whose local steps depend on the rank count by design, trains them."""

import pytest

from dsgraph.parallel import get_strategy
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, step_losses, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

HEADS = 4  # make_trainer's model
GCN = dict(block="gcn", ego="sep", norm="post", norm_type="batch", jk="cat", global_attention="none")
SAGE = dict(block="sage", norm="pre", norm_type="batch", jk="max", global_attention="none")
SEP = dict(block="attention", ego="sep", input_projection=False, norm="none", head="attention", global_attention="none")
SAMPLED = dict(fanouts=[3, 3], batch_size=16, feature_dtype="float32")
RUNS = {
    "ag-gcn": dict(strategy="ag", model=GCN),
    "halo-sage-checkpointed": dict(strategy="halo", model=SAGE, checkpoint_activations=True),
    "a2a-sep": dict(strategy="a2a", model=SEP),
    "ag_ring-gcn-gat-head": dict(strategy="ag_ring", model=dict(GCN, jk="none", head="attention")),
    "sampled-sage": dict(mode="sampled", model=SAGE, sampled=SAMPLED),
    "sampled-sep": dict(mode="sampled", model=SEP, sampled=SAMPLED),
}


def _runs(world: int) -> dict[str, dict]:
    return {k: v for k, v in RUNS.items() if not get_strategy(v.get("strategy", "ag")).infeasible(HEADS, world)}


def _train(rank, world, tmp):
    trainers = ((key, make_trainer(tmp, ds_config(stage=2), epochs=3, **s)) for key, s in _runs(world).items())
    losses = step_losses(trainers)
    if rank == 0:
        dump(tmp, f"losses_{world}.json", losses)


def test_one_two_and_four_ranks_take_the_same_steps(tmp_path):
    write_random_graph(str(tmp_path))
    for world in (1, 2, 4):
        run(_train, world, tmp_path)
    reference = load(tmp_path, "losses_1.json")
    for world in (2, 4):
        results = load(tmp_path, f"losses_{world}.json")
        assert set(results) == set(_runs(world))
        for key, losses in results.items():
            want_all = reference[key]
            assert len(losses) == len(want_all)
            for got, want in zip(losses, want_all):
                assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (key, world, losses, want_all)


def _isolated(rank, world, tmp):
    runs = {"gcn": GCN, "sep": SEP, "sage": SAGE}
    trainers = ((k, make_trainer(tmp, ds_config(stage=0), epochs=6, mode="isolated", model=m)) for k, m in runs.items())
    losses = step_losses(trainers, epochs=6)
    if rank == 0:
        dump(tmp, f"isolated_{world}.json", losses)


def test_isolated_mode_trains_them(tmp_path):
    write_random_graph(str(tmp_path))
    run(_isolated, 2, tmp_path)
    for key, losses in load(tmp_path, "isolated_2.json").items():
        assert losses[-1] < losses[0], (key, losses)
