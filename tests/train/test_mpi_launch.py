"""Training under `mpiexec -n 2`: rank and world size come from MPI (deepspeed's MPI discovery) and
the MPI control plane is chosen and logged."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.distributed import free_port
from tests.train.helpers import ds_config, write_random_graph

pytestmark = pytest.mark.slow  # every test here starts processes

MPIEXEC = shutil.which("mpiexec", path=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec is not installed (pip install mpich)")
def test_mpiexec_two_ranks_use_the_mpi_control_plane(tmp_path):
    config = tmp_path / "ds.json"
    section = dict(
        dataset=write_random_graph(str(tmp_path)),
        strategy="halo",
        epochs=2,
        eval_every=2,
        hidden=16,
        heads=2,
        layers=1,
        backend="reference",
        metrics_out=str(tmp_path / "m.jsonl"),
    )
    config.write_text(json.dumps({**ds_config(stage=2), "dsgraph": section}))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    env["MASTER_PORT"] = str(free_port())
    cmd = [MPIEXEC, "-n", "2", sys.executable, "launch/train.py", "--deepspeed_config", str(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "control plane: mpi (MPI launcher, MPI world = torch world = 2)" in proc.stdout, proc.stdout[-3000:]
    assert "epoch    1  loss" in proc.stdout
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["step", "util", "step", "util", "eval", "forecast"]
    rows = [r for r in rows if r["kind"] in ("step", "eval")]
    assert all(r["world_size"] == 2 and r["strategy"] == "halo" and r["comm_bytes"] > 0 for r in rows)
