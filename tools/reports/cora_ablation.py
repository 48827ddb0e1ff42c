#!/usr/bin/env python
"""Where accuracy on Cora comes from, in two parts (mean test accuracy over seeds, one process, fp32).

    .venv/bin/python -m tools.reports.cora_ablation [--part gcn|model|both] [--seeds 0 1 2] [--variants NAME ...]

Part "gcn": a 2-layer GCN-style model built on dsgraph's sparse_attention (uniform scores, so
attention is the mean over in-edges plus the self loop), then the same model with one Graph
Transformer ingredient added at a time. Base: h = relu(mean(W1 dropout(x))); logits =
mean(W2 dropout(h)); row-normalised features, hidden 16, dropout 0.5, Adam lr 0.01 with L2 5e-4 on
W1 (the GCN paper's recipe, mean instead of symmetric normalisation). Variants: raw 0/1 features, a
residual around the first aggregation, a LayerNorm after it, and a per-node classifier after the
last aggregation (as a Transformer's final norm + classifier do) instead of aggregating the logits.

Part "model": dsgraph's GraphTransformer as --config builds it (default ds_configs/cpu_quickstart.json,
with its sizes, dropouts and model section), then the same with one model option changed at a time,
and at 4 layers. Trained like the trainer on one rank: the config's Adam (L2 weight decay), gradient
clipping and constant learning rate, dropout keyed by the epoch, evaluation every eval_every epochs;
"best val" is the test accuracy at the first evaluation with the highest validation accuracy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

from dsgraph.graph import load_dataset
from dsgraph.models import TRANSFORMER
from dsgraph.ops import sparse_attention
from dsgraph.train.config import DsgraphConfig

GCN_VARIANTS = {
    "base (GCN recipe, mean aggregation)": {},
    "raw 0/1 features": {"raw": True},
    "residual around the first aggregation": {"residual": True},
    "LayerNorm after the first aggregation": {"norm": True},
    "per-node classifier after the last aggregation": {"node_classifier": True},
}

# name -> overrides of the config's "dsgraph" section ("model" entries are merged into its model section)
MODEL_VARIANTS = {
    "config as it is": {},
    "head: linear (per-node classifier)": {"model": {"head": "linear"}},
    "norm: pre": {"model": {"norm": "pre"}},
    "norm: post": {"model": {"norm": "post"}},
    "input_projection: true": {"model": {"input_projection": True}},
    "block: transformer (W_o + GELU FFN)": {"model": {"block": "transformer"}},
    "residual: linear": {"model": {"residual": "linear"}},
    "feature_norm: none (raw 0/1 features)": {"model": {"feature_norm": "none"}},
    "options.TRANSFORMER (the previous block)": {"model": TRANSFORMER.to_dict()},
    "4 layers": {"layers": 4},
    "4 layers, residual: none": {"layers": 4, "model": {"residual": "none"}},
    "4 layers, residual: linear": {"layers": 4, "model": {"residual": "linear"}},
}


def mean_aggregate(graph, h: torch.Tensor) -> torch.Tensor:
    """Mean over each node's in-edges (self loop included): attention with all scores equal."""
    zeros = torch.zeros(h.shape[0], 1, h.shape[1])
    return sparse_attention(graph.rowptr, graph.col, zeros, zeros, h[:, None, :], backend="cpu")[:, 0]


