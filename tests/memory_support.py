"""The resident memory a test's subprocess reads of itself, from /proc/self/status (Linux).

A process started by another begins with its parent's peak: ru_maxrss (`resource`) keeps it
across exec, and under pytest that is the test process's, often above anything the child
does, so a bound on it passes whatever the child holds. VmHWM is the child's own peak, and
writing 5 to /proc/self/clear_refs restarts it. The subprocesses import this module with the
tests folder on their PYTHONPATH (`PATH`).
"""

import os
from pathlib import Path

#: The PYTHONPATH of a subprocess that imports probembed and this module.
PATH = os.pathsep.join(str(Path(__file__).resolve().parents[i]) for i in (1, 0))


def status_bytes(field: str) -> int:
    """A figure of /proc/self/status in bytes (`VmRSS` now, `VmHWM` the peak): what a test's
    bound on a step's memory compares."""
    lines = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(f"{field}:"))


def restart_peak() -> None:
    """Restart the peak (VmHWM) from the resident memory now, so the next one read is what
    came after."""
    Path("/proc/self/clear_refs").write_text("5")
