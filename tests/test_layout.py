"""The layout rules of docs/DESIGN.md, checked on the source tree: the package layers (import-linter,
`.importlinter`), no sys.path edits in tools/, and short module-level functions."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60


def _python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_packages_import_only_the_layers_below_them():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.fail("lint-imports is missing: install the dev extra (pip install -e '.[dev]')")
    proc = subprocess.run([lint, "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_tools_import_each_other_without_sys_path_edits():
    edits = [f"{p.relative_to(ROOT)}:{n}" for p in _python_files("tools") for n, line in enumerate(p.read_text().splitlines(), 1)
             if "sys.path.insert" in line or "sys.path.append" in line]  # fmt: skip
    assert not edits, f"run tools as modules (python -m tools.<folder>.<name>) instead: {edits}"


def test_no_module_level_function_is_longer_than_60_lines():
    long = []
    for path in _python_files("dsgraph", "tools"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, f"split these functions: {long}"
