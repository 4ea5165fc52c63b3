"""Structured logs: one event per transition, JSON or console, never on stdout by default."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from structlog.testing import capture_logs

from loopwarden import LoopConfig, LoopEngine, configure_logging


class TestTransitionEvents:
    def test_one_event_per_transition_with_its_fields(self, engine: LoopEngine) -> None:
        """Each state entry logs loop, task, iteration, from, to, signal, reason, duration."""
        with capture_logs() as logs:
            loop = engine.start("T", LoopConfig(max_iterations=1))
            engine.submit(loop.id, "output")
        events = [e for e in logs if e["event"] == "transition"]
        assert [e["to_state"] for e in events] == [
            "initialized",
            "executing",
            "validating",
            "deciding",
            "escalated",
        ]
        last = events[-1]
        assert last["loop_id"] == loop.id
        assert last["task_id"] == "T"
        assert last["iteration"] == 1
        assert last["from_state"] == "deciding"
        assert last["signal"] == "ESCALATE"
        assert "max iterations" in last["reason"]
        assert last["duration_ms"] >= 0

    def test_json_rendering(self, db_url: str) -> None:
        """configure_logging('json') renders one JSON object per line."""
        stream = io.StringIO()
        configure_logging("json", level="info", stream=stream)
        with LoopEngine(db_url) as engine:
            engine.start("T", LoopConfig())
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [line["to_state"] for line in lines] == ["initialized", "executing"]
        assert all(line["level"] == "info" for line in lines)


class TestDefaultOutput:
    def test_nothing_on_stdout_when_unconfigured(self, tmp_path: object) -> None:
        """An application that never configured logging gets nothing on its stdout."""
        code = (
            "import sys\nfrom loopwarden import LoopEngine\n"
            "e = LoopEngine(sys.argv[1]); l = e.start('T'); e.submit(l.id, 'x')\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, f"sqlite:///{tmp_path}/x.db"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert out.stdout == ""
