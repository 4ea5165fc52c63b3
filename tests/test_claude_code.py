"""loopwarden as Claude Code's Stop hook: `loopwarden claude ...` (issue 4B)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loopwarden import LoopEngine, State, TerminalReason, detect_promises
from loopwarden.integrations import claude_code
from loopwarden.integrations.claude_cli import claude_app
from loopwarden.integrations.claude_code import (
    ensure_stop_hook,
    hook_command,
    last_assistant_text,
    neutralize_quoted_promises,
    remove_stop_hook,
    run_stop_hook,
    start_loop,
)

FIXTURES = Path(__file__).parent / "fixtures" / "claude-code"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "claude-code"
PROMPT = (
    "Make the failing tests in tests/test_parser.py pass. "
    "Output <promise>COMPLETE</promise> when every test passes."
)
DONE = "All 12 tests pass and lint is clean.\n\n<promise>COMPLETE</promise>"
HOOK = [sys.executable, "-m", "loopwarden.integrations.claude_cli", "stop-hook"]


def fixture_input(name: str = "stop-input.json", **changes: Any) -> dict[str, Any]:
    """A hook input from the fixtures, with some fields changed (None removes a field)."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def call_hook(project: Path, **changes: Any) -> tuple[dict[str, Any] | None, str]:
    """Run the stop hook in-process for ``project``; the parsed stdout (or None) and stderr."""
    changes.setdefault("cwd", str(project))
    response = run_stop_hook(json.dumps(fixture_input(**changes)), env={})
    assert response.exit_code == 0
    return (json.loads(response.stdout) if response.stdout else None), response.stderr


