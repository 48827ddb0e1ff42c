"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

``on_files`` adds ``reference/config.md``, generated from the config dataclasses by
``tools.common.config_reference`` at every build, so the configuration reference cannot drift from
the code; a key without a docstring fails the build. Run MkDocs as ``python -m mkdocs`` from the
repository root (``bash tools/docs.sh`` does), so that ``tools`` and this checkout's ``dsgraph``
are importable.
"""

from __future__ import annotations

CONFIG_PAGE = "reference/config.md"


def on_files(files, config):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    try:
        from tools.common import config_reference
    except ImportError as err:
        raise PluginError(f"{err}: run mkdocs from the repository root as `python -m mkdocs` (bash tools/docs.sh)") from None
    missing = config_reference.missing_docstrings()
    if missing:
        raise PluginError(f"config key(s) without a docstring under the field: {', '.join(missing)}")
    files.append(File.generated(config, CONFIG_PAGE, content=config_reference.markdown()))
    return files
