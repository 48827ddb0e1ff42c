"""Every strategy's traced steps become per-rank compute / communication / idle and overlap
scalars, and every epoch per-rank CPU utilisation, in metrics.jsonl and TensorBoard; the traces
themselves land in the run's TensorBoard folder, one file per rank."""

import glob
import json
import os

import pytest

from dsgraph.parallel import strategy_names
from tests.distributed import run
from tests.train.helpers import ds_config, make_trainer, write_random_graph

TRACE_KEYS = ("comm_ms", "compute_ms", "idle_ms", "attention_ms", "comm_hidden")


def _train(rank, world, tmp, strategies):
    for strategy in strategies:
        # not the bare strategy name: DeepSpeed reads a config value "auto" as "its default"
        tensorboard = {"enabled": True, "output_path": f"{tmp}/tb", "job_name": f"run-{strategy}"}
        trainer = make_trainer(
            tmp,
            ds_config(stage=1, tensorboard=tensorboard),
            strategy=strategy,
            backend="reference",
            epochs=3,
            eval_every=3,
            trace_steps="1:2",
            metrics_out=f"{tmp}/{strategy}.jsonl",
            run_name=f"run-{strategy}",
        )
        trainer.fit(log=lambda line: None)


def _scalars(folder: str) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder)
    events.Reload()
    return set(events.Tags()["scalars"])


@pytest.mark.slow
def test_every_strategy_writes_per_rank_trace_and_utilisation_scalars(tmp_path):
    write_random_graph(str(tmp_path))
    run(_train, 2, tmp_path, strategy_names())
    for strategy in strategy_names():
        rows = [json.loads(line) for line in open(tmp_path / f"{strategy}.jsonl")]
        (trace,) = [r for r in rows if r["kind"] == "trace"]
        assert (trace["epoch"], trace["step"]) == (1, 2), strategy
        for rank in (0, 1):
            assert all(f"{key}/rank{rank}" in trace for key in TRACE_KEYS), (strategy, trace)
            assert trace[f"comm_ms/rank{rank}"] > 0 and trace[f"compute_ms/rank{rank}"] > 0, (strategy, trace)
            assert 0.0 <= trace[f"comm_hidden/rank{rank}"] <= 1.0
        util = [r for r in rows if r["kind"] == "util"]
        assert [r["epoch"] for r in util] == [0, 1, 2], strategy
        assert all(r[f"cpu_util/rank{k}"] > 0 for r in util for k in (0, 1)), (strategy, util)
        folder = tmp_path / "tb" / f"run-{strategy}"
        traces = sorted(os.path.basename(f).split(".")[0] for f in glob.glob(f"{folder}/*.pt.trace.json"))
        assert traces == ["rank0", "rank1"], (strategy, traces)
        tags = _scalars(str(folder))
        for tag in ("dsgraph/trace/comm_ms/rank1", "dsgraph/trace/idle_ms/rank0", "dsgraph/util/cpu_util/rank1"):
            assert tag in tags, (strategy, tag, sorted(tags))
