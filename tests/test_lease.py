"""One owner at a time: a lease (owner, expiry, epoch) fences every write."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwarden import (
    LeaseError,
    LeaseHeldError,
    LoopConfig,
    LoopEngine,
    Signal,
    StaleOwnerError,
    State,
    TerminalReason,
)

# Long enough that a busy CI machine does not expire a lease between two lines of a test.
TTL = 1.0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "lease.db"


@pytest.fixture
def url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def a(url: str) -> Iterator[LoopEngine]:
    """Owner A, with a short lease."""
    with LoopEngine(url, lease_ttl=TTL, owner="owner-a") as engine:
        yield engine


@pytest.fixture
def b(url: str) -> Iterator[LoopEngine]:
    """Owner B, with the default lease."""
    with LoopEngine(url, owner="owner-b") as engine:
        yield engine


@pytest.fixture
def loop_id(b: LoopEngine) -> str:
    return b.start("T", LoopConfig(max_iterations=5), prompt="p").id


def _record(engine: LoopEngine, loop_id: str) -> tuple[object, ...]:
    """Everything a write could change: the loop, its checkpoints and its history."""
    snap = engine.get(loop_id)
    return (snap.to_dict(), engine.checkpoints(loop_id), engine.history(loop_id))


def _lease_row(path: Path, loop_id: str) -> tuple[object, ...]:
    con = sqlite3.connect(path)
    try:
        return con.execute(
            "SELECT lease_owner, lease_epoch, lease_expires, lease_pid, lease_host "
            "FROM lw_loops WHERE id = ?",
            (loop_id,),
        ).fetchone()
    finally:
        con.close()


def _set_lease(path: Path, loop_id: str, *, pid: int, host: str) -> None:
    """Make the lease look held for an hour by ``pid`` on ``host``."""
    con = sqlite3.connect(path)
    try:
        with con:
            con.execute(
                "UPDATE lw_loops SET lease_owner = 'ghost', lease_epoch = lease_epoch + 1, "
                "lease_expires = ?, lease_pid = ?, lease_host = ? WHERE id = ?",
                (time.time() + 3600, pid, host, loop_id),
            )
    finally:
        con.close()


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


class TestLiveLease:
    """While one owner's lease is live, no other owner writes."""

    def test_another_owner_is_refused_and_nothing_is_written(
        self, a: LoopEngine, b: LoopEngine, loop_id: str, path: Path
    ) -> None:
        """LeaseHeldError for every write; the loop, its checkpoints and its lease are unchanged."""
        with a.hold(loop_id):
            before, lease = _record(b, loop_id), _lease_row(path, loop_id)
            for write in (
                lambda: b.submit(loop_id, "work"),
                lambda: b.resume(loop_id),
                lambda: b.set_max_iterations(loop_id, 9),
                lambda: b.reopen(loop_id, extra_iterations=1),
            ):
                with pytest.raises(LeaseHeldError, match="owner-a"):
                    write()
            assert _record(b, loop_id) == before
            assert _lease_row(path, loop_id) == lease

    def test_renewing_keeps_the_lease_past_its_ttl(
        self, a: LoopEngine, b: LoopEngine, loop_id: str
    ) -> None:
        """An owner that renews in time keeps others out indefinitely."""
        with a.hold(loop_id):
            for _ in range(4):
                time.sleep(TTL / 4)
                a.renew(loop_id)
            with pytest.raises(LeaseHeldError):
                b.submit(loop_id, "work")
            assert a.submit(loop_id, "work").signal is Signal.CONTINUE

    def test_the_holder_writes_across_calls(self, a: LoopEngine, loop_id: str) -> None:
        """hold() keeps one lease (one epoch) across several writes."""
        with a.hold(loop_id):
            a.submit(loop_id, "one")
            a.submit(loop_id, "two")
        assert a.get(loop_id).iteration == 3


class TestExpiredLease:
    """After the lease expires another owner takes over, and the old one is fenced off."""

    def test_takeover_then_the_stale_owner_is_rejected(
        self, a: LoopEngine, b: LoopEngine, loop_id: str, path: Path
    ) -> None:
        """B writes after A's TTL; A's next write raises StaleOwnerError and changes nothing."""
        with a.hold(loop_id):
            time.sleep(TTL * 1.5)
            assert b.submit(loop_id, "from b").iteration == 1
            after_b, lease = _record(b, loop_id), _lease_row(path, loop_id)
            with pytest.raises(StaleOwnerError, match="rejected"):
                a.submit(loop_id, "from a")
            assert _record(b, loop_id) == after_b
            assert _lease_row(path, loop_id) == lease
        assert [r.output for r in b.history(loop_id)] == ["from b"]

    @pytest.mark.parametrize("write", ["submit", "set_max_iterations", "renew"])
    def test_every_kind_of_write_is_fenced(
        self, a: LoopEngine, b: LoopEngine, loop_id: str, write: str
    ) -> None:
        """Whatever the stale owner tries, StaleOwnerError and no change."""
        with a.hold(loop_id):
            time.sleep(TTL * 1.5)
            b.submit(loop_id, "from b")
            before = _record(b, loop_id)
            calls = {
                "submit": lambda: a.submit(loop_id, "from a"),
                "set_max_iterations": lambda: a.set_max_iterations(loop_id, 9),
                "renew": lambda: a.renew(loop_id),
            }
            with pytest.raises(StaleOwnerError):
                calls[write]()
            assert _record(b, loop_id) == before

    def test_a_stale_owner_can_take_the_lease_again(
        self, a: LoopEngine, b: LoopEngine, loop_id: str
    ) -> None:
        """Fenced while holding, A stays fenced until it lets go; then it acquires anew."""
        with a.hold(loop_id):
            time.sleep(TTL * 1.5)
            b.submit(loop_id, "from b")
            with pytest.raises(StaleOwnerError):
                a.submit(loop_id, "from a")
            with pytest.raises(StaleOwnerError, match="lost the lease it was holding"):
                a.submit(loop_id, "from a, never taking the loop back silently")
        assert a.submit(loop_id, "from a again").iteration == 2
        assert [r.output for r in b.history(loop_id)] == ["from b", "from a again"]