def open_engine(project: Path) -> LoopEngine:
    return LoopEngine(claude_code.project_db_url(project), create=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def marker_loop(project: Path) -> str:
    """A loop whose validation passes once ``ok`` exists in the project."""
    loop, _ = start_loop(project, PROMPT, max_iterations=5, validate=["test -f ok"])
    return loop.id


class TestFixtures:
    """The suite carries its own copy of the Claude Code fixtures."""

    def test_copies_match_the_shared_fixtures(self) -> None:
        """When ../shared is beside the repository, the copies are identical to it."""
        if not SHARED.is_dir():
            pytest.skip("../shared/fixtures is not beside this checkout")
        for path in SHARED.iterdir():
            assert (FIXTURES / path.name).read_bytes() == path.read_bytes(), path.name

    def test_stop_input_has_the_documented_fields(self) -> None:
        """stop-input.json carries every field the hook reads."""
        data = fixture_input()
        assert {"session_id", "transcript_path", "cwd", "hook_event_name"} <= set(data)
        assert data["hook_event_name"] == "Stop"


class TestTranscriptReading:
    """The last assistant text of a transcript, when the input has no last_assistant_message."""

    def test_complete_transcript(self) -> None:
        """The final text block, skipping tool calls."""
        assert last_assistant_text(FIXTURES / "transcript-complete.jsonl") == DONE

    def test_working_transcript(self) -> None:
        """An assistant message that mixes text and tool_use: the last text wins."""
        text = last_assistant_text(FIXTURES / "transcript-working.jsonl")
        assert text is not None
        assert text.startswith("Three tests still fail")

    def test_partial_last_line_is_tolerated(self, tmp_path: Path) -> None:
        """A half-written last line (Claude Code still flushing) is skipped."""
        lines = (FIXTURES / "transcript-complete.jsonl").read_text().splitlines()
        path = tmp_path / "t.jsonl"
        path.write_text("\n".join(lines[:2]) + "\n" + lines[3][: len(lines[3]) // 2])
        assert last_assistant_text(path) is None  # only a tool call before the torn line
        path.write_text(
            (FIXTURES / "transcript-working.jsonl").read_text() + lines[3][: len(lines[3]) // 2]
        )
        text = last_assistant_text(path)
        assert text is not None
        assert text.startswith("Three tests still fail")

    def test_one_message_split_over_lines_is_joined(self, tmp_path: Path) -> None:
        """Lines sharing one message.id form one message; sidechain lines are not ours."""

        def line(text: str, msg: str, sidechain: bool = False) -> str:
            content = [{"type": "text", "text": text}]
            return json.dumps(
                {
                    "type": "assistant",
                    "isSidechain": sidechain,
                    "message": {"id": msg, "role": "assistant", "content": content},
                }
            )

        path = tmp_path / "t.jsonl"
        path.write_text(
            "\n".join(
                [
                    line("old", "m1"),
                    line("part 1", "m2"),
                    line("part 2", "m2"),
                    line("sub", "m3", True),
                ]
            )
            + "\n"
        )
        assert last_assistant_text(path) == "part 1\npart 2"

    def test_missing_transcript(self, tmp_path: Path) -> None:
        """No file: None."""
        assert last_assistant_text(tmp_path / "absent.jsonl") is None


class TestPromptQuotingThePromise:
    """A promise tag quoted from the prompt is never taken for a promise."""

    def promises(self, output: str) -> list[str]:
        return [p.word for p in detect_promises(neutralize_quoted_promises(output, [PROMPT]))]

    def test_echoing_the_instruction_is_not_a_promise(self) -> None:
        """Repeating the prompt's sentence around the tag is quoting it."""
        output = (
            "The task says to output <promise>COMPLETE</promise> when every test passes; "
            "3 tests still fail."
        )
        assert self.promises(output) == []

    def test_echoing_the_whole_prompt_is_not_a_promise(self) -> None:
        """The prompt pasted back verbatim carries no promise."""
        assert self.promises(f"You asked:\n{PROMPT}\nWorking on it.") == []

    def test_tag_in_quotation_marks_is_not_a_promise(self) -> None:
        """'"<promise>COMPLETE</promise>"' is talking about the tag."""
        assert self.promises('I will print "<promise>COMPLETE</promise>" at the end.') == []

    def test_a_tag_on_its_own_line_is_a_promise(self) -> None:
        """The agent's own promise, alone on its line, counts."""
        assert self.promises(DONE) == ["COMPLETE"]

    def test_a_real_promise_after_a_quoted_one_counts(self) -> None:
        """Quoting the prompt and then promising: exactly one promise."""
        output = (
            "You asked me to output <promise>COMPLETE</promise> when every test passes.\n"
            "They all pass now.\n<promise>COMPLETE</promise>"
        )
        assert self.promises(output) == ["COMPLETE"]

    def test_other_text_around_a_promise_keeps_it(self) -> None:
        """A promise after the agent's own words is still a promise."""
        assert self.promises("Done, all green. <promise>COMPLETE</promise>") == ["COMPLETE"]

    def test_end_to_end_a_quoted_promise_does_not_complete_the_loop(self, project: Path) -> None:
        """The loop (no rules, trusting the promise) continues when the promise is only quoted."""
        loop, _ = start_loop(project, PROMPT)
        quoted = "I must output <promise>COMPLETE</promise> when every test passes. Not yet."
        out, _ = call_hook(project, last_assistant_message=quoted)
        assert out is not None
        assert out["decision"] == "block"
        assert "read as a quotation, not as a promise" in out["reason"]
        with open_engine(project) as engine:
            assert engine.get(loop.id).state is State.EXECUTING
            [record] = engine.history(loop.id)
            assert record.promises == ()
        out, _ = call_hook(project, last_assistant_message=DONE)
        assert out is not None
        assert "decision" not in out
        assert "completed" in out["systemMessage"]


class TestSettingsLocal:
    """`.claude/settings.local.json` gets one Stop hook entry, idempotently, keeping the rest."""

    def test_keeps_everything_else_and_is_idempotent(self, tmp_path: Path) -> None:
        """Other keys and hooks survive; a second write changes nothing."""
        path = tmp_path / ".claude" / "settings.local.json"
        path.parent.mkdir()
        original: dict[str, Any] = {
            "permissions": {"allow": ["Bash(ls)"]},
            "hooks": {
                "Stop": [{"hooks": [{"type": "command", "command": "./mine.sh"}]}],
                "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "x"}]}],
            },
        }
        path.write_text(json.dumps(original))
        assert ensure_stop_hook(path, "/bin/loopwarden claude stop-hook")
        first = path.read_bytes()
        assert not ensure_stop_hook(path, "/bin/loopwarden claude stop-hook")
        assert path.read_bytes() == first
        data = json.loads(first)
        assert data["permissions"] == original["permissions"]
        assert data["hooks"]["PreToolUse"] == original["hooks"]["PreToolUse"]
        assert data["hooks"]["Stop"] == [
            original["hooks"]["Stop"][0],
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": "/bin/loopwarden claude stop-hook",
                        "timeout": 600,
                    }
                ]
            },
        ]

    def test_an_older_entry_is_replaced_not_duplicated(self, tmp_path: Path) -> None:
        """A loopwarden entry from another installation gives way to the current one."""
        path = tmp_path / "settings.local.json"
        ensure_stop_hook(path, "/old/venv/bin/loopwarden claude stop-hook")
        ensure_stop_hook(path, "/new/venv/bin/loopwarden claude stop-hook")
        stop = json.loads(path.read_text())["hooks"]["Stop"]
        assert [h["command"] for g in stop for h in g["hooks"]] == [
            "/new/venv/bin/loopwarden claude stop-hook"
        ]

    def test_an_invalid_file_is_never_overwritten(self, tmp_path: Path) -> None:
        """A settings file that is not JSON is left alone, with a clear error."""
        path = tmp_path / "settings.local.json"
        path.write_text("{ not json")
        with pytest.raises(claude_code.SettingsFileError, match="not valid JSON"):
            ensure_stop_hook(path, "loopwarden claude stop-hook")
        assert path.read_text() == "{ not json"

    def test_remove_takes_out_only_loopwardens_entry(self, tmp_path: Path) -> None:
        """Removing the hook keeps the user's own Stop hooks."""
        path = tmp_path / "settings.local.json"
        path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"command": "./mine.sh"}]}]}}))
        ensure_stop_hook(path, "loopwarden claude stop-hook")
        assert remove_stop_hook(path)
        assert json.loads(path.read_text()) == {
            "hooks": {"Stop": [{"hooks": [{"command": "./mine.sh"}]}]}
        }
        assert not remove_stop_hook(path)

    def test_hook_command_runs_this_installation(self) -> None:
        """The command names this interpreter's loopwarden: Claude Code's PATH does not matter."""
        command = hook_command()
        assert command.endswith("claude stop-hook")
        assert command.startswith(str(Path(sys.executable).parent)) or sys.executable in command
        assert hook_command("sqlite:////x y.db").endswith("--db 'sqlite:////x y.db'")