def run_gcn(graph, seed: int, epochs: int, raw=False, residual=False, norm=False, node_classifier=False) -> dict:
    x = graph.x.float()
    if not raw:
        x = x / x.sum(1, keepdim=True).clamp(min=1)
    torch.manual_seed(seed)
    hidden = 16
    first, last = torch.nn.Linear(x.shape[1], hidden), torch.nn.Linear(hidden, graph.num_classes)
    middle, layer_norm = torch.nn.Linear(hidden, hidden), torch.nn.LayerNorm(hidden)
    rest = [p for m in (last, middle, layer_norm) for p in m.parameters()]
    opt = torch.optim.Adam([{"params": first.parameters(), "weight_decay": 5e-4}, {"params": rest}], lr=0.01)

    def forward(train: bool) -> torch.Tensor:
        h0 = first(F.dropout(x, 0.5, train))
        h = F.relu(mean_aggregate(graph, h0))
        if residual:
            h = h + h0
        if norm:
            h = layer_norm(h)
        if node_classifier:
            return last(F.dropout(mean_aggregate(graph, middle(F.dropout(h, 0.5, train))), 0.5, train))
        return mean_aggregate(graph, last(F.dropout(h, 0.5, train)))

    for _ in range(epochs):
        out = forward(True)
        loss = F.cross_entropy(out[graph.train_mask], graph.y[graph.train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        pred = forward(False).argmax(1)
    return {"last": float((pred[graph.test_mask] == graph.y[graph.test_mask]).float().mean())}


def variant_config(section: dict, overrides: dict, seed: int) -> DsgraphConfig:
    """The config's dsgraph section with ``overrides`` (model entries merged) and ``seed``."""
    merged = {**section, **{k: v for k, v in overrides.items() if k != "model"}, "seed": seed}
    merged["model"] = {**section.get("model", {}), **overrides.get("model", {})}
    return DsgraphConfig.from_dict(merged, source="cora_ablation")


def _accuracy(logits, graph, mask) -> float:
    return float((logits.argmax(1)[mask] == graph.y[mask]).float().mean())


def run_model(graph, cfg: DsgraphConfig, optimizer: dict, clip: float) -> dict:
    """One training run of the trainer's model on one process; test accuracy last and at best val."""
    from dsgraph.train.trainer import build_model

    model = build_model(cfg, graph.num_features, graph.num_classes)
    x, ids = graph.x.float(), torch.arange(graph.num_nodes)
    attention = lambda q, k, v: sparse_attention(graph.rowptr, graph.col, q, k, v, backend="cpu")  # noqa: E731
    opt = torch.optim.Adam(model.parameters(), lr=optimizer["lr"], weight_decay=optimizer.get("weight_decay", 0.0))
    best_val, at_best, last = -1.0, 0.0, 0.0
    for epoch in range(cfg.epochs):
        model.train()
        logits = model(x, attention, ids, epoch)
        loss = F.cross_entropy(logits[graph.train_mask], graph.y[graph.train_mask])
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
            model.eval()
            with torch.no_grad():
                logits = model(x, attention, ids, epoch)
            val, last = _accuracy(logits, graph, graph.val_mask), _accuracy(logits, graph, graph.test_mask)
            if val > best_val:
                best_val, at_best = val, last
    return {"last": last, "best_val": at_best}


def load_config(path: str) -> tuple[dict, dict, float]:
    """(dsgraph section, Adam params, gradient clipping) of a DeepSpeed JSON; refuses what run_model does not model."""
    with open(path) as f:
        ds = json.load(f)
    opt = ds.get("optimizer", {})
    if opt.get("type") != "Adam" or opt.get("params", {}).get("adam_w_mode", True) or "scheduler" in ds:
        raise SystemExit(
            f"{path}: the model part trains with Adam with L2 weight decay (adam_w_mode false) "
            f"and a constant learning rate, as the Cora configs do; this config differs"
        )
    return ds.get("dsgraph", {}), opt["params"], float(ds.get("gradient_clipping", 0.0))


def row(name: str, results: list[dict], keys: list[str]) -> str:
    cells = []
    for key in keys:
        accs = [100 * r[key] for r in results]
        spread = f" ± {statistics.stdev(accs):.2f}" if len(accs) > 1 else ""
        cells += [" / ".join(f"{a:.1f}" for a in accs), f"{statistics.mean(accs):.2f}{spread}"]
    return f"| {name} | " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=["gcn", "model", "both"], default="both")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=200, help="epochs of the gcn part (the model part uses the config's)")
    p.add_argument("--config", default="ds_configs/cpu_quickstart.json", help="the model part's base config")
    p.add_argument(
        "--variants",
        nargs="+",
        metavar="NAME",
        help=f"model variants to run (default all): {'; '.join(MODEL_VARIANTS)}",
    )
    args = p.parse_args(argv)
    unknown = sorted(set(args.variants or []) - set(MODEL_VARIANTS))
    if unknown:
        p.error(f"unknown variant(s) {unknown}; choose from {list(MODEL_VARIANTS)}")
    torch.set_num_threads(1)
    graph = load_dataset("cora").with_self_loops()
    if args.part in ("gcn", "both"):
        print("| GCN-style variant | test acc per seed | mean ± std |\n| --- | --- | --- |")
        for name, options in GCN_VARIANTS.items():
            print(row(name, [run_gcn(graph, s, args.epochs, **options) for s in args.seeds], ["last"]), flush=True)
    if args.part in ("model", "both"):
        section, optimizer, clip = load_config(args.config)
        print(
            f"\n| {args.config} variant | last epoch per seed | mean ± std | best val per seed | mean ± std |\n"
            "| --- | --- | --- | --- | --- |"
        )
        for name in args.variants or MODEL_VARIANTS:
            results = [
                run_model(graph, variant_config(section, MODEL_VARIANTS[name], s), optimizer, clip) for s in args.seeds
            ]
            print(row(name, results, ["last", "best_val"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
