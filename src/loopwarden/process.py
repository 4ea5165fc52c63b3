"""The one way loopwarden runs a subprocess.

Rules, hooks and the agent runner all come through :func:`run`, so every child gets the same
treatment: an argument list (a shell only when asked for), its own process group, a timeout
that terminates and then kills the whole group, and bounded capture of stdout and stderr that
never blocks the child (the excess is drained and dropped, and the result says so).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Literal

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "ProcessResult",
    "kill_group_if_same",
    "missing_executable",
    "run",
    "split_command",
    "start_time",
]

DEFAULT_MAX_OUTPUT = 1_000_000
_CHUNK = 65536
# How long to wait for a child's pipes to close after it exited before assuming a leftover
# grandchild holds them, and killing the group.
_DRAIN_WAIT = 0.5


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """What a child did. ``returncode`` is None when it never started or was killed on timeout."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: str | None = None
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.cancelled and not self.error

    def describe(self) -> str:
        """One line: how the process ended."""
        name = self.argv[0] if self.argv else "command"
        if self.error:
            return self.error
        if self.timed_out:
            return f"{name} timed out after {self.duration:.1f}s and was killed"
        if self.cancelled:
            return f"{name} was stopped after {self.duration:.1f}s (cancelled)"
        return f"{name} exited with status {self.returncode}"


def split_command(command: str) -> list[str]:
    """Split a command line into an argument list the way a POSIX shell would quote it."""
    return shlex.split(command)


def missing_executable(argv: Sequence[str], cwd: str | None = None) -> str | None:
    """A message when ``argv[0]`` cannot be run, else None."""
    if not argv:
        return "empty command"
    exe = argv[0]
    if os.sep in exe:
        path = exe if os.path.isabs(exe) or cwd is None else os.path.join(cwd, exe)
        if not os.path.exists(path):
            return f"{exe}: no such file"
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            return f"{exe}: not executable"
        return None
    if shutil.which(exe) is None:
        return f"{exe}: command not found on PATH"
    return None


def start_time(pid: int) -> str | None:
    """The kernel's start time of a process (Linux ``/proc``), to tell it from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def kill_group_if_same(pgid: int, started: str | None) -> bool:
    """Kill a process group left behind by a dead driver, if its leader is still that process.

    The leader's start time must match ``started``, so a recycled pid is never touched.
    Returns True when a group was killed.
    """
    if started is None or start_time(pgid) != started:
        return False
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and start_time(pgid) == started:
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    return True


class _Capture:
    """Reads one pipe to EOF, keeping at most ``limit`` bytes of its head or tail."""

    def __init__(self, pipe: IO[bytes], limit: int, keep: Literal["head", "tail"]) -> None:
        self.pipe = pipe
        self.limit = limit
        self.keep = keep
        self.data = bytearray()
        self.truncated = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            fd = self.pipe.fileno()
            while chunk := os.read(fd, _CHUNK):
                self._keep(chunk)
        except (OSError, ValueError):
            pass

    def _keep(self, chunk: bytes) -> None:
        if self.keep == "head":
            room = self.limit - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if len(chunk) > max(room, 0):
                self.truncated = True
        else:
            self.data += chunk
            if len(self.data) > self.limit:
                del self.data[: len(self.data) - self.limit]
                self.truncated = True

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", errors="replace")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            pipe.close()


def run(
    argv: Sequence[str] | str,
    *,
    input: str | bytes | None = None,
    timeout: float | None = 300.0,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    shell: bool = False,
    max_output: int = DEFAULT_MAX_OUTPUT,
    keep: Literal["head", "tail"] = "head",
    grace: float = 2.0,
    cancel: threading.Event | None = None,
    on_start: Callable[[int], None] | None = None,
) -> ProcessResult:
    """Run a command to completion and return what it did; never raises for the child's sake.

    ``argv`` is an argument list; a string is accepted only with ``shell=True``. On timeout
    the process group gets SIGTERM, then SIGKILL after ``grace`` seconds; setting ``cancel``
    does the same at once (the result says ``cancelled``). ``keep`` chooses whether the head
    or the tail of an over-long output is kept. ``on_start(pid)`` is called once the child
    runs (its pid is also its process group id).
    """
    if isinstance(argv, str):
        if not shell:
            raise TypeError("pass an argument list, or shell=True to run a command string")
        args: list[str] | str = argv
        shown: tuple[str, ...] = (argv,)
    else:
        args = [os.fspath(a) for a in argv]
        shown = tuple(args)
        if not args:
            return ProcessResult(shown, None, "", "", 0.0, error="empty command")
    environment = dict(os.environ if env is None else env)
    if extra_env:
        environment.update(extra_env)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=environment,
            shell=shell,
            start_new_session=True,
        )
    except FileNotFoundError:
        where = f" (in {cwd})" if cwd else ""
        return ProcessResult(
            shown, None, "", "", 0.0, error=f"{shown[0]}: command not found{where}"
        )
    except PermissionError:
        return ProcessResult(shown, None, "", "", 0.0, error=f"{shown[0]}: permission denied")
    except OSError as exc:
        return ProcessResult(shown, None, "", "", 0.0, error=f"{shown[0]}: {exc.strerror}")

    assert proc.stdout is not None
    assert proc.stderr is not None
    if on_start is not None:
        try:
            on_start(proc.pid)
        except BaseException:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            for pipe in (proc.stdout, proc.stderr, proc.stdin):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            raise
    out = _Capture(proc.stdout, max_output, keep)
    err = _Capture(proc.stderr, max_output, keep)
    if input is not None and proc.stdin is not None:
        data = input.encode("utf-8") if isinstance(input, str) else input
        threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()

    timed_out = False
    cancelled = False
    try:
        if cancel is None:
            proc.wait(timeout=timeout)
        else:
            deadline = None if timeout is None else started + timeout
            while proc.poll() is None:
                if cancel.wait(0.05):
                    cancelled = True
                    raise subprocess.TimeoutExpired(args, timeout or 0.0)
                if deadline is not None and time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(args, timeout or 0.0)
    except subprocess.TimeoutExpired:
        timed_out = not cancelled
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    except BaseException:
        # Interrupted (Ctrl-C) while waiting: never leave the group running behind us.
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    for capture in (out, err):
        capture.thread.join(_DRAIN_WAIT)
    if out.thread.is_alive() or err.thread.is_alive():
        # A leftover grandchild still holds our pipes: end the group so we can finish reading.
        _signal_group(proc.pid, signal.SIGKILL)
        for capture in (out, err):
            capture.thread.join(_DRAIN_WAIT)
    if timed_out or cancelled:
        _signal_group(proc.pid, signal.SIGKILL)
    for pipe in (proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            pipe.close()
    return ProcessResult(
        shown,
        None if timed_out or cancelled else proc.returncode,
        out.text(),
        err.text(),
        time.monotonic() - started,
        timed_out=timed_out,
        stdout_truncated=out.truncated or out.thread.is_alive(),
        stderr_truncated=err.truncated or err.thread.is_alive(),
        cancelled=cancelled,
    )
