"""Command hooks in Claude Code's format: settings, stdin, exit codes, JSON, timeouts (issue 4A)."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from loopwarden import (
    ConfigError,
    LoopConfig,
    LoopEngine,
    Signal,
    State,
    StopCheck,
    ValidationReport,
)
from loopwarden.hooks.base import StopContext
from loopwarden.hooks.command import (
    CommandHook,
    CommandHooks,
    load_settings,
    matcher_matches,
    transcript_path,
    write_transcript,
)

BLOCK = '{"decision": "block", "reason": "tests still fail"}'


def make_context(workdir: Path, **changes: Any) -> StopContext:
    """A StopContext for a root loop about to complete in ``workdir``."""
    values: dict[str, Any] = {
        "loop_id": "loop-1",
        "task_id": "task-1",
        "iteration": 2,
        "max_iterations": 10,
        "output": "All done.\n<promise>COMPLETE</promise>",
        "stop_reason": "completion promise COMPLETE accepted",
        "retry_count": 0,
        "report": ValidationReport(),
        "workdir": str(workdir),
    }
    values.update(changes)
    return StopContext(**values)


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable sh script in ``tmp_path``; returns the command line that runs it."""
    path = tmp_path / "scripts" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(0o755)
    return shlex.quote(str(path))


def hook(command: str, timeout: float | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        entry["timeout"] = timeout
    return entry


def write_settings(path: Path, stop: Any = None, **events: Any) -> Path:
    """A settings file in Claude Code's format with the given Stop / other event groups."""
    hooks: dict[str, Any] = dict(events)
    if stop is not None:
        hooks["Stop"] = stop
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
    return path


def project_settings(project: Path, *commands: str, timeout: float | None = None) -> Path:
    return write_settings(
        project / ".loopwarden" / "settings.json",
        [{"hooks": [hook(c, timeout) for c in commands]}],
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def hooks(tmp_path: Path) -> CommandHooks:
    """Command hooks reading user settings from a temporary home, not the real one."""
    return CommandHooks(home=tmp_path / "home")


# Each row: what the hook prints on stdout / stderr, its exit status, and the expected answer.
MATRIX = [
    pytest.param(BLOCK, "", 0, False, "tests still fail", id="exit0-json-block-vetoes"),
    pytest.param(
        '{"decision": "block"}', "", 0, False, "blocked the stop", id="exit0-block-no-reason"
    ),
    pytest.param(
        '{"continue": false, "stopReason": "budget spent"}',
        "",
        0,
        True,
        "budget spent",
        id="exit0-continue-false-allows-with-stopReason",
    ),
    pytest.param(
        '{"continue": false, "stopReason": "halt", "decision": "block", "reason": "more"}',
        "",
        0,
        True,
        "halt",
        id="exit0-continue-false-wins-over-block",
    ),
    pytest.param("", "", 0, True, "allowed the stop", id="exit0-no-output-allows"),
    pytest.param("all good", "", 0, True, "allowed the stop", id="exit0-plain-text-allows"),
    pytest.param('{"decision": "bl', "", 0, True, "not valid JSON", id="exit0-broken-json-allows"),
    pytest.param("[1, 2]", "", 0, True, "allowed the stop", id="exit0-json-array-allows"),
    pytest.param("{}", "", 0, True, "allowed the stop", id="exit0-empty-object-allows"),
    pytest.param(
        '{"decision": "approve", "reason": "fine"}', "", 0, True, "allowed", id="exit0-approve"
    ),
    pytest.param("", "lint fails in a.py", 2, False, "lint fails in a.py", id="exit2-vetoes"),
    pytest.param(
        '{"continue": false}', "use stderr", 2, False, "use stderr", id="exit2-ignores-stdout"
    ),
    pytest.param("", "", 2, False, "exited 2 with nothing", id="exit2-empty-stderr"),
    pytest.param(BLOCK, "oops", 1, True, "exited with status 1", id="exit1-json-ignored"),
    pytest.param("", "crash", 3, True, "exited with status 3", id="exit3-warns-allows"),
]


class TestExitCodeAndJsonMatrix:
    """Exit status x stdout JSON, with Claude Code's semantics, one row per case."""

    @pytest.mark.parametrize(("stdout", "stderr", "status", "allowed", "reason"), MATRIX)
    def test_row(
        self,
        tmp_path: Path,
        project: Path,
        hooks: CommandHooks,
        stdout: str,
        stderr: str,
        status: int,
        allowed: bool,
        reason: str,
    ) -> None:
        """The hook's exit status and output map to a veto or an allowed stop."""
        body = (
            f"cat > /dev/null\nprintf '%s' {shlex.quote(stdout)}\n"
            f"printf '%s' {shlex.quote(stderr)} >&2\nexit {status}"
        )
        project_settings(project, script(tmp_path, "hook.sh", body))
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert answer.allowed is allowed
        assert answer.source == "command-hooks"
        assert reason in answer.reason
        assert not answer.forced

    def test_block_reason_is_exactly_the_hooks_reason(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """A single blocking hook's reason is passed on verbatim."""
        project_settings(project, f"echo {shlex.quote(BLOCK)}")
        assert hooks.check(make_context(project)) == StopCheck(
            "command-hooks", False, "tests still fail"
        )

    def test_command_that_cannot_start_warns_and_allows(
        self, project: Path, hooks: CommandHooks
    ) -> None:
        """A missing command (status 127 from the shell) is a warning, not a veto."""
        project_settings(project, "/nonexistent/hook.sh")
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert answer.allowed
        assert "127" in answer.reason

    def test_no_hooks_no_opinion(self, project: Path, hooks: CommandHooks) -> None:
        """Without any settings file the checker has no opinion (None)."""
        assert hooks.check(make_context(project)) is None


class TestSeveralHooks:
    """Several hooks of one event: any block blocks, reasons joined; they run in parallel."""

    def test_any_block_blocks_and_reasons_are_joined(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """Two blocking hooks and one allowing: vetoed with both reasons."""
        a = script(tmp_path, "a.sh", "echo 'reason A' >&2; exit 2")
        b = script(tmp_path, "b.sh", """echo '{"decision": "block", "reason": "reason B"}'""")
        c = script(tmp_path, "c.sh", "exit 0")
        project_settings(project, a, b, c)
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert not answer.allowed
        assert answer.reason.splitlines() == ["reason A", "reason B"]

    def test_continue_false_from_one_hook_wins_over_another_hooks_block(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """``continue: false`` ends the loop even when another hook blocks."""
        a = script(tmp_path, "a.sh", f"echo {shlex.quote(BLOCK)}")
        b = script(tmp_path, "b.sh", """echo '{"continue": false, "stopReason": "enough"}'""")
        project_settings(project, a, b)
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert answer.allowed
        assert answer.reason.startswith("enough")

    def test_hooks_of_one_event_run_in_parallel(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """Three hooks of 2 s each finish well before the 6 s they would take one by one."""
        commands = [script(tmp_path, f"s{i}.sh", "sleep 2") for i in range(3)]
        project_settings(project, *commands)
        started = time.monotonic()
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert answer.allowed
        assert time.monotonic() - started < 5
        assert len(hooks.last_runs) == 3


class TestTimeoutsAndRunawayOutput:
    """A hook never hangs or floods the loop: timeouts kill the group, output is bounded."""

    def test_hook_sleeping_past_its_timeout_is_killed_with_its_group(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """Past ``timeout`` the whole process group is killed; a warning, and the stop proceeds."""
        pidfile = tmp_path / "grandchild.pid"
        body = f"sleep 30 &\necho $! > {shlex.quote(str(pidfile))}\nwait"
        project_settings(project, script(tmp_path, "slow.sh", body), timeout=1)
        started = time.monotonic()
        answer = hooks.check(make_context(project))
        assert time.monotonic() - started < 5
        assert answer is not None
        assert answer.allowed
        assert "timed out after 1s" in answer.reason
        pid = int(pidfile.read_text())
        assert not _alive(pid)

    def test_grandchild_holding_stdout_does_not_hang_the_hook(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """A hook that exits but leaves a grandchild holding stdout still answers promptly."""
        pidfile = tmp_path / "grandchild.pid"
        body = (
            f"sleep 30 &\necho $! > {shlex.quote(str(pidfile))}\necho {shlex.quote(BLOCK)}\nexit 0"
        )
        project_settings(project, script(tmp_path, "leaky.sh", body), timeout=20)
        started = time.monotonic()
        answer = hooks.check(make_context(project))
        assert time.monotonic() - started < 5
        assert answer == StopCheck("command-hooks", False, "tests still fail")
        assert not _alive(int(pidfile.read_text()))

    def test_megabytes_of_stdout_are_cut_and_the_record_says_so(
        self, tmp_path: Path, project: Path
    ) -> None:
        """Output past the bound is dropped; the answer notes the truncation."""
        hooks = CommandHooks(home=tmp_path / "home", max_output=100_000)
        body = "head -c 5000000 /dev/zero | tr '\\0' 'x'"
        project_settings(project, script(tmp_path, "loud.sh", body))
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert answer.allowed
        assert "stdout truncated to its first 100000 bytes" in answer.reason
        assert len(hooks.last_runs[0].result.stdout) == 100_000

    def test_megabytes_of_stderr_on_exit_2_give_a_bounded_reason(
        self, tmp_path: Path, project: Path
    ) -> None:
        """A blocking hook's huge stderr reason is bounded and marked truncated."""
        hooks = CommandHooks(home=tmp_path / "home", max_output=50_000)
        body = "head -c 3000000 /dev/zero | tr '\\0' 'e' >&2; exit 2"
        project_settings(project, script(tmp_path, "loud.sh", body))
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert not answer.allowed
        assert len(answer.reason) < 51_000
        assert "stderr truncated" in answer.reason


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            if fh.read().split(") ", 1)[1].startswith("Z"):
                return False
        time.sleep(0.05)
    return True


class TestSettingsFiles:
    """User, project and local settings all run; a broken file or entry disables only itself."""

    def test_all_three_levels_run(self, tmp_path: Path, project: Path, hooks: CommandHooks) -> None:
        """Hooks from ~/.loopwarden, .loopwarden/settings.json and settings.local.json all run."""
        log = tmp_path / "ran.txt"
        for level, path in [
            ("user", tmp_path / "home" / ".loopwarden" / "settings.json"),
            ("project", project / ".loopwarden" / "settings.json"),
            ("local", project / ".loopwarden" / "settings.local.json"),
        ]:
            write_settings(path, [{"hooks": [hook(f"echo {level} >> {log}")]}])
        answer = hooks.check(make_context(project))
        assert answer is not None
        assert answer.allowed
        assert sorted(log.read_text().split()) == ["local", "project", "user"]
        assert hooks.problems == ()

    def test_broken_file_and_wrong_entries_disable_only_themselves(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """An invalid JSON file and wrong-shaped entries are reported; the rest still run."""
        log = tmp_path / "ran.txt"
        user = tmp_path / "home" / ".loopwarden" / "settings.json"
        write_settings(user, [{"hooks": [hook(f"echo user >> {log}")]}])
        broken = project / ".loopwarden" / "settings.json"
        broken.parent.mkdir()
        broken.write_text('{"hooks": {"Stop": [', encoding="utf-8")
        local = write_settings(
            project / ".loopwarden" / "settings.local.json",
            [
                {"hooks": [{"type": "command"}, hook(f"echo local >> {log}")]},
                {"hooks": [{"type": "prompt", "prompt": "is it done?"}]},
                {"hooks": [hook("echo t", timeout=-1)]},
                {"matcher": "(", "hooks": [hook(f"echo bad-matcher >> {log}")]},
                "not a group",
            ],
        )
        with capture_logs() as logs:
            answer = hooks.check(make_context(project))
        assert answer is not None
        assert sorted(log.read_text().split()) == ["local", "user"]
        problems = {(p.path, p.entry) for p in hooks.problems}
        assert problems == {
            (str(broken), "(file)"),
            (str(local), "hooks.Stop[0].hooks[0]"),
            (str(local), "hooks.Stop[1].hooks[0]"),
            (str(local), "hooks.Stop[2].hooks[0]"),
            (str(local), "hooks.Stop[3].matcher"),
            (str(local), "hooks.Stop[4]"),
        }
        warned = [e for e in logs if e["event"] == "hook_settings_problem"]
        assert {(e["file"], e["entry"]) for e in warned} == problems
        assert all(e["log_level"] == "warning" for e in warned)

    def test_problems_are_available_without_running_hooks(self, project: Path) -> None:
        """``load_settings`` reports problems with the file, the entry and what is wrong."""
        path = write_settings(project / ".loopwarden" / "settings.json", {"hooks": []})
        settings = load_settings(project, home=project / "nohome")
        assert [str(p) for p in settings.problems] == [
            f"{path}: hooks.Stop: must be a list of groups"
        ]

    def test_identical_commands_run_once(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """The same command in several files and groups runs once."""
        log = tmp_path / "count.txt"
        command = f"echo run >> {log}"
        write_settings(
            tmp_path / "home" / ".loopwarden" / "settings.json", [{"hooks": [hook(command)]}]
        )
        write_settings(
            project / ".loopwarden" / "settings.json",
            [{"hooks": [hook(command)]}, {"hooks": [hook(command)]}],
        )
        hooks.check(make_context(project))
        assert log.read_text().split() == ["run"]
        assert len(hooks.last_runs) == 1

    def test_claude_codes_settings_example_loads(self, project: Path) -> None:
        """The fixture's settings (Claude Code's format) load with no problems."""
        fixture = Path(__file__).parent / "fixtures" / "claude-code" / "settings.json"
        target = project / ".loopwarden" / "settings.json"
        target.parent.mkdir()
        target.write_text(fixture.read_text())
        settings = load_settings(project, home=project / "nohome")
        assert settings.problems == ()
        assert settings.files == (str(target),)
        [stop] = settings.for_event("Stop")
        assert stop.timeout == 120.0
        assert stop.command == '"$CLAUDE_PROJECT_DIR"/.claude/hooks/check-tests.sh'
        assert [h.command for h in settings.for_event("SubagentStop", "test-runner")] == [
            "python3 .claude/hooks/subagent_gate.py"
        ]
        assert settings.for_event("SubagentStop", "reviewer") == []


class TestSubagentStop:
    """Child loops run SubagentStop hooks whose matcher fits their agent_type."""

    @pytest.fixture
    def configured(self, tmp_path: Path, project: Path) -> Path:
        log = tmp_path / "ran.txt"
        write_settings(
            project / ".loopwarden" / "settings.json",
            [{"hooks": [hook(f"echo stop >> {log}")]}],
            SubagentStop=[
                {"matcher": "test-runner", "hooks": [hook(f"echo runner >> {log}")]},
                {"matcher": "test-.*", "hooks": [hook(f"echo regex >> {log}")]},
                {"matcher": "reviewer", "hooks": [hook(f"echo reviewer >> {log}")]},
                {"hooks": [hook(f"echo any >> {log}")]},
            ],
        )
        return log

    def test_child_loop_runs_matching_subagent_hooks_only(
        self, configured: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """agent_type test-runner: the exact, regex and match-all groups run; Stop does not."""
        ctx = make_context(project, parent_id="parent-1", metadata={"agent_type": "test-runner"})
        hooks.check(ctx)
        assert sorted(configured.read_text().split()) == ["any", "regex", "runner"]

    def test_root_loop_runs_stop_hooks_only(
        self, configured: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """A loop without a parent runs Stop hooks, never SubagentStop."""
        hooks.check(make_context(project, metadata={"agent_type": "test-runner"}))
        assert configured.read_text().split() == ["stop"]

    def test_child_without_agent_type_runs_match_all_groups(
        self, configured: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """No agent_type: only groups without a matcher apply."""
        hooks.check(make_context(project, parent_id="parent-1"))
        assert configured.read_text().split() == ["any"]

    def test_subagent_stdin_names_the_agent(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """SubagentStop input carries hook_event_name, agent_id and agent_type."""
        capture = tmp_path / "stdin.json"
        write_settings(
            project / ".loopwarden" / "settings.json",
            SubagentStop=[{"matcher": "*", "hooks": [hook(f"cat > {capture}")]}],
        )
        ctx = make_context(project, parent_id="p-1", metadata={"agent_type": "test-runner"})
        hooks.check(ctx)
        data = json.loads(capture.read_text())
        assert data["hook_event_name"] == "SubagentStop"
        assert data["agent_type"] == "test-runner"
        assert data["agent_id"] == "loop-1"
        assert data["loopwarden_parent_id"] == "p-1"

    @pytest.mark.parametrize(
        ("matcher", "agent", "expected"),
        [
            (None, None, True),
            ("", "x", True),
            ("*", "x", True),
            ("test-runner", "test-runner", True),
            ("test", "test-runner", False),
            ("test-runner|reviewer", "reviewer", True),
            ("Test-runner", "test-runner", False),
        ],
    )
    def test_matcher_semantics(
        self, matcher: str | None, agent: str | None, expected: bool
    ) -> None:
        """Absent, empty or * match all; otherwise the regex must match the whole agent type."""
        assert matcher_matches(matcher, agent) is expected


class TestHookInput:
    """What a hook receives: stdin JSON, environment and a transcript in Claude Code's format."""

    def test_stdin_environment_and_transcript(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """The fields Claude Code sends, loopwarden's extensions, and the env vars."""
        stdin, env = tmp_path / "stdin.json", tmp_path / "env.txt"
        project_settings(project, f"cat > {stdin}; env > {env}")
        hooks.check(make_context(project, retry_count=1, iteration=4))
        data = json.loads(stdin.read_text())
        transcript = transcript_path(project, "loop-1")
        assert data == {
            "session_id": "loop-1",
            "transcript_path": str(transcript),
            "cwd": str(project),
            "permission_mode": "default",
            "hook_event_name": "Stop",
            "stop_hook_active": True,
            "last_assistant_message": "All done.\n<promise>COMPLETE</promise>",
            "loopwarden_iteration": 4,
            "loopwarden_max_iterations": 10,
            "loopwarden_consecutive_blocks": 1,
            "loopwarden_task_id": "task-1",
        }
        environment = dict(
            line.split("=", 1) for line in env.read_text().splitlines() if "=" in line
        )
        assert environment["LOOPWARDEN_PROJECT_DIR"] == str(project)
        assert environment["CLAUDE_PROJECT_DIR"] == str(project)
        assert environment["LOOPWARDEN_STOP_HOOK_ACTIVE"] == "true"
        assert environment["LOOPWARDEN_TRANSCRIPT_PATH"] == str(transcript)
        lines = [json.loads(x) for x in transcript.read_text().splitlines()]
        assert lines[-1]["type"] == "assistant"
        assert lines[-1]["message"]["content"] == [
            {"type": "text", "text": "All done.\n<promise>COMPLETE</promise>"}
        ]

    def test_first_stop_is_not_hook_active(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """stop_hook_active is false when no veto caused this iteration."""
        stdin = tmp_path / "stdin.json"
        project_settings(project, f"cat > {stdin}; echo $LOOPWARDEN_STOP_HOOK_ACTIVE >&2")
        hooks.check(make_context(project))
        assert json.loads(stdin.read_text())["stop_hook_active"] is False

    def test_agent_output_never_reaches_a_command_line(
        self, tmp_path: Path, project: Path, hooks: CommandHooks
    ) -> None:
        """Shell metacharacters in the output travel on stdin only, untouched."""
        stdin = tmp_path / "stdin.json"
        project_settings(project, f"cat > {stdin}")
        evil = "$(touch pwned1) `touch pwned2`; touch pwned3 '\" && touch pwned4"
        hooks.check(make_context(project, output=evil))
        assert json.loads(stdin.read_text())["last_assistant_message"] == evil
        assert not list(project.glob("pwned*"))
        assert not list(tmp_path.glob("pwned*"))


class TestTranscript:
    """loopwarden writes each loop's transcript in Claude Code's JSONL line format."""

    def test_turns_are_appended_once_and_chained(self, tmp_path: Path) -> None:
        """Each iteration is written once; uuids chain through parentUuid."""
        path = tmp_path / "t.jsonl"
        write_transcript(path, loop_id="L", cwd="/p", turns=[(1, "do it", "first")])
        write_transcript(path, loop_id="L", cwd="/p", turns=[(1, "do it", "first"), (2, "", "b")])
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert [(x["type"], x["loopwarden"]["iteration"]) for x in lines] == [
            ("user", 1),
            ("assistant", 1),
            ("assistant", 2),
        ]
        assert [x["parentUuid"] for x in lines] == [None, lines[0]["uuid"], lines[1]["uuid"]]
        assert lines[0]["message"] == {"role": "user", "content": "do it"}

    def test_a_torn_last_line_is_repaired_before_appending(self, tmp_path: Path) -> None:
        """A partial line left by a crash is cut off, so the file stays valid JSONL."""
        path = tmp_path / "t.jsonl"
        write_transcript(path, loop_id="L", cwd="/p", turns=[(1, "", "one")])
        with path.open("a") as fh:
            fh.write('{"type": "assistant", "mess')
        write_transcript(path, loop_id="L", cwd="/p", turns=[(2, "", "two")])
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert [x["message"]["content"][0]["text"] for x in lines] == ["one", "two"]


class TestWithTheEngine:
    """Wired into the engine: vetoes continue the loop; loop prevention forces the stop."""

    def _always_block(self, project: Path) -> None:
        project_settings(project, """echo '{"decision":"block","reason":"not yet"}'""")

    def test_a_veto_continues_the_loop_with_the_reason_as_feedback(
        self, db_url: str, tmp_path: Path, project: Path
    ) -> None:
        """The hook's reason is in the next iteration's prompt."""
        self._always_block(project)
        hooks = CommandHooks(home=tmp_path / "home")
        with LoopEngine(db_url, stop_checkers=[hooks]) as engine:
            hooks.engine = engine
            loop = engine.start("t", LoopConfig(workdir=str(project)), prompt="Fix it")
            decision = engine.submit(loop.id, "<promise>COMPLETE</promise>")
            assert decision.signal is Signal.CONTINUE
            assert "not yet" in engine.get(loop.id).current_prompt
            lines = transcript_path(project, loop.id).read_text().splitlines()
            assert json.loads(lines[0])["message"]["content"] == "Fix it"

    def test_stop_is_forced_after_max_stop_retries_vetoes(
        self, db_url: str, tmp_path: Path, project: Path
    ) -> None:
        """After 3 vetoes in a row (the default) the stop is allowed and recorded as forced."""
        self._always_block(project)
        hooks = CommandHooks(home=tmp_path / "home")
        with LoopEngine(db_url, stop_checkers=[hooks]) as engine:
            loop = engine.start("t", LoopConfig(workdir=str(project)), prompt="p")
            signals = [engine.submit(loop.id, "<promise>COMPLETE</promise>") for _ in range(4)]
            assert [d.signal for d in signals] == [Signal.CONTINUE] * 3 + [Signal.COMPLETE]
            assert signals[-1].forced
            assert engine.get(loop.id).state is State.COMPLETED

    def test_max_continuations_caps_hook_vetoes(
        self, db_url: str, tmp_path: Path, project: Path
    ) -> None:
        """max_continuations=1: the second stop is allowed without running the hooks, forced."""
        self._always_block(project)
        hooks = CommandHooks(home=tmp_path / "home", max_continuations=1)
        with LoopEngine(db_url, stop_checkers=[hooks]) as engine:
            loop = engine.start("t", LoopConfig(workdir=str(project)), prompt="p")
            first = engine.submit(loop.id, "<promise>COMPLETE</promise>")
            second = engine.submit(loop.id, "<promise>COMPLETE</promise>")
            assert first.signal is Signal.CONTINUE
            assert second.signal is Signal.COMPLETE
            assert second.forced
            assert hooks.last_runs == ()

    def test_hooks_run_only_when_the_loop_is_about_to_complete(
        self, db_url: str, tmp_path: Path, project: Path
    ) -> None:
        """An iteration that continues anyway does not run the hooks."""
        log = tmp_path / "ran.txt"
        project_settings(project, f"echo ran >> {log}")
        hooks = CommandHooks(home=tmp_path / "home")
        with LoopEngine(db_url, stop_checkers=[hooks]) as engine:
            loop = engine.start("t", LoopConfig(workdir=str(project)), prompt="p")
            engine.submit(loop.id, "still working")
            assert not log.exists()


@pytest.mark.parametrize(
    ("field", "value"), [("max_continuations", -1), ("max_output", 10), ("max_continuations", "3")]
)
def test_invalid_limits_are_a_config_error(field: str, value: object) -> None:
    """Bad limits fail at construction, naming the field."""
    with pytest.raises(ConfigError, match=field):
        CommandHooks(**{field: value})  # type: ignore[arg-type]


def test_a_hook_without_a_timeout_gets_60_seconds() -> None:
    """The default per-hook timeout is 60 s."""
    assert CommandHook("Stop", "true").timeout == 60.0
