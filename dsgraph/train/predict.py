"""``dsgraph predict``: full-graph inference from a DeepSpeed checkpoint, on every rank:

    deepspeed --num_accelerators 2 launch/predict.py --config CFG --checkpoint-dir DIR --out preds.npz

Loads the module weights of the latest (or ``--tag``) checkpoint, whatever world size and ZeRO stage
saved it (``weights.py``), splits the graph over this run's ranks with any strategy, and writes in
the dataset's own node order ``logits`` [N, C], ``embeddings`` [N, d] (the input of the output
layer) and ``train_mask``/``val_mask``/``test_mask`` [N] of the run's split
(``prediction_files.py``); for a link task ``embeddings`` [N, d] and, with ``--edges FILE``, the
pairs and their ``scores``; for a regression task ``predictions`` [N] (or [N, T]) instead of
``logits``. The run's task says what it exports (``Task.export``, ``dsgraph/tasks``).
``--eval-only`` prints the checkpoint's metrics instead.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from dsgraph.modes.registry import DEFAULT_MODE
from dsgraph.parallel import strategy_names
from dsgraph.tasks import TASKS, get_task
from dsgraph.tasks.base import metrics_help
from dsgraph.train.config import DsgraphConfig, load_ds_config, with_overrides
from dsgraph.train.run_name import with_run_name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="launch/predict.py",
        description="Full-graph inference from a DeepSpeed checkpoint "
        "(any world size, any ZeRO stage); run it under `deepspeed` or `dsgraph predict`.",
    )
    p.add_argument(
        "--config", "--deepspeed_config", dest="config", required=True, help="the training run's DeepSpeed JSON"
    )
    p.add_argument(
        "--checkpoint-dir", dest="checkpoint_dir", help="checkpoint folder (default: the config's checkpoint_dir)"
    )
    p.add_argument(
        "--run-name", dest="run_name", help="the training run whose checkpoints to read (runs/NAME/checkpoints)"
    )
    p.add_argument("--tag", help="checkpoint tag, e.g. epoch000199 (default: the one named in 'latest')")
    p.add_argument(
        "--out",
        help="output .npz: what the task exports (logits or predictions, embeddings, the split masks) in dataset order",
    )
    p.add_argument(
        "--strategy", choices=strategy_names(), help="graph-parallel strategy for inference (default: the config's)"
    )
    p.add_argument("--dataset", help="dataset (default: the config's)")
    p.add_argument("--split", type=int, help="which fixed split's masks to write and evaluate")
    p.add_argument(
        "--metric",
        help=f"metric for --eval-only, by task: {metrics_help(TASKS)} (default: the config's, or the task's)",
    )
    p.add_argument(
        "--edges",
        help="link task: node pairs to score, a .npy [m, 2] or a .npz with 'edges' [m, 2] of dataset "
        "ids; --out then also holds 'edges' and their 'scores' [m] (logits)",
    )
    p.add_argument("--bf16", action="store_true", help="run the model in bfloat16 (outputs are still float32)")
    p.add_argument(
        "--eval-only", dest="eval_only", action="store_true", help="print the checkpoint's metrics; write nothing"
    )
    p.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.eval_only and not args.out:
        p.error("--out FILE.npz is required unless --eval-only")
    if args.out and not args.out.endswith(".npz"):
        p.error("--out must end in .npz")
    if args.edges and args.eval_only:
        p.error("--edges writes scores into --out; it does not go with --eval-only")
    return args


def predict_config(args: argparse.Namespace) -> DsgraphConfig:
    _, cfg = load_ds_config(args.config)
    overrides = {
        k: getattr(args, k)
        for k in ("strategy", "dataset", "split", "metric", "checkpoint_dir")
        if getattr(args, k) is not None
    }
    cfg = with_overrides(cfg, {**overrides, "mode": DEFAULT_MODE})
    if args.run_name:
        return with_run_name(cfg, args.run_name)
    if cfg.checkpoint_dir is None or "{run_name}" in cfg.checkpoint_dir:
        raise ValueError(
            "which run's checkpoints? pass --run-name NAME of the training run (runs/NAME/checkpoints), "
            "or --checkpoint-dir DIR"
        )
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = predict_config(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph predict: error: {err}", file=sys.stderr)
        return 2
    from dsgraph.train.trainer import init_distributed

    device = init_distributed(cfg.timeout_s)
    import deepspeed.comm as dist

    try:
        result = run_prediction(cfg, args, device)
        if dist.get_rank() == 0:
            print(json.dumps(result) if args.eval_only else f"dsgraph predict: wrote {args.out} ({result})", flush=True)
        return 0
    except (ValueError, FileNotFoundError) as err:
        print(f"dsgraph predict: error (rank {dist.get_rank()}): {err}", file=sys.stderr)
        return 2
    finally:
        dist.destroy_process_group()


def run_prediction(cfg: DsgraphConfig, args: argparse.Namespace, device: torch.device) -> dict | str:
    """On every rank: the metrics (``--eval-only``) or a description of what was written."""
    from dsgraph.train.inference import Inference

    pairs = get_task(cfg.task).pairs_to_score(args.edges)
    inference = Inference(cfg, device, args.checkpoint_dir or cfg.checkpoint_dir, args.tag, bf16=args.bf16)
    if args.eval_only:
        return inference.metrics()
    return inference.write(args.out, pairs)


if __name__ == "__main__":
    sys.exit(main())
