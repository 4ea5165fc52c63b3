"""The loopwarden CLI as a real process: exit codes, hooks, --json, kill and resume, errors."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "completion-hook.schema.json").read_text())
CLI = [sys.executable, "-m", "loopwarden.cli"]

AGENT_HEAD = """\
import os, sys, time
prompt = sys.stdin.read()
i = int(os.environ["LOOPWARDEN_ITERATION"])
"""
# Five iterations, a little slow, so a run can be killed in the middle of one.
STEADY = "time.sleep(0.3)\nprint('<promise>COMPLETE</promise>' if i >= 5 else f'step {i}')\n"


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWARDEN_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def spawn(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args],
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def make_agent(tmp_path: Path, body: str) -> str:
    path = tmp_path / "agent.py"
    path.write_text(AGENT_HEAD + body)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def make_hook(tmp_path: Path, name: str, text: str, mode: int = 0o755) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def capture_hook(tmp_path: Path) -> tuple[Path, Path]:
    """A hook script that saves its stdin; returns (script, where it saves)."""
    out = tmp_path / "payload.json"
    hook = make_hook(tmp_path, "capture.sh", f"#!/bin/sh\ncat > {shlex.quote(str(out))}\n")
    return hook, out


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def read_until(proc: subprocess.Popen[str], predicate: Any, timeout: float = 30) -> list[Any]:
    """Read --json lines from a running process until one satisfies ``predicate``."""
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(json.loads(line))
        if predicate(seen[-1]):
            return seen
    raise AssertionError(f"the expected event never came; saw {seen}")


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "lw.db")


class TestExitCodes:
    """The process exit status per terminal reason."""

    @pytest.mark.parametrize(
        ("body", "extra", "code"),
        [
            ("print('<promise>COMPLETE</promise>')", [], 0),
            ("print('<promise>BLOCKED</promise> no access')", [], 3),
            ("print('more to do')", ["--max-iterations", "2"], 7),
        ],
    )
    def test_exit_status(
        self, tmp_path: Path, db: str, body: str, extra: list[str], code: int
    ) -> None:
        """completed exits 0; blocked and max iterations have their own codes."""
        agent = make_agent(tmp_path, body)
        result = cli("run", "--agent", agent, "--prompt", "go", "--db", db, *extra, cwd=tmp_path)
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr

    def test_json_is_one_object_per_line(self, tmp_path: Path, db: str) -> None:
        """--json prints started, one object per iteration, then finished."""
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>' if i == 3 else 'wip')")
        result = cli("run", "--agent", agent, "--prompt", "go", "--db", db, "--json", cwd=tmp_path)
        got = events(result.stdout)
        assert [e["event"] for e in got] == [
            "started",
            "iteration",
            "iteration",
            "iteration",
            "finished",
        ]
        assert [e["iteration"] for e in got[1:4]] == [1, 2, 3]
        assert got[-1]["status"] == "completed"
        assert got[-1]["exit_code"] == 0


class TestKillAndResume:
    """A run killed with SIGKILL resumes, with no flags, to the uninterrupted outcome; while it
    lives, a second driver is turned away."""

    @pytest.mark.parametrize("after", [1, 3])
    def test_sigkill_then_resume(self, tmp_path: Path, after: int) -> None:
        """Kill after iteration ``after`` (plus a random moment); resume reaches the same end."""
        agent = make_agent(tmp_path, STEADY)
        base = ["--agent", agent, "--prompt", "go", "--json"]
        straight = cli("run", *base, "--db", str(tmp_path / "a.db"), cwd=tmp_path)
        assert straight.returncode == 0, straight.stderr
        expected = events(straight.stdout)[-1]
        assert expected["status"] == "completed"

        db = str(tmp_path / "b.db")
        proc = spawn("run", *base, "--db", db, cwd=tmp_path)
        seen = read_until(proc, lambda e: e.get("iteration") == after and e["event"] == "iteration")
        time.sleep(random.uniform(0, 0.2))
        proc.kill()
        rest, _ = proc.communicate(timeout=10)
        assert '"finished"' not in rest
        assert proc.returncode == -signal.SIGKILL
        loop_id = seen[0]["loop_id"]

        resumed = cli("resume", loop_id, "--db", db, "--json", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        final = events(resumed.stdout)[-1]
        for key in ("status", "terminal_reason", "iterations", "scores", "exit_code"):
            assert final[key] == expected[key]
        shown = json.loads(cli("show", loop_id, "--db", db, "--json", cwd=tmp_path).stdout)
        assert [it["iteration"] for it in shown["iterations"]] == [1, 2, 3, 4, 5]

    def test_resume_stops_the_agent_a_killed_run_left_behind(self, tmp_path: Path, db: str) -> None:
        """The agent of a SIGKILLed run (its own session) is stopped before resume re-runs it."""
        slow = tmp_path / "slow"
        slow.touch()
        agent = make_agent(
            tmp_path,
            "open('agent.pid', 'w').write(str(os.getpid()))\n"
            "time.sleep(60 if os.path.exists('slow') else 0)\n"
            "print('<promise>COMPLETE</promise>')\n",
        )
        proc = spawn("run", "--agent", agent, "--prompt", "go", "--db", db, "--json", cwd=tmp_path)
        pid_file = tmp_path / "agent.pid"
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # let the run record the agent's process
        orphan = int(pid_file.read_text())
        proc.kill()
        proc.communicate(timeout=10)
        assert alive(orphan)
        slow.unlink()
        loop_id = json.loads(cli("list", "--db", db, "--json", cwd=tmp_path).stdout)[0]["id"]
        resumed = cli("resume", loop_id, "--db", db, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert not alive(orphan)

    def test_ctrl_c_leaves_the_loop_resumable(self, tmp_path: Path, db: str) -> None:
        """While a run lives a second driver is turned away (75); SIGINT exits 130, tells the
        hooks 'interrupted', and the loop resumes afterwards."""
        slow = tmp_path / "slow"
        slow.touch()
        agent = make_agent(
            tmp_path,
            "time.sleep(30 if os.path.exists('slow') and i == 2 else 0.05)\n"
            "print('<promise>COMPLETE</promise>' if i >= 3 else 'wip')\n",
        )
        hook, out = capture_hook(tmp_path)
        proc = spawn(
            "run", "--agent", agent, "--prompt", "go", "--db", db, "--json",
            "--on-complete", str(hook), cwd=tmp_path,
        )  # fmt: skip
        seen = read_until(proc, lambda e: e.get("iteration") == 1)
        busy = cli("resume", seen[0]["loop_id"], "--db", db, cwd=tmp_path)
        assert busy.returncode == 75, busy.stderr
        assert "being driven by" in busy.stderr
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr
        payload = json.loads(out.read_text())
        jsonschema.validate(payload, SCHEMA)
        assert (payload["status"], payload["exit_code"]) == ("interrupted", 130)
        loop_id = seen[0]["loop_id"]
        state = json.loads(cli("status", loop_id, "--db", db, "--json", cwd=tmp_path).stdout)
        assert state["state"] in ("executing", "validating", "deciding")
        slow.unlink()
        assert cli("resume", loop_id, "--db", db, cwd=tmp_path).returncode == 0


class TestCommandHooksInRun:
    def test_project_stop_hook_vetoes_once(self, tmp_path: Path, db: str) -> None:
        """A .loopwarden/settings.json Stop hook that blocks once makes run go one more round."""
        settings = tmp_path / ".loopwarden" / "settings.json"
        settings.parent.mkdir()
        hook = make_hook(
            tmp_path,
            "stop.sh",
            "#!/bin/sh\n[ -e vetoed ] && exit 0\ntouch vetoed\necho 'also update the docs' >&2\n"
            "exit 2\n",
        )
        settings.write_text(
            json.dumps(
                {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": str(hook)}]}]}}
            )
        )
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>')\n")
        done = cli("run", "--agent", agent, "--prompt", "go", "--db", db, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        lines = events(done.stdout)
        iterations = [e for e in lines if e.get("event") == "iteration"]
        assert [e["signal"] for e in iterations] == ["CONTINUE", "COMPLETE"]
        assert any("also update the docs" in f for f in iterations[0]["feedback"])


class TestDetachAndWorker:
    def test_detached_loops_are_driven_by_a_worker(self, tmp_path: Path, db: str) -> None:
        """run --detach queues loops; `loopwarden worker --exit-when-idle` finishes them."""
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>' if i >= 2 else 'wip')\n")
        queued = []
        for n in range(3):
            out = cli(
                "run", "--agent", agent, "--prompt", f"job {n}", "--db", db, "--detach", "--json",
                cwd=tmp_path,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            queued.append(json.loads(out.stdout)["loop_id"])
        waiting = json.loads(cli("list", "--db", db, "--json", cwd=tmp_path).stdout)
        assert {w["state"] for w in waiting} == {"initialized"}
        done = cli(
            "worker", "--db", db, "--concurrency", "2", "--exit-when-idle", "--poll", "0.1",
            "--json", cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1])["loops_finished"] == 3
        for loop_id in queued:
            state = json.loads(cli("status", loop_id, "--db", db, "--json", cwd=tmp_path).stdout)
            assert (state["state"], state["iteration"]) == ("completed", 2)

    def test_db_upgrade_is_idempotent(self, tmp_path: Path, db: str) -> None:
        """`loopwarden db upgrade` creates/upgrades the schema once, then has nothing to do."""
        first = json.loads(cli("db", "upgrade", "--db", db, "--json", cwd=tmp_path).stdout)
        second = json.loads(cli("db", "upgrade", "--db", db, "--json", cwd=tmp_path).stdout)
        assert first["after"] == second["after"] == second["before"]


class TestBlockWhileRunning:
    def test_block_stops_a_running_agent(self, tmp_path: Path, db: str) -> None:
        """`loopwarden block` during an agent run stops the agent and the run exits 4 promptly."""
        agent = make_agent(tmp_path, "time.sleep(60)\nprint('wip')\n")
        proc = spawn("run", "--agent", agent, "--prompt", "go", "--db", db, "--json", cwd=tmp_path)
        started = read_until(proc, lambda e: e.get("event") == "started" or "loop_id" in e)
        loop_id = started[0]["loop_id"]
        time.sleep(0.5)
        blocked = cli("block", loop_id, "--reason", "stop now", "--db", db, cwd=tmp_path)
        assert blocked.returncode == 0, blocked.stderr
        began = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 4, stderr
        assert time.monotonic() - began < 15
        state = json.loads(cli("status", loop_id, "--db", db, "--json", cwd=tmp_path).stdout)
        assert (state["state"], state["terminal_reason"]) == ("blocked", "blocked_by_user")


class TestCompletionHookProcess:
    """--on-complete scripts as real processes."""

    def test_payload_on_stdin(self, tmp_path: Path, db: str) -> None:
        """The script gets the documented payload; token-looking values are redacted."""
        agent = make_agent(tmp_path, "print('trying')")
        hook, out = capture_hook(tmp_path)
        leak = "print('GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz012345'); raise SystemExit(1)"
        result = cli(
            "run", "--agent", agent, "--prompt", "go", "--db", db, "--max-iterations", "1",
            "--validate", f"tests={shlex.quote(sys.executable)} -c {shlex.quote(leak)}",
            "--on-complete", str(hook), cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 7
        payload = json.loads(out.read_text())
        jsonschema.validate(payload, SCHEMA)
        assert (payload["status"], payload["terminal_reason"]) == ("escalated", "max_iterations")
        assert (payload["iterations"], payload["max_iterations"], payload["exit_code"]) == (1, 1, 7)
        assert "ghp_abcdefghijklmnopqrstuvwxyz012345" not in out.read_text()
        assert "GITHUB_TOKEN=[REDACTED]" in payload["log_tail"]
        assert payload["agent_command"] == Path(sys.executable).name

    def test_hanging_hook_is_killed_with_its_group(self, tmp_path: Path, db: str) -> None:
        """A hook past its timeout is terminated with its children; the exit code stands."""
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>')")
        pids = tmp_path / "pids"
        hook = make_hook(
            tmp_path,
            "hang.sh",
            f"#!/bin/sh\nsleep 60 &\necho $$ $! > {shlex.quote(str(pids))}\nwait\n",
        )
        started = time.monotonic()
        result = cli(
            "run", "--agent", agent, "--prompt", "go", "--db", db,
            "--on-complete", str(hook), "--hook-timeout", "0.5", cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0
        assert time.monotonic() - started < 20
        assert "timed out after 0.5s" in result.stderr
        deadline = time.monotonic() + 5
        hook_pid, child_pid = (int(p) for p in pids.read_text().split())
        while (alive(hook_pid) or alive(child_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(hook_pid)
        assert not alive(child_pid)

    def test_non_executable_hook_is_a_warning(self, tmp_path: Path, db: str) -> None:
        """A hook without the execute bit is skipped with a warning; the exit code stands."""
        agent = make_agent(tmp_path, "print('<promise>BLOCKED</promise>')")
        hook = make_hook(tmp_path, "plain.sh", "#!/bin/sh\nexit 0\n", mode=0o644)
        result = cli(
            "run", "--agent", agent, "--prompt", "go", "--db", db, "--on-complete", str(hook),
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 3
        assert "warning: completion hook" in result.stderr
        assert "not executable" in result.stderr


class _Receiver:
    """A local HTTP server that answers each POST with the next status code."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                outer.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(outer.statuses.pop(0) if outer.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/done"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Any]:
    made: list[_Receiver] = []

    def make(statuses: list[int]) -> _Receiver:
        made.append(_Receiver(statuses))
        return made[-1]

    yield make
    for r in made:
        r.httpd.shutdown()
        r.httpd.server_close()


