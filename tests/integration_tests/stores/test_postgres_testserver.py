"""The throw-away PostgreSQL server (`testing/postgres.py`) cleans up on SIGTERM too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[3]

LIBRARY_USE = textwrap.dedent(
    """
    import time
    from langchain_tdai_recall.testing.postgres import TemporaryPostgres

    with TemporaryPostgres() as server:
        print(server.url(), flush=True)
        time.sleep(600)
    """
)


def _running(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for a reaper that never comes does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(args: list[str]) -> tuple[subprocess.Popen[str], Path, int]:
    """Start a process that prints a server URL; (process, data directory, postmaster pid)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a new session, so the signal reaches this process alone (as `kill PID` does), not the
    # postmaster that a terminal's process group would also interrupt
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("postgresql://"), url
    data_dir = Path(parse_qs(urlsplit(url).query)["host"][0])
    postmaster = int((data_dir / "data" / "postmaster.pid").read_text().split()[0])
    assert _running(postmaster)
    return process, data_dir, postmaster


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "args",
    [
        ["-m", "langchain_tdai_recall.stores.postgres.testserver"],
        ["-c", LIBRARY_USE],
    ],
    ids=["module-main", "with-block"],
)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_the_server_and_removes_its_data(args: list[str], signum: int) -> None:
    process, data_dir, postmaster = _start(args)
    try:
        process.send_signal(signum)
        process.wait(timeout=90)
        deadline = time.monotonic() + 30
        while _running(postmaster) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(postmaster), "the postmaster outlived its owner"
        assert not data_dir.exists(), "the data directory was left behind"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if _running(postmaster):
            os.kill(postmaster, signal.SIGQUIT)


RESTORES = textwrap.dedent(
    """
    import signal
    from langchain_tdai_recall.testing.postgres import TemporaryPostgres

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with TemporaryPostgres() as first, TemporaryPostgres() as second:
        assert first.url() != second.url()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        first.stop()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # second still runs
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def own(signum, frame):
        pass

    signal.signal(signal.SIGTERM, own)  # an application's own handler is left alone
    with TemporaryPostgres():
        assert signal.getsignal(signal.SIGTERM) is own
    assert signal.getsignal(signal.SIGTERM) is own
    print("ok")
    """
)


@pytest.mark.timeout(180)
def test_sigterm_handler_is_restored_and_never_replaces_an_application_handler() -> None:
    # in a fresh interpreter: this session's own server may hold the handler already
    done = subprocess.run(
        [sys.executable, "-c", RESTORES],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
