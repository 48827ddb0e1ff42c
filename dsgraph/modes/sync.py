"""How the ranks keep one model, and the bytes that costs each step (a step row's ``sync_bytes``).

- ``EveryStep``: DeepSpeed reduces the gradients in every optimizer step (every mode, and isolated
  training with ``isolated_sync: "step"``). Its bytes are counted from what the engine reduces
  (``reduction_bytes``).
- ``LocalSteps`` (``modes/isolated/local_steps.py``): isolated training's local steps, with the
  ranks' parameters averaged at super-epoch boundaries.

Bytes are per rank and follow the same convention as ``comm_bytes``: an all-gather sends the rank's
block to W - 1 peers, a reduce-scatter W - 1 blocks, an all-reduce both (2 (W - 1) / W of the
buffer). DeepSpeed's scalar all-reduces (gradient norm, overflow flag: 1-8 bytes) are left out.
"""

from __future__ import annotations

GRADIENT_CLIPPING_DEFAULT = 1.0  # DeepSpeed 0.19's default for "gradient_clipping"


def all_reduce_bytes(nbytes: int, world: int) -> int:
    return 2 * (world - 1) * nbytes // world


def _one_way_bytes(nbytes: int, world: int) -> int:
    """An all-gather or a reduce-scatter of a buffer of ``nbytes`` (the whole, all blocks)."""
    return (world - 1) * nbytes // world


def reduction_bytes(engine) -> int:
    """Bytes this rank sends in one optimizer step for DeepSpeed's gradient reduction, and in ZeRO
    1-3 for the all-gather of the updated parameters (n trainable parameters, W data-parallel ranks):

    - stage 0: all-reduce of n gradients in the communication dtype;
    - stages 1 and 2: the same all-reduce, and the all-gather of the parameter partitions;
    - stage 3: a reduce-scatter of the gradients, and an all-gather of every parameter once per
      step (in the forward; DeepSpeed keeps it for the backward unless ``stage3_max_live_parameters``
      or ``stage3_max_reuse_distance`` make it release and gather it again, which is not counted).
    """
    world = engine.dp_world_size
    if world == 1:
        return 0
    n = sum(int(getattr(p, "ds_numel", p.numel())) for p in engine.module.parameters() if p.requires_grad)
    grad = engine.communication_data_type.itemsize
    param = 2 if engine.bfloat16_enabled() or engine.fp16_enabled() else 4
    stage = int(engine.zero_optimization_stage())
    if stage == 0:
        return all_reduce_bytes(n * grad, world)
    if stage in (1, 2):
        return all_reduce_bytes(n * grad, world) + _one_way_bytes(n * param, world)
    return _one_way_bytes(n * grad, world) + _one_way_bytes(n * param, world)


class EveryStep:
    """DeepSpeed reduces the gradients in every step; ``after_step`` returns the counted bytes."""

    def engine_config(self, ds_config: dict) -> dict:
        return ds_config

    def attach(self, engine, pg) -> None:
        self.bytes = reduction_bytes(engine)

    def before_step(self, step) -> None:
        assert not step.local, "a local step needs the LocalSteps synchronisation"

    def after_step(self, step) -> int:
        return self.bytes
