"""A throw-away PostgreSQL 16 + pgvector server for tests, benchmarks and local trials.

It runs the server binaries that the `pgserver` wheel (PyPI) bundles: PostgreSQL 16 with the
pgvector extension, no system packages needed. The server listens on a unix socket only, in a
fresh data directory (on `/dev/shm` when it is writable, so `initdb` takes about half a second)
with durability switched off (`fsync=off`): it is for tests, never for data you want to keep.

PostgreSQL refuses to run as root. When this process is root, the server runs as an unprivileged
system user (`tdaipg`, created on first use after a notice on standard error, and reused
afterwards); when that user cannot reach the wheel's files (a virtual environment under `/root`),
the binaries are copied, with their layout, to `/opt/tdai-pg-bin` (also announced). `pgserver`'s own
Python API is not used: importing it touches `$XDG_RUNTIME_DIR` (a warning when it is unset) and, as
root, opens up the permissions of every parent directory of the data and of the environment.

Usage::

    with TemporaryPostgres() as server:
        url = server.url()  # postgresql://postgres@/postgres?host=/dev/shm/tdai-pg.xxxx&port=5432

or from a shell: `python -m langchain_tdai_recall.testing.postgres` prints the URL and
keeps the server until interrupted.

SIGTERM stops the server like SIGINT: while a server runs, and when SIGTERM has no handler of its
own (its default would end this process at once and leave the postmaster and its data behind),
SIGTERM raises `KeyboardInterrupt` in the main thread, so `with` blocks and test fixtures stop
the server and delete its data. The default is restored when the last server stops.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Final, Self
from urllib.parse import quote

from langchain_tdai_recall._runtime.process import pid_alive

__all__ = ["TemporaryPostgres", "TemporaryPostgresError", "bundled_binaries"]

logger = logging.getLogger(__name__)

OS_USER: Final = "tdaipg"
"""System user the server runs as when this process is root."""
PREFIX: Final = "tdai-pg."
"""Name prefix of the data directories (stale ones are removed on start)."""
COPY_DIR: Final = Path("/opt/tdai-pg-bin")
"""Where the binaries are copied when the server user cannot reach the installed wheel."""
CREATE_USER_NOTICE: Final = (
    f"langchain_tdai_recall.testing.postgres: running as root, and PostgreSQL refuses to run as "
    f"root: creating the system user {OS_USER!r} (useradd --system --no-create-home --shell "
    f"/bin/false {OS_USER}) to run the throw-away test server; later runs reuse it (remove with: "
    f"userdel {OS_USER})"
)
"""Said on standard error (and logged) before the server's system user is created."""
PORT: Final = 5432
"""Socket number (the socket is `<data dir>/.s.PGSQL.5432`; no TCP port is opened)."""
SETTINGS: Final[dict[str, str]] = {
    "listen_addresses": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "maintenance_work_mem": "512MB",
    "shared_buffers": "128MB",
}
"""Server settings: no TCP, no durability (test data only), room for HNSW builds."""


class TemporaryPostgresError(RuntimeError):
    """The throw-away server could not be started; the message says why and what to do."""

    __test__ = False


