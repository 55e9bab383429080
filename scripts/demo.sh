#!/usr/bin/env bash
# Set up (if needed) and run the bundled demo: no internet, no API key.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/ego2web-replay demo "$@"
