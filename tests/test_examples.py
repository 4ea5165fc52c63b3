"""The examples run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class TestExamples:
    def test_custom_hook_example_escalates_on_thrashing(self) -> None:
        """examples/custom_hook.py stops the loop by its hook after five edits of one file."""
        out = subprocess.run(
            [sys.executable, str(EXAMPLES / "custom_hook.py")],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "stopped: escalated_by_hook" in out.stdout
        assert "iteration 5: ESCALATE" in out.stdout

    def test_embedded_loop_example_completes(self) -> None:
        """examples/embedded_loop.py rejects the early claim, then completes at iteration 2."""
        out = subprocess.run(
            [sys.executable, str(EXAMPLES / "embedded_loop.py")],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "completion claim rejected" in out.stdout
        assert "final state: completed (completed) after 2 iterations" in out.stdout