def bundled_binaries() -> Path:
    """The `bin` directory of the PostgreSQL that the `pgserver` wheel ships.

    Found without importing `pgserver` (see the module docstring).

    Raises:
        TemporaryPostgresError: If `pgserver` is not installed.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        msg = (
            "the pgserver package (PostgreSQL 16 + pgvector binaries) is not installed; "
            "install it with: pip install pgserver"
        )
        raise TemporaryPostgresError(msg)
    return Path(spec.origin).parent / "pginstall" / "bin"


class _SigtermAsInterrupt:
    """SIGTERM -> `KeyboardInterrupt` while servers run (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers = 0
        self._installed = False

    @staticmethod
    def _handle(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        raise KeyboardInterrupt

    def acquire(self) -> None:
        with self._lock:
            self._servers += 1
            if self._installed or threading.current_thread() is not threading.main_thread():
                return
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, self._handle)
                self._installed = True

    def release(self) -> None:
        with self._lock:
            self._servers = max(0, self._servers - 1)
            if self._servers or not self._installed:
                return
            if threading.current_thread() is not threading.main_thread():
                return  # a later stop() in the main thread restores it
            if signal.getsignal(signal.SIGTERM) is self._handle:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._installed = False


_SIGTERM: Final = _SigtermAsInterrupt()


class TemporaryPostgres:
    """A PostgreSQL server in a temporary directory, removed by `stop()`.

    Args:
        parent: Directory for the data directory (default `/dev/shm` when writable, else the
            system temporary directory). Keep it short: a unix socket path has at most about
            100 bytes.
        settings: Extra server settings (`name -> value`) on top of `SETTINGS`.
    """

    __test__ = False

    def __init__(
        self,
        *,
        parent: str | os.PathLike[str] | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        if parent is None:
            shm = Path("/dev/shm")
            parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else tempfile.gettempdir()
        self.parent = Path(parent)
        self.settings = {**SETTINGS, **(settings or {})}
        self.data_dir: Path | None = None
        self.bin = bundled_binaries()

    # -- running commands ----------------------------------------------------------------------

    @staticmethod
    def _as_user() -> tuple[int | None, int | None, list[int] | None]:
        """(uid, gid, extra groups) to run the server binaries as (root: the server user)."""
        if os.geteuid() != 0:
            return None, None, None
        entry = pwd.getpwnam(OS_USER)
        return entry.pw_uid, entry.pw_gid, []

    def _run(self, program: str, *args: str, timeout: float = 60.0) -> str:
        try:
            uid, gid, groups = self._as_user()
            done = subprocess.run(
                [str(self.bin / program), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            msg = f"{program} could not run: {exc}"
            raise TemporaryPostgresError(msg) from exc
        if done.returncode != 0:
            log = self.data_dir / "server.log" if self.data_dir else None
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            msg = (
                f"{program} failed with status {done.returncode}: "
                f"{(done.stdout + done.stderr).strip()[-2000:]}"
                + (f"\nserver log:\n{tail}" if tail else "")
            )
            raise TemporaryPostgresError(msg)
        return str(done.stdout)

    def _ensure_user(self) -> None:
        """Reuse the server's system user, or create it after saying so on standard error.

        Creating an operating-system account changes the machine (`/etc/passwd`), so it is never
        silent: the notice names the account, the command and how to remove it, before
        `useradd` runs. Later runs find the account and reuse it.
        """
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            sys.stderr.write(CREATE_USER_NOTICE + "\n")
            sys.stderr.flush()
            logger.warning("%s", CREATE_USER_NOTICE)
            try:
                command = ["useradd", "--system", "--no-create-home", "--shell", "/bin/false"]
                subprocess.run(
                    [*command, OS_USER],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                msg = (
                    f"PostgreSQL cannot run as root and the system user {OS_USER!r} could not be "
                    f"created ({exc}); create it (useradd --system {OS_USER}) or run as a normal "
                    "user"
                )
                raise TemporaryPostgresError(msg) from exc

    def _reachable_binaries(self) -> Path:
        """The binaries, copied where the server user can run them if it cannot reach these."""
        uid, gid, groups = self._as_user()
        probe = subprocess.run(
            ["test", "-x", str(self.bin / "postgres")],
            check=False,
            timeout=30,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        if probe.returncode == 0:
            return self.bin
        # keep the layout bin/../../../pgserver.libs that the binaries' RPATH expects
        site = self.bin.parents[2]
        target = COPY_DIR / "pgserver" / "pginstall" / "bin"
        if not (target / "postgres").exists():
            notice = (
                f"langchain_tdai_recall.testing.postgres: copying the PostgreSQL binaries to "
                f"{COPY_DIR}, where the system user {OS_USER!r} can run them (reused by later "
                f"runs; remove with: rm -r {COPY_DIR})"
            )
            sys.stderr.write(notice + "\n")
            sys.stderr.flush()
            logger.warning("%s", notice)
            (COPY_DIR / "pgserver").mkdir(parents=True, exist_ok=True)
            shutil.copytree(
                site / "pgserver" / "pginstall",
                COPY_DIR / "pgserver" / "pginstall",
                symlinks=True,
                dirs_exist_ok=True,
            )
            libs = site / "pgserver.libs"
            if libs.is_dir():
                shutil.copytree(libs, COPY_DIR / "pgserver.libs", symlinks=True, dirs_exist_ok=True)
            for root, dirs, files in os.walk(COPY_DIR):
                for name in dirs + files:
                    path = Path(root) / name
                    if not path.is_symlink():
                        path.chmod(path.stat().st_mode | 0o055)
            COPY_DIR.chmod(0o755)
        return target

    def _remove_stale(self) -> None:
        """Stop servers and remove data directories whose owning process is gone."""
        for folder in self.parent.glob(f"{PREFIX}*"):
            owner_file = folder / "owner.pid"
            try:
                owner = int(owner_file.read_text().strip())
            except (OSError, ValueError):
                owner = 0
            if owner and pid_alive(owner):
                continue
            pid_file = folder / "postmaster.pid"
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(pid_file.read_text().split()[0])
                if pid_alive(pid):
                    os.kill(pid, signal.SIGQUIT)  # immediate shutdown of the leaked server
                    for _ in range(50):
                        if not pid_alive(pid):
                            break
                        time.sleep(0.1)
            shutil.rmtree(folder, ignore_errors=True)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        """Create the data directory and start the server (about one second on tmpfs).

        Raises:
            TemporaryPostgresError: With the reason and the server log when it cannot start.
        """
        if self.data_dir is not None:
            return self
        if os.geteuid() == 0:
            self._ensure_user()
            self.bin = self._reachable_binaries()
        self._remove_stale()
        _SIGTERM.acquire()
        self.data_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.parent))
        (self.data_dir / "owner.pid").write_text(str(os.getpid()))
        pgdata = self.data_dir / "data"
        pgdata.mkdir(mode=0o700)
        if os.geteuid() == 0:
            entry = pwd.getpwnam(OS_USER)
            self.data_dir.chmod(0o755)
            os.chown(pgdata, entry.pw_uid, entry.pw_gid)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        try:
            self._run(
                "initdb",
                "-D",
                str(pgdata),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            )
            options = [f"-p {PORT}", f"-k {self.data_dir}"]
            options += [f"-c {name}={value}" for name, value in self.settings.items()]
            self._run(
                "pg_ctl",
                "-D",
                str(pgdata),
                "-w",
                "-t",
                "60",
                "-l",
                str(self.data_dir / "server.log"),
                "-o",
                " ".join(options),
                "start",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its data directory. Idempotent."""
        if self.data_dir is None:
            return
        pgdata = self.data_dir / "data"
        try:
            if (pgdata / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(pgdata), "-w", "-t", "30", "-m", "fast", "stop")
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            _SIGTERM.release()

    def restart(self) -> None:
        """Restart the server (fast shutdown: open connections are terminated)."""
        if self.data_dir is None:
            msg = "the server is not running; call start() first"
            raise TemporaryPostgresError(msg)
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir / "data"),
            "-w",
            "-t",
            "60",
            "-m",
            "fast",
            "-l",
            str(self.data_dir / "server.log"),
            "restart",
        )

    def processes(self) -> list[int]:
        """Process ids of the server: the postmaster and its children (Linux only)."""
        if self.data_dir is None:
            return []
        try:
            main = int((self.data_dir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        found = [main]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == main:
                    found.append(int(stat.parent.name))
        return found

    def url(self, database: str = "postgres") -> str:
        """A `postgresql://` URL of the running server (unix socket, user `postgres`)."""
        if self.data_dir is None:
            msg = "the server is not running; call start() first"
            raise TemporaryPostgresError(msg)
        host = quote(str(self.data_dir), safe="")
        return f"postgresql://postgres@/{quote(database, safe='')}?host={host}&port={PORT}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main() -> int:
    """Start a server, print its URL and keep it until interrupted (SIGINT or SIGTERM)."""
    with TemporaryPostgres() as server:
        print(server.url(), flush=True)  # noqa: T201
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
