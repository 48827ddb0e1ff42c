"""Every shipped config loads, and every command the documentation names prints its --help."""

import glob
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from dsgraph.train.config import load_ds_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "ds_configs", "*.json")))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_shipped_config_loads(path):
    ds_config, cfg = load_ds_config(path)
    assert ds_config["train_micro_batch_size_per_gpu"] == 1
    assert cfg.epochs >= 1


def documented_tools() -> list[str]:
    """Every ``tools.<folder>.<name>`` module that README.md or a docs page tells a user to run."""
    pages = [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)]
    found = set()
    for page in pages:
        with open(page) as f:
            found.update(re.findall(r"\btools\.(?:benchmarks|reports|gpu|common)\.[a-z_]+", f.read()))
    return sorted(m for m in found if os.path.isfile(os.path.join(ROOT, *m.split(".")) + ".py"))


COMMANDS = [["-m", "dsgraph", "--help"], *(["-m", "dsgraph", sub, "--help"] for sub in ("train", "partition", "convert", "profile", "plan")),
            ["launch/train.py", "--help"], *(["-m", module, "--help"] for module in documented_tools())]  # fmt: skip


def test_the_documentation_names_tools():
    assert "tools.benchmarks.bench_kernels" in documented_tools()
    assert "tools.common.config_reference" in documented_tools()


def test_every_documented_command_prints_help():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(args):
        done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        return args, done

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, COMMANDS))
    failed = [f"{' '.join(a)}: exit {d.returncode}\n{d.stderr[-2000:]}" for a, d in results if d.returncode != 0 or "usage" not in d.stdout.lower()]
    assert not failed, "\n".join(failed)


def test_gpu_check_prints_help():
    done = subprocess.run(["bash", "tools/gpu/check.sh", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--prepare" in done.stdout
