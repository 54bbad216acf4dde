"""As root, the PostgreSQL tests create an operating-system user: never silently (issue 25).

PostgreSQL refuses to run as root, so `testing.postgres.TemporaryPostgres` runs its server as the
system user `tdaipg`, created on first use. Changing `/etc/passwd` must be announced before it
happens, both by the module (standard error, then `useradd`) and by `make test`, and an existing
user is reused without a word.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall.testing import postgres

ROOT = Path(__file__).resolve().parents[2]


def _server() -> postgres.TemporaryPostgres:
    return postgres.TemporaryPostgres.__new__(postgres.TemporaryPostgres)


def test_the_user_is_announced_before_useradd_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[str] = []

    def missing(name: str) -> Any:
        raise KeyError(name)

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        events.append("stderr so far: " + capsys.readouterr().err)
        events.append(" ".join(command))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(postgres.pwd, "getpwnam", missing)
    monkeypatch.setattr(postgres.subprocess, "run", run)
    _server()._ensure_user()
    assert events[0].startswith("stderr so far: ")
    assert postgres.CREATE_USER_NOTICE in events[0]
    assert "userdel tdaipg" in events[0]
    assert events[1].startswith("useradd --system") and events[1].endswith(postgres.OS_USER)


def test_an_existing_user_is_reused_without_a_word(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[Any] = []
    monkeypatch.setattr(postgres.pwd, "getpwnam", lambda name: object())
    monkeypatch.setattr(postgres.subprocess, "run", lambda *a, **k: ran.append(a))
    _server()._ensure_user()
    assert ran == []
    assert capsys.readouterr().err == ""


def _fake_bin(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    ("uid", "user_exists", "announced"),
    [("0", False, True), ("0", True, False), ("1000", False, False)],
    ids=["root-new-user", "root-user-exists", "not-root"],
)
def test_make_test_says_so_before_the_tests_run(
    tmp_path: Path, uid: str, user_exists: bool, announced: bool
) -> None:
    tools = tmp_path / "tools"
    venv = tmp_path / "venv"
    tools.mkdir()
    venv.mkdir()
    # `id -u` answers `uid`; `id tdaipg` succeeds only when the user exists
    _fake_bin(
        tools,
        "id",
        f'if [ "$1" = "-u" ]; then echo {uid}; exit 0; fi\nexit {0 if user_exists else 1}\n',
    )
    _fake_bin(venv, "python", 'echo "the tests run" >&2\n')
    stamp = tmp_path / "stamp"
    stamp.touch()  # newer than pyproject.toml: nothing to install
    env = {k: v for k, v in os.environ.items() if k != "TDAI_TEST_POSTGRES_URL"}
    env["PATH"] = f"{tools}:{env.get('PATH', '')}"
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "test", f"BIN={venv}", f"TSTAMP={stamp}"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    lines = done.stderr.splitlines()
    assert lines[-1] == "the tests run"
    notice = [line for line in lines if "tdaipg" in line]
    if announced:
        assert len(notice) == 1 and "useradd" in notice[0] and "userdel tdaipg" in notice[0]
        assert lines.index(notice[0]) < lines.index("the tests run")
    else:
        assert notice == []


def test_the_docs_document_the_user() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts = [" ".join(p.read_text(encoding="utf-8").split()) for p in pages if p.exists()]
    assert any(
        "tdaipg" in t and "userdel tdaipg" in t and "`make test`" in t and "useradd" in t
        for t in texts
    ), "the README or a docs page says that `make test` as root creates the user tdaipg"
