"""process.run: the one way loopwarden runs a child process."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from loopwarden import process
from loopwarden.process import ProcessResult, missing_executable, run, split_command

PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", code]


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def gone_within(pid: int, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return not alive(pid)


def read_pid(path: Path, seconds: float = 2.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.strip():
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"no pid written to {path}")


SPAWN_GRANDCHILD = """
import subprocess, sys
child = subprocess.Popen(["sleep", "30"])
with open(sys.argv[1], "w") as f:
    f.write(str(child.pid))
child.wait()
"""


class TestExit:
    def test_success(self) -> None:
        """A clean exit gives status 0, the output, and ok."""
        result = run(py("print('hello')"), timeout=10)
        assert (result.returncode, result.stdout, result.ok) == (0, "hello\n", True)
        assert not result.timed_out
        assert result.error is None
        assert result.describe().endswith("exited with status 0")

    def test_failure_status_and_stderr(self) -> None:
        """A non-zero status and stderr are reported, and ok is False."""
        result = run(py("import sys; sys.stderr.write('bad'); sys.exit(5)"), timeout=10)
        assert (result.returncode, result.stderr, result.ok) == (5, "bad", False)

    def test_stdin_input_is_delivered(self) -> None:
        """input is written to the child's stdin, then stdin is closed."""
        result = run(py("import sys; print(sys.stdin.read().upper())"), input="abc", timeout=10)
        assert result.stdout == "ABC\n"

    def test_bytes_input(self) -> None:
        """input may be bytes."""
        result = run(py("import sys; print(len(sys.stdin.buffer.read()))"), input=b"\x00" * 7)
        assert result.stdout.strip() == "7"

    def test_no_input_means_empty_stdin(self) -> None:
        """Without input the child reads end-of-file at once, never our terminal."""
        result = run(py("import sys; print(repr(sys.stdin.read()))"), timeout=10)
        assert result.stdout.strip() == "''"

    def test_large_input_with_a_child_that_ignores_it(self) -> None:
        """A child that never reads a large input does not hang run()."""
        started = time.monotonic()
        result = run(py("pass"), input="x" * 5_000_000, timeout=10)
        assert result.returncode == 0
        assert time.monotonic() - started < 5

    def test_cwd_and_env(self, tmp_path: Path) -> None:
        """cwd and extra_env reach the child; env replaces the environment."""
        code = "import os; print(os.getcwd()); print(os.environ.get('LW_X'))"
        result = run(py(code), cwd=tmp_path, extra_env={"LW_X": "42"}, timeout=10)
        assert result.stdout.split() == [str(tmp_path.resolve()), "42"]
        bare = run(py("import os; print(sorted(os.environ))"), env={"ONLY": "1"}, timeout=10)
        assert "'ONLY'" in bare.stdout
        assert "'PATH'" not in bare.stdout


class TestArguments:
    def test_string_without_shell_is_a_type_error(self) -> None:
        """A command string without shell=True is refused with a TypeError."""
        with pytest.raises(TypeError, match="shell=True"):
            run("echo hi")

    def test_string_with_shell(self) -> None:
        """With shell=True a string runs in the shell."""
        result = run("echo $((6 * 7))", shell=True, timeout=10)
        assert result.stdout == "42\n"
        assert result.argv == ("echo $((6 * 7))",)

    def test_argument_list_is_not_interpreted(self) -> None:
        """Arguments reach the child verbatim, shell characters and all."""
        result = run([*py("import sys; print(sys.argv[1])"), "$(whoami); *"], timeout=10)
        assert result.stdout == "$(whoami); *\n"

    def test_missing_executable_is_an_error_result(self) -> None:
        """A program that does not exist gives result.error, not an exception."""
        result = run(["definitely-not-a-program-lw"], timeout=10)
        assert result.error is not None
        assert "definitely-not-a-program-lw" in result.error
        assert result.returncode is None
        assert not result.ok
        assert result.describe() == result.error

    def test_not_executable_is_an_error_result(self, tmp_path: Path) -> None:
        """A file without execute permission gives result.error."""
        script = tmp_path / "script.sh"
        script.write_text("#!/bin/sh\necho hi\n")
        script.chmod(0o644)
        result = run([str(script)], timeout=10)
        assert result.error is not None

    def test_empty_argument_list(self) -> None:
        """An empty argument list is an error result."""
        assert run([]).error == "empty command"

    def test_split_command(self) -> None:
        """split_command quotes like a POSIX shell."""
        assert split_command("pytest -k 'a and b' -q") == ["pytest", "-k", "a and b", "-q"]

    def test_missing_executable_helper(self, tmp_path: Path) -> None:
        """missing_executable explains what is missing, or returns None."""
        assert missing_executable([PY]) is None
        assert missing_executable(["sh"]) is None
        assert "not found" in (missing_executable(["no-such-lw-prog"]) or "")
        assert "no such file" in (missing_executable(["./nope"], cwd=str(tmp_path)) or "")
        assert missing_executable([]) == "empty command"


