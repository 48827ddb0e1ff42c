"""Start-up never hangs silently and runs leave nothing behind, through the training command:

- a CPU run builds no C++ op, so stale build locks (planted in a temporary extensions folder) do not
  stop it; a run that does need a build and finds a stale lock stops within the timeout, naming the
  lock and the command that clears it;
- runs leave no DeepSpeed buffer in /dev/shm; a rank removes its own buffer even when it exits
  through a peer's failure (os._exit), and a later run removes the buffers of dead runs that no live
  process uses, saying how many MB that freed;
- a rank killed or frozen during set-up stops the others within the timeout.
"""

from __future__ import annotations

import glob
import json
import mmap
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from dsgraph.comm.ports import free_port
from dsgraph.runtime import extensions, shm
from tests.train.helpers import write_random_graph
from tests.train.test_faults import _rank_env, _train_cmd, _write_config, lose_a_rank

TIMEOUT_S = 10


def _env(rank: int, world: int, port: int, ext_dir: str | None = None) -> dict:
    """A rank's environment as the deepspeed launcher sets it: LOCAL_SIZE is what makes DeepSpeed's
    shm all-reduce map its /dev/shm buffer, so a regression would show here."""
    env = {**_rank_env(rank, world, port), "LOCAL_SIZE": str(world)}
    if ext_dir is not None:
        env["TORCH_EXTENSIONS_DIR"] = ext_dir
    return env


def _plant_stale_locks(ext_dir: str) -> list[str]:
    """A lock in the build folder of each op DeepSpeed would JIT-build on CPU, as a stopped build
    leaves it (no process holds it)."""
    locks = []
    for op in ("deepspeed_shm_comm", "fused_adam"):
        os.makedirs(os.path.join(ext_dir, op))
        locks.append(os.path.join(ext_dir, op, "lock"))
        open(locks[-1], "w").close()
    return locks


def _tree(root: str) -> list[str]:
    return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "**"), recursive=True))


def _our_shm(ports: list[int]) -> list[str]:
    """Files in /dev/shm that a job on one of ``ports`` created (DeepSpeed names them by port);
    other sessions' files are not ours to judge."""
    return sorted(n for n in os.listdir(shm.SHM_DIR) if any(f"_{port}_" in n for port in ports))


def test_shipped_cpu_configs_need_no_build():
    for path in glob.glob("ds_configs/*.json"):
        if "gpu" in os.path.basename(path):
            continue
        with open(path) as f:
            params = json.load(f)["optimizer"]["params"]
        assert params.get("torch_adam") is True, path


