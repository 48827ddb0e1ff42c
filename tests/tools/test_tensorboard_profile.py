"""TensorBoard in a real browser: a run's traces (``--trace-steps``) open in TensorBoard's
PyTorch Profiler tab (torch-tb-profiler), one worker per rank, with dsgraph's region names.

Trains two ranks with TensorBoard on, starts TensorBoard on a loopback port over the events folder,
asks the plugin's data endpoints for the runs, the ranks and each rank's trace, renders the tab in
headless chromium (the page's DOM and a screenshot). The planted case moves the traces to the
run's old folder (``runs/<run>/traces``, outside TensorBoard's logdir), where the plugin does not
look: the same checks must fail there. Skipped, with the reason, without chromium (tools/setup_venv.sh
installs Debian's where apt works) or without the plugin (the dev extra).
"""

import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from dsgraph.comm.ports import free_port
from tests.distributed import run
from tests.train.helpers import ds_config, make_trainer, write_random_graph

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN = "traced-run"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium not installed (tools/setup_venv.sh installs it where apt works)"
    ),
]


def _train(rank, world, tmp):
    tensorboard = {"enabled": True, "output_path": f"{tmp}/tensorboard", "job_name": RUN}
    trainer = make_trainer(
        tmp, ds_config(stage=1, tensorboard=tensorboard), strategy="ag", epochs=2, trace_steps="1:2", run_name=RUN
    )
    trainer.fit(log=lambda line: None)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    pytest.importorskip("torch_tb_profiler", reason="TensorBoard's PyTorch Profiler plugin (the dev extra) is missing")
    tmp = tmp_path_factory.mktemp("traced")
    write_random_graph(str(tmp))
    run(_train, 2, tmp)
    return tmp


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as reply:
        body = reply.read()
        return gzip.decompress(body) if reply.headers.get("Content-Encoding") == "gzip" else body


def _runs(base: str, seconds: float = 180.0, empty_for: float = 30.0) -> list[str]:
    """The plugin's runs once it has loaded some, or [] when it still has none ``empty_for`` seconds
    after its first answer (it scans the logdir every 10 s in the background)."""
    deadline, first = time.monotonic() + seconds, None
    while True:
        try:
            answer = json.loads(_get(f"{base}/data/plugin/pytorch_profiler/runs"))
            first = first or time.monotonic()
            if not answer["loading"] and (answer["runs"] or time.monotonic() > first + empty_for):
                return answer["runs"]
        except OSError:
            pass
        assert time.monotonic() < deadline, "TensorBoard's profiler plugin did not answer"
        time.sleep(1.0)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=20000"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=180, check=True)


@pytest.fixture
def tensorboard(traced, request, tmp_path):
    """TensorBoard's base URL over a copy of the run: traces where they are written, or planted away."""
    logdir = tmp_path / "tensorboard"
    shutil.copytree(traced / "tensorboard", logdir)
    if request.param == "planted":
        os.makedirs(tmp_path / "runs" / RUN / "traces")
        for path in glob.glob(str(logdir / RUN / "*.pt.trace.json*")):
            shutil.move(path, tmp_path / "runs" / RUN / "traces")
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
    server = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.parametrize(
    "tensorboard",
    ["written", pytest.param("planted", marks=pytest.mark.xfail(strict=True, reason="traces outside the logdir"))],
    indirect=True,
)
def test_profile_tab_shows_every_rank_with_dsgraph_regions(tensorboard, tmp_path):
    assert RUN in _runs(tensorboard)
    api = f"{tensorboard}/data/plugin/pytorch_profiler"
    assert "Trace" in json.loads(_get(f"{api}/views?run={RUN}"))
    workers = json.loads(_get(f"{api}/workers?run={RUN}&view=Trace"))
    assert workers == ["rank0", "rank1"]
    for worker in workers:
        (span,) = json.loads(_get(f"{api}/spans?run={RUN}&worker={worker}"))
        trace = _get(f"{api}/trace?run={RUN}&worker={worker}&span={span}").decode()
        for region in ("dsgraph/comm/all_gather", "dsgraph/attention/", "dsgraph/step/1"):
            assert region in trace, (worker, region)
    dom = _chromium("--dump-dom", f"{api}/index.html").stdout
    assert f">{RUN}<" in dom and ">rank0<" in dom
    shot = tmp_path / "profile.png"
    _chromium("--window-size=1280,800", f"--screenshot={shot}", f"{tensorboard}/#pytorch_profiler")
    assert shot.stat().st_size > 10_000
