"""The loopwarden CLI, in process (typer's runner): run, resume, the views, errors, hooks."""

from __future__ import annotations

import json
import shlex
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from typer.testing import CliRunner

from loopwarden import LoopConfig, LoopEngine, State, TerminalReason
from loopwarden.cli import app, score_chart, sparkline
from loopwarden.hooks import completion
from loopwarden.runner import AGENT_FAILED, ExitCode, RunLog, exit_code_for

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "completion-hook.schema.json").read_text())

AGENT_HEAD = """\
import os, sys
prompt = sys.stdin.read()
i = int(os.environ["LOOPWARDEN_ITERATION"])
"""


SECOND_CALL_MADE = "import os, sys; sys.exit(not os.path.exists('call2.json'))"


def make_agent(tmp_path: Path, body: str, name: str = "agent.py") -> str:
    """Write a python agent script; return its command line."""
    path = tmp_path / name
    path.write_text(AGENT_HEAD + body)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def invoke(*args: str) -> Any:
    """Run the CLI in process; stdout and stderr apart."""
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run_json(db_url: str, agent: str, *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    result = invoke(
        "run", "--agent", agent, "--prompt", "do the task", "--db", db_url, "--json", *extra
    )
    return result.exit_code, json_lines(result.stdout), result.stderr


def check_one_line_error(result: Any) -> None:
    """Exit 2, a single `loopwarden: error:` line on stderr, no traceback."""
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("loopwarden: error: ")
    assert "Traceback" not in result.stderr + result.stdout


class TestRunExitCodes:
    """`run` exits 0 only for completed, and with a distinct code for each other ending."""

    @pytest.mark.parametrize(
        ("body", "extra", "code", "reason"),
        [
            ("print('<promise>COMPLETE</promise>' if i == 2 else 'working')", (), 0, "completed"),
            ("print('<promise>BLOCKED</promise> need creds')", (), 3, "blocked_by_agent"),
            ("print('<promise>ESCALATE</promise> unsafe')", (), 5, "escalated_by_agent"),
            ("print('still working')", ("--max-iterations", "2"), 7, "max_iterations"),
            ("sys.exit(1)", (), 8, "circuit_breaker"),
        ],
    )
    def test_exit_code_per_terminal_reason(
        self, db_url: str, tmp_path: Path, body: str, extra: tuple[str, ...], code: int, reason: str
    ) -> None:
        """Each way a loop can end has its own exit code."""
        exit_code, events, _ = run_json(db_url, make_agent(tmp_path, body), *extra)
        assert exit_code == code
        assert events[-1]["event"] == "finished"
        assert (events[-1]["terminal_reason"], events[-1]["exit_code"]) == (reason, code)

    def test_regression_escalates_with_its_own_code(self, db_url: str, tmp_path: Path) -> None:
        """Scores falling over the window by more than the minimum drop exit 9."""
        agent = make_agent(tmp_path, "open('it', 'w').write(str(i)); print('ok')")
        checks = []
        for k in (1, 2, 3):
            script = tmp_path / f"check{k}.py"
            script.write_text(f"import sys; sys.exit(int(open('it').read()) + {k} > 4)")
            checks += ["--validate", f"c{k}={shlex.quote(sys.executable)} {script.name}"]
        code, events, _ = run_json(db_url, agent, "--workdir", str(tmp_path), *checks)
        assert code == ExitCode.REGRESSION
        assert [e["score"] for e in events if e["event"] == "iteration"] == [100.0, 75.0, 50.0]

    def test_every_terminal_reason_has_a_distinct_code(self) -> None:
        """The exit code table is one-to-one, and only completed maps to 0."""
        engine_codes = {}
        for reason in TerminalReason:
            state = State.COMPLETED if reason is TerminalReason.COMPLETED else State.ESCALATED
            snap = _snapshot(state, reason)
            engine_codes[reason] = exit_code_for(snap)
        assert len(set(engine_codes.values())) == len(TerminalReason)
        assert [r for r, c in engine_codes.items() if c == 0] == [TerminalReason.COMPLETED]
        assert ExitCode.USAGE not in engine_codes.values()


def _snapshot(state: State, reason: TerminalReason) -> Any:
    from loopwarden import LoopSnapshot

    return LoopSnapshot(
        id="x",
        task_id="t",
        state=state,
        iteration=1,
        max_iterations=1,
        config=LoopConfig(),
        prompt="",
        current_prompt="",
        context={},
        consecutive_failures=0,
        scores=(),
        terminal_reason=reason,
        reason="",
        seq=1,
        created_at=0.0,
        updated_at=0.0,
    )


class TestRunUsageErrors:
    """Bad invocations exit 2 with one line, before any loop is created."""

    def test_missing_agent_executable(self, tmp_path: Path) -> None:
        """An agent that cannot be found is a usage error and creates no database."""
        db = tmp_path / "lw.db"
        result = invoke(
            "run", "--agent", "no-such-agent-xyz --flag", "--prompt", "p", "--db", str(db)
        )
        check_one_line_error(result)
        assert "no-such-agent-xyz" in result.stderr
        assert not db.exists()

    @pytest.mark.parametrize(
        ("args", "needle"),
        [
            (["--prompt", "p", "--prompt-file", "x"], "exactly one"),
            ([], "exactly one"),
            (["--prompt", "p", "--max-iterations", "0"], "--max-iterations"),
            (["--prompt", "p", "--circuit-breaker", "0"], "--circuit-breaker"),
            (["--prompt", "p", "--completion", "sometimes"], "--completion"),
            (["--prompt", "p", "--validate", "no-such-checker-xyz"], "no-such-checker-xyz"),
            (["--prompt", "p", "--webhook", "ftp://x"], "--webhook"),
            (["--prompt", "p", "--no-such-flag"], "--no-such-flag"),
            (["--prompt-file", "/nonexistent/prompt.md"], "--prompt-file"),
        ],
    )
    def test_bad_flags(self, tmp_path: Path, args: list[str], needle: str) -> None:
        """Each bad flag is named in a single error line."""
        agent = make_agent(tmp_path, "print('x')")
        result = invoke("run", "--agent", agent, "--db", str(tmp_path / "lw.db"), *args)
        check_one_line_error(result)
        assert needle in result.stderr


class TestAgentContract:
    """What the agent command gets, and what a failing agent makes of an iteration."""

    def test_prompt_on_stdin_and_environment(self, db_url: str, tmp_path: Path) -> None:
        """The agent gets the prompt (plus feedback later) on stdin and LOOPWARDEN_* variables."""
        body = (
            "import json\n"
            "keys = ['LOOPWARDEN_LOOP_ID', 'LOOPWARDEN_TASK_ID', 'LOOPWARDEN_ITERATION',"
            " 'LOOPWARDEN_MAX_ITERATIONS']\n"
            "seen = {k: os.environ[k] for k in keys}\n"
            "open(f'call{i}.json', 'w').write(json.dumps({'env': seen, 'prompt': prompt}))\n"
            "print('<promise>COMPLETE</promise>' if i == 2 else 'first try')\n"
        )
        code, events, _ = run_json(
            db_url,
            make_agent(tmp_path, body),
            "--workdir",
            str(tmp_path),
            "--task",
            "T-9",
            "--max-iterations",
            "4",
            "--validate",
            f"{shlex.quote(sys.executable)} -c {shlex.quote(SECOND_CALL_MADE)}",
        )
        assert code == 0
        first = json.loads((tmp_path / "call1.json").read_text())
        second = json.loads((tmp_path / "call2.json").read_text())
        loop_id = events[0]["loop_id"]
        assert first["env"] == {
            "LOOPWARDEN_LOOP_ID": loop_id,
            "LOOPWARDEN_TASK_ID": "T-9",
            "LOOPWARDEN_ITERATION": "1",
            "LOOPWARDEN_MAX_ITERATIONS": "4",
        }
        assert first["prompt"] == "do the task"
        assert second["env"]["LOOPWARDEN_ITERATION"] == "2"
        assert second["prompt"].startswith("do the task\n\n---\nFeedback from iteration 1")

    def test_failing_agent_makes_no_promise(self, db_url: str, tmp_path: Path) -> None:
        """A non-zero exit is an iteration whose output says so; its promise does not count."""
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>'); sys.exit(3)")
        code, events, _ = run_json(db_url, agent, "--max-iterations", "1")
        assert code == ExitCode.MAX_ITERATIONS
        loop_id = events[0]["loop_id"]
        shown = json.loads(invoke("show", loop_id, "--db", db_url, "--json").stdout)
        output = shown["iterations"][0]["output"]
        assert output.startswith(f"{AGENT_FAILED} ")
        assert "exited with status 3" in output
        assert shown["iterations"][0]["promises"] == []
        assert events[1]["rules"][0] == {
            **events[1]["rules"][0],
            "name": "agent",
            "status": "failed",
        }

    def test_agent_timeout_is_a_failed_iteration(self, db_url: str, tmp_path: Path) -> None:
        """An agent over its timeout is killed and the iteration says it timed out."""
        agent = make_agent(tmp_path, "import time; time.sleep(30)")
        code, events, _ = run_json(db_url, agent, "--agent-timeout", "0.3", "--max-iterations", "1")
        assert code == ExitCode.MAX_ITERATIONS
        assert events[1]["agent"]["timed_out"] is True
        assert "timed out" in events[1]["feedback"][0]


def _finished_loop(db_url: str, tmp_path: Path, *extra: str) -> str:
    agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>' if i == 2 else 'wip')")
    code, events, _ = run_json(db_url, agent, "--task", "T-1", *extra)
    assert code == 0
    return str(events[0]["loop_id"])


class TestViews:
    """list, status, show and diagram, as tables and as JSON."""

    def test_list(self, db_url: str, tmp_path: Path) -> None:
        """list shows every loop, filters by state and task, and has --json."""
        loop_id = _finished_loop(db_url, tmp_path)
        rows = json.loads(invoke("list", "--db", db_url, "--json").stdout)
        assert [(r["id"], r["state"], r["iteration"], r["score"]) for r in rows] == [
            (loop_id, "completed", 2, 100.0)
        ]
        assert (
            json.loads(invoke("list", "--db", db_url, "--json", "--state", "blocked").stdout) == []
        )
        assert json.loads(invoke("list", "--db", db_url, "--json", "--task", "nope").stdout) == []
        table = invoke("list", "--db", db_url).stdout
        assert loop_id in table
        assert "completed" in table
        assert "2/15" in table

    def test_status(self, db_url: str, tmp_path: Path) -> None:
        """status gives the loop's state and exit code; a unique id prefix is enough."""
        loop_id = _finished_loop(db_url, tmp_path)
        data = json.loads(invoke("status", loop_id[:8], "--db", db_url, "--json").stdout)
        assert (data["id"], data["state"], data["exit_code"]) == (loop_id, "completed", 0)
        text = invoke("status", loop_id, "--db", db_url).stdout
        assert "completed" in text
        assert "python" in text

    def test_show(self, db_url: str, tmp_path: Path) -> None:
        """show has the iteration history, a score chart and the terminal reason."""
        loop_id = _finished_loop(db_url, tmp_path)
        data = json.loads(invoke("show", loop_id, "--db", db_url, "--json").stdout)
        assert [it["iteration"] for it in data["iterations"]] == [1, 2]
        assert data["loop"]["terminal_reason"] == "completed"
        text = invoke("show", loop_id, "--db", db_url).stdout
        assert "score trend" in text
        assert "100 ┤" in text
        assert "ended: completed" in text

    @pytest.mark.parametrize("fmt", ["mermaid", "dot", "svg"])
    def test_diagram_of_a_loop(self, db_url: str, tmp_path: Path, fmt: str) -> None:
        """diagram LOOP_ID counts how often each transition fired on that loop's path."""
        loop_id = _finished_loop(db_url, tmp_path)
        data = json.loads(
            invoke("diagram", loop_id, "--format", fmt, "--db", db_url, "--json").stdout
        )
        counts = {(c["source"], c["trigger"], c["dest"]): c["count"] for c in data["counts"]}
        assert counts == {
            ("initialized", "start", "executing"): 1,
            ("executing", "submit", "validating"): 2,
            ("validating", "evaluate", "deciding"): 2,
            ("deciding", "decide", "executing"): 1,
            ("deciding", "decide", "completed"): 1,
        }
        assert "(2x)" in data["diagram"]

    def test_diagram_of_the_machine(self) -> None:
        """diagram without a loop draws the machine and needs no database."""
        result = invoke("diagram")
        assert result.exit_code == 0
        assert result.stdout.startswith("stateDiagram-v2")


class TestManualControl:
    """block and reopen, then resume with the stored settings."""

    def test_block_reopen_resume(self, db_url: str, tmp_path: Path) -> None:
        """A blocked loop reopened with more iterations resumes to completion with no flags."""
        agent = make_agent(tmp_path, "print('<promise>COMPLETE</promise>' if i >= 3 else 'wip')")
        code, events, _ = run_json(db_url, agent, "--max-iterations", "2")
        loop_id = events[0]["loop_id"]
        assert code == ExitCode.MAX_ITERATIONS
        reopened = invoke("reopen", loop_id, "--extra-iterations", "2", "--db", db_url, "--json")
        assert json.loads(reopened.stdout)["state"] == "executing"
        blocked = invoke("block", loop_id, "--reason", "wait for review", "--db", db_url, "--json")
        assert json.loads(blocked.stdout)["terminal_reason"] == "blocked_by_user"
        again = invoke("resume", loop_id, "--db", db_url, "--json")
        assert again.exit_code == ExitCode.BLOCKED_BY_USER
        assert json_lines(again.stdout)[-1]["already_finished"] is True
        invoke("reopen", loop_id, "--db", db_url)
        final = invoke("resume", loop_id, "--db", db_url, "--json")
        assert final.exit_code == 0
        assert json_lines(final.stdout)[-1]["iterations"] == 3

    def test_block_of_a_completed_loop_is_refused(self, db_url: str, tmp_path: Path) -> None:
        """A terminal loop cannot be blocked: one line, exit 2."""
        loop_id = _finished_loop(db_url, tmp_path)
        check_one_line_error(invoke("block", loop_id, "--reason", "x", "--db", db_url))


class TestErrors:
    """Errors a user can act on: one line on stderr, exit 2, no traceback."""

    @pytest.mark.parametrize("command", ["status", "show", "resume", "block", "reopen", "diagram"])
    def test_unknown_loop_id(self, db_url: str, tmp_path: Path, command: str) -> None:
        """An unknown loop id is one line naming it."""
        _finished_loop(db_url, tmp_path)
        extra = ["--reason", "r"] if command == "block" else []
        result = invoke(command, "feedface", "--db", db_url, *extra)
        check_one_line_error(result)
        assert "feedface" in result.stderr

    @pytest.mark.parametrize("command", ["list", "status", "resume"])
    def test_missing_database(self, tmp_path: Path, command: str) -> None:
        """Reading commands never create a database: a missing one is an error."""
        db = tmp_path / "nowhere" / "lw.db"
        args = [command] + ([] if command == "list" else ["abcd1234"])
        result = invoke(*args, "--db", str(db))
        check_one_line_error(result)
        assert "no loopwarden database" in result.stderr
        assert not db.exists()

    def test_newer_schema(self, db_url: str, tmp_path: Path) -> None:
        """A database written by a newer loopwarden is refused."""
        _finished_loop(db_url, tmp_path)
        path = db_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE lw_meta SET value = '999' WHERE key = 'schema_version'")
        result = invoke("list", "--db", db_url)
        check_one_line_error(result)
        assert "newer" in result.stderr

    def test_json_errors_are_json_too(self, db_url: str, tmp_path: Path) -> None:
        """With --json an error is also a JSON object on stdout."""
        _finished_loop(db_url, tmp_path)
        result = invoke("status", "feedface", "--db", db_url, "--json")
        assert result.exit_code == 2
        assert json.loads(result.stdout)["exit_code"] == 2

    def test_resume_of_a_loop_not_started_by_run(self, db_url: str) -> None:
        """A loop made through the Python API has no agent command to resume with."""
        with LoopEngine(db_url) as engine:
            loop = engine.start("T", LoopConfig())
        result = invoke("resume", loop.id, "--db", db_url)
        check_one_line_error(result)
        assert "not started by `loopwarden run`" in result.stderr


class TestCompletionHooks:
    """--on-complete scripts receive the outcome; they never change the exit code."""

    def test_payload_on_stdin_validates(self, db_url: str, tmp_path: Path) -> None:
        """The hook gets one JSON object on stdin that matches docs/completion-hook.schema.json."""
        hook = tmp_path / "hook.py"
        hook.write_text(
            f"#!{sys.executable}\nimport sys\nopen({str(tmp_path / 'got.json')!r}, 'w')"
            ".write(sys.stdin.read())\nsys.exit(7)\n"
        )
        hook.chmod(0o755)
        loop_id = _finished_loop(db_url, tmp_path, "--on-complete", str(hook))
        payload = json.loads((tmp_path / "got.json").read_text())
        jsonschema.validate(payload, SCHEMA)
        assert (payload["loop_id"], payload["status"], payload["exit_code"]) == (
            loop_id,
            "completed",
            0,
        )
        assert (payload["iterations"], payload["task_id"]) == (2, "T-1")
        assert payload["score_history"] == [100.0, 100.0]
        assert payload["agent_command"] == Path(sys.executable).name
        assert loop_id in payload["log_tail"]

    def test_hooks_fire_once_per_outcome(self, db_url: str, tmp_path: Path) -> None:
        """Resume of a finished loop fires its hooks only if they never fired for that end."""
        calls = tmp_path / "calls.txt"
        hook = tmp_path / "hook.py"
        hook.write_text(
            f"#!{sys.executable}\nimport sys\nopen({str(calls)!r}, 'a').write('x\\n')\n"
        )
        hook.chmod(0o755)
        loop_id = _finished_loop(db_url, tmp_path, "--on-complete", str(hook))
        assert calls.read_text().count("x") == 1
        assert invoke("resume", loop_id, "--db", db_url).exit_code == 0
        assert calls.read_text().count("x") == 1
        with LoopEngine(db_url) as engine:  # as if run died between the end and its hooks
            engine.update_metadata(loop_id, {"completion_hooks_fired_seq": None})
        assert invoke("resume", loop_id, "--db", db_url).exit_code == 0
        assert calls.read_text().count("x") == 2

    def test_missing_hook_is_a_warning(self, db_url: str, tmp_path: Path) -> None:
        """A missing hook script warns on stderr and changes nothing else."""
        agent = make_agent(tmp_path, "print('<promise>BLOCKED</promise>')")
        code, _, stderr = run_json(db_url, agent, "--on-complete", str(tmp_path / "absent.sh"))
        assert code == ExitCode.BLOCKED_BY_AGENT
        assert "warning: completion hook" in stderr
        assert "absent.sh" in stderr

    def test_environment_variable_names_hooks(
        self, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """LOOPWARDEN_ON_COMPLETE names hooks when --on-complete is not given."""
        out = tmp_path / "env-hook.txt"
        hook = tmp_path / "hook.sh"
        hook.write_text(f"#!/bin/sh\ncat > {shlex.quote(str(out))}\n")
        hook.chmod(0o755)
        monkeypatch.setenv("LOOPWARDEN_ON_COMPLETE", str(hook))
        _finished_loop(db_url, tmp_path)
        assert json.loads(out.read_text())["status"] == "completed"


class TestPayload:
    """The payload itself: schema, redaction, size."""

    def payload(self, log: str, **changes: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "loop_id": "abc",
            "task_id": "T",
            "status": "interrupted",
            "terminal_reason": None,
            "reason": "interrupted",
            "exit_code": 130,
            "iterations": 0,
            "max_iterations": 15,
            "started_at": 1_700_000_000.0,
            "finished_at": 1_700_000_002.5,
            "score_history": [],
            "agent_command": "claude",
            "git_branch": None,
            "log": log,
        }
        fields.update(changes)
        return completion.build_payload(**fields)

    def test_schema_accepts_each_status(self) -> None:
        """Every status the runner reports validates."""
        for status, reason, code in [
            ("completed", "completed", 0),
            ("blocked", "blocked_by_user", 4),
            ("escalated", "regression", 9),
            ("failed", None, 1),
            ("interrupted", None, 130),
        ]:
            jsonschema.validate(
                self.payload("x\n", status=status, terminal_reason=reason, exit_code=code), SCHEMA
            )

    def test_schema_rejects_unknown_fields(self) -> None:
        """The schema is closed: an undocumented field fails validation."""
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**self.payload(""), "env": {}}, SCHEMA)

    def test_log_tail_is_bounded(self) -> None:
        """log_tail keeps the last 3 KB, starting at a line boundary."""
        log = "".join(f"line {n} ü\n" for n in range(2000))
        tail = self.payload(log)["log_tail"]
        assert len(tail.encode()) <= completion.LOG_TAIL_BYTES
        assert tail.startswith("line ")
        assert tail.endswith("line 1999 ü\n")

    @pytest.mark.parametrize(
        "secret",
        [
            "sk-ant-api03-abcdefghijklmnop",
            "ghp_abcdefghijklmnopqrstuvwxyz0123",
            "xoxb-1234567890-abcdefghij",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        ],
    )
    def test_token_formats_are_redacted(self, secret: str) -> None:
        """Provider token formats never reach the payload."""
        payload = self.payload(f"calling api with {secret} now\n", reason=f"failed: {secret}")
        assert secret not in json.dumps(payload)
        assert "[REDACTED]" in payload["log_tail"]

    @pytest.mark.parametrize(
        ("text", "kept"),
        [
            ("Authorization: Bearer abc.def-ghi_jkl", "Bearer "),
            ("api_key=s3cr3tvalue&x=1", "api_key="),
            ('{"password": "hunter22"}', '"password": "'),
            ("GITHUB_TOKEN=abcd1234efgh", "GITHUB_TOKEN="),
            ("https://user:pa55word@example.com/x", "https://"),
        ],
    )
    def test_named_secrets_are_redacted(self, text: str, kept: str) -> None:
        """key=, token=, password= values, bearer tokens and URL passwords are replaced."""
        redacted = completion.redact(text)
        assert kept in redacted
        assert "[REDACTED]" in redacted
        for secret in ("abc.def-ghi_jkl", "s3cr3tvalue", "hunter22", "abcd1234efgh", "pa55word"):
            assert secret not in redacted

    def test_ordinary_text_is_kept(self) -> None:
        """Redaction leaves ordinary log lines alone."""
        line = "[3/15] score 66.7 · CONTINUE · validation failed: 1 of 3 rules did not pass"
        assert completion.redact(line) == line

    def test_git_branch(self, tmp_path: Path) -> None:
        """The branch is reported inside a git repository and None outside one."""
        assert completion.git_branch(str(tmp_path)) is None
        branch = completion.git_branch(str(ROOT))
        assert branch is None or isinstance(branch, str)

    def test_run_log_is_bounded(self) -> None:
        """The run log keeps the newest lines within its limit."""
        log = RunLog(limit=100)
        for n in range(50):
            log.write(f"line {n}")
        text = log.text()
        assert len(text) <= 110
        assert text.endswith("line 49\n")