class TestStartStatusCancel:
    """`loopwarden claude start | status | cancel | prompt | release`."""

    def test_start_creates_a_loop_bound_to_the_project(self, project: Path) -> None:
        """The loop lives in <project>/.loopwarden/loopwarden.db with the chosen guards."""
        loop, changed = start_loop(
            project,
            PROMPT,
            max_iterations=7,
            circuit_breaker=5,
            completion_promise="DONE",
            validate=["pytest -q", "ruff check"],
        )
        assert changed
        assert (project / ".loopwarden" / "loopwarden.db").is_file()
        assert loop.state is State.EXECUTING
        assert loop.metadata == {"integration": "claude-code", "project": str(project.resolve())}
        assert loop.config.max_iterations == 7
        assert loop.config.circuit_breaker_threshold == 5
        assert loop.config.completion_promises == ("DONE",)
        assert [r.name for r in loop.config.rules] == ["validate-1", "validate-2"]
        assert loop.config.workdir == str(project.resolve())
        settings = json.loads((project / ".claude" / "settings.local.json").read_text())
        assert settings["hooks"]["Stop"][0]["hooks"][0]["command"] == hook_command()

    def test_a_second_start_is_refused_while_a_loop_is_active(self, project: Path) -> None:
        """One active loop per project."""
        start_loop(project, PROMPT)
        with pytest.raises(claude_code.ClaudeLoopError, match="already active"):
            start_loop(project, "another")

    def test_cli_round_trip(self, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """start, prompt, status, cancel through the typer app; then the hook is a no-op."""
        monkeypatch.chdir(project)
        runner = CliRunner()
        prompt_file = project / "prompt.md"
        prompt_file.write_text(PROMPT)
        started = runner.invoke(
            claude_app, ["start", "--prompt-file", str(prompt_file), "--max-iterations", "3"]
        )
        assert started.exit_code == 0, started.output
        assert "started" in started.output
        shown = runner.invoke(claude_app, ["prompt"])
        assert shown.output.strip() == PROMPT
        status = runner.invoke(claude_app, ["status", "--json"])
        data = json.loads(status.output)
        assert (data["state"], data["iteration"], data["max_iterations"]) == ("executing", 1, 3)
        assert data["hook_installed"] is True
        cancelled = runner.invoke(claude_app, ["cancel"])
        assert "cancelled" in cancelled.output
        with open_engine(project) as engine:
            [loop] = engine.list()
            assert loop.terminal_reason is TerminalReason.BLOCKED_BY_USER
        assert call_hook(project) == (None, "")
        assert (
            runner.invoke(claude_app, ["cancel"]).output.strip() == "no active loop in this project"
        )

    def test_start_needs_exactly_one_prompt(
        self, project: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No prompt, or both an argument and a file: a usage error."""
        monkeypatch.chdir(project)
        (project / "p.md").write_text("from a file")
        for args in (["start"], ["start", "from an argument", "--prompt-file", "p.md"]):
            result = CliRunner().invoke(claude_app, args)
            assert result.exit_code == 1
            assert "exactly one" in result.output
        assert not (project / ".loopwarden").exists()


class TestStopHook:
    """The hook: submit the output, then block with prompt + feedback or stop with the outcome."""

    def test_failing_validation_blocks_with_prompt_and_feedback(
        self, project: Path, marker_loop: str
    ) -> None:
        """A rejected promise keeps Claude working: reason = prompt + feedback."""
        out, _ = call_hook(project)
        assert out is not None
        assert out["decision"] == "block"
        assert "quotation" not in out["reason"]
        assert out["reason"].startswith(PROMPT)
        assert "validate-1" in out["reason"]
        assert out["systemMessage"].startswith("loopwarden: iteration 1/5 done, score 0")

    def test_passing_validation_lets_claude_stop_with_the_outcome(
        self, project: Path, marker_loop: str
    ) -> None:
        """Validated promise: no decision, the outcome in systemMessage."""
        (project / "ok").touch()
        out, _ = call_hook(project)
        assert out is not None
        assert set(out) == {"systemMessage"}
        assert "completed (completed) at iteration 1/5, score 100" in out["systemMessage"]

    def test_max_iterations_ends_the_loop_escalated(self, project: Path) -> None:
        """At the iteration budget Claude is let go, and told it was the limit, not success."""
        start_loop(project, PROMPT, max_iterations=2)
        call_hook(project, last_assistant_message="working")
        out, _ = call_hook(project, last_assistant_message="still working")
        assert out is not None
        assert "decision" not in out
        assert "escalated (max_iterations)" in out["systemMessage"]
        assert call_hook(project) == (None, "")

    def test_output_falls_back_to_the_transcript(self, project: Path, marker_loop: str) -> None:
        """Without last_assistant_message, the transcript's last assistant text is submitted."""
        (project / "ok").touch()
        transcript = project / "transcript.jsonl"
        transcript.write_bytes((FIXTURES / "transcript-complete.jsonl").read_bytes() + b'{"type"')
        out, _ = call_hook(project, last_assistant_message=None, transcript_path="transcript.jsonl")
        assert out is not None
        assert "completed" in out["systemMessage"]
        with open_engine(project) as engine:
            assert engine.history(marker_loop)[0].output == DONE

    def test_subagent_stop_input_is_ignored(self, project: Path, marker_loop: str) -> None:
        """The hook drives the main agent's loop only; SubagentStop input is a no-op."""
        response = run_stop_hook(
            json.dumps(fixture_input("subagent-stop-input.json", cwd=str(project))), env={}
        )
        assert (response.stdout, response.exit_code) == ("", 0)

    def test_no_loop_in_the_project_is_a_silent_no_op(self, project: Path) -> None:
        """No database, no loop: exit 0, no output, nothing created."""
        assert call_hook(project) == (None, "")
        assert not (project / ".loopwarden").exists()

    def test_claude_project_dir_wins_over_cwd(self, project: Path, marker_loop: str) -> None:
        """A session whose cwd moved into a subdirectory still finds the project."""
        sub = project / "src" / "deep"
        sub.mkdir(parents=True)
        payload = json.dumps(fixture_input(cwd=str(sub)))
        by_env = run_stop_hook(payload, env={"CLAUDE_PROJECT_DIR": str(project)})
        assert json.loads(by_env.stdout)["decision"] == "block"
        by_walk = run_stop_hook(payload, env={})
        assert json.loads(by_walk.stdout)["decision"] == "block"


class TestSessions:
    """The loop belongs to the first session that stops; any other session is never trapped."""

    def test_a_second_session_in_the_project_is_ignored(
        self, project: Path, marker_loop: str
    ) -> None:
        """Session B gets no output and the loop does not move."""
        first, _ = call_hook(project, session_id="session-A")
        assert first is not None
        assert first["decision"] == "block"
        assert call_hook(project, session_id="session-B") == (None, "")
        with open_engine(project) as engine:
            assert engine.get(marker_loop).iteration == 2
            assert engine.get(marker_loop).context["claude_session_id"] == "session-A"
        again, _ = call_hook(project, session_id="session-A")
        assert again is not None
        assert again["systemMessage"].startswith("loopwarden: iteration 2/5")

    def test_release_hands_the_loop_to_the_next_session(
        self, project: Path, marker_loop: str
    ) -> None:
        """After `claude release` (a new Claude Code session), the next session binds."""
        call_hook(project, session_id="session-A")
        assert claude_code.release_session(project, marker_loop) == "session-A"
        out, _ = call_hook(project, session_id="session-B")
        assert out is not None
        assert out["decision"] == "block"
        assert claude_code.session_binding(project, marker_loop) == "session-B"


class TestNeverTrapsTheUser:
    """Any internal error lets Claude Code stop: exit 0, a message, a log line."""

    def test_input_that_is_not_json(self, project: Path) -> None:
        """Garbage on stdin: exit 0, message on stderr and in systemMessage."""
        response = run_stop_hook("this is not json", env={})
        assert response.exit_code == 0
        assert "stop hook failed" in response.stderr
        assert "decision" not in json.loads(response.stdout)

    def test_a_broken_database(self, project: Path, marker_loop: str) -> None:
        """An unreadable database: Claude Code stops, the error is logged under .loopwarden/."""
        (project / ".loopwarden" / "loopwarden.db").write_bytes(b"garbage" * 1000)
        for suffix in ("-wal", "-shm"):
            (project / ".loopwarden" / f"loopwarden.db{suffix}").unlink(missing_ok=True)
        out, err = call_hook(project)
        assert out is not None
        assert "decision" not in out
        assert "stop hook failed" in err
        assert "stop hook failed" in out["systemMessage"]
        assert (project / ".loopwarden" / "claude-stop-hook.log").read_text()


class TestAsARealProcess:
    """`stop-hook` as Claude Code runs it: a subprocess fed the fixture JSON on stdin."""

    def run(self, project: Path, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "CLAUDE_PROJECT_DIR"}
        return subprocess.run(
            HOOK,
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            cwd=project,
            env=env,
            timeout=60,
            check=False,
        )

    def test_fixture_input_end_to_end(self, project: Path, marker_loop: str) -> None:
        """Block while validation fails, then stop with the outcome once it passes."""
        first = self.run(project, fixture_input(cwd=str(project)))
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout)["decision"] == "block"
        (project / "ok").touch()
        second = self.run(project, fixture_input(cwd=str(project)))
        assert second.returncode == 0, second.stderr
        answer = json.loads(second.stdout)
        assert "decision" not in answer
        assert "completed" in answer["systemMessage"]

    def test_a_crash_between_two_hook_calls_resumes_correctly(self, project: Path) -> None:
        """SIGKILL mid-validation: the next call finishes that iteration, then takes the new one."""
        loop, _ = start_loop(
            project, PROMPT, max_iterations=5, validate=["test ! -f slow || sleep 3; test -f ok"]
        )
        (project / "slow").touch()
        payload = fixture_input(cwd=str(project), last_assistant_message="first attempt")
        proc = subprocess.Popen(
            HOOK,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=project,
            text=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(payload))
        proc.stdin.close()
        deadline = time.monotonic() + 30
        with open_engine(project) as engine:
            while engine.get(loop.id).state is not State.VALIDATING:
                assert time.monotonic() < deadline, "the hook never reached validation"
                time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        (project / "slow").unlink()
        (project / "ok").touch()
        second = self.run(project, fixture_input(cwd=str(project)))
        assert second.returncode == 0, second.stderr
        with open_engine(project) as engine:
            history = engine.history(loop.id)
            snapshot = engine.get(loop.id)
        assert [(r.iteration, r.output) for r in history] == [(1, "first attempt"), (2, DONE)]
        assert snapshot.state is State.COMPLETED
        assert "completed" in json.loads(second.stdout)["systemMessage"]
