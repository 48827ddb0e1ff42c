"""Each run its own outputs: a run name, and the paths of its metrics, checkpoints, traces and
TensorBoard events under it.

The run name is the config's ``run_name``, or ``<config stem>-<UTC time stamp>`` chosen by rank 0
and shared with the other ranks. ``{run_name}`` in ``checkpoint_dir``, ``trace_dir``,
``metrics_out`` and the TensorBoard ``output_path`` is replaced by it; the defaults (null) put
everything under ``runs/<run_name>/``, and TensorBoard's ``job_name`` becomes the run name, so two runs of one
config never write into one TensorBoard run. Traces (``--trace-steps``) go into that TensorBoard run's
folder, where TensorBoard's PyTorch Profiler tab reads them (``runs/<run_name>/traces`` without TensorBoard).
The default folders are under ``$DSGRAPH_RUNS_DIR``
instead of ``runs`` when that is set (the tests set it).
"""

from __future__ import annotations

import dataclasses
import os
import time

PLACEHOLDER = "{run_name}"
PATH_KEYS = ("checkpoint_dir", "trace_dir", "metrics_out")
DEFAULTS = {
    "checkpoint_dir": "checkpoints",
    "trace_dir": "traces",
    "metrics_out": "metrics.jsonl",
}  # under runs/<run_name>/


def default_run_name(stem: str, now: float | None = None) -> str:
    """'<stem>-YYYYmmddTHHMMSSZ' (UTC)."""
    return f"{stem}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"


def config_stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0] or "dsgraph"


def with_run_name(cfg, run_name: str, default_metrics: bool = False, tensorboard_run: str | None = None):
    """``cfg`` with ``run_name`` set and substituted in its paths; ``default_metrics``: a missing
    ``metrics_out`` becomes runs/<run_name>/metrics.jsonl (what the training command writes);
    ``tensorboard_run``: the run's TensorBoard folder, where traces go unless ``trace_dir`` is set."""
    changes = {"run_name": run_name}
    for key in PATH_KEYS:
        value = getattr(cfg, key)
        if value is None and key == "trace_dir" and tensorboard_run is not None:
            value = tensorboard_run
        if value is None and (key != "metrics_out" or default_metrics):
            value = os.path.join(os.environ.get("DSGRAPH_RUNS_DIR", "runs"), PLACEHOLDER, DEFAULTS[key])
        if value is not None:
            changes[key] = value.replace(PLACEHOLDER, run_name)
    return dataclasses.replace(cfg, **changes)


def tensorboard_for_run(ds_config: dict, run_name: str) -> dict:
    """The DeepSpeed config with TensorBoard's events in a run of their own (job_name = run name)."""
    tb = ds_config.get("tensorboard")
    if not isinstance(tb, dict) or not tb.get("enabled"):
        return ds_config
    path = str(tb.get("output_path", "runs/tensorboard")).replace(PLACEHOLDER, run_name)
    return {**ds_config, "tensorboard": {**tb, "output_path": path, "job_name": run_name}}


def tensorboard_run_dir(ds_config: dict) -> str | None:
    """The folder of the run's TensorBoard events (``output_path/job_name``), or None without TensorBoard."""
    tb = ds_config.get("tensorboard")
    if not isinstance(tb, dict) or not tb.get("enabled"):
        return None
    return os.path.join(tb.get("output_path", "runs/tensorboard"), tb.get("job_name", "DeepSpeedJobName"))


def describe(cfg, ds_config: dict) -> str:
    """The start-up line that says where this run's outputs go."""
    parts = [f"metrics {cfg.metrics_out}" if cfg.metrics_out else "no metrics file"]
    if cfg.checkpoint_every:
        parts.append(f"checkpoints {cfg.checkpoint_dir}")
    tb = ds_config.get("tensorboard")
    if isinstance(tb, dict) and tb.get("enabled"):
        parts.append(f"TensorBoard {os.path.join(tb['output_path'], tb['job_name'])}")
    if cfg.trace_steps:
        parts.append(f"traces {cfg.trace_dir}")
    return f"run {cfg.run_name}: " + ", ".join(parts)
