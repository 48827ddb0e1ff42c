"""The configuration reference, generated from the config dataclasses (so it cannot drift).

Every key of ``DsgraphConfig`` and of its nested sections (``model``: ``ModelOptions``, and every
section of ``dsgraph.train.config.SECTIONS``: the modes' ``sampled`` and ``isolated``, the link
task's ``link``, the strategies' ``parallel``, AGP's ``agp``) with its type, default, allowed values
(where the code lists them), the mode it belongs to and the docstring written under the field. The
docstrings are read from the source with ``ast`` (a dataclass keeps no field docstrings at run time).

    python -m tools.common.config_reference                                # print the Markdown page
    python -m tools.common.config_reference --out docs/reference/config.md # write the committed copy
    python -m tools.common.config_reference --check                        # exit 1 naming every key without a docstring

The documentation site generates the page again at every build (``tools/common/docs_hooks.py``), so
the site cannot drift from the code; ``docs/reference/config.md`` is the same page committed for
readers of the repository, and ``tests/test_docs.py`` fails when it is out of date.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import sys
import textwrap
from dataclasses import dataclass

PAGE = "docs/reference/config.md"  # the committed copy of the page


@dataclass(frozen=True)
class Key:
    """One configuration key as the reference shows it."""

    path: str  # "strategy", "model.block", "isolated.sync"
    type: str
    default: object
    allowed: tuple[str, ...] | None
    mode: str
    doc: str


def field_docstrings(cls) -> dict[str, str]:
    """Field name -> the string literal right under its annotated assignment in ``cls``'s body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def sections() -> list[tuple[str, type, str]]:
    """(prefix, dataclass, mode) for the top-level section and each nested one."""
    from dsgraph.models.options import ModelOptions
    from dsgraph.modes.registry import mode_names
    from dsgraph.train.config import SECTIONS, DsgraphConfig

    task_sections = {"link": "full"}  # a task's section: the mode it trains in
    mode_of = {name: name if name in mode_names() else task_sections.get(name, "all") for name in SECTIONS}
    nested = [(name, cls, mode_of[name]) for name, cls in SECTIONS.items()]
    return [("", DsgraphConfig, "all"), ("model", ModelOptions, "all"), *nested]


def allowed_values() -> dict[str, tuple[str, ...]]:
    """Key path -> the values the code accepts, taken from the code's own lists."""
    from dsgraph import ops
    from dsgraph.comm.compress import CODECS
    from dsgraph.graph.partition import METHODS
    from dsgraph.models import options
    from dsgraph.models.link import DECODERS
    from dsgraph.modes.isolated import config as isolated
    from dsgraph.modes.isolated.chunks import CHUNK_METHODS, CORRECTIONS
    from dsgraph.modes.registry import mode_names
    from dsgraph.modes.sampled.config import FEATURE_DTYPE_NAMES
    from dsgraph.parallel import strategy_names
    from dsgraph.tasks import task_names

    return {
        "strategy": tuple(strategy_names()),
        "backend": ("auto", *ops.backend_names()),
        "mode": tuple(mode_names()),
        "task": tuple(task_names()),
        "link.decoder": DECODERS,
        "parallel.comm_dtype": tuple(CODECS),
        "parallel.comm_grad_dtype": tuple(CODECS),
        "parallel.partition_method": tuple(METHODS),
        "model.block": options.BLOCKS,
        "model.ego": options.EGOS,
        "model.norm_type": options.NORM_TYPES,
        "model.jk": options.JKS,
        "model.norm": options.NORMS,
        "model.residual": options.RESIDUALS,
        "model.head": options.HEADS,
        "model.feature_norm": options.FEATURE_NORMS,
        "model.global_attention": options.GLOBAL_ATTENTIONS,
        "model.encoding_input": options.ENCODING_INPUTS,
        "sampled.feature_dtype": FEATURE_DTYPE_NAMES,
        "isolated.sync": isolated.SYNC_MODES,
        "isolated.comm_dtype": isolated.COMM_DTYPE_NAMES,
        "isolated.correction": tuple(CORRECTIONS),
        "isolated.chunk_method": tuple(CHUNK_METHODS),
    }


