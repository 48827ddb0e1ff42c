"""Building a Trainer inside a spawned rank, on a small graph saved as .npz."""

from __future__ import annotations

import json
import os

import torch

from dsgraph.graph import save_npz
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.graphs import random_graph


def ds_config(stage: int = 2, bf16: bool = False, **extra) -> dict:
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        # torch.optim's AdamW (what the CLI picks on CPU): no FusedAdam JIT build, whose lock a killed
        # test leaves behind
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**6,
        **extra,
    }


def write_random_graph(tmp: str) -> str:
    """The random graph's .npz in ``tmp``, written once. Ranks may call it at once: each writes its
    own file and renames it into place, so no rank reads a half-written file."""
    path = os.path.join(tmp, "random.npz")
    if not os.path.exists(path):
        mine = os.path.join(tmp, f"random.{os.getpid()}.partial.npz")
        save_npz(random_graph(), mine)
        os.replace(mine, path)
    return path


def make_trainer(tmp: str, ds: dict, **cfg) -> Trainer:
    settings = dict(dataset=write_random_graph(tmp), hidden=32, heads=4, layers=2, self_loops=False, seed=3)
    settings.update(cfg)
    return Trainer(DsgraphConfig.from_dict(settings), ds, torch.device("cpu"))


def dump(tmp: str, name: str, value) -> None:
    with open(os.path.join(tmp, name), "w") as f:
        json.dump(value, f)


def load(tmp, name: str):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)


def dump_losses(rank: int, tmp: str, name: str, runs: dict[str, dict], epochs: int) -> None:
    """Trains each run (``make_trainer`` settings, ZeRO-2) for ``epochs`` epochs; rank 0 saves the
    losses per run key in ``name``."""
    losses = {}
    for key, settings in runs.items():
        trainer = make_trainer(tmp, ds_config(stage=2), **settings)
        losses[key] = [trainer.train_epoch(epoch)["loss"] for epoch in range(epochs)]
    if rank == 0:
        dump(tmp, name, losses)


def step_losses(trainers, epochs: int = 3) -> dict[str, list[float]]:
    """The loss of every training step of ``epochs`` epochs of each (key, trainer) of ``trainers``
    (an iterable, so that one trainer is built, trained and closed at a time)."""
    losses = {}
    for key, trainer in trainers:
        losses[key] = [
            trainer.train_step(step)["loss"] for epoch in range(epochs) for step in trainer.mode.steps(epoch, epoch + 1)
        ]
        trainer.mode.close()
    return losses


def results_by_world(fn, tmp_path, name: str, worlds=(1, 2, 4)) -> dict[int, dict]:
    """What rank 0 of ``fn`` saved as ``name``_W.json, run on each of ``worlds`` ranks."""
    from tests.distributed import run

    for world in worlds:
        run(fn, world, tmp_path)
    return {world: load(tmp_path, f"{name}_{world}.json") for world in worlds}


def assert_same_steps(by_world: dict[int, dict], same_as: dict[str, str] | None = None) -> None:
    """Every run key's step losses on every world size equal world 1's (1e-5 relative, fp32), and
    every run learns; ``same_as`` maps a key to the world-1 key it must equal (a store to its .npz run)."""
    reference, same_as = by_world[min(by_world)], same_as or {}
    for world, results in by_world.items():
        for key, losses in results.items():
            want_all = reference[same_as.get(key, key)]
            third = max(1, len(want_all) // 3)  # several steps per epoch (sampled mode): mean over a third of them
            assert sum(want_all[-third:]) < sum(want_all[:third]), key  # it learns
            for got, want in zip(losses, want_all, strict=True):
                assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (key, world, losses, want_all)


def dataset_with_stores(tmp: str, name: str, graph, prepare=None) -> str:
    """``graph`` saved as ``tmp/name``, then ``prepare(path)`` (if given) and a partition store per
    rank count 1, 2 and 4 (random parts) at ``tmp/store{P}``, made from it; made once per folder."""
    from dsgraph.graph.partition_cli import main as partition

    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        save_npz(graph, path)
        if prepare is not None:
            prepare(path)
        for parts in (1, 2, 4):
            assert (
                partition(
                    [
                        "--dataset",
                        path,
                        "--parts",
                        str(parts),
                        "--method",
                        "random",
                        "--out",
                        os.path.join(tmp, f"store{parts}"),
                        "--quiet",
                    ]
                )
                == 0
            )
    return path


def quiet_trainer(settings: dict, stage: int = 2) -> Trainer:
    """A Trainer of ``settings`` (the dsgraph section) with ZeRO ``stage``, no log lines."""
    return Trainer(
        DsgraphConfig.from_dict(settings), ds_config(stage=stage), torch.device("cpu"), log=lambda line: None
    )


def assert_same_evaluation(by_world: dict[int, dict]) -> None:
    """Every world size's evaluation (loss within 1e-5 relative, validation accuracy exactly) is world 1's."""
    reference = by_world[min(by_world)]
    for world, got in by_world.items():
        assert abs(got["loss"] - reference["loss"]) <= 1e-5 * abs(reference["loss"]), (world, got, reference)
        assert got["val_acc"] == reference["val_acc"], (world, got, reference)


def step_keeping(model, rank_graph, attention) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """One forward and backward of ``model`` on a rank's rows: (logits, parameter gradients, bytes
    autograd kept for backward, each storage counted once)."""
    import torch.nn.functional as F

    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    nodes = rank_graph.nodes
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(nodes.x, attention, nodes.node_ids, 1)
    F.cross_entropy(logits[nodes.train_mask].float(), nodes.y[nodes.train_mask]).backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()], sum(storages.values())
