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


COMMANDS = [
    ["-m", "dsgraph", "--help"],
    *(["-m", "dsgraph", sub, "--help"] for sub in ("train", "partition", "convert", "encode", "profile", "plan")),
    ["-m", "dsgraph", "plan", "--config", "CONFIG", "--help"],  # routed to the memory prediction (dsgraph/cli.py)
    ["launch/train.py", "--help"],
    *(["-m", module, "--help"] for module in documented_tools()),
]


def test_the_documentation_names_tools():
    assert "tools.benchmarks.bench_kernels" in documented_tools()
    assert "tools.common.config_reference" in documented_tools()


def _help(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """' '.join(args) -> the finished `--help` run of every documented command (4 at a time)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip((" ".join(a) for a in COMMANDS), pool.map(_help, COMMANDS)))


@pytest.mark.slow
def test_every_documented_command_prints_help(helps):
    failed = [
        f"{name}: exit {d.returncode}\n{d.stderr[-2000:]}"
        for name, d in helps.items()
        if d.returncode != 0 or "usage" not in d.stdout.lower()
    ]
    assert not failed, "\n".join(failed)


def _shell_blocks(page: str) -> list[str]:
    """The text of every fenced code block of a Markdown page whose language is none, bash or sh."""
    blocks, current, language = [], None, ""
    with open(page) as f:
        for line in f:
            if line.startswith("```"):
                if current is None:
                    current, language = [], line[3:].strip()
                else:
                    if language in ("", "bash", "sh"):
                        blocks.append("".join(current))
                    current = None
            elif current is not None:
                current.append(line)
    return blocks


def documented_command_lines() -> list[tuple[str, str]]:
    """(page, command line) of every `dsgraph SUB ...`, `launch/train.py ...` and `python -m tools...` line in
    a code block of README.md or the docs (outside the dated benchmark pages), continuation lines joined."""
    pages = [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)]
    lines = []
    for page in pages:
        if os.sep + "benchmarks" + os.sep in page:
            continue
        for block in _shell_blocks(page):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0]
                if re.search(
                    r"(^|[ /])dsgraph (train|partition|convert|encode|profile|plan)\b"
                    r"|launch/train\.py|-m tools\.[a-z_]+\.[a-z_]+",
                    line,
                ):
                    lines.append((os.path.relpath(page, ROOT), line))
    return lines


@pytest.mark.slow
def test_documented_options_exist(helps):
    """Every --option a documented command line passes is one its --help lists."""
    train = helps["launch/train.py --help"].stdout
    wrong = []
    for page, line in documented_command_lines():
        sub = re.search(r"dsgraph (train|partition|convert|encode|profile|plan)\b(.*)", line)
        tool = re.search(r"-m (tools\.[a-z_]+\.[a-z_]+)(.*)", line)
        if tool:
            known, args = helps[f"-m {tool.group(1)} --help"].stdout, tool.group(2)
        elif sub and sub.group(1) == "plan" and re.search(r"(?<![\w-])--config\b", sub.group(2)):
            known, args = helps["-m dsgraph plan --config CONFIG --help"].stdout, sub.group(2)
        elif sub:
            known = helps[f"-m dsgraph {sub.group(1)} --help"].stdout + (train if sub.group(1) == "train" else "")
            args = sub.group(2)
        else:
            known, args = train, line.split("launch/train.py", 1)[1]
        wrong += [
            f"{page}: {flag} in `{line.strip()}`"
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", args)
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known)
        ]
    assert documented_command_lines(), "no documented command lines found"
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_gpu_check_prints_help():
    done = subprocess.run(
        ["bash", "tools/gpu/check.sh", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "--prepare" in done.stdout
