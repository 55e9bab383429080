"""CLI start-up: import time of ``ego2web_replay.cli`` and the wall time of ``--help`` and of an argument error.

    .venv/bin/python benchmarks/bench_cli.py [--reps 15] [--no-write]

Each variant runs in a fresh interpreter (a subprocess), the variants interleaved, ``--reps`` times;
the median is reported. Import time is measured inside the child (``perf_counter`` around the
import), wall times from the parent (interpreter start-up included). For scale, the same is done
for bare interpreter start-up and for importing the judge registry (the OpenAI client and every
judge: what the CLI used to import for ``--help``). Children run with bytecode caching on (as an
installed package has it, whatever ``PYTHONDONTWRITEBYTECODE`` says here); one extra line imports
the CLI from a copy of the package without bytecode (``PYTHONDONTWRITEBYTECODE=1``), so every project
module it loads is compiled, as on a machine that sets that variable; Python's and click's own
bytecode stays cached.
Target: the CLI module imports in under 0.3 s.
Prints a table and rewrites the ``cli`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    exit_on_sigterm,
    machine_info,
    machine_lines,
    markdown_table,
    median,
    text_table,
    update_section,
)

TARGET_S = 0.3
PY = sys.executable
EXE = str(Path(PY).with_name("ego2web-replay"))
_TIMED_IMPORT = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"

#: name -> (command, how it is timed: "inside" prints its own seconds, "wall" is timed from outside)
VARIANTS: dict[str, tuple[list[str], str]] = {
    "import ego2web_replay.cli": ([PY, "-c", _TIMED_IMPORT.format(module="ego2web_replay.cli")], "inside"),
    "import ego2web_replay.judge.registry (reference)":
        ([PY, "-c", _TIMED_IMPORT.format(module="ego2web_replay.judge.registry")], "inside"),
    "import ego2web_replay.cli, project bytecode not cached":
        ([PY, "-c", _TIMED_IMPORT.format(module="ego2web_replay.cli")], "cold"),
    "python -c pass (interpreter start-up)": ([PY, "-c", "pass"], "wall"),
    "ego2web-replay --help": ([EXE, "--help"], "wall"),
    "ego2web-replay judge run --help": ([EXE, "judge", "run", "--help"], "wall"),
    "ego2web-replay run --no-such-option (argument error)": ([EXE, "run", "--no-such-option"], "wall"),
}


_CACHED = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}


def _uncompiled_copy() -> str:
    """A copy of the package without ``__pycache__``, for PYTHONPATH (it comes before the editable install)."""
    root = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    src = Path(__file__).resolve().parent.parent / "ego2web_replay"
    shutil.copytree(src, root / "ego2web_replay", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    atexit.register(shutil.rmtree, root, True)
    return str(root)


_COLD_PATH = _uncompiled_copy()


def measure(command: list[str], how: str) -> float:
    env = _CACHED
    if how == "cold":  # project modules from the copy, compiled every time; nothing is written
        env = {**_CACHED, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": _COLD_PATH}
    t = time.perf_counter()
    r = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    wall = time.perf_counter() - t
    if how in ("inside", "cold"):
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {r.stderr.strip()}")
        return float(r.stdout.strip().splitlines()[-1])
    if r.returncode not in (0, 2):  # 2: click's usage error, expected for the argument-error variant
        raise SystemExit(f"{' '.join(command)} exited {r.returncode}: {r.stderr.strip()}")
    return wall


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15, help="Runs of each variant (interleaved).")
    ap.add_argument("--no-write", action="store_true", help="Print only; do not touch BENCHMARKS.md.")
    args = ap.parse_args()
    info = machine_info()
    for command, how in VARIANTS.values():  # warm the file cache once, untimed
        measure(command, how)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.reps):
        for name, (command, how) in VARIANTS.items():
            times[name].append(measure(command, how))
    header = ["what", "timed", "median", "min", "max"]
    rows = [[name, "wall, from the parent" if VARIANTS[name][1] == "wall" else "import, in the child",
             f"{median(xs):.3f} s", f"{min(xs):.3f} s", f"{max(xs):.3f} s"] for name, xs in times.items()]
    cli_import = median(times["import ego2web_replay.cli"])
    verdict = (f"CLI module import: median {cli_import:.3f} s, target < {TARGET_S} s: "
               f"{'met' if cli_import < TARGET_S else 'NOT met'}")
    print(text_table(header, rows))
    print(verdict)
    if args.no_write:
        return
    body = f"""## CLI start-up (`benchmarks/bench_cli.py`)

Each line is a fresh interpreter (subprocess), the variants interleaved, {args.reps} runs each,
median. "import, in the child" is `perf_counter` around the import; "wall, from the parent"
includes interpreter start-up. Bytecode caching is on (as for an installed package) except on the
"not cached" line, which compiles every project module the CLI loads (as on a machine with
`PYTHONDONTWRITEBYTECODE=1`; Python's and click's bytecode stays cached). The judge registry line
is for scale: it is what `--help` used to import (the OpenAI client and every judge) before
commands imported their libraries lazily. On a shared machine (see the load averages below)
absolute times are inflated and spread widely; the ratio between lines measured together holds.

{markdown_table(header, rows)}

{verdict}.

Machine and versions:
{machine_lines(info)}
"""
    update_section("cli", body)


if __name__ == "__main__":
    main()
