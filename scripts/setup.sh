#!/usr/bin/env bash
# Set up ego2web-replay on a fresh Debian machine: Chromium, a Python >= 3.12
# virtualenv in .venv, and the package (editable, with test tools).
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*" >&2; }

# 1. Chromium (Debian's package; Playwright's own download cannot work offline).
if [ ! -x /usr/lib/chromium/chromium ] && [ -z "${EGO2WEB_CHROMIUM:-}" ]; then
  say "installing Debian's chromium with apt"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# 1b. nginx (Debian's nginx-light): the tests' third-party origin for byte ranges and video seeks.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  say "installing Debian's nginx-light with apt (for the tests)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nginx-light >/dev/null
fi

# 1c. curl and wget: real clients of the replay proxy in the tests (tests/test_replay_clients.py).
if ! command -v curl >/dev/null 2>&1 || ! command -v wget >/dev/null 2>&1; then
  say "installing Debian's curl and wget with apt (for the tests)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq curl wget >/dev/null
fi

# 2. A Python >= 3.12: on PATH, else among pyenv's versions.
find_python() {
  local c
  for c in python3.13 python3.12 python3 python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  local root="${PYENV_ROOT:-$HOME/.pyenv}"
  if command -v pyenv >/dev/null 2>&1; then root="$(pyenv root)"; fi
  for c in $(ls -d "$root"/versions/3.1[2-9]* "$root"/versions/3.[2-9][0-9]* 2>/dev/null | sort -rV); do
    if [ -x "$c/bin/python" ] && "$c/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$c/bin/python"; return 0
    fi
  done
  return 1
}

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
  if ! PY="$(find_python)"; then
    say "error: no Python >= 3.12 found on PATH or in pyenv."
    say "Install one, e.g. 'apt-get install python3.12 python3.12-venv' or 'pyenv install 3.12', then run this again."
    exit 1
  fi
  say "creating .venv with $PY ($("$PY" --version 2>&1))"
  rm -rf .venv
  "$PY" -m venv .venv
fi

# 3. The package, reinstalled only when pyproject.toml changed.
STAMP=".venv/.ego2web-installed"
HASH="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$HASH" ]; then
  say "installing the package and its dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  echo "$HASH" > "$STAMP"
fi
# 3b. browsergym-core (ego2web_replay.browsergym, tests/test_browsergym.py): every 0.13-0.14 release pins
#     playwright==1.44, which our playwright>=1.50 cannot meet, so it is installed without its pins (its other
#     dependencies come with the dev extra; see the browsergym extra in pyproject.toml).
if ! .venv/bin/python -c 'import browsergym.core' >/dev/null 2>&1; then
  say "installing browsergym-core 0.14.3 without its playwright pin"
  .venv/bin/python -m pip install -q --no-deps 'browsergym-core==0.14.3'
fi
# 4. Third-party browser code some tests serve from 127.0.0.1 (from the npm registry, fetched here once:
#    the tests themselves send nothing past loopback).
NPM_ASSETS=".venv/test-assets/npm"
for spec in "@amplitude/analytics-browser@2.48.1"; do
  tgz="$NPM_ASSETS/$(echo "${spec%@*}" | sed 's|^@||; s|/|-|')-${spec##*@}.tgz"
  if [ ! -f "$tgz" ]; then
    if command -v npm >/dev/null 2>&1; then
      say "fetching $spec from npm for the tests"
      mkdir -p "$NPM_ASSETS"
      npm pack "$spec" --silent --pack-destination "$NPM_ASSETS" >/dev/null || say "warning: npm could not fetch $spec; its test will skip"
    else
      say "warning: npm is not installed; the test that serves $spec will skip (apt-get install npm)"
    fi
  fi
done
say "ready: $(.venv/bin/ego2web-replay --version)"
