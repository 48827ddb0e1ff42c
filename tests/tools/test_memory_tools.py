"""tools/common/rss_watch.py, tools/reports/memory_report.py and tools/benchmarks/peer_memory.py
without training runs: the watcher sees a child's peak and enforces its cap; configs, ratios and the
self loops are right."""

import json
import sys

import pytest
import torch

from dsgraph.graph import Graph
from dsgraph.train.config import load_ds_config
from tools.benchmarks import peer_memory as peers
from tools.common import rss_watch as watch
from tools.reports import memory_report as report

GROW = "import time; b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.0)"


@pytest.mark.slow
def test_watcher_reports_the_peak_and_kills_above_the_cap(tmp_path):
    fine = watch.run_watched([sys.executable, "-c", GROW.format(mb=200)], log_path=str(tmp_path / "a.log"), cap_mb=2000)
    assert fine.returncode == 0 and not fine.over_cap and 200 < max(fine.peaks()) < 400
    capped = watch.run_watched(
        [sys.executable, "-c", GROW.format(mb=300)], log_path=str(tmp_path / "b.log"), cap_mb=150
    )
    assert capped.over_cap and capped.returncode is None and capped.seconds < 1.0


def test_report_config_and_ratios(tmp_path):
    args = report.parse_args(["--dataset", "rmat:8", "--epochs", "3"])
    _, cfg = load_ds_config(str(report.run_config(args, tmp_path, "a2a", 2, 4, True)))
    assert (cfg.strategy, cfg.layers, cfg.checkpoint_activations, cfg.epochs, cfg.eval_every) == ("a2a", 4, True, 3, 3)
    runs = [
        dict(strategy=s, ranks=p, layers=2, checkpointing=False, status="ok", max_rank_peak_rss_mb=mb)
        for s, p, mb in (("ag", 1, 1000.0), ("ag", 4, 500.0), ("ag_ring", 4, 400.0))
    ]
    report.add_ratios(runs)
    assert [r["host_ratio"] for r in runs] == [1.0, 0.5, 0.4]  # ag_ring without a 1-rank run: over ag's


def test_peers_add_a_self_loop_only_where_a_row_has_none(tmp_path):
    rowptr, col = torch.tensor([0, 2, 3, 3]), torch.tensor([0, 2, 0])  # row 0 has its loop, rows 1 and 2 none
    mask = torch.ones(3, dtype=torch.bool)
    graph = Graph(
        rowptr=rowptr,
        col=col.int(),
        x=torch.zeros(3, 2),
        y=torch.zeros(3, dtype=torch.long),
        train_mask=mask,
        val_mask=mask,
        test_mask=mask,
    )
    src, dst = peers.with_self_loops(graph)
    assert sorted(zip(src.tolist(), dst.tolist())) == [(0, 0), (0, 1), (1, 1), (2, 0), (2, 2)]
    args = peers.parse_args(["--layers", "3"])
    cmd = peers.dsgraph_command(args, "dsgraph:ag_ring+ckpt", "rmat:9:16", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())["dsgraph"]
    assert "--num_accelerators" in cmd and (config["strategy"], config["checkpoint_activations"], config["layers"]) == (
        "ag_ring",
        True,
        3,
    )
