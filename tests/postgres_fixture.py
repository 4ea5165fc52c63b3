"""A PostgreSQL server for the tests: found through LOOPWARDEN_TEST_PG_URL, or started here.

Use it from a test module with ``pytest_plugins = ["postgres_fixture"]``. Fixtures:

``pg_url``        (session) a superuser URL to the server's ``postgres`` database
``fresh_pg_url``  (function) a new, empty database on that server, dropped after the test

Without LOOPWARDEN_TEST_PG_URL a throwaway cluster is created with Debian's binaries
(``/usr/lib/postgresql/*/bin``, else ``initdb`` on PATH) in a temporary directory, listening
on 127.0.0.1 and a free port only, as the ``postgres`` user when the tests run as root
(PostgreSQL refuses to run as root); it is stopped and removed when the test session ends.
Tests are skipped, with the reason, only when neither way is possible.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ENV = "LOOPWARDEN_TEST_PG_URL"
DRIVER = "postgresql+psycopg://"


class PgServer:
    """A reachable server and how to make and drop databases on it."""

    def __init__(
        self, url: str, stop: Callable[[], None] | None = None, data: Path | None = None
    ) -> None:
        if url.startswith(("postgresql://", "postgres://")):
            url = DRIVER + url.split("://", 1)[1]
        self.url = url
        self.data = data  # the data directory of a cluster started here
        self.bindir: Path | None = None
        self._as: list[str] = []
        self._stop = stop

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.url.replace(DRIVER, "postgresql://", 1), autocommit=True)

    def create_database(self) -> str:
        """A new empty database; its URL."""
        name = f"lw_test_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[-1].split("?", 1)[0]
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def database_url(self, name: str) -> str:
        base, _, query = self.url.partition("?")
        head = base.rsplit("/", 1)[0]
        return f"{head}/{name}" + (f"?{query}" if query else "")

    def restart(self) -> None:
        """Restart a cluster started here (fast shutdown: every connection is cut)."""
        assert self.data is not None
        assert self.bindir is not None
        subprocess.run(
            [
                *self._as,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "fast",
                "-l",
                str(self.data.parent / "server.log"),
                "-w",
                "restart",
            ],
            cwd=self.data.parent,
            capture_output=True,
            check=True,
        )

    def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def find_bindir() -> Path | None:
    """The directory of PostgreSQL's server binaries (initdb, pg_ctl), newest version first."""

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.parent.name)
        except ValueError:
            return 0.0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version, reverse=True)
    if found:
        return Path(found[0]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and (Path(out.stdout.strip()) / "initdb").exists():
            return Path(out.stdout.strip())
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_user() -> tuple[list[str], int | None, int | None]:
    """The command prefix, uid and gid to run the server with (never root)."""
    if os.geteuid() != 0:
        return [], None, None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "running as root and there is no 'postgres' user to run the server as "
            "(Debian's postgresql package creates it)"
        ) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root and runuser(1) is not available")
    return [runuser, "-u", "postgres", "--"], user.pw_uid, user.pw_gid


def start_cluster(bindir: Path, *, durable: bool = False) -> PgServer:
    """initdb + pg_ctl start in a temporary directory on 127.0.0.1; stopped by ``stop()``.

    Test clusters run with fsync off; ``durable=True`` keeps PostgreSQL's defaults (for the
    benchmarks, whose commits must reach the disk).
    """
    prefix, uid, gid = _as_user()
    base = Path(tempfile.mkdtemp(prefix="loopwarden-pg-"))
    if uid is not None and gid is not None:
        os.chown(base, uid, gid)
    data = base / "data"

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=base, capture_output=True, text=True, check=False)

    init = run(
        [
            *prefix,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ]
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
    last = ""
    for _attempt in range(3):
        port = free_port()
        options = f"-h 127.0.0.1 -p {port} -k {base} -c max_connections=200"
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        started = run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(base / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        if started.returncode == 0:
            break
        log = base / "server.log"
        last = log.read_text(errors="replace")[-2000:] if log.exists() else started.stderr
    else:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {last.strip()}")

    def stop() -> None:
        run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(base, ignore_errors=True)

    started_server = PgServer(f"{DRIVER}postgres@127.0.0.1:{port}/postgres", stop, data)
    started_server.bindir = bindir
    started_server._as = prefix
    return started_server


@functools.cache
def server() -> tuple[PgServer | None, str]:
    """The process-wide server (started once), or None and why there is none."""
    url = os.environ.get(ENV)
    if url:
        return PgServer(url), ""
    bindir = find_bindir()
    if bindir is None:
        return None, (
            f"no PostgreSQL: set {ENV} to a server's URL, or install the server binaries "
            "(apt-get install postgresql) so the tests can start one"
        )
    try:
        started = start_cluster(bindir)
    except RuntimeError as exc:
        return None, f"could not start a PostgreSQL cluster with {bindir}: {exc}"
    atexit.register(started.stop)
    return started, ""


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A superuser URL to a PostgreSQL server found or started for this test session."""
    found, why = server()
    if found is None:
        pytest.skip(why)
    yield found.url
    found.stop()  # a cluster started here goes with the session (atexit is the fallback)


@pytest.fixture
def fresh_pg_url(pg_url: str) -> Iterator[str]:
    """A new empty database for one test, dropped after it."""
    found, _why = server()
    assert found is not None
    url = found.create_database()
    yield url
    with contextlib.suppress(Exception):
        found.drop_database(url)
