"""Per-step compute / communication / idle time and the overlap figure from a rank's trace events."""

import json

import pytest

from dsgraph.train.trace_figures import load_events, step_figures


def test_a_step_splits_into_compute_comm_and_idle():
    events = [
        ("dsgraph/step/3", 0.0, 10.0),
        ("dsgraph/attention/reference", 1.0, 4.0),  # compute 1..3, then during comm
        ("aten::mm", 1.5, 2.0),  # inside attention: no extra time
        ("dsgraph/comm/all_gather", 3.0, 6.0),  # comm 3 ms, 1 ms of it during attention
        ("gloo:all_gather", 3.0, 6.0),
        ("aten::cat", 4.5, 5.0),  # run by the collective: comm time, not compute
        ("dsgraph/comm/wait", 6.0, 8.0),  # waiting: idle
        ("aten::add", 8.0, 9.0),  # compute, 1 ms (3 in all); idle 0..1, 6..8, 9..10
        ("dsgraph/step/4", 20.0, 22.0),
        ("aten::mul", 20.0, 21.0),
        ("aten::before", -5.0, -1.0),  # outside every step
    ]
    first, second = step_figures(events)
    assert first == pytest.approx(
        {"comm_ms": 3.0, "compute_ms": 3.0, "idle_ms": 4.0, "attention_ms": 3.0, "comm_hidden": 1 / 3}
    )
    assert second == pytest.approx(
        {"comm_ms": 0.0, "compute_ms": 1.0, "idle_ms": 1.0, "attention_ms": 0.0, "comm_hidden": 0.0}
    )


def test_nccl_kernels_count_as_communication():
    events = [("dsgraph/step/0", 0.0, 4.0), ("ncclDevKernel_AllGather_RING_LL", 1.0, 3.0), ("gemm_kernel", 0.0, 2.0)]
    (figures,) = step_figures(events)
    assert (figures["comm_ms"], figures["compute_ms"], figures["idle_ms"]) == pytest.approx((2.0, 1.0, 1.0))


def test_the_profilers_own_span_is_not_work(tmp_path):
    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 10_000},
        {"ph": "X", "cat": "user_annotation", "name": "dsgraph/step/0", "ts": 1000, "dur": 4000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000, "dur": 1000},
        {"ph": "i", "name": "marker", "ts": 1500},
    ]
    path = tmp_path / "rank0.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert load_events(str(path)) == [("dsgraph/step/0", 1.0, 5.0), ("aten::mm", 1.0, 2.0)]
    (figures,) = step_figures(load_events(str(path)))
    assert (figures["compute_ms"], figures["idle_ms"]) == pytest.approx((1.0, 3.0))
