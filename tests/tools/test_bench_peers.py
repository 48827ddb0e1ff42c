"""tools/benchmarks/peer_models.py and tools/benchmarks/bench_peers.py: the peers against the
reference, and the benchmark."""

import json

import pytest
import torch

from dsgraph.graph import load_dataset
from dsgraph.ops.reference import sparse_attention_reference
from tests.ops.cases import assert_relative_close
from tools.benchmarks import bench_peers as bench
from tools.benchmarks import peer_models as peers


@pytest.fixture(scope="module")
def graph():
    return load_dataset("rmat:8").with_self_loops()


def _grads(attention, graph, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(graph.num_nodes, 4, 8, generator=gen).requires_grad_() for _ in range(3))
    y = attention(q, k, v)
    return (y, *torch.autograd.grad(y, (q, k, v), torch.randn(y.shape, generator=gen)))


@pytest.mark.parametrize("name", ["dsgraph", "pyg", "pyg-torch-only"])
def test_kernels_match_the_reference(graph, name, monkeypatch):
    if name == "pyg-torch-only":  # the torch reference, used where torch_geometric is missing
        monkeypatch.setitem(__import__("sys").modules, "torch_geometric.utils", None)
    attention = peers.KERNELS[name.split("-")[0]](graph.rowptr, graph.col)
    want = _grads(lambda q, k, v: sparse_attention_reference(graph.rowptr, graph.col, q, k, v, 8**-0.5), graph)
    for got, expected in zip(_grads(attention, graph), want):
        assert_relative_close(got, expected, 1e-5)


@pytest.mark.parametrize("name", ["dsgraph", "pyg"])
def test_training_steps_learn(graph, name):
    peer = peers.build(name, graph, hidden=32, heads=4, layers=2)
    losses = [peer.step() for _ in range(8)]
    assert losses[-1] < losses[0] and peer.steps == 8
    with pytest.raises(ValueError, match="choose from dsgraph, pyg, dgl"):
        peers.build("gat", graph)


def test_summarise_keeps_out_of_memory_as_a_result():
    results = {
        "dsgraph": {
            "setup": {"oom": False},
            "runs": [
                {"oom": False, "fwd": 2.0, "bwd": 3.0, "peak": 2**20},
                {"oom": False, "fwd": 1.0, "bwd": 5.0, "peak": 2**21},
            ],
        },
        "pyg": {"setup": {"oom": False}, "runs": [{"oom": True, "error": "out of memory"}]},
    }
    rows = bench.summarise(results, ("fwd", "bwd"))
    assert rows["dsgraph"]["fwd_min"] == 1.0 and rows["dsgraph"]["bwd_med"] == 4.0 and rows["dsgraph"]["peak_mb"] == 2.0
    assert rows["pyg"]["oom"] and rows["pyg"]["error"] == "out of memory"


def test_unknown_peer_and_missing_dgl_environment(tmp_path):
    with pytest.raises(SystemExit, match="unknown peer"):
        bench.open_lanes(bench.parse_args(["--peers", "dsgraph,gat"]))
    lanes, notes = bench.open_lanes(
        bench.parse_args(["--peers", "dsgraph,dgl", "--dgl-python", str(tmp_path / "none")])
    )
    assert list(lanes) == ["dsgraph"] and "dgl left out" in notes[0]


def _end_to_end(tmp_path, peer_list):
    out = tmp_path / "p.json"
    bench.main(
        [
            "--graph",
            "rmat:8",
            "--train-graph",
            "rmat:8",
            "--peers",
            peer_list,
            "--repeats",
            "2",
            "--steps",
            "2",
            "--hidden",
            "32",
            "--heads",
            "4",
            "--dim",
            "8",
            "--threads",
            "1",
            "--json-out",
            str(out),
        ]
    )
    return json.loads(out.read_text())


def test_end_to_end_in_process(tmp_path, capsys):
    payload = _end_to_end(tmp_path, "dsgraph,pyg")
    kernels, train = payload["kernels"][0], payload["train"][0]
    assert kernels["peers"]["dsgraph"]["dsgraph_speedup"] == pytest.approx(1.0) and kernels["dsgraph_bwd_over_fwd"] > 0
    assert train["edges"] > kernels["edges"]  # self loops for the training step
    assert all(not r["oom"] and r["step_min"] > 0 for r in train["peers"].values())
    assert "| pyg |" in capsys.readouterr().out


@pytest.mark.slow  # starts the DGL worker process
@pytest.mark.skipif(not bench.DGL_PYTHON.is_file(), reason="no .venv-dgl (tools/test_dgl_lane.sh builds it)")
def test_end_to_end_with_the_dgl_worker(tmp_path):
    payload = _end_to_end(tmp_path, "dsgraph,dgl")
    train = payload["train"][0]["peers"]
    assert not payload["kernels"][0]["peers"]["dgl"]["oom"]
    assert train["dgl"]["loss"] == pytest.approx(train["dsgraph"]["loss"], rel=1e-4)  # the same module, DGL's attention


def test_pyg_is_left_out_of_large_graphs(tmp_path):
    out = tmp_path / "p.json"
    bench.main(
        [
            "--graph",
            "rmat:8",
            "--train-graph",
            "rmat:8",
            "--peers",
            "dsgraph,pyg",
            "--repeats",
            "1",
            "--steps",
            "1",
            "--hidden",
            "16",
            "--heads",
            "2",
            "--dim",
            "8",
            "--pyg-max-edges",
            "1000",
            "--json-out",
            str(out),
        ]
    )
    payload = json.loads(out.read_text())
    for record in payload["kernels"] + payload["train"]:
        assert list(record["peers"]) == ["dsgraph"] and "pyg left out" in record["notes"][0]


def test_each_turn_runs_its_untimed_calls_right_before_the_timed_one():
    state = bench.PeerState("dsgraph")
    calls = []
    q, k, v = (torch.randn(4, 2, 3, requires_grad=True) for _ in range(3))

    def attention(q_, k_, v_):
        calls.append(q_.grad is None)  # gradients are reset before every call
        return q_ * k_ + v_

    state.work = (attention, [q, k, v], torch.ones(4, 2, 3))
    answer = state.op_kernel_time({"warmup": 2})
    assert calls == [True, True, True] and answer["fwd"] > 0 and not answer["oom"]

    class Lane:
        def __init__(self):
            self.commands = []

        def handle(self, cmd):
            self.commands.append(cmd)
            return {"oom": False}

    lanes = {"a": Lane(), "b": Lane()}
    bench.run_rounds(lanes, {"op": "kernel_setup"}, "kernel_time", 2, 1)
    timed = {"op": "kernel_time", "warmup": 1}
    assert all(lane.commands == [{"op": "kernel_setup"}, timed, timed, {"op": "release"}] for lane in lanes.values())
