"""Project hygiene: the README's commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section, flags=re.DOTALL)


class TestQuickstart:
    def test_exactly_two_commands(self) -> None:
        """The Quickstart has exactly two commands: run an example, run the tests."""
        commands = quickstart_commands()
        assert len(commands) == 2
        assert all("\n" not in c for c in commands)

    def test_ci_runs_the_readme_test_command(self) -> None:
        """.ci/run runs the README's test command, verbatim."""
        test_command = quickstart_commands()[1]
        assert "pytest" in test_command
        assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
