"""Each run its own outputs: run names in paths and TensorBoard's job name."""

from dsgraph.train.config import DsgraphConfig
from dsgraph.train.run_name import default_run_name, tensorboard_for_run, tensorboard_run_dir, with_run_name


def test_default_name_is_config_stem_and_utc_stamp():
    assert default_run_name("cpu_quickstart", now=0) == "cpu_quickstart-19700101T000000Z"


def test_run_name_goes_into_every_output_path(monkeypatch):
    monkeypatch.delenv("DSGRAPH_RUNS_DIR", raising=False)
    cfg = with_run_name(DsgraphConfig(), "r1", default_metrics=True)
    assert (cfg.run_name, cfg.checkpoint_dir, cfg.trace_dir, cfg.metrics_out) == (
        "r1",
        "runs/r1/checkpoints",
        "runs/r1/traces",
        "runs/r1/metrics.jsonl",
    )
    mine = with_run_name(DsgraphConfig(checkpoint_dir="/tmp/x/ck", metrics_out="/tmp/x/{run_name}.jsonl"), "r2")
    assert with_run_name(DsgraphConfig(), "r4").checkpoint_dir == "runs/r4/checkpoints"
    assert (mine.checkpoint_dir, mine.metrics_out) == ("/tmp/x/ck", "/tmp/x/r2.jsonl")
    assert (
        with_run_name(DsgraphConfig(), "r3").metrics_out is None
    )  # a Trainer built in Python writes no file by default


def test_tensorboard_job_is_the_run():
    ds = {"tensorboard": {"enabled": True, "output_path": "runs/tensorboard", "job_name": "cpu_quickstart"}}
    assert tensorboard_for_run(ds, "r1")["tensorboard"] == {
        "enabled": True,
        "output_path": "runs/tensorboard",
        "job_name": "r1",
    }
    assert tensorboard_for_run({"x": 1}, "r1") == {"x": 1}


def test_traces_go_into_the_tensorboard_run_unless_a_trace_dir_is_given(monkeypatch):
    monkeypatch.delenv("DSGRAPH_RUNS_DIR", raising=False)
    ds = tensorboard_for_run({"tensorboard": {"enabled": True, "output_path": "runs/tensorboard"}}, "r1")
    assert tensorboard_run_dir(ds) == "runs/tensorboard/r1"
    assert (
        with_run_name(DsgraphConfig(), "r1", tensorboard_run=tensorboard_run_dir(ds)).trace_dir == "runs/tensorboard/r1"
    )
    mine = with_run_name(
        DsgraphConfig(trace_dir="/tmp/perfetto/{run_name}"), "r1", tensorboard_run="runs/tensorboard/r1"
    )
    assert mine.trace_dir == "/tmp/perfetto/r1"
    assert tensorboard_run_dir({"tensorboard": {"enabled": False}}) is None
    assert with_run_name(DsgraphConfig(), "r1", tensorboard_run=None).trace_dir == "runs/r1/traces"
