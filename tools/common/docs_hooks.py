"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

``on_files`` generates ``reference/config.md`` from the config dataclasses
(``tools.common.config_reference``) at every build, in place of the committed copy, so the site's
configuration reference cannot drift from the code; a key without a docstring fails the build. Run
MkDocs as ``python -m mkdocs`` from the repository root (``bash tools/docs.sh`` does), so that
``tools`` and this checkout's ``dsgraph`` are importable.
"""

from __future__ import annotations

CONFIG_PAGE = "reference/config.md"


def on_files(files, config):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    try:
        from tools.common import config_reference
    except ImportError as err:
        raise PluginError(
            f"{err}: run mkdocs from the repository root as `python -m mkdocs` (bash tools/docs.sh)"
        ) from None
    missing = config_reference.missing_docstrings()
    if missing:
        raise PluginError(f"config key(s) without a docstring under the field: {', '.join(missing)}")
    committed = files.get_file_from_path(CONFIG_PAGE)
    if committed is not None:  # the repository's copy; the site shows the page as the code is now
        files.remove(committed)
    files.append(File.generated(config, CONFIG_PAGE, content=config_reference.markdown()))
    return files
