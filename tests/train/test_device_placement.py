"""Device-correct by construction: for every registered strategy and every training mode, a rank's
data loaded on the CPU and attached to another device (torch's ``meta`` device) hands the op only
tensors on that device. A recording backend notes the device of every tensor each op call receives;
on a GPU, one tensor left on the CPU fails the first step, and here it fails these tests."""

import os
import shutil

import pytest
import torch

from dsgraph.comm import GraphParallelGroup
from dsgraph.comm.control import TorchControlPlane
from dsgraph.graph.encode.cli import main as encode
from dsgraph.modes.registry import make_mode
from dsgraph.ops import register_backend
from dsgraph.ops.backend import FusedBackend
from dsgraph.ops.dispatch import unregister_backend
from dsgraph.parallel import auto_candidates, strategy_names
from dsgraph.tasks import get_task
from dsgraph.train.config import DsgraphConfig
from tests.train.helpers import write_random_graph

META = torch.device("meta")
HEADS, DIM = 2, 8


class Recording(FusedBackend):
    """Accepts any inputs and records where each one lives; returns zeros on q's device. Its
    forward/backward passes (for blockwise strategies) record the same way."""

    name, priority, device_type = "recording", -1, None

    def __init__(self):
        self.calls: list[dict[str, torch.device]] = []

    def _record(self, **tensors) -> None:
        self.calls.append({name: t.device for name, t in tensors.items()})

    def attention(self, rowptr, col, q, k, v, scale):
        self._record(rowptr=rowptr, col=col, q=q, k=k, v=v)
        return q * 0 + (k.sum() + v.sum()) * 0

    def forward(self, rowptr, col, q, k, v, scale):
        self._record(rowptr=rowptr, col=col, q=q, k=k, v=v)
        lse = torch.zeros(q.shape[:2], device=q.device)
        return torch.zeros(q.shape, device=q.device), lse, (lse,)

    def backward(self, rowptr, col, q, k, v, y_acc, saved, dy, scale, needs):
        self._record(rowptr=rowptr, col=col, q=q, k=k, v=v, y=y_acc, lse=saved[0], dy=dy)
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


@pytest.fixture
def recording():
    import torch.fx.experimental._config as fx_config

    backend = Recording()
    register_backend(backend)
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):  # boolean masks on meta tensors get a shape
        yield backend
    unregister_backend(backend.name)


def _mode(tmp_path, **settings):
    settings = dict(dict(dataset=write_random_graph(str(tmp_path))), **settings)
    cfg = DsgraphConfig.from_dict(
        dict(hidden=HEADS * DIM, heads=HEADS, layers=1, backend="recording", seed=1, **settings)
    )
    task = get_task(cfg.task)(cfg)
    mode = make_mode(cfg, GraphParallelGroup(), TorchControlPlane(), lambda line: None, lambda phase: None, task)
    mode.attach(META, torch.float32)
    return mode


def _call(attention, n: int) -> None:
    q = torch.randn(n, HEADS, DIM, device=META, requires_grad=True)
    attention(q, q, q).sum().backward()


def _assert_all_on_meta(recording, what: str) -> None:
    assert recording.calls, f"{what}: the op was never called"
    for call in recording.calls:
        wrong = {name: str(device) for name, device in call.items() if device != META}
        assert not wrong, f"{what}: tensors handed to the op on the wrong device: {wrong}"
    recording.calls.clear()


def _assert_step_on_meta(step, what: str) -> None:
    for name in ("x", "node_ids", "labels", "loss_rows", "weights"):
        value = getattr(step, name)
        if isinstance(value, torch.Tensor):
            assert value.device == META, f"{what}: step.{name} is on {value.device}"


def _run_steps_and_evaluation(mode, steps, recording, label: str) -> None:
    for step in steps:
        _assert_step_on_meta(step, label)
        _call(step.attention, step.x.shape[0])
    _assert_all_on_meta(recording, f"{label} training steps")
    batch = mode.eval_batch()
    _call(batch.attention, batch.x.shape[0])
    _assert_all_on_meta(recording, f"{label} evaluation")


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_puts_graph_plans_and_node_data_on_the_training_device(tmp_path, recording, strategy):
    mode = _mode(tmp_path, strategy=strategy)
    graph = mode.ranks.graph
    wrong = {name: str(t.device) for name, t in graph.tensors().items() if t.device != META}
    assert not wrong, f"{strategy}: rank graph tensors left behind: {wrong}"
    _run_steps_and_evaluation(mode, [next(mode.steps(0))], recording, strategy)


