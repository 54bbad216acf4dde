"""Whether another process is still running: one answer for every lease and lock of the package.

Formation leases, document locks and the throw-away PostgreSQL server all record the process id
of their holder and must tell a live holder from one that died. `os.kill(pid, 0)` asks the
kernel without sending anything on POSIX; on Windows any signal but the console ones terminates
the process, so there a recorded holder is taken as alive (its lease or lock then expires by
time, never by a check that would kill it).
"""

from __future__ import annotations

import os
import sys

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (this process always does; unknown on Windows: `True`)."""
    if pid == os.getpid():
        return True
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists but belongs to someone else
    return True