class _Server:
    """A local HTTP server answering POSTs with the given status codes, recording bodies."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append(body)
                status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory() -> Iterator[Any]:
    servers: list[_Server] = []

    def make(statuses: list[int]) -> _Server:
        servers.append(_Server(statuses))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


class TestWebhook:
    """--webhook POSTs the payload, retrying a little on 5xx and connection errors."""

    def test_retries_5xx_then_succeeds(self, server_factory: Any) -> None:
        """Two 503s then 200: three attempts, success."""
        server = server_factory([503, 503, 200])
        result = completion.post_webhook(server.url, {"event": "loop.finished"}, backoff=0.01)
        assert result.ok
        assert len(server.bodies) == 3

    def test_gives_up_after_bounded_attempts(self, server_factory: Any) -> None:
        """Persistent 500s stop after the attempt limit."""
        server = server_factory([500] * 10)
        result = completion.post_webhook(server.url, {}, attempts=3, backoff=0.01)
        assert not result.ok
        assert "HTTP 500" in result.detail
        assert len(server.bodies) == 3

    def test_4xx_is_not_retried(self, server_factory: Any) -> None:
        """A client error is final."""
        server = server_factory([404])
        assert not completion.post_webhook(server.url, {}, backoff=0.01).ok
        assert len(server.bodies) == 1

    def test_connection_refused_is_retried_and_bounded(self) -> None:
        """Nothing listening: a bounded number of connection attempts, then a warning."""
        calls = []

        def refuse(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            raise httpx.ConnectError("refused", request=request)

        result = completion.post_webhook(
            "http://127.0.0.1:9/hook", {}, backoff=0.01, transport=httpx.MockTransport(refuse)
        )
        assert not result.ok
        assert len(calls) == 3

    def test_run_posts_the_payload(self, db_url: str, tmp_path: Path, server_factory: Any) -> None:
        """`run --webhook` POSTs a payload that validates, and a failing webhook changes nothing."""
        server = server_factory([200])
        loop_id = _finished_loop(db_url, tmp_path, "--webhook", server.url)
        payload = json.loads(server.bodies[0])
        jsonschema.validate(payload, SCHEMA)
        assert payload["loop_id"] == loop_id


class TestCharts:
    """The score trend drawings."""

    def test_sparkline(self) -> None:
        """One block character per score, rising with it."""
        assert sparkline([0, 50, 100]) == "▁▄█"

    def test_score_chart(self) -> None:
        """A column per iteration, full height at 100, a dot at 0."""
        lines = score_chart([0, 100], height=4)
        assert lines[0] == "100 ┤  █"
        assert lines[3].endswith("· █")


class TestRunner:
    """The runner under the CLI: the lease it holds while the agent works."""

    def settings(self, tmp_path: Path, body: str) -> Any:
        from loopwarden.runner import RunSettings

        return RunSettings(agent=make_agent(tmp_path, body), workdir=str(tmp_path))

    def test_heartbeat_keeps_the_lease(self, db_url: str, tmp_path: Path) -> None:
        """While the agent runs longer than the lease TTL, no other owner can take the loop."""
        from loopwarden import LeaseHeldError
        from loopwarden.runner import Runner

        settings = self.settings(
            tmp_path, "import time; time.sleep(2.5); print('<promise>COMPLETE</promise>')"
        )
        with LoopEngine(db_url, lease_ttl=1.0) as engine, LoopEngine(db_url) as other:
            loop = engine.create("T", LoopConfig(), prompt="p", metadata=settings.metadata())
            errors: list[BaseException] = []

            def intrude() -> None:
                time.sleep(1.8)  # well past the TTL: only renewals keep the lease
                try:
                    other.resume(loop.id)
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=intrude)
            thread.start()
            outcome = Runner(engine, settings).drive(loop.id)
            thread.join()
        assert outcome.exit_code == ExitCode.COMPLETED
        assert len(errors) == 1
        assert isinstance(errors[0], LeaseHeldError)

    def test_block_during_a_run_ends_it_as_blocked(self, db_url: str, tmp_path: Path) -> None:
        """`loopwarden block` while the agent works: the run ends with the blocked exit code."""
        from loopwarden.runner import Runner

        settings = self.settings(tmp_path, "import time; time.sleep(0.8); print('wip')")
        with LoopEngine(db_url) as engine, LoopEngine(db_url) as other:
            loop = engine.create("T", LoopConfig(), prompt="p", metadata=settings.metadata())
            timer = threading.Timer(0.3, other.block, args=(loop.id, "stop now"))
            timer.start()
            outcome = Runner(engine, settings).drive(loop.id)
            timer.join()
        assert (outcome.status, outcome.exit_code) == ("blocked", ExitCode.BLOCKED_BY_USER)
        assert outcome.iterations == 0
