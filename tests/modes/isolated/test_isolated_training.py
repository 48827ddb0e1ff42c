"""Isolated (Grappa) training through the DeepSpeed engine on 2 ranks: local steps send nothing
(DeepSpeed's comms logger sees no collective) until the super-epoch boundary, where the parameter
average is the only one and the ranks' parameters agree again; the chunks rotate round-robin; the
halo cache holds the right features and its bytes are what the peer needed; the batch-level
correction gives the seed's gradient, and with per-step sync the global-batch
gradient DeepSpeed reduces every step; evaluation covers the full graph; prefetching changes nothing;
and every step row's ``sync_bytes`` equals what DeepSpeed's reduction sent, for ZeRO 0-3."""

import json
import math

import pytest
import torch

from dsgraph.graph import load_npz
from dsgraph.graph.rank_graph import whole_graph
from dsgraph.modes.isolated.chunks import RotationSchedule
from dsgraph.modes.ranks import local_attention
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.trainer import Trainer
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, write_random_graph

SETTINGS = dict(
    hidden=32,
    heads=4,
    layers=2,
    self_loops=True,
    seed=3,
    strategy="isolated",
    isolated_chunks=4,
    repart_every=2,
    epochs=6,
    eval_every=2,
    isolated_batch_size=16,
    isolated_halo_fraction=0.1,
)


def _trainer(tmp, ds=None, **cfg):
    settings = dict(SETTINGS, dataset=write_random_graph(tmp), **cfg)
    return Trainer(
        DsgraphConfig.from_dict(settings), ds or ds_config(stage=0), torch.device("cpu"), log=lambda line: None
    )


def _logged(train_step, step) -> tuple[dict, dict]:
    """(row, {op: {message bytes: count}}) of one train_step, from DeepSpeed's comms logger."""
    from deepspeed.comm.comm import comms_logger

    comms_logger.comms_dict.clear()
    comms_logger.enabled, comms_logger.prof_all, comms_logger.debug = True, True, False
    try:
        row = train_step(step)
    finally:
        comms_logger.enabled = False
    return row, {op: {size: v[0] for size, v in sizes.items()} for op, sizes in comms_logger.comms_dict.items()}


def _flat(trainer) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(trainer.engine.module.parameters()).detach().clone()


def _all_ranks(value):
    import torch.distributed as tdist

    out = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, value)
    return out


def _full_graph_accuracy(trainer, path):
    """Test accuracy of the trained module on the whole graph in one process (no ranks involved)."""
    graph = load_npz(path).with_self_loops()
    attention = local_attention(whole_graph(graph), backend="reference")
    module = trainer.engine.module.eval()
    with torch.no_grad():
        pred = module(graph.x, attention, torch.arange(graph.num_nodes), 0).argmax(1)
    return float((pred[graph.test_mask] == graph.y[graph.test_mask]).float().mean())


def _check_halo(trainer, step, rank, tmp) -> None:
    """After a switch: the halo rows hold the nodes' features (rounded to bf16 when they travelled,
    exact when copied from a row this rank held), and the bytes this rank sent are what the other
    rank received."""
    data = trainer.mode.data
    graph = load_npz(write_random_graph(tmp)).with_self_loops()
    nodes, halo = data.graph.nodes, data.halo
    exact = graph.x[nodes.node_ids]
    rounded = exact.to(torch.bfloat16).float()
    assert data.halo_nodes > 0 and torch.equal(nodes.x[halo.recv_rows], rounded[halo.recv_rows])
    reused = nodes.x[halo.reuse_dst]
    assert ((reused == exact[halo.reuse_dst]).all(1) | (reused == rounded[halo.reuse_dst]).all(1)).all()
    assert sorted(halo.recv_rows.tolist() + halo.reuse_dst.tolist()) == list(
        range(data.graph.num_nodes - data.halo_nodes, data.graph.num_nodes)
    )
    assert data.halo.reuse_dst.numel() == step.fields["halo_reused"]
    assert (step.fields["halo_reused"] > 0) == (
        data.super_epoch > 0
    )  # features held a super-epoch ago are not sent again
    received = _all_ranks(data.halo.recv_counts)[1 - rank][rank]  # what the other rank took from this one
    assert step.input_bytes == step.fields["halo_bytes"] == received * graph.num_features * 2
    assert (received > 0) or data.super_epoch > 0  # the first super-epoch fetches everything