class TestTimeout:
    def test_timeout_is_reported(self) -> None:
        """A child that outlives its timeout is killed and timed_out is set."""
        started = time.monotonic()
        result = run(py("import time; time.sleep(30)"), timeout=0.3, grace=0.5)
        assert result.timed_out
        assert result.returncode is None
        assert not result.ok
        assert "timed out" in result.describe()
        assert time.monotonic() - started < 3

    def test_output_before_the_timeout_is_kept(self) -> None:
        """What the child printed before it was killed is in the result."""
        code = "import sys, time; print('partial', flush=True); time.sleep(30)"
        result = run(py(code), timeout=0.5, grace=0.5)
        assert result.timed_out
        assert "partial" in result.stdout

    def test_a_child_ignoring_sigterm_is_killed(self) -> None:
        """After the grace period a child that ignores SIGTERM gets SIGKILL."""
        code = (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(30)"
        )
        started = time.monotonic()
        result = run(py(code), timeout=0.5, grace=0.3)
        assert result.timed_out
        assert time.monotonic() - started < 3

    def test_timeout_kills_the_whole_process_group(self, tmp_path: Path) -> None:
        """On timeout the child and its grandchild are both gone."""
        pid_file = tmp_path / "grandchild.pid"
        result = run([*py(SPAWN_GRANDCHILD), str(pid_file)], timeout=0.5, grace=0.5)
        assert result.timed_out
        grandchild = read_pid(pid_file)
        assert gone_within(grandchild), f"grandchild {grandchild} survived the timeout"


class TestLeftoverGrandchild:
    def test_grandchild_holding_stdout_does_not_hang(self, tmp_path: Path) -> None:
        """A grandchild that keeps our stdout open after the parent exits does not hang run()."""
        pid_file = tmp_path / "grandchild.pid"
        code = (
            "import subprocess, sys; "
            "p = subprocess.Popen(['sleep', '30']); "
            "open(sys.argv[1], 'w').write(str(p.pid)); "
            "print('parent done', flush=True)"
        )
        started = time.monotonic()
        result = run([*py(code), str(pid_file)], timeout=20)
        elapsed = time.monotonic() - started
        assert elapsed < 5
        assert result.returncode == 0
        assert "parent done" in result.stdout
        assert not result.timed_out
        assert gone_within(read_pid(pid_file)), "the leftover grandchild was left running"


class TestBoundedOutput:
    def test_megabytes_of_output_are_truncated(self) -> None:
        """Output beyond max_output is dropped, flagged, and never blocks the child."""
        code = "import sys; sys.stdout.write('x' * 4_000_000); sys.stdout.flush()"
        started = time.monotonic()
        result = run(py(code), max_output=10_000, timeout=20)
        assert result.returncode == 0
        assert result.stdout_truncated
        assert not result.stderr_truncated
        assert len(result.stdout) <= 10_000
        assert time.monotonic() - started < 10

    def test_head_or_tail_is_kept(self) -> None:
        """keep='head' keeps the start of the output, keep='tail' its end."""
        code = "print('FIRST'); print('x' * 100_000); print('LAST')"
        head = run(py(code), max_output=1000, keep="head", timeout=10)
        tail = run(py(code), max_output=1000, keep="tail", timeout=10)
        assert head.stdout.startswith("FIRST")
        assert "LAST" not in head.stdout
        assert tail.stdout.rstrip().endswith("LAST")
        assert "FIRST" not in tail.stdout
        assert len(head.stdout) <= 1000
        assert len(tail.stdout) <= 1000

    def test_stderr_is_bounded_too(self) -> None:
        """stderr has its own bound and flag."""
        code = "import sys; sys.stderr.write('e' * 200_000)"
        result = run(py(code), max_output=500, timeout=10)
        assert result.stderr_truncated
        assert len(result.stderr) <= 500

    def test_output_within_the_bound_is_whole(self) -> None:
        """Output that fits is kept whole and not flagged."""
        result = run(py("print('y' * 999)"), max_output=1000, timeout=10)
        assert result.stdout == "y" * 999 + "\n"
        assert not result.stdout_truncated


class TestResult:
    def test_public_names(self) -> None:
        """The module exports run, ProcessResult and its helpers."""
        assert set(process.__all__) >= {"run", "ProcessResult", "split_command"}

    def test_result_is_frozen(self) -> None:
        """A result cannot be changed."""
        result = ProcessResult(("x",), 0, "", "", 0.0)
        with pytest.raises(AttributeError):
            result.returncode = 1  # type: ignore[misc]


class TestCancel:
    def test_cancel_stops_the_group_at_once(self) -> None:
        """Setting the cancel event kills the process group and says cancelled, not timed out."""
        import threading

        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        started = time.monotonic()
        result = run([sys.executable, "-c", "import time; time.sleep(30)"], cancel=cancel)
        assert time.monotonic() - started < 10
        assert result.cancelled
        assert not result.timed_out
        assert result.returncode is None
        assert not result.ok
        assert "cancelled" in result.describe()

    def test_unset_cancel_changes_nothing(self) -> None:
        """With a cancel event that is never set, the command runs to its end."""
        import threading

        result = run([sys.executable, "-c", "print('done')"], cancel=threading.Event())
        assert result.ok
        assert result.stdout.strip() == "done"
