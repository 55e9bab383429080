"""benchmarks/_recordstream.pin_tree: every thread of a process and of its children is pinned."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _recordstream  # noqa: E402

_TREE = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print(child.pid, flush=True)
time.sleep(30)
"""


def _allowed(pid: int) -> set[str]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out.add(line.split()[1])
    return out


def test_pins_every_thread_and_child():
    proc = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while len(list(Path(f"/proc/{proc.pid}/task").iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        pinned = _recordstream.pin_tree(proc.pid, {0})
        assert pinned >= 3  # the main thread, its sleeping thread, the child
        assert _allowed(proc.pid) == {"0"} and _allowed(child) == {"0"}
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()