class TestWebhookProcess:
    """--webhook against a local server."""

    def test_webhook_receives_the_payload(self, tmp_path: Path, db: str, receiver: Any) -> None:
        """One 503, then the payload is delivered on the retry."""
        server = receiver([503])
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>')")
        result = cli(
            "run", "--agent", agent, "--prompt", "go", "--db", db, "--webhook", server.url,
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0
        assert len(server.bodies) == 2
        jsonschema.validate(json.loads(server.bodies[-1]), SCHEMA)

    def test_failing_webhook_never_changes_the_exit_code(
        self, tmp_path: Path, db: str, receiver: Any
    ) -> None:
        """A webhook that keeps failing is retried a bounded number of times, then a warning."""
        server = receiver([500] * 10)
        agent = make_agent(tmp_path, "print('<promise>ESCALATE</promise>')")
        result = cli(
            "run", "--agent", agent, "--prompt", "go", "--db", db, "--webhook", server.url,
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 5
        assert len(server.bodies) == 3
        assert "warning: completion hook" in result.stderr
        assert "HTTP 500" in result.stderr


class TestErrorsProcess:
    """One clear line, exit 2, no traceback."""

    def test_unknown_loop_id(self, tmp_path: Path, db: str) -> None:
        """An unknown loop id."""
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>')")
        cli("run", "--agent", agent, "--prompt", "go", "--db", db, cwd=tmp_path)
        result = cli("resume", "0123456789abcdef", "--db", db, cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1
        assert "0123456789abcdef" in result.stderr
        assert "Traceback" not in result.stderr

    def test_missing_database(self, tmp_path: Path) -> None:
        """No database in the working directory."""
        result = cli("list", cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.startswith("loopwarden: error: no loopwarden database")
        assert result.stderr.count("\n") == 1
        assert not (tmp_path / ".loopwarden").exists()

    def test_missing_agent(self, tmp_path: Path) -> None:
        """A missing agent executable: nothing is created."""
        result = cli("run", "--agent", "./nope.sh", "--prompt", "go", cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr == "loopwarden: error: --agent: ./nope.sh: no such file\n"
        assert not (tmp_path / ".loopwarden").exists()


class TestTddDemo:
    """examples/tdd-demo: the README's first command goes from failing tests to completed."""

    def test_readme_command_completes_and_reruns(self, tmp_path: Path) -> None:
        """The README's `loopwarden run ...` line completes in a few iterations, twice."""
        demo = tmp_path / "tdd-demo"
        shutil.copytree(
            ROOT / "examples" / "tdd-demo",
            demo,
            ignore=shutil.ignore_patterns("work", ".loopwarden", "__pycache__"),
        )
        readme = (demo / "README.md").read_text()
        line = next(ln for ln in readme.splitlines() if "loopwarden run --agent" in ln)
        command = line[line.index("loopwarden run") :].replace("python3", sys.executable)
        args = shlex.split(command)[1:]
        for _ in range(2):
            result = cli(*args, "--json", cwd=demo)
            assert result.returncode == 0, result.stdout + result.stderr
            final = events(result.stdout)[-1]
            assert final["status"] == "completed"
            assert 2 <= final["iterations"] <= 4
            assert final["scores"][0] < 100
