"""The layout rules of docs/DESIGN.md, checked on the source tree: the package layers (import-linter,
`.importlinter`), no sys.path edits in tools/, short module-level functions; and the test markers'
guard (a test that starts processes without ``@pytest.mark.slow`` fails)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60
PLANTED = """
import multiprocessing, os, subprocess

import pytest


{marker}
def test_runs_a_command():
    subprocess.run(["true"], check=True)


{marker}
def test_swallows_the_error():
    try:
        subprocess.run(["true"], check=True)
    except Exception:
        pass
"""
UNMARKED_STARTS = {  # each is stopped by the guard before a process exists
    "test_spawns_a_rank": "multiprocessing.get_context('spawn').Process(target=print).start()",
    "test_forks": "os.fork()",
    "test_calls_os_system": "os.system('true')",
}


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_packages_import_only_the_layers_below_them(capsys):
    from importlinter.cli import lint_imports  # in-process (grimp reads the files; nothing is imported)

    code = lint_imports(config_filename=str(ROOT / ".importlinter"), no_cache=True)
    assert code == 0, capsys.readouterr().out[-4000:]


def test_tools_import_each_other_without_sys_path_edits():
    edits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _python_files("tools")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "sys.path.insert" in line or "sys.path.append" in line
    ]
    assert not edits, f"run tools as modules (python -m tools.<folder>.<name>) instead: {edits}"


def test_no_module_level_function_is_longer_than_60_lines():
    long = []
    for path in _python_files("dsgraph", "tools"):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
            ):
                long.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
                )
    assert not long, f"split these functions: {long}"


def test_a_test_that_starts_processes_without_the_slow_marker_fails(pytester):
    """tests/process_guard.py on planted tests (pytest in this process): unmarked, every process start
    fails the test, even one whose error is swallowed; marked ``slow``, the same tests pass."""
    starts = "".join(f"\n\ndef {name}():\n    {code}\n" for name, code in UNMARKED_STARTS.items())
    pytester.makepyfile(test_unmarked=PLANTED.format(marker="") + starts)
    unmarked = pytester.runpytest_inprocess("test_unmarked.py", "-p", "tests.process_guard", "-p", "no:cacheprovider")
    unmarked.assert_outcomes(failed=2 + len(UNMARKED_STARTS))
    unmarked.stdout.fnmatch_lines(["*test_unmarked.py::test_swallows_the_error starts a process*not marked*slow*"])
    for name in ("test_runs_a_command", *UNMARKED_STARTS):
        unmarked.stdout.fnmatch_lines([f"*UnmarkedProcessStart: test_unmarked.py::{name} starts a process*"])
    pytester.makepyfile(test_marked=PLANTED.format(marker="@pytest.mark.slow"))
    marked = pytester.runpytest_inprocess("test_marked.py", "-p", "tests.process_guard", "-p", "no:cacheprovider")
    marked.assert_outcomes(passed=2)
