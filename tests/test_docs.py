"""The documentation: the site builds in strict mode, the configuration reference covers every
config key with a description, and the README and docs stay free of development history."""

import dataclasses
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tools.common import config_reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_config_key_has_a_docstring():
    assert config_reference.missing_docstrings() == [], "add a docstring under each of these fields"


def test_a_key_without_a_docstring_is_found():
    @dataclass
    class Section:
        documented: int = 1
        """Says what it does."""
        undocumented: int = 2

    assert config_reference.field_docstrings(Section) == {"documented": "Says what it does."}


def test_the_reference_lists_every_key_with_its_default():
    page = config_reference.markdown()
    for prefix, cls, _ in config_reference.sections():
        for f in dataclasses.fields(cls):
            path = f"{prefix}.{f.name}" if prefix else f.name
            assert f"| `{path}` |" in page, path
    assert '| `strategy` | `str` | `"ag"` | `ag`, `a2a`, `halo`, `ag_ring`, `auto` | all |' in page
    assert '| `isolated.sync` | `str` | `"super_epoch"` | `super_epoch`, `step` | isolated |' in page


def test_the_committed_reference_is_up_to_date():
    with open(os.path.join(ROOT, config_reference.PAGE)) as f:
        committed = f.read()
    assert committed == config_reference.markdown(), (
        f"{config_reference.PAGE} is out of date: python -m tools.common.config_reference --out {config_reference.PAGE}"
    )


def test_allowed_values_are_what_validation_accepts():
    from dsgraph.train.config import DsgraphConfig

    for key in config_reference.keys():
        if key.allowed is None:
            continue
        section, _, name = key.path.rpartition(".")
        for value in key.allowed:
            DsgraphConfig.from_dict({section: {name: value}} if section else {name: value})
        with pytest.raises(ValueError):
            DsgraphConfig.from_dict({section: {name: "no-such-value"}} if section else {name: "no-such-value"})


@pytest.mark.slow
def test_site_builds_in_strict_mode(tmp_path):
    """What CI runs: a broken link, a missing page or a docstring that fails to render fails it."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    cmd = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(tmp_path / "site"),
        "-f",
        "mkdocs.yml",
    ]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()


def _user_pages():
    yield os.path.join(ROOT, "README.md")
    for folder, _, names in os.walk(os.path.join(ROOT, "docs")):
        if os.path.relpath(folder, ROOT).split(os.sep)[:2] in (["docs", "benchmarks"], ["docs", "results"]):
            continue
        yield from (os.path.join(folder, n) for n in names if n.endswith(".md"))


HISTORY = [
    re.compile(r"\bissue\s*#?\d+", re.I),
    re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    re.compile(r"\b(rerun|measured) on main\b|\bafter (merging|the merges?)\b", re.I),
]


@pytest.mark.parametrize("path", sorted(_user_pages()), ids=lambda p: os.path.relpath(p, ROOT))
def test_no_development_history_outside_the_dated_pages(path):
    text = open(path).read()
    found = [m.group(0) for pattern in HISTORY for m in pattern.finditer(text)]
    assert not found, f"{path}: {found} (history goes to CHANGELOG.md, measurements to docs/benchmarks/)"


def test_readme_is_short():
    with open(os.path.join(ROOT, "README.md")) as f:
        assert len(f.readlines()) <= 250


def test_readme_model_table_lists_every_model_option():
    """The README's model table names every key of the config's "model" object."""
    from dsgraph.models.options import option_names

    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    table = text[text.index("## Models") :].split("\n## ", 1)[0]
    missing = [name for name in option_names() if f"`{name}`" not in table]
    assert not missing, f"README.md's model table lacks {missing}"
