"""What a server process holds, for leak tests: open file descriptors,
resident memory, TCP connections by state (Linux ``/proc``)."""

from __future__ import annotations

import os

__all__ = ['open_fds', 'rss_mib', 'tcp_states']


_TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


def open_fds(pid: int) -> int:
    """File descriptors process ``pid`` has open (Linux: ``/proc/PID/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid``, MiB (Linux: ``VmRSS``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def tcp_states(pid: int) -> dict[str, int]:
    """The TCP sockets process ``pid`` holds, counted by state
    (``ESTABLISHED``, ``CLOSE_WAIT``, ``LISTEN``...; Linux: ``/proc/net/tcp``
    and ``tcp6`` matched to the process's descriptors by inode). A socket in
    ``CLOSE_WAIT`` was closed by its peer and not yet by the process."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    counts: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)  # the header
                for line in lines:
                    fields = line.split()
                    if fields[9] in inodes:
                        state = _TCP_STATES.get(fields[3], fields[3])
                        counts[state] = counts.get(state, 0) + 1
        except FileNotFoundError:
            continue
    return counts
