"""The MCP server over real stdio (issue 6): the official client SDK drives a spawned server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

SERVER = "loopwarden.integrations.mcp_server"
TOOLS = {
    "iteration_start",
    "iteration_validate",
    "iteration_next",
    "iteration_complete",
    "iteration_status",
    "checkpoint_resume",
    "hook_register",
    "hook_evaluate",
    "hook_list",
    "hook_clear",
}
# A command rule that SIGKILLs the server running it, once, after the test arms it.
KILL_SERVER_ONCE = (
    "import os, pathlib, signal\n"
    "if pathlib.Path('armed').exists() and not pathlib.Path('fired').exists():\n"
    "    pathlib.Path('fired').write_text('x')\n"
    "    os.kill(os.getppid(), signal.SIGKILL)\n"
)
# A command rule that records the pid of the server running it.
RECORD_SERVER_PID = "import os, pathlib; pathlib.Path('server.pid').write_text(str(os.getppid()))"


class Tools:
    """A connected client session; ``ok`` expects a result, ``error`` a tool error."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def raw(self, tool: str, arguments: Any) -> tuple[bool, str, dict[str, Any] | None]:
        result = await self.session.call_tool(tool, arguments)
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        return bool(result.is_error), "\n".join(texts), result.structured_content

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        failed, text, data = await self.raw(tool, arguments)
        assert not failed, f"{tool} failed: {text}"
        assert data is not None
        assert json.loads(text) == data  # the text content echoes the structured result
        return data

    async def error(self, tool: str, **arguments: Any) -> str:
        failed, text, _data = await self.raw(tool, arguments)
        assert failed, f"{tool} should have failed, answered {text}"
        return text


