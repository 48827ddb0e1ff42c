"""Two "nodes" on one machine, over loopback addresses (127.0.0.2 and 127.0.0.3: the whole
127.0.0.0/8 range is on lo):

- two ``deepspeed --hostfile H --no_ssh --node_rank R --master_addr 127.0.0.2`` launchers, one slot
  each, train at world size 2 with the 1-rank losses, checkpointing;
- ``mpiexec -f MACHINES -launcher fork`` with a two-host machine file: Hydra starts one proxy per
  host (locally, by fork: no ssh server runs here), so MPI sees two nodes of one rank each; the
  same losses, and the MPI control plane;
- the two-node run resumed on one node (one launcher, 2 local ranks) continues with the 1-rank losses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from dsgraph.comm.ports import free_port
from tests.train.helpers import ds_config, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

BIN = os.path.dirname(sys.executable)
DEEPSPEED = os.path.join(BIN, "deepspeed")
MPIEXEC = shutil.which("mpiexec", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
EPOCHS, RESUMED_EPOCHS = 4, 6


def _config(tmp: str) -> str:
    path = os.path.join(tmp, "ds.json")
    settings = dict(
        dataset=write_random_graph(tmp),
        hidden=16,
        heads=2,
        layers=1,
        backend="reference",
        self_loops=False,
        eval_every=1000,
        epochs=EPOCHS,
        seed=5,
        checkpoint_every=2,
    )
    with open(path, "w") as f:
        json.dump({**ds_config(stage=1), "dsgraph": settings}, f)
    return path


def _env() -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    return {**env, "PYTHONUNBUFFERED": "1"}


def _losses(path) -> list[float]:
    with open(path) as f:
        return [row["loss"] for row in map(json.loads, f) if row["kind"] == "step"]


def _reference(tmp: str, config: str) -> list[float]:
    env = {
        **_env(),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    cmd = [
        sys.executable,
        "launch/train.py",
        "--deepspeed_config",
        config,
        "--epochs",
        str(RESUMED_EPOCHS),
        "--metrics-out",
        f"{tmp}/reference.jsonl",
        "--checkpoint-dir",
        f"{tmp}/ck_reference",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _losses(f"{tmp}/reference.jsonl")


def test_two_deepspeed_launchers_on_loopback_hosts_and_a_resume_on_one_node(tmp_path):
    tmp = str(tmp_path)
    config = _config(tmp)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.2 slots=1\n127.0.0.3 slots=1\n")
    port = str(free_port())
    nodes = []
    for node_rank in (0, 1):
        cmd = [
            DEEPSPEED,
            "--hostfile",
            str(hostfile),
            "--no_ssh",
            "--node_rank",
            str(node_rank),
            "--master_addr",
            "127.0.0.2",
            "--master_port",
            port,
            "launch/train.py",
            "--deepspeed_config",
            config,
            "--metrics-out",
            f"{tmp}/node{node_rank}.jsonl",
            "--checkpoint-dir",
            f"{tmp}/ck",
        ]
        nodes.append(subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [proc.communicate(timeout=600)[0] for proc in nodes]
    assert [proc.returncode for proc in nodes] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    assert "nnodes=2, num_local_procs=1, node_rank=1" in outs[1] and "dist_world_size=2" in outs[1], outs[1][-3000:]
    reference = _reference(tmp, config)
    two_nodes = _losses(f"{tmp}/node0.jsonl")  # rank 0 (node 0) writes the metrics
    assert two_nodes == pytest.approx(reference[:EPOCHS], abs=1e-5), (two_nodes, reference)
    with open(f"{tmp}/ck/epoch000003/dsgraph_manifest.json") as f:
        assert json.load(f)["world_size"] == 2

    cmd = [
        DEEPSPEED,
        "--num_accelerators",
        "2",
        "--master_port",
        str(free_port()),
        "launch/train.py",
        "--deepspeed_config",
        config,
        "--resume",
        "--epochs",
        str(RESUMED_EPOCHS),
        "--metrics-out",
        f"{tmp}/resumed.jsonl",
        "--checkpoint-dir",
        f"{tmp}/ck",
    ]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    resumed = _losses(f"{tmp}/resumed.jsonl")
    assert resumed == pytest.approx(reference[EPOCHS:], abs=1e-5), (resumed, reference)


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec is not installed (pip install mpich)")
def test_mpiexec_with_two_loopback_hosts(tmp_path):
    tmp = str(tmp_path)
    config = _config(tmp)
    machines = tmp_path / "machines"
    machines.write_text("127.0.0.2:1\n127.0.0.3:1\n")
    env = {**_env(), "MASTER_PORT": str(free_port())}
    cmd = [
        MPIEXEC,
        "-f",
        str(machines),
        "-launcher",
        "fork",
        "-n",
        "2",
        sys.executable,
        "launch/train.py",
        "--deepspeed_config",
        config,
        "--metrics-out",
        f"{tmp}/mpi.jsonl",
        "--checkpoint-dir",
        f"{tmp}/ck",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "control plane: mpi (MPI launcher, MPI world = torch world = 2)" in proc.stdout, proc.stdout[-3000:]
    got, reference = _losses(f"{tmp}/mpi.jsonl"), _reference(tmp, config)
    assert got == pytest.approx(reference[:EPOCHS], abs=1e-5), (got, reference)