def test_auto_switches_stay_on_the_training_device(tmp_path, recording):
    mode = _mode(tmp_path, strategy="auto")  # no profile: the fallback, then every candidate by hand
    attention = mode.train_attention
    for name in auto_candidates():
        attention.auto.switch_to(name, "test")
        assert attention.name == name
        _call(attention, mode.ranks.graph.nodes.num_rows)
        _assert_all_on_meta(recording, f"auto running {name}")


def test_sampled_batches_and_evaluation_are_on_the_training_device(tmp_path, recording):
    mode = _mode(tmp_path, mode="sampled", fanouts=[3], batch_size=16, prefetch_depth=1, cache_fraction=0.2, epochs=1)
    steps = list(mode.steps(0))
    assert len(steps) == mode.batches_per_epoch
    _run_steps_and_evaluation(mode, steps, recording, "sampled")


def test_isolated_chunks_and_evaluation_are_on_the_training_device(tmp_path, recording):
    mode = _mode(tmp_path, mode="isolated", isolated_chunks=2, repart_every=1, epochs=2, isolated_prefetch=True)
    try:
        _run_steps_and_evaluation(
            mode, mode.steps(0), recording, "isolated"
        )  # two super-epochs: the prefetched one too
    finally:
        mode.close()


def test_link_pairs_and_negatives_are_on_the_training_device(tmp_path, recording):
    """A link task's fixed pairs ride in the rank graph; each step's pairs and targets follow."""
    mode = _mode(tmp_path, task="link", link={"embedding_dim": 8})
    wrong = {name: str(t.device) for name, t in mode.ranks.graph.tensors().items() if t.device != META}
    assert "link_pairs.eval_u" in mode.ranks.graph.tensors() and not wrong, f"link: left behind: {wrong}"
    step = next(mode.steps(0))
    for name, t in (("u", step.pairs.u_rows), ("v", step.pairs.v_rows), ("labels", step.labels)):
        assert t.device == META and t.numel() > 0, f"link step {name} is on {t.device}"
    batch = mode.eval_batch()
    assert batch.pairs.u_rows.device == META and batch.pair_sets.set_id.device == META
    _run_steps_and_evaluation(mode, [step], recording, "link")


def test_a_tensor_left_on_the_cpu_is_caught(tmp_path, recording):
    """The check itself: an index tensor planted on the CPU beside meta q, k, v is reported."""
    mode = _mode(tmp_path, strategy="ag")
    attention = mode.train_attention
    attention.col = torch.zeros(attention.col.shape, dtype=attention.col.dtype)
    _call(attention, mode.ranks.graph.nodes.num_rows)
    with pytest.raises(AssertionError, match="'col': 'cpu'"):
        _assert_all_on_meta(recording, "planted mistake")


@pytest.mark.parametrize(
    "settings",
    [
        dict(strategy="ag"),
        dict(strategy="halo"),
        dict(mode="sampled", fanouts=[3], epochs=1),
        dict(mode="isolated", isolated_chunks=2, repart_every=1, epochs=2),
    ],
    ids=str,
)
def test_encodings_ride_with_the_node_data_to_the_training_device(tmp_path, recording, settings):
    path = os.path.join(tmp_path, "encoded.npz")
    shutil.copy(write_random_graph(str(tmp_path)), path)
    assert encode([path, "--rwse", "3", "--lappe", "2", "--quiet"]) == 0
    mode = _mode(tmp_path, dataset=path, model={"encodings": ["rwse", "lappe", "degree"]}, **settings)
    arrays = {"rwse", "lappe", "lappe_eigvals", "degree"}
    try:
        for what, enc in [
            *((f"step {i}", step.enc) for i, step in enumerate(mode.steps(0))),
            ("evaluation", mode.eval_batch().enc),
        ]:
            assert set(enc) == arrays, what
            wrong = {name: str(t.device) for name, t in enc.items() if t.device != META}
            assert not wrong, f"{what}: encodings left behind: {wrong}"
    finally:
        mode.close()
