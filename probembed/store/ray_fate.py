"""A Ray this process started ends with it, however the process ends (SIGKILL included).

ray.init ties the processes it starts to the driver (Linux's PR_SET_PDEATHSIG: the GCS, the
raylet, the log monitor, the dashboard and the autoscaler's monitor get SIGKILL as the driver
dies), and the workers exit within about 2 s of their raylet. Not the raylet's two agents (the
dashboard agent, the runtime env agent): they see the raylet die at once, then tell the dead
GCS so (`ray._private.process_watcher.report_raylet_error_logs`, a publish whose 60 s timeout
is written in Ray's code; no setting shortens it) and exit only once that has timed out,
60-62 s after `probembed ingest --ray` was sent SIGKILL or SIGTERM (measured with Ray 2.60;
Ctrl-C runs ray.shutdown(), which ends them at once).

`Watcher` is this file run as a script (the standard library only: it loads neither probembed
nor Ray) by a driver that has just started Ray, given the processes ray.init started. It notes
them and their descendants as they come, each by pid and start time, and once the driver's end
of its stdin closes (the session ended, or the driver died by any signal) it SIGKILLs those
still alive, through a pidfd opened while the start time still matches (a pid the system has
since given to another process is never signalled), and exits. Linux only (/proc, pidfd_open:
Linux 5.3; before it, a plain kill after the same check): elsewhere Ray's own reaper or
fate-sharing is all there is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable

#: Seconds between the watcher's looks for processes started since (workers and theirs): one
#: started after the last look and before the driver died is one of Ray's workers, which exits
#: on its own within about 2 s of its raylet.
LOOK_SECONDS = 2.0

#: A process as the watcher knows it: its pid and start time (clock ticks after boot).
Process = tuple[int, int]


class Watcher:
    """The watcher of the Ray processes `roots` (pids) and their descendants, started now."""

    def __init__(self, roots: Iterable[int]) -> None:
        """Start the watcher, whose stdin is a pipe only this process holds the other end of
        (os.pipe's ends are not inherited across exec: Ray's processes, started before, hold
        neither; a child forked without exec holds it until it ends)."""
        read, self._write = os.pipe()
        try:
            command = [sys.executable, "-I", os.path.abspath(__file__), *map(str, roots)]
            self._process = subprocess.Popen(command, stdin=read, stdout=subprocess.DEVNULL)
        finally:
            os.close(read)

    def close(self) -> None:
        """End the watch now (the session ended): what is left of its processes is killed,
        and the watcher has exited when this returns."""
        os.close(self._write)
        self._process.wait()


def watched_ray() -> Watcher | None:
    """A watcher of the processes this driver's ray.init has just started (GCS, raylet,
    monitors) and theirs; None off Linux (no /proc, no pidfd)."""
    if not sys.platform.startswith("linux"):
        return None
    from ray._private import worker

    node = worker._global_node
    assert node is not None, "ray.init has not started Ray"
    return Watcher(info.process.pid for infos in node.all_processes.values() for info in infos)


def _stat(pid: int) -> tuple[int, int] | None:
    """Process `pid`'s parent pid and start time (/proc), None where it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            line = stat.read()
    except OSError:
        return None
    fields = line[line.rindex(b")") + 2 :].split()  # after the name, which may hold spaces
    # fields 3 (state), 4 (parent) and 22 (start time) of proc(5)
    return None if fields[0] == b"Z" else (int(fields[1]), int(fields[19]))


def _processes() -> dict[int, tuple[int, int]]:
    """Each live process's parent pid and start time, by pid."""
    pids = (int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit())
    return {pid: stat for pid in pids if (stat := _stat(pid)) is not None}


def _alive(known: set[Process], table: dict[int, tuple[int, int]]) -> set[Process]:
    """Those of `known` still alive in `table`, and every process there descended from one."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack = [pid for pid, start in known if table.get(pid, (0, None))[1] == start]
    found: set[Process] = set()
    while stack:
        pid = stack.pop()
        found.add((pid, table[pid][1]))
        stack.extend(children.get(pid, []))
    return found


def _kill(known: set[Process]) -> None:
    """SIGKILL each of `known` still alive: its pidfd is opened first, then its start time
    checked, so the signal reaches that process and no later one given its pid. A kernel
    without pidfd_open (before Linux 5.3) gets a plain kill after the same check: a pid given
    to another process between the two is the risk left there."""
    for pid, start in known:
        with contextlib.suppress(ProcessLookupError):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError as error:
                if error.errno != errno.ENOSYS:
                    raise
                if _started(pid) == start:
                    os.kill(pid, signal.SIGKILL)
                continue
            try:
                if _started(pid) == start:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            finally:
                os.close(pidfd)


def _started(pid: int) -> int | None:
    """Process `pid`'s start time, None where it is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def watch(roots: list[int]) -> None:
    """Note `roots` and their descendants every LOOK_SECONDS until stdin ends (the driver
    closed it or died), then kill those alive. Deaf to the signals a terminal or a service
    manager sends the whole group (SIGINT, SIGTERM, SIGHUP): it has to outlive the driver."""
    for deaf in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(deaf, signal.SIG_IGN)
    table = _processes()
    known = _alive({(pid, table[pid][1]) for pid in roots if pid in table}, table)
    # the driver never writes: stdin readable is its end of the pipe closed
    while not select.select([sys.stdin], [], [], LOOK_SECONDS)[0]:
        known = _alive(known, _processes())
    _kill(_alive(known, _processes()))


if __name__ == "__main__":
    watch([int(pid) for pid in sys.argv[1:]])
