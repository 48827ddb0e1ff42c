"""A DeepSpeed checkpoint's module weights, without an engine: for prediction at any world size.

Every rank of a training run holds the same parameters, so the weights do not depend on how many
ranks saved the checkpoint. ZeRO stages 0-2 store the whole module once (``mp_rank_00_model_states.pt``,
key ``module``); ZeRO-3 stores parameter shards in each rank's optimizer state, which DeepSpeed's
``zero_to_fp32`` reassembles (``get_fp32_state_dict_from_zero_checkpoint``).
"""

from __future__ import annotations

import os

import torch


def checkpoint_tag(directory: str, tag: str | None) -> str:
    """``tag``, or the one the ``latest`` file names; FileNotFoundError naming what is missing."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory}: no such checkpoint folder")
    if tag is None:
        latest = os.path.join(directory, "latest")
        if not os.path.isfile(latest):
            raise FileNotFoundError(
                f"{directory}: no 'latest' file; name a checkpoint with --tag (one of: "
                f"{', '.join(sorted(os.listdir(directory))) or 'none'})"
            )
        with open(latest) as f:
            tag = f.read().strip()
    if not os.path.isdir(os.path.join(directory, tag)):
        raise FileNotFoundError(f"{os.path.join(directory, tag)}: no such checkpoint")
    return tag


def load_module_weights(directory: str, tag: str | None = None) -> tuple[dict[str, torch.Tensor], dict, str]:
    """(the module's state dict in fp32, the checkpoint's dsgraph client state, its tag)."""
    tag = checkpoint_tag(directory, tag)
    folder = os.path.join(directory, tag)
    whole = os.path.join(folder, "mp_rank_00_model_states.pt")
    if os.path.isfile(whole):
        state = torch.load(whole, map_location="cpu", weights_only=True)
        module = state["module"]
    else:
        shard = os.path.join(folder, "zero_pp_rank_0_mp_rank_00_model_states.pt")
        if not os.path.isfile(shard):
            raise FileNotFoundError(
                f"{folder}: neither mp_rank_00_model_states.pt nor ZeRO-3 shards; not a DeepSpeed checkpoint"
            )
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = torch.load(shard, map_location="cpu", weights_only=True)
        module = get_fp32_state_dict_from_zero_checkpoint(directory, tag=tag)
    client = {k: state[k] for k in ("epoch", "seed", "best") if k in state}
    return {k: v.float() if v.is_floating_point() else v for k, v in module.items()}, client, tag