def test_prefer_torch_adam_only_fills_in_what_the_config_leaves_open():
    adamw = {"optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}
    chosen, changed = extensions.prefer_torch_adam(adamw)
    assert changed and chosen["optimizer"]["params"] == {"lr": 0.1, "torch_adam": True}
    assert adamw["optimizer"]["params"] == {"lr": 0.1}  # the caller's dict is not modified
    explicit = {"optimizer": {"type": "Adam", "params": {"torch_adam": False}}}
    assert extensions.prefer_torch_adam(explicit) == (explicit, False)
    lamb = {"optimizer": {"type": "Lamb", "params": {}}}
    assert extensions.prefer_torch_adam(lamb) == (lamb, False)


_WATCHDOG_SCRIPT = """
import sys, time
from dsgraph.runtime.watchdog import Watchdog
marker, cause = sys.argv[1], sys.argv[2] or None
with Watchdog(None, 0.5, poll_s=0.05, diagnose=lambda: cause, on_exit=lambda: open(marker, "w").close()) as dog:
    dog.beat("start-up: a phase that never ends")
    time.sleep(30)
"""


@pytest.mark.slow
@pytest.mark.parametrize("cause", ["", "waiting for the build lock /x/lock"])
def test_watchdog_names_the_phase_and_cleans_up_before_it_ends_the_process(cause, tmp_path):
    marker = str(tmp_path / "cleaned")
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _WATCHDOG_SCRIPT, marker, cause], capture_output=True, text=True, timeout=60
    )
    assert time.monotonic() - began < 25, "the watchdog did not end the process"
    assert os.path.exists(marker), proc.stderr  # on_exit ran although os._exit skips finally blocks
    assert proc.stderr.startswith("dsgraph: error (rank ?): "), proc.stderr
    assert re.search(r"no progress for \d+ s during start-up: a phase that never ends", proc.stderr), proc.stderr
    if cause:
        assert proc.returncode == 2 and proc.stderr.strip().endswith(cause), proc.stderr
    else:
        assert proc.returncode == 3 and "another rank died or did not answer within 0.5 s" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_stale_build_locks_do_not_stop_a_cpu_run(tmp_path):
    """No build is attempted: the run finishes although every op's lock is stale (a build would
    wait on it until the watchdog stopped the run), and the extensions folder is untouched."""
    ext_dir = str(tmp_path / "ext")
    _plant_stale_locks(ext_dir)
    before = _tree(ext_dir)
    config = _write_config(str(tmp_path), dataset=write_random_graph(str(tmp_path)), epochs=2, timeout_s=TIMEOUT_S)
    with open(config) as f:
        ds = json.load(f)
    del ds["optimizer"]["params"]["torch_adam"]  # a user config that does not choose: dsgraph must
    with open(config, "w") as f:
        json.dump(ds, f)
    port = free_port()
    proc = subprocess.run(
        _train_cmd(config), env=_env(0, 1, port, ext_dir), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "epoch    1" in proc.stdout and "built successfully" not in proc.stdout + proc.stderr
    assert '"torch_adam": true' in proc.stdout  # dsgraph chose the optimizer that needs no build
    assert _tree(ext_dir) == before
    assert _our_shm([port]) == []


@pytest.mark.slow
def test_stale_build_lock_stops_start_up_within_the_timeout_and_names_it(tmp_path):
    ext_dir = str(tmp_path / "ext")
    lock = _plant_stale_locks(ext_dir)[1]  # fused_adam's
    path = _write_config(str(tmp_path), dataset=write_random_graph(str(tmp_path)), epochs=2, timeout_s=TIMEOUT_S)
    with open(path) as f:
        config = json.load(f)
    config["optimizer"]["params"]["torch_adam"] = False  # the user asks for FusedAdam: it must be built
    with open(path, "w") as f:
        json.dump(config, f)
    began = time.monotonic()
    proc = subprocess.run(
        _train_cmd(path), env=_env(0, 1, free_port(), ext_dir), capture_output=True, text=True, timeout=300
    )
    elapsed = time.monotonic() - began
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "during start-up: deepspeed.initialize" in proc.stderr, proc.stderr[-3000:]
    assert "which no running process holds" in proc.stderr and f"rm {lock}" in proc.stderr, proc.stderr[-3000:]
    assert TIMEOUT_S - 1 <= elapsed < TIMEOUT_S + 60, elapsed  # the start of python and torch is included


@pytest.mark.slow
def test_runs_leave_no_shared_memory(tmp_path):
    """Two 2-rank runs, one ending normally and one whose rank 1 is killed mid-run."""
    config = _write_config(str(tmp_path), dataset=write_random_graph(str(tmp_path)), epochs=3, timeout_s=TIMEOUT_S)
    ports = [free_port(), free_port()]
    procs = [
        subprocess.Popen(
            _train_cmd(config), env=_env(r, 2, ports[0]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:]
    long_config = _write_config(
        str(tmp_path), dataset=write_random_graph(str(tmp_path)), epochs=10**6, timeout_s=TIMEOUT_S
    )
    code, rest = _kill_rank_1_after_epoch_2(long_config, ports[1])
    assert code == 3, rest[-3000:]
    assert _our_shm(ports) == []


def _kill_rank_1_after_epoch_2(config: str, port: int) -> tuple[int, str]:
    """Starts 2 ranks, SIGKILLs rank 1 once rank 0 logged epoch 2; returns rank 0's exit code and
    what it printed afterwards."""
    ranks = [
        subprocess.Popen(
            _train_cmd(config), env=_env(r, 2, port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in range(2)
    ]
    try:
        seen = []
        for line in ranks[0].stdout:
            seen.append(line)
            if line.startswith("epoch    2"):
                break
        assert seen and seen[-1].startswith("epoch    2"), "".join(seen)[-3000:]
        os.kill(ranks[1].pid, signal.SIGKILL)
        rest = ranks[0].stdout.read()
        return ranks[0].wait(timeout=TIMEOUT_S + 60), "".join(seen) + rest
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _hold(path: str, size: int = 1 << 20):
    """Creates ``path`` and maps it, as a live DeepSpeed rank holds its buffer; returns (fd, map)."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    return fd, mmap.mmap(fd, size)


@pytest.mark.slow
def test_rank_removes_its_buffer_on_a_peer_failure_and_sweeps_dead_ones_at_start_up(tmp_path):
    """The buffers DeepSpeed would create for this job exist (held by this test, as live ranks
    would hold them); a dead run's buffer lies next to them. Rank 0 sweeps the dead one at start-up
    and reports the MB, keeps the live ones, and removes its own when it exits through os._exit
    after rank 1 is killed; rank 1's stays (a killed process cleans nothing up; the next run's
    sweep would remove it once nobody holds it)."""
    config = _write_config(str(tmp_path), dataset=write_random_graph(str(tmp_path)), epochs=10**6, timeout_s=TIMEOUT_S)
    port, dead_port = free_port(), free_port()
    own = [os.path.join(shm.SHM_DIR, f"{shm.BUFFER_PREFIX}{os.getuid()}_127.0.0.1_{port}_{r}") for r in range(2)]
    dead = os.path.join(shm.SHM_DIR, f"{shm.BUFFER_PREFIX}{os.getuid()}_127.0.0.1_{dead_port}_0")
    with open(dead, "wb") as f:
        f.truncate(3 * 10**6)
    held = [_hold(path) for path in own]
    try:
        code, out = _kill_rank_1_after_epoch_2(config, port)
        assert code == 3, out[-3000:]
        assert not os.path.exists(dead), out[-3000:]
        freed = re.search(
            r"removed (\d+) DeepSpeed all-reduce buffer\(s\) of finished runs from /dev/shm, (\d+) MB freed", out
        )
        assert freed and int(freed.group(1)) >= 1 and int(freed.group(2)) >= 3, out[-3000:]
        assert not os.path.exists(own[0]) and os.path.exists(own[1]), out[-3000:]
    finally:
        for fd, mapping in held:
            mapping.close()
            os.close(fd)
        for path in own + [dead]:
            if os.path.exists(path):
                os.unlink(path)


@pytest.mark.slow
def test_sweep_removes_only_buffers_no_live_process_uses(tmp_path):
    shm_dir = str(tmp_path)
    names = {
        key: os.path.join(shm_dir, f"{shm.BUFFER_PREFIX}{os.getuid()}_127.0.0.1_1_{i}")
        for i, key in enumerate(("dead", "mapped", "open"))
    }
    with open(names["dead"], "wb") as f:
        f.truncate(2 * 10**6)
    other = os.path.join(shm_dir, "not_deepspeed")
    open(other, "w").close()
    holder = subprocess.Popen(  # maps the file and closes the descriptor: only /proc/PID/maps shows it
        [
            sys.executable,
            "-c",
            "import mmap, os, sys, time; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600); "
            "os.ftruncate(fd, 4096); m = mmap.mmap(fd, 4096); os.close(fd); print('ready', flush=True); "
            "time.sleep(600)",
            names["mapped"],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    fd = os.open(names["open"], os.O_CREAT | os.O_RDWR, 0o600)  # held open by this process, not mapped
    try:
        assert holder.stdout.readline().strip() == "ready"
        freed = shm.sweep_dead_buffers(shm_dir)
    finally:
        holder.kill()
        holder.wait()
        os.close(fd)
    assert (freed.files, freed.bytes, freed.kept) == (1, 2 * 10**6, 2)
    assert "removed 1 DeepSpeed all-reduce buffer(s)" in freed.message(shm_dir) and "2 MB freed" in freed.message(
        shm_dir
    )
    assert sorted(os.listdir(shm_dir)) == sorted(os.path.basename(p) for p in (names["mapped"], names["open"], other))
    assert shm.sweep_dead_buffers(shm_dir).files == 2  # once nobody holds them


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_rank_lost_during_set_up_stops_the_others_within_the_timeout(fault, tmp_path):
    """Rank 1 is killed (or frozen) right after the process group exists, while both ranks load
    the graph and build the engine; rank 0 must stop, before any epoch."""
    config = _write_config(str(tmp_path), dataset=write_random_graph(str(tmp_path)), epochs=10**6, timeout_s=TIMEOUT_S)
    # "control plane:" is logged by rank 0 in the trainer's set-up, after init_distributed
    code, rest, elapsed = lose_a_rank(config, _env, "control plane:", fault, TIMEOUT_S)
    assert code == 3, rest[-3000:]
    assert "another rank died or did not answer within 10 s" in rest and "epoch    0" not in rest, rest[-3000:]
    assert elapsed < TIMEOUT_S + 15, elapsed
    if fault == "stop":  # nothing closed a connection: only a timeout can have ended the wait
        assert elapsed >= TIMEOUT_S - 1, (elapsed, rest[-3000:])