def _local_training(rank, world, tmp):
    trainer = _trainer(tmp)
    params, n = list(trainer.engine.module.parameters()), sum(p.numel() for p in trainer.engine.module.parameters())
    schedule, rows, evals = RotationSchedule(4, 2), [], []
    for step in trainer.mode.steps(0):
        if step.fields["batch"] == 0 and step.epoch % 2 == 0:
            _check_halo(trainer, step, rank, tmp)
        row, ops = _logged(trainer.train_step, step)
        rows.append(row)
        assert row["chunks"] == schedule.chunks(rank, step.epoch // 2) and step.local
        if not step.sync:  # a local step: no collective at all, nothing counted
            assert ops == {} and row["sync_bytes"] == 0 and row["comm_bytes"] == step.input_bytes
        else:  # the boundary: one all-reduce of the parameter changes in bf16, nothing else
            assert ops == {"all_reduce": {n * 2: 1}} and row["sync_bytes"] == n * 2 * (world - 1) // world * 2
        flats = _all_ranks(_flat(trainer))
        assert torch.equal(flats[0], flats[1]) == step.sync  # the ranks drift apart and agree again at the boundary
        if step.ends_epoch and (step.epoch + 1) % 2 == 0:
            evals.append(trainer.evaluate(step.epoch))
    assert sum(r["sync_bytes"] > 0 for r in rows) == 3 and all(math.isfinite(r["loss"]) for r in rows)
    assert len(rows) > 6  # several mini-batches per epoch
    assert all(r["comm_bytes"] > 0 for r in evals)  # the full-graph evaluation path does move activations
    assert abs(evals[-1]["test_acc"] - _full_graph_accuracy(trainer, write_random_graph(tmp))) < 1e-6
    assert [s for s, _, _ in trainer.mode.switch_times] == [0, 1, 2] and params
    trainer.close()
    if rank == 0:
        dump(tmp, "prefetch_on.json", [r["loss"] for r in rows])
    metrics = f"{tmp}/no_prefetch.jsonl"
    _trainer(tmp, isolated_prefetch=False, metrics_out=metrics).fit(log=lambda line: None)
    if rank == 0:
        with open(metrics) as f:
            dump(tmp, "prefetch_off.json", [row["loss"] for row in map(json.loads, f) if row["kind"] == "step"])


@pytest.mark.slow
def test_local_steps_send_nothing_until_the_boundary(tmp_path):
    write_random_graph(str(tmp_path))
    run(_local_training, 2, tmp_path)
    on, off = load(tmp_path, "prefetch_on.json"), load(tmp_path, "prefetch_off.json")
    assert len(on) > 6 and on == off  # loading ahead in a thread changes nothing but the timing


def _seed_gradient(trainer, step, count: int) -> list[torch.Tensor]:
    """(1/count) sum_i c_i grad l_i over the step's loss rows, node by node, in float64."""
    module, params = trainer.engine.module, list(trainer.engine.module.parameters())
    c, rows = step.weights.double(), step.loss_rows
    logits = module(step.x, step.attention, step.node_ids, step.dropout_step)[rows]
    reference = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    for i in range(rows.numel()):
        grads = torch.autograd.grad(
            torch.nn.functional.cross_entropy(logits[i : i + 1], step.labels[i : i + 1]),
            params,
            retain_graph=True,
            allow_unused=True,
        )
        for acc, g in zip(reference, grads):
            acc += 0 if g is None else c[i] * g.double() / count
    return reference


def _moved_by(trainer, step, expected: list[torch.Tensor]) -> dict:
    """Takes the step (SGD, lr 1) and checks the parameters moved by minus ``expected``; returns the row."""
    params = list(trainer.engine.module.parameters())
    before = [p.detach().double().clone() for p in params]
    row, ops = _logged(trainer.train_step, step)
    for b, p, g in zip(before, params, expected):
        assert torch.allclose(b - p.detach().double(), g, atol=1e-6, rtol=1e-4)
    return {**row, "ops": ops}


SGD = ds_config(stage=0, optimizer={"type": "SGD", "params": {"lr": 1.0}}, gradient_clipping=0.0)


def _correction_gradient(rank, world, tmp):
    """A local step with SGD (lr 1, no clipping, no dropout) moves the parameters by minus the
    seed's batch-level corrected gradient (1/|B|) sum_i c_i grad l_i, computed node by node.
    With ``isolated_sync: "step"`` (today's: one step of all the rank's training nodes per epoch, no
    halo) DeepSpeed reduces the gradients every step: the move is the same sum over both ranks'
    nodes divided by the global count, and the ranks agree after every step."""
    trainer = _trainer(tmp, SGD, dropout=0.0, input_dropout=0.0, isolated_correction="resample")
    step = next(iter(trainer.mode.steps(0)))
    c = step.weights
    assert step.local and step.global_count == step.loss_rows.numel() > 1 and (c >= 1).all() and c.max() > c.min()
    _moved_by(trainer, step, _seed_gradient(trainer, step, step.loss_rows.numel()))
    trainer.close()
    trainer = _trainer(
        tmp,
        SGD,
        dropout=0.0,
        input_dropout=0.0,
        isolated_sync="step",
        isolated_batch_size=0,
        isolated_halo_fraction=0.0,
    )
    steps = list(trainer.mode.steps(0))
    assert len(steps) == SETTINGS["epochs"] and not any(
        s.local or s.sync for s in steps
    )  # one step per epoch, all reduced
    counts = _all_ranks(steps[0].loss_rows.numel())
    assert steps[0].global_count == sum(counts) and steps[0].fields["halo_nodes"] == 0
    mine = _seed_gradient(trainer, steps[0], sum(counts))
    total = [sum(g) for g in zip(*_all_ranks(mine))]
    row = _moved_by(trainer, steps[0], total)
    assert "all_reduce" in row["ops"] and row["sync_bytes"] > 0 and row["comm_bytes"] == 0
    flats = _all_ranks(_flat(trainer))
    assert torch.equal(flats[0], flats[1])
    trainer.close()


@pytest.mark.slow
@pytest.mark.smoke
def test_the_batch_level_correction_is_the_seeds_gradient(tmp_path):
    write_random_graph(str(tmp_path))
    run(_correction_gradient, 2, tmp_path)


def _sent(ops: dict, world: int) -> int:
    """Bytes one rank sent for the logged collectives (the convention of ``dsgraph.modes.sync``)."""
    factor = {
        "all_reduce": 2 * (world - 1) / world,
        "all_gather_into_tensor": world - 1,
        "reduce_scatter_tensor": (world - 1) / world,
    }
    return int(sum(factor.get(op, 0.0) * size * count for op, sizes in ops.items() for size, count in sizes.items()))


NOT_PERSISTENT = {"stage": 3, "stage3_param_persistence_threshold": 0}  # every parameter partitioned
ENGINES = [
    (0, False, {}),
    (0, True, {}),
    (1, False, {}),
    (2, False, {}),
    (2, True, {}),
    (3, False, {}),
    (3, True, {}),
    (3, False, {"zero_optimization": NOT_PERSISTENT}),
]


def _counted_sync_bytes(rank, world, tmp):
    for stage, bf16, extra in ENGINES:
        ds = ds_config(stage=stage, bf16=bf16, **extra)
        trainer = _trainer(tmp, ds, isolated_sync="step", epochs=2, isolated_batch_size=0)
        steps = list(trainer.mode.steps(0))
        trainer.train_step(steps[0])  # ZeRO-3 gathers more in its first step
        row, ops = _logged(trainer.train_step, steps[1])
        measured = _sent(ops, world)
        assert abs(row["sync_bytes"] - measured) <= 0.01 * measured + 256, (stage, bf16, row["sync_bytes"], ops)
        assert row["sync_bytes"] > 0
        trainer.close()
    with pytest.raises(ValueError, match=r'ZeRO stage 2.*"stage": 0\}'):
        _trainer(tmp, ds_config(stage=2))


@pytest.mark.slow
def test_sync_bytes_are_what_deepspeed_reduces(tmp_path):
    write_random_graph(str(tmp_path))
    run(_counted_sync_bytes, 2, tmp_path)


@pytest.mark.parametrize(
    "section, message",
    [
        (
            {"isolated_correction": "exact"},
            r"'isolated': 'correction' must be one of resample, uniform, coverage, none",
        ),
        (
            {"isolated": {"correction": "exact"}},
            r"'isolated': 'correction' must be one of resample, uniform, coverage, none",
        ),
        ({"isolated": {"chunk": 4}}, r"unknown key\(s\) 'chunk' in 'isolated'; valid keys: chunks, "),
        ({"chunk_method": "balanced"}, r"'chunk_method' must be one of random, metis"),
        ({"repart_every": 0}, r"'repart_every' >= 1"),
        ({"isolated_chunks": -2}, r"'chunks' must be >= 0"),
        (
            {"strategy": "isolated", "partitions": "some/dir", "isolated_store": "other/dir"},
            r"with 'partitions' trains on that store's parts as its chunks; drop isolated 'store'",
        ),
        ({"isolated_sync": "epoch"}, r"'sync' must be one of super_epoch, step"),
        ({"isolated_batch_size": -1}, r"'batch_size' must be >= 0"),
        ({"isolated_halo_fraction": 1.5}, r"'halo_fraction' in \[0, 1\]"),
        ({"isolated_comm_dtype": "fp16"}, r"'comm_dtype' must be one of bfloat16, float32"),
        (
            {"strategy": "isolated", "repart_every": 4},
            r"'eval_every' \(10\) must be a multiple of 'repart_every' \(4\)",
        ),
        ({"strategy": "isolated", "checkpoint_every": 3}, r"'checkpoint_every' \(3\) must be a multiple"),
    ],
)
def test_isolated_config_errors(section, message):
    with pytest.raises(ValueError, match=message):
        DsgraphConfig.from_dict(section)


def test_per_step_sync_needs_no_boundary_alignment():
    DsgraphConfig.from_dict({"strategy": "isolated", "isolated_sync": "step", "repart_every": 4, "checkpoint_every": 3})


GLOBAL_MODEL = dict(block="transformer", input_projection=True, norm="pre", head="linear", global_attention="linear")


def _local_steps(rank, world, tmp, model: dict, evaluation_sends: bool):
    """Local steps over the rank's own subgraph send nothing beyond the halo; the full-graph
    evaluation on both ranks is the one-process model's (``evaluation_sends``: and it sends bytes)."""
    trainer = _trainer(tmp, model=model, epochs=2)
    losses = []
    for step in trainer.mode.steps(0):
        row, ops = _logged(trainer.train_step, step)
        losses.append(row["loss"])
        if not step.sync:
            assert ops == {} and row["comm_bytes"] == step.input_bytes, ops
    evaluation = trainer.evaluate(1)
    assert all(math.isfinite(x) for x in losses) and 0.0 <= evaluation["test_acc"] <= 1.0
    assert evaluation["comm_bytes"] > 0 or not evaluation_sends
    assert abs(evaluation["test_acc"] - _full_graph_accuracy(trainer, write_random_graph(tmp))) < 1e-6
    trainer.close()


@pytest.mark.slow
def test_global_attention_in_isolated_steps_spans_the_ranks_subgraph(tmp_path):
    """Global attention spans the rank's own subgraph in a local step (no collective); the
    evaluation's all-reduces of the sums run over both ranks."""
    run(_local_steps, 2, tmp_path, GLOBAL_MODEL, True)


APPNP_MODEL = dict(propagation_steps=3, propagation_alpha=0.2)


@pytest.mark.slow
def test_appnp_propagation_in_isolated_steps_and_full_graph_evaluation(tmp_path):
    """``model.propagation_steps``: local steps propagate the logits over the rank's subgraph and
    send nothing; the full-graph evaluation on 2 ranks is the one-process model's."""
    run(_local_steps, 2, tmp_path, APPNP_MODEL, False)
