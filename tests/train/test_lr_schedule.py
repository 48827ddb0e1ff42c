"""No shipped config wastes optimizer steps at learning rate 0: DeepSpeed's WarmupLR (and
WarmupDecayLR) run the first two steps at ``warmup_min_lr`` (default 0), and WarmupCosineLR runs the
first at lr 0 whatever its ``warmup_min_ratio``. Each config's optimizer and scheduler sections
drive a real DeepSpeed engine on one gloo process; the first steps must use lr > 0 and move the
parameters."""

import glob
import json

import pytest
import torch

from tests.distributed import run

pytestmark = pytest.mark.slow  # every test here starts processes

CONFIGS = sorted(glob.glob("ds_configs/*.json"))


def _schedule_only(path: str) -> dict:
    """The config's optimizer and scheduler on a plain fp32 engine (ZeRO and precision do not set the lr)."""
    with open(path) as f:
        ds = json.load(f)
    optimizer = json.loads(json.dumps(ds["optimizer"]))
    optimizer["params"]["torch_adam"] = True  # the CPU Adam; the same lr reaches it
    out = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "optimizer": optimizer}
    if "scheduler" in ds:
        out["scheduler"] = ds["scheduler"]
    return out


def _first_steps(rank, world, tmp):
    import deepspeed

    for path in CONFIGS:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        engine, _, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=_schedule_only(path)
        )
        x = torch.randn(8, 4)
        for step in range(1, 4):
            lr = engine.get_lr()[0]
            before = [p.detach().clone() for p in model.parameters()]
            engine.backward(engine(x).square().mean())
            engine.step()
            moved = any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
            assert lr > 0 and moved, f"{path}: optimizer step {step} ran at lr {lr} (parameters moved: {moved})"


def test_shipped_configs_start_training_at_a_positive_learning_rate(tmp_path):
    assert len(CONFIGS) >= 7
    run(_first_steps, 1, tmp_path)
