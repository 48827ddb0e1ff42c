#!/usr/bin/env bash
# Builds the documentation site from docs/ (mkdocs.yml) in strict mode, or serves it while you edit.
#   bash tools/docs.sh            build into ./site (a broken link, a missing page or a docstring that
#                                 fails to render is an error)
#   bash tools/docs.sh serve      serve it at http://127.0.0.1:8000, rebuilding on every change
# Uses ./.venv (tools/setup_venv.sh installs the docs toolchain with the dev extra).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mkdocs ] || bash tools/setup_venv.sh
export NO_MKDOCS_2_WARNING=1  # Material's end-of-life notice, printed on every build
# python -m mkdocs (not .venv/bin/mkdocs): the repository root goes on sys.path, so the build's hook
# imports tools/ and this checkout's dsgraph
if [ "${1:-build}" = serve ]; then
  exec .venv/bin/python -m mkdocs serve --strict "${@:2}"
fi
exec .venv/bin/python -m mkdocs build --strict --site-dir site "${@:2}"
