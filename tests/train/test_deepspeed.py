"""Training through the DeepSpeed engine: rank-count independence, ZeRO stages, precision."""

import math

import pytest
import torch

from dsgraph.parallel import get_strategy, strategy_names
from tests.distributed import run
from tests.train.helpers import ds_config, dump, dump_losses, load, make_trainer, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

HEADS = 4  # make_trainer's model


def _runnable(world: int) -> list[str]:
    return [s for s in strategy_names() if not get_strategy(s).infeasible(HEADS, world)]


def _five_steps(rank, world, tmp):
    # every registered strategy through DeepSpeed (ZeRO-2, dropout on)
    dump_losses(rank, tmp, f"losses_{world}.json", {s: dict(strategy=s) for s in _runnable(world)}, epochs=5)


def test_first_five_steps_do_not_depend_on_rank_count_for_every_strategy(tmp_path):
    write_random_graph(str(tmp_path))
    for world in (1, 2, 4):
        run(_five_steps, world, tmp_path)
    reference = load(tmp_path, "losses_1.json")
    for world in (2, 4):
        results = load(tmp_path, f"losses_{world}.json")
        assert sorted(results) == sorted(_runnable(world))
        for strategy, losses in results.items():
            want_all = reference[strategy]
            assert want_all[-1] < want_all[0]  # it learns
            for got, want in zip(losses, want_all):
                assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (strategy, world, losses, want_all)


GLOBAL_MODEL = dict(block="transformer", input_projection=True, norm="pre", head="linear", global_attention="linear")
GLOBAL_RUNS = {
    "ag": dict(strategy="ag", model=GLOBAL_MODEL),
    "halo-checkpointed": dict(strategy="halo", model=GLOBAL_MODEL, checkpoint_activations=True),
    "a2a-gat": dict(strategy="a2a", model=dict(global_attention="linear")),
}


def _five_global_steps(rank, world, tmp):
    dump_losses(rank, tmp, f"global_{world}.json", GLOBAL_RUNS, epochs=5)


def test_global_attention_through_deepspeed_does_not_depend_on_rank_count(tmp_path):
    """Linear global attention (its sums all-reduced in every layer) through ZeRO-2 with dropout on:
    1, 2 and 4 ranks take the same five steps, with and without activation checkpointing."""
    write_random_graph(str(tmp_path))
    for world in (1, 2, 4):
        run(_five_global_steps, world, tmp_path)
    reference = load(tmp_path, "global_1.json")
    for world in (2, 4):
        for key, losses in load(tmp_path, f"global_{world}.json").items():
            assert reference[key][-1] < reference[key][0]  # it learns
            for got, want in zip(losses, reference[key]):
                assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (key, world, losses, reference[key])


def _all_stages(rank, world, tmp):
    results = {}
    for stage in (0, 1, 2, 3):
        for bf16 in (False, True):
            trainer = make_trainer(tmp, ds_config(stage=stage, bf16=bf16))
            before = [p.detach().float().clone() for p in trainer.engine.module.parameters()]
            losses = [trainer.train_epoch(epoch)["loss"] for epoch in range(3)]
            assert all(math.isfinite(x) for x in losses)
            if stage < 3:  # ZeRO-3 keeps only a shard of each parameter on this rank
                changed = any(
                    not torch.equal(b, p.detach().float()) for b, p in zip(before, trainer.engine.module.parameters())
                )
                assert changed, f"ZeRO-{stage} bf16={bf16}: parameters did not change"
            results[f"{stage}-{bf16}"] = losses
    if rank == 0:
        dump(tmp, "stages.json", results)


def test_zero_stages_0_to_3_in_fp32_and_bf16(tmp_path):
    run(_all_stages, 2, tmp_path)
    results = load(tmp_path, "stages.json")
    assert len(results) == 8
    fp32 = [results[f"{s}-False"] for s in range(4)]
    for losses in fp32[1:]:  # all fp32 stages take the same steps
        assert losses == pytest.approx(fp32[0], rel=1e-5)
