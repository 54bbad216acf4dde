"""`pid_alive`: one liveness check for every lease and lock."""

from __future__ import annotations

import os
import subprocess
import sys

from langchain_tdai_recall._runtime.process import pid_alive


def test_this_process_is_alive_and_a_finished_child_is_not() -> None:
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)


def test_a_process_of_another_user_counts_as_alive() -> None:
    assert pid_alive(1)  # init: exists, and signalling it may be refused