def keys() -> list[Key]:
    """Every key of every section, in declaration order (a nested section's own key is listed too)."""
    allowed = allowed_values()
    out, all_sections = [], sections()
    modes = {prefix: mode for prefix, _, mode in all_sections if prefix}
    for prefix, cls, mode in all_sections:
        docs = field_docstrings(cls)
        defaults = cls()
        for f in dataclasses.fields(cls):
            path = f"{prefix}.{f.name}" if prefix else f.name
            default, type_name, key_mode = getattr(defaults, f.name), str(f.type).replace(" | None", " or null"), mode
            if dataclasses.is_dataclass(default):  # a nested section: its keys follow
                default, type_name = "{...}", "object"
                key_mode = modes.get(f.name, mode)
            out.append(Key(path, type_name, default, allowed.get(path), key_mode, docs.get(f.name, "")))
    return out


def missing_docstrings() -> list[str]:
    return [k.path for k in keys() if not k.doc.strip()]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _value(value) -> str:
    return "`{...}`" if value == "{...}" else f"`{json.dumps(value)}`"


def markdown() -> str:
    lines = [
        "# Configuration reference",
        "",
        'A run is one DeepSpeed JSON file: DeepSpeed\'s own keys plus a top-level `"dsgraph"` section, whose keys',
        "are listed here. dsgraph validates the section itself: an unknown or mistyped key is an error that names it",
        "and lists the valid keys (DeepSpeed would ignore it). Command-line options of `launch/train.py` override",
        "the section. The nested sections `model`, `sampled`, `isolated` and `link` are JSON objects; keys left out "
        "keep",
        "their defaults. The keys of `sampled` and `isolated` are also accepted at the top level under their older",
        "spellings (for example `isolated_chunks` for `isolated.chunks`).",
        "",
        "This page is generated from the config dataclasses (`dsgraph/train/config.py`, `dsgraph/models/options.py`,",
        "`dsgraph/modes/sampled/config.py`, `dsgraph/modes/isolated/config.py`, `dsgraph/tasks/link_config.py`) by",
        "`python -m tools.common.config_reference`, again at every build of the site: the description of each",
        'key is the docstring under its field. "Mode" says which training mode reads it (`all`: every mode; see',
        "[Training modes](../concepts/modes.md)).",
        "",
        "```json",
        '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam", "params": {"lr": 0.005}},',
        ' "dsgraph": {"dataset": "cora", "strategy": "ag", "epochs": 200, "model": {"block": "attention"}}}',
        "```",
        "",
    ]
    titles = {
        "": "Top-level keys",
        "model": "`model`: the architecture",
        "sampled": "`sampled`: mini-batch mode",
        "isolated": "`isolated`: isolated (Grappa) mode",
        "link": '`link`: link prediction (`"task": "link"`)',
    }
    by_section: dict[str, list[Key]] = {}
    for key in keys():
        by_section.setdefault(key.path.rpartition(".")[0], []).append(key)
    for prefix, section_keys in by_section.items():
        lines += [
            f"## {titles.get(prefix, prefix)}",
            "",
            "| key | type | default | allowed values | mode | description |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for k in section_keys:
            allowed = ", ".join(f"`{a}`" for a in k.allowed) if k.allowed else ""
            lines.append(f"| `{k.path}` | `{k.type}` | {_value(k.default)} | {allowed} | {k.mode} | {_cell(k.doc)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.common.config_reference", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 naming every config key without a docstring")
    parser.add_argument("--out", metavar="FILE", help=f"write the page to FILE (the committed copy is {PAGE})")
    args = parser.parse_args(argv)
    if args.check:
        missing = missing_docstrings()
        for path in missing:
            print(f"config key '{path}' has no docstring under its field", file=sys.stderr)
        return 1 if missing else 0
    if args.out:
        with open(args.out, "w") as f:
            f.write(markdown())
        return 0
    print(markdown(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
