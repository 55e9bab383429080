#!/usr/bin/env bash
# Set up (if needed), check style and types, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "[test] ruff" >&2
.venv/bin/ruff check ego2web_replay tests
echo "[test] mypy" >&2
.venv/bin/mypy ego2web_replay --ignore-missing-imports
echo "[test] pytest" >&2
exec .venv/bin/python -m pytest -q "$@"
