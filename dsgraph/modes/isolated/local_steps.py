"""Isolated training as Grappa does it: local optimizer steps inside a super-epoch.

Inside a super-epoch every rank takes optimizer steps on its own subgraph with no collective:
DeepSpeed's backward all-reduce is off (``engine.enable_backward_allreduce``, the attribute
DeepSpeed's pipeline engine uses for the same purpose) and gradients are clipped with the rank's own
norm (DeepSpeed's clipping all-reduces the norm over the data-parallel group, so the engine is built
with ``gradient_clipping`` 0). At a super-epoch boundary the ranks average their parameters,
weighted by the training nodes each trained on. Adam's moments stay each rank's own: they describe
the rank's own gradients and are never sent, so a boundary costs one all-reduce of the parameters.
Bytes follow ``dsgraph.modes.sync``'s convention.
"""

from __future__ import annotations

import torch

from dsgraph.modes.sync import GRADIENT_CLIPPING_DEFAULT, all_reduce_bytes


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
                f'"zero_optimization": {{"stage": 0}} without bf16/fp16 (ds_configs/cpu_isolated.json), '
                f'or "isolated_sync": "step"'
            )
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
        return all_reduce_bytes(delta.numel() * delta.element_size(), world)