@contextlib.asynccontextmanager
async def mcp_server(workdir: Path) -> AsyncIterator[Tools]:
    """``python -m loopwarden.integrations.mcp_server --db ...`` in ``workdir``, connected."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", SERVER, "--db", str(workdir / "loops.db")],
        cwd=workdir,
    )
    with (workdir / "server.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield Tools(session)


def run(scenario: Callable[[], Awaitable[None]], timeout: float = 50) -> None:
    """Run an async scenario to the end, within ``timeout`` seconds."""

    async def bounded() -> None:
        await asyncio.wait_for(scenario(), timeout)

    asyncio.run(bounded())


def pattern_rule(name: str, pattern: str, **extra: Any) -> dict[str, Any]:
    return {"type": "content_pattern", "name": name, "pattern": pattern, **extra}


def python_rule(name: str, code: str) -> dict[str, Any]:
    return {"type": "command", "name": name, "config": {"command": [sys.executable, "-c", code]}}


class TestWholeLoop:
    """An agent drives a loop from start to COMPLETE through the tools alone."""

    def test_start_to_complete(self, tmp_path: Path) -> None:
        """Fail, take the feedback, pass with a promise, complete: every answer says so."""

        async def scenario() -> None:
            async with mcp_server(tmp_path) as tools:
                listed = await tools.session.list_tools()
                assert {t.name for t in listed.tools} == TOOLS

                started = await tools.ok(
                    "iteration_start",
                    taskId="PARSER-1",
                    maxIterations=5,
                    prompt="Fix the parser",
                    agentContext={"branch": "main"},
                    validationRules=[
                        pattern_rule("tests-pass", r"\d+ passed"),
                        pattern_rule("no-todo", "TODO", mustMatch=False),
                        {"type": "command", "name": "true", "config": {"command": "true"}},
                    ],
                )
                loop_id = started["loopId"]
                assert started == {
                    "iterationId": f"{loop_id}:1",
                    "taskId": "PARSER-1",
                    "loopId": loop_id,
                    "iterationNumber": 1,
                    "maxIterations": 5,
                    "state": "executing",
                    "checkpointId": 2,
                }
                assert "has not been validated" in await tools.error(
                    "iteration_next", taskId="PARSER-1"
                )

                first = await tools.ok(
                    "iteration_validate",
                    iterationId=f"{loop_id}:1",
                    agentOutput="Rewrote the lexer. TODO: the tests",
                    filesModified=["parser.py"],
                )
                assert first["iterationNumber"] == 1
                assert first["completionSignal"] == "CONTINUE"
                assert first["validationPassed"] is False
                assert first["score"] == pytest.approx(100 / 3, abs=1e-3)
                assert first["detectedPromise"] is None
                assert [r["status"] for r in first["validationReport"]["results"]] == [
                    "failed",
                    "failed",
                    "passed",
                ]
                assert len(first["feedback"]) == 2

                stale = await tools.error(
                    "iteration_validate", iterationId=f"{loop_id}:1", agentOutput="again"
                )
                assert "iterationId: iteration 1" in stale
                assert "already decided" in stale
                assert "CONTINUE, not COMPLETE" in await tools.error(
                    "iteration_complete", taskId="PARSER-1"
                )

                nxt = await tools.ok("iteration_next", taskId="PARSER-1", notes="run pytest")
                assert nxt["iterationNumber"] == 2
                assert nxt["maxIterations"] == 5
                assert nxt["checkpointId"] == 5
                assert "tests-pass" in nxt["prompt"]
                assert nxt["message"]

                second = await tools.ok(
                    "iteration_validate",
                    taskId="PARSER-1",
                    agentOutput="12 passed in 0.3s\n<promise>COMPLETE</promise> all green",
                )
                assert second["completionSignal"] == "COMPLETE"
                assert second["validationPassed"] is True
                assert second["detectedPromise"] == "COMPLETE"
                assert second["score"] == 100
                assert second["feedback"] == []

                done = await tools.ok(
                    "iteration_complete", taskId="PARSER-1", completionPromise="COMPLETE"
                )
                assert done["totalIterations"] == 2
                assert done["finalValidationScore"] == 100
                assert [h["completionSignal"] for h in done["iterationHistory"]] == [
                    "CONTINUE",
                    "COMPLETE",
                ]
                assert done["completedAt"].endswith("Z")

                status = await tools.ok("iteration_status", taskId="PARSER-1")
                assert status["state"] == "completed"
                assert status["lastScore"] == 100
                assert status["consecutiveFailures"] == 0
                resumed = await tools.ok("checkpoint_resume", taskId="PARSER-1")
                assert resumed["agentContext"] == {
                    "branch": "main",
                    "iterationNotes": {"2": "run pytest"},
                }
                assert resumed["iterationConfig"]["validationRules"][1] == {
                    "type": "content_pattern",
                    "name": "no-todo",
                    "pattern": "TODO",
                    "target": "agent_output",
                    "mustMatch": False,
                }
                assert "is completed" in await tools.error(
                    "iteration_validate", taskId="PARSER-1", agentOutput="more"
                )

        run(scenario)


class TestGuards:
    """The order of tool calls never gets a loop past a guard."""

    def test_breaker_trips(self, tmp_path: Path) -> None:
        """Failures in a row escalate; the loop then refuses next, complete and more output."""

        async def scenario() -> None:
            async with mcp_server(tmp_path) as tools:
                await tools.ok(
                    "iteration_start",
                    taskId="FLAKY",
                    maxIterations=10,
                    circuitBreakerThreshold=2,
                    validationRules=[pattern_rule("green", "PASS")],
                )
                first = await tools.ok("iteration_validate", taskId="FLAKY", agentOutput="FAIL")
                assert first["completionSignal"] == "CONTINUE"
                second = await tools.ok(
                    "iteration_validate",
                    taskId="FLAKY",
                    agentOutput="FAIL <promise>COMPLETE</promise>",
                )
                assert second["completionSignal"] == "ESCALATE"
                assert second["terminalReason"] == "circuit_breaker"
                assert second["state"] == "escalated"

                assert "circuit_breaker" in await tools.error("iteration_next", taskId="FLAKY")
                assert "cannot complete" in await tools.error("iteration_complete", taskId="FLAKY")
                assert "escalated" in await tools.error(
                    "iteration_validate", taskId="FLAKY", agentOutput="PASS"
                )
                status = await tools.ok("iteration_status", taskId="FLAKY")
                assert status["state"] == "escalated"
                assert status["consecutiveFailures"] == 2
                assert status["iterationsDecided"] == 2

                # A new loop for the same task is allowed once the old one has ended.
                await tools.ok("iteration_start", taskId="FLAKY")
                assert "already has a live loop" in await tools.error(
                    "iteration_start", taskId="FLAKY"
                )

        run(scenario)

    def test_max_iterations_and_blocked(self, tmp_path: Path) -> None:
        """The last allowed iteration escalates; a BLOCKED promise takes effect at once."""

        async def scenario() -> None:
            async with mcp_server(tmp_path) as tools:
                await tools.ok(
                    "iteration_start",
                    taskId="BUDGET",
                    maxIterations=2,
                    circuitBreakerThreshold=5,
                    validationRules=[pattern_rule("green", "PASS")],
                )
                await tools.ok("iteration_validate", taskId="BUDGET", agentOutput="no")
                await tools.ok("iteration_next", taskId="BUDGET")
                last = await tools.ok("iteration_validate", taskId="BUDGET", agentOutput="no")
                assert last["terminalReason"] == "max_iterations"
                assert "past max iterations" in await tools.error("iteration_next", taskId="BUDGET")

                await tools.ok("iteration_start", taskId="STUCK")
                blocked = await tools.ok(
                    "iteration_validate",
                    taskId="STUCK",
                    agentOutput="<promise>BLOCKED</promise> need credentials",
                )
                assert blocked["completionSignal"] == "BLOCKED"
                assert blocked["state"] == "blocked"
                assert "blocked" in await tools.error("iteration_next", taskId="STUCK")

        run(scenario)


class TestRestart:
    """The server dies with SIGKILL; a new server resumes the loop exactly where it was."""

    def test_killed_idle_and_mid_validation(self, tmp_path: Path) -> None:
        """Killed between calls and inside iteration_validate: nothing lost, nothing doubled."""
        rules = [
            python_rule("record-pid", RECORD_SERVER_PID),
            python_rule("kill-once", KILL_SERVER_ONCE),
            pattern_rule("done", "DONE"),
        ]

        async def scenario() -> None:
            async with mcp_server(tmp_path) as tools:
                await tools.ok(
                    "iteration_start", taskId="CRASH", validationRules=rules, prompt="Do it"
                )
                first = await tools.ok("iteration_validate", taskId="CRASH", agentOutput="wip")
                assert first["completionSignal"] == "CONTINUE"
                os.kill(int((tmp_path / "server.pid").read_text()), signal.SIGKILL)
                with pytest.raises(MCPError):
                    await tools.session.call_tool("iteration_status", {"taskId": "CRASH"})

            async with mcp_server(tmp_path) as tools:
                resumed = await tools.ok("checkpoint_resume", taskId="CRASH", checkpointId=5)
                assert resumed["state"] == "executing"
                assert resumed["iterationNumber"] == 2
                assert resumed["pendingDecision"] is None
                assert resumed["prompt"].startswith("Do it")
                assert "Rule 'done' failed" in resumed["prompt"]
                assert "iteration_validate" in resumed["resumeInstructions"]
                assert [h["iterationNumber"] for h in resumed["iterationHistory"]] == [1]

                (tmp_path / "armed").write_text("x")
                with pytest.raises(MCPError):
                    await tools.session.call_tool(
                        "iteration_validate",
                        {"taskId": "CRASH", "agentOutput": "DONE <promise>COMPLETE</promise>"},
                    )
            assert (tmp_path / "fired").exists()

            async with mcp_server(tmp_path) as tools:
                status = await tools.ok("iteration_status", taskId="CRASH")
                assert status["state"] == "validating"
                assert status["iterationNumber"] == 2
                assert "checkpoint_resume" in await tools.error(
                    "iteration_validate", taskId="CRASH", agentOutput="again"
                )
                resumed = await tools.ok("checkpoint_resume", taskId="CRASH", checkpointId=3)
                assert resumed["state"] == "completed"
                assert resumed["pendingDecision"]["completionSignal"] == "COMPLETE"
                assert "not the latest" in resumed["resumeInstructions"]
                done = await tools.ok("iteration_complete", taskId="CRASH")
                assert done["totalIterations"] == 2
                assert [h["iterationNumber"] for h in done["iterationHistory"]] == [1, 2]

        run(scenario)


class TestHooks:
    """Stop hooks registered over MCP are persisted with the task."""

    def test_hooks_survive_a_restart(self, tmp_path: Path) -> None:
        """A validation hook registered in one server completes a loop in the next one."""

        async def scenario() -> None:
            rules = [pattern_rule("ok", "all ok")]
            async with mcp_server(tmp_path) as tools:
                registered = await tools.ok(
                    "hook_register",
                    taskId="HOOKED",
                    hookType="validation",
                    metadata={"owner": "test"},
                )
                assert registered["hookType"] == "validation"
                assert registered["enabled"] is True
                assert registered["metadata"] == {"owner": "test"}
                await tools.ok("iteration_start", taskId="HOOKED", validationRules=rules)
                await tools.ok("iteration_start", taskId="PLAIN", validationRules=rules)

            async with mcp_server(tmp_path) as tools:
                listed = await tools.ok("hook_list", taskId="HOOKED")
                assert listed["hookCount"] == 1
                assert listed["hooks"][0]["hookId"] == registered["hookId"]

                started = await tools.ok("iteration_status", taskId="HOOKED")
                dry = await tools.ok(
                    "hook_evaluate", iterationId=started["iterationId"], agentOutput="all ok"
                )
                assert dry["hookId"] == registered["hookId"]
                assert dry["action"] == "complete"
                assert dry["checkpointCreated"] is False
                assert (await tools.ok("iteration_status", taskId="HOOKED"))["checkpointId"] == 2

                hooked = await tools.ok("iteration_validate", taskId="HOOKED", agentOutput="all ok")
                assert hooked["completionSignal"] == "COMPLETE"
                assert hooked["hookVerdict"]["action"] == "complete"
                plain = await tools.ok("iteration_validate", taskId="PLAIN", agentOutput="all ok")
                assert plain["completionSignal"] == "CONTINUE"

                assert (await tools.ok("hook_clear", taskId="HOOKED"))["hooksCleared"] == 1
                assert (await tools.ok("hook_list", taskId="HOOKED"))["hookCount"] == 0
                no_hooks = await tools.ok(
                    "hook_evaluate", taskId="HOOKED", agentOutput="<promise>COMPLETE</promise>"
                )
                assert no_hooks["hookId"] is None
                assert no_hooks["reason"] == "No hooks registered for this task"

        run(scenario)


# (tool, arguments, text the error must contain: the field it names)
MALFORMED: list[tuple[str, Any, str]] = [
    ("iteration_start", {}, "taskId"),
    ("iteration_start", {"taskId": 7}, "taskId"),
    ("iteration_start", {"taskId": ""}, "taskId"),
    ("iteration_start", {"taskId": "M", "maxIterations": 0}, "maxIterations"),
    ("iteration_start", {"taskId": "M", "maxIterations": "many"}, "maxIterations"),
    ("iteration_start", {"taskId": "M", "circuitBreakerThreshold": -1}, "circuitBreakerThreshold"),
    (
        "iteration_start",
        {"taskId": "M", "completionPromises": ["no spaces!"]},
        "completionPromises",
    ),
    ("iteration_start", {"taskId": "M", "validationRules": "pytest"}, "validationRules"),
    ("iteration_start", {"taskId": "M", "validationRules": [42]}, "validationRules"),
    (
        "iteration_start",
        {"taskId": "M", "validationRules": [{"type": "x"}]},
        "validationRules[0].type",
    ),
    (
        "iteration_start",
        {
            "taskId": "M",
            "validationRules": [{"type": "content_pattern", "name": "r", "pattern": "(["}],
        },
        "validationRules[0].pattern: invalid regular expression",
    ),
    (
        "iteration_start",
        {
            "taskId": "M",
            "validationRules": [
                pattern_rule("a", "x"),
                {"type": "content_pattern", "name": "b", "pattern": "x", "target": "stdout"},
            ],
        },
        "validationRules[1].target",
    ),
    (
        "iteration_start",
        {"taskId": "M", "validationRules": [pattern_rule("a", "x"), pattern_rule("a", "y")]},
        "validationRules[1].name",
    ),
    (
        "iteration_start",
        {"taskId": "M", "validationRules": [{"type": "command", "name": "c", "config": {}}]},
        "validationRules[0].config.command",
    ),
    (
        "iteration_start",
        {
            "taskId": "M",
            "validationRules": [{"type": "command", "name": "c", "config": {"command": "a 'b"}}],
        },
        "validationRules[0].config.command",
    ),
    (
        "iteration_start",
        {
            "taskId": "M",
            "validationRules": [
                {"type": "command", "name": "c", "config": {"command": "true", "timeout": 0}}
            ],
        },
        "validationRules[0].config.timeout",
    ),
    (
        "iteration_start",
        {
            "taskId": "M",
            "validationRules": [{"type": "coverage", "name": "c", "config": {"minCoverage": 101}}],
        },
        "validationRules[0].config.minCoverage",
    ),
    (
        "iteration_start",
        {
            "taskId": "M",
            "validationRules": [
                {"type": "coverage", "name": "bad name!", "config": {"minCoverage": 1}}
            ],
        },
        "validationRules[0].name",
    ),
    ("iteration_start", {"taskId": "M", "agentContext": [1, 2]}, "agentContext"),
    ("iteration_validate", {"taskId": "M"}, "agentOutput"),
    ("iteration_validate", {"agentOutput": "x"}, "taskId"),
    ("iteration_validate", {"taskId": "nobody", "agentOutput": "x"}, "taskId"),
    ("iteration_validate", {"iterationId": "nope:1", "agentOutput": "x"}, "iterationId"),
    ("iteration_validate", {"taskId": "M", "agentOutput": ["x"]}, "agentOutput"),
    (
        "iteration_validate",
        {"taskId": "M", "agentOutput": "x", "filesModified": "a.py"},
        "filesModified",
    ),
    ("iteration_next", {"taskId": None}, "taskId"),
    ("iteration_next", {"taskId": "nobody"}, "taskId"),
    ("iteration_complete", {"taskId": "nobody"}, "taskId"),
    ("iteration_status", {}, "taskId"),
    ("checkpoint_resume", {"taskId": "nobody"}, "taskId"),
    ("checkpoint_resume", {"taskId": "M", "checkpointId": "latest"}, "checkpointId"),
    ("hook_register", {"taskId": "M", "hookType": "magic"}, "hookType"),
    ("hook_register", {"taskId": "M", "hookType": "default", "metadata": "x"}, "metadata"),
    ("hook_evaluate", {"iterationId": "nope", "agentOutput": "x"}, "iterationId"),
    ("hook_list", {"taskId": 1}, "taskId"),
    ("hook_clear", {}, "taskId"),
    ("no_such_tool", {"taskId": "M"}, "no_such_tool"),
]


class TestMalformedInput:
    """Bad arguments are tool errors naming the field; the server never dies."""

    def test_a_thousand_malformed_calls(self, tmp_path: Path) -> None:
        """1,000 malformed calls in one session, then a valid call is still answered."""

        async def scenario() -> None:
            async with mcp_server(tmp_path) as tools:
                for n in range(1000):
                    tool, arguments, names = MALFORMED[n % len(MALFORMED)]
                    failed, text, _data = await tools.raw(tool, arguments)
                    assert failed, f"{tool}({arguments}) was accepted: {text}"
                    assert names in text, f"{tool}({arguments}): {text!r} does not name {names}"
                started = await tools.ok("iteration_start", taskId="M")
                assert started["iterationNumber"] == 1

        run(scenario)

    def test_stdout_carries_protocol_messages_only(self, tmp_path: Path) -> None:
        """A garbage line and logging tool calls leave stdout with JSON-RPC messages alone."""

        async def scenario() -> None:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                SERVER,
                "--db",
                str(tmp_path / "loops.db"),
                cwd=tmp_path,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            assert proc.stdin is not None
            assert proc.stdout is not None
            assert proc.stderr is not None
            messages: list[Any] = [
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "0"},
                    },
                },
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                "this line is not JSON",
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "iteration_start", "arguments": {"taskId": "RAW"}},
                },
            ]
            validate = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {
                    "name": "iteration_validate",
                    "arguments": {"taskId": "RAW", "agentOutput": "x"},
                },
            }
            answered: dict[int, Any] = {}

            async def send(batch: list[Any], until: int) -> None:
                for message in batch:
                    line = message if isinstance(message, str) else json.dumps(message)
                    proc.stdin.write(line.encode() + b"\n")
                await proc.stdin.drain()
                while until not in answered:
                    line = await proc.stdout.readline()
                    assert line, "the server closed stdout early"
                    message = json.loads(line)
                    assert message["jsonrpc"] == "2.0"
                    if "id" in message:
                        answered[message["id"]] = message

            # The server may answer concurrent requests in any order: validate only once the
            # loop has been started.
            await send(messages, until=2)
            await send([validate], until=3)
            proc.stdin.close()
            stderr = await proc.stderr.read()
            assert await proc.wait() == 0
            assert (await proc.stdout.read()).strip() == b""
            assert not answered[2]["result"].get("isError")
            assert answered[3]["result"]["structuredContent"]["completionSignal"] == "CONTINUE"
            assert b"transition" in stderr

        run(scenario)


class TestCliEntryPoint:
    def test_loopwarden_mcp_serves(self, tmp_path: Path) -> None:
        """`loopwarden mcp --db URL` answers an MCP initialize on stdio with JSON only."""
        import subprocess

        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        proc = subprocess.run(
            [sys.executable, "-m", "loopwarden", "mcp", "--db", f"sqlite:///{tmp_path}/m.db"],
            input=json.dumps(request) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        first = json.loads(proc.stdout.splitlines()[0])
        assert first["id"] == 1
        assert "serverInfo" in first["result"]
