"""How the ranks keep one model, and the bytes that costs each step (a step row's ``sync_bytes``).

- ``EveryStep``: DeepSpeed reduces the gradients in every optimizer step (every mode, and isolated
  training with ``isolated_sync: "step"``). Its bytes are counted from what the engine reduces
  (``reduction_bytes``).
- ``LocalSteps``: isolated training as Grappa does it. Inside a super-epoch every rank takes
  optimizer steps on its own subgraph with no collective: DeepSpeed's backward all-reduce is off
  (``engine.enable_backward_allreduce``, the attribute DeepSpeed's pipeline engine uses for the same
  purpose) and gradients are clipped with the rank's own norm (DeepSpeed's clipping all-reduces the
  norm over the data-parallel group, so the engine is built with ``gradient_clipping`` 0). At a
  super-epoch boundary the ranks average their parameters, weighted by the training nodes each
  trained on. Adam's moments stay each rank's own: they describe the rank's own gradients and are
  never sent, so a boundary costs one all-reduce of the parameters.

Bytes are per rank and follow the same convention as ``comm_bytes``: an all-gather sends the rank's
block to W - 1 peers, a reduce-scatter W - 1 blocks, an all-reduce both (2 (W - 1) / W of the
buffer). DeepSpeed's scalar all-reduces (gradient norm, overflow flag: 1-8 bytes) are left out.
"""

from __future__ import annotations

import torch

GRADIENT_CLIPPING_DEFAULT = 1.0  # DeepSpeed 0.19's default for "gradient_clipping"


def _all_reduce_bytes(nbytes: int, world: int) -> int:
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
        return _all_reduce_bytes(n * grad, world)
    if stage in (1, 2):
        return _all_reduce_bytes(n * grad, world) + _one_way_bytes(n * param, world)
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


class LocalSteps:
    """Local optimizer steps with no collective; parameter averaging where a step says ``sync``.

    The average is taken over the change since the last boundary, sent in ``comm_dtype``: every rank
    ends with reference + sum_r weight_r * delta_r, the same on every rank. In bf16 this rounds the
    change of a super-epoch (not the parameters) to bf16, as DeepSpeed rounds gradients to its
    communication dtype.
    """

    def __init__(self, comm_dtype: torch.dtype = torch.bfloat16):
        self.comm_dtype = comm_dtype
        self.reference: torch.Tensor | None = None  # fp32 [n]: the parameters after the last boundary
        self.max_norm = GRADIENT_CLIPPING_DEFAULT

    def engine_config(self, ds_config: dict) -> dict:
        """The config without DeepSpeed's clipping (it all-reduces the gradient norm); clipping is local."""
        self.max_norm = float(ds_config.get("gradient_clipping", GRADIENT_CLIPPING_DEFAULT))
        return {**ds_config, "gradient_clipping": 0.0}

    def attach(self, engine, pg) -> None:
        stage = int(engine.zero_optimization_stage())
        if stage != 0 or engine.bfloat16_enabled() or engine.fp16_enabled():
            raise ValueError(
                f"isolated_sync 'super_epoch' takes local optimizer steps with no collective, so every rank needs "
                f"the whole optimizer state and its fp32 parameters; this config has ZeRO stage {stage}"
                f"{' and bf16/fp16' if engine.bfloat16_enabled() or engine.fp16_enabled() else ''}, which shard the "
                f"state or keep master weights inside DeepSpeed and reduce every step. Use "
                f"\"zero_optimization\": {{\"stage\": 0}} without bf16/fp16 (ds_configs/cpu_isolated.json), "
                f"or \"isolated_sync\": \"step\""
            )  # fmt: skip
        engine.enable_backward_allreduce = False
        self.engine, self.pg = engine, pg
        self.params = [p for p in engine.module.parameters() if p.requires_grad]

    def before_step(self, step) -> None:
        assert step.local, "LocalSteps runs only local steps"
        if self.reference is None:  # the parameters every rank starts the super-epoch with
            self.reference = torch.nn.utils.parameters_to_vector(self.params).detach().float().clone()
        if self.max_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)

    def after_step(self, step) -> int:
        return self.average(step.sync_weight) if step.sync else 0

    def average(self, weight: float) -> int:
        """Replaces every rank's parameters by the weighted average (weights sum to 1 over ranks);
        returns the bytes this rank sent."""
        world = self.pg.world_size
        if world == 1:
            return 0
        import deepspeed.comm as dist

        flat = torch.nn.utils.parameters_to_vector(self.params).detach().float()
        delta = ((flat - self.reference) * weight).to(self.comm_dtype)
        dist.all_reduce(delta, group=self.pg.group)
        self.reference = self.reference + delta.float()
        with torch.no_grad():
            for p, value in zip(self.params, torch.split(self.reference, [p.numel() for p in self.params])):
                p.copy_(value.view_as(p))
        return _all_reduce_bytes(delta.numel() * delta.element_size(), world)