class TestBlockTakesOver:
    """block() is a human's override: it takes the lease from a live driver."""

    def test_block_fences_the_live_holder(self, url: str, b: LoopEngine, loop_id: str) -> None:
        """B blocks while A holds a long lease; A's next write is rejected."""
        with LoopEngine(url, owner="owner-a") as a, a.hold(loop_id):
            snap = b.block(loop_id, "stop now")
            assert (snap.state, snap.terminal_reason) == (
                State.BLOCKED,
                TerminalReason.BLOCKED_BY_USER,
            )
            before = _record(b, loop_id)
            with pytest.raises(StaleOwnerError):
                a.submit(loop_id, "more work")
            assert _record(b, loop_id) == before


class TestDeadOwner:
    """A lease whose process is gone from this host is taken over at once."""

    def test_a_killed_holder_is_taken_over_at_once(
        self, url: str, b: LoopEngine, loop_id: str
    ) -> None:
        """A child holding the lease is SIGKILLed and reaped; B writes with no wait."""
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                engine = LoopEngine(url)  # a 60 s lease
                with engine.hold(loop_id):
                    os.write(ready_w, b"r")
                    time.sleep(60)
            finally:
                os._exit(1)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"r"
        os.close(ready_r)
        with pytest.raises(LeaseHeldError, match=f"pid {pid}"):
            b.submit(loop_id, "while the child lives")
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        started = time.monotonic()
        assert b.submit(loop_id, "after the kill").iteration == 1
        assert time.monotonic() - started < 1.0

    def test_a_lease_of_a_gone_pid_on_this_host_is_taken_over(
        self, b: LoopEngine, loop_id: str, path: Path
    ) -> None:
        """The dead pid check needs no expiry."""
        _set_lease(path, loop_id, pid=_dead_pid(), host=socket.gethostname())
        assert b.submit(loop_id, "work").signal is Signal.CONTINUE

    def test_a_lease_held_on_another_host_waits_for_its_expiry(
        self, b: LoopEngine, loop_id: str, path: Path
    ) -> None:
        """A pid on another host cannot be checked: the lease stands until it expires."""
        _set_lease(path, loop_id, pid=_dead_pid(), host="some-other-host")
        before = _record(b, loop_id)
        with pytest.raises(LeaseHeldError, match="some-other-host"):
            b.submit(loop_id, "work")
        assert _record(b, loop_id) == before

    def test_lease_errors_share_a_root(self) -> None:
        """Callers can catch LeaseError for both."""
        assert issubclass(LeaseHeldError, LeaseError)
        assert issubclass(StaleOwnerError, LeaseError)


class TestHeartbeatDuringValidation:
    def test_renew_is_not_blocked_by_a_slow_rule(self, url: str) -> None:
        """A heartbeat renews while submit runs a slow rule, so nobody else takes the loop."""
        import sys
        import threading

        from loopwarden import rules

        slow = rules.command("slow", [sys.executable, "-c", "import time; time.sleep(1.5)"])
        short = 0.5
        with LoopEngine(url, lease_ttl=short, owner="slow-owner") as a, LoopEngine(url) as b:
            loop = a.start("T", LoopConfig(max_iterations=5, rules=[slow]))
            stop = threading.Event()
            lost: list[Exception] = []

            def beat() -> None:
                while not stop.wait(short / 4):
                    try:
                        a.renew(loop.id)
                    except StaleOwnerError as exc:
                        lost.append(exc)
                        return

            with a.hold(loop.id):
                thread = threading.Thread(target=beat)
                thread.start()
                taker: list[BaseException] = []

                def try_take() -> None:
                    time.sleep(1.0)  # well past TTL, mid-validation
                    try:
                        b.resume(loop.id)
                    except LeaseHeldError as exc:
                        taker.append(exc)

                other = threading.Thread(target=try_take)
                other.start()
                decision = a.submit(loop.id, "output")
                other.join()
                stop.set()
                thread.join()
            assert decision.signal is Signal.CONTINUE
            assert not lost
            assert len(taker) == 1
