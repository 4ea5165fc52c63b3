"""The guard laboratory on the command line: replay, checkpoints, fork, prune."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from loopwarden import LoopConfig, LoopEngine, State, rules
from loopwarden.cli import app, parse_age


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def reopened_loop(engine: LoopEngine) -> str:
    """A loop that tripped the breaker at 3, was reopened, and completed at 5."""
    loop = engine.start("T", LoopConfig(max_iterations=10, rules=[rules.pattern("ok", "OK")]))
    for out in ("no", "no", "no"):
        engine.submit(loop.id, out)
    engine.reopen(loop.id)
    for out in ("no", "OK <promise>COMPLETE</promise>"):
        engine.submit(loop.id, out)
    return loop.id


class TestReplayCommand:
    def test_side_by_side_and_summary(self, reopened_loop: str, db_url: str) -> None:
        """replay prints each iteration's recorded and replayed decision and a summary."""
        result = invoke("replay", reopened_loop, "--circuit-breaker", "5", "--db", db_url)
        assert result.exit_code == 0
        assert "ESCALATE (circuit_breaker)" in result.stdout
        assert "would have completed at iteration 5" in " ".join(result.stdout.split())

    def test_json(self, reopened_loop: str, db_url: str) -> None:
        """--json gives the steps, both outcomes and the summary."""
        result = invoke("replay", reopened_loop, "--max-iterations", "2", "--json", "--db", db_url)
        data = json.loads(result.stdout)
        assert data["replayed_end"]["terminal_reason"] == "max_iterations"
        assert data["differs"] is True


class TestCheckpointsCommand:
    def test_lists_every_state_entry(self, reopened_loop: str, db_url: str) -> None:
        """checkpoints --json lists seq, state, iteration and trigger, without the data."""
        data = json.loads(invoke("checkpoints", reopened_loop, "--json", "--db", db_url).stdout)
        assert [c["seq"] for c in data] == list(range(1, len(data) + 1))
        assert data[0]["state"] == "initialized"
        assert "data" not in data[0]


class TestForkCommand:
    def test_fork_from_a_checkpoint(
        self, reopened_loop: str, db_url: str, engine: LoopEngine
    ) -> None:
        """fork --seq N starts a new loop there; the original is untouched."""
        data = json.loads(
            invoke(
                "fork", reopened_loop, "--seq", "5", "--prompt", "again", "--json", "--db", db_url
            ).stdout
        )
        assert data["metadata"]["fork"] == {"parent_loop_id": reopened_loop, "parent_seq": 5}
        assert data["state"] == "executing"
        assert engine.get(reopened_loop).state is State.COMPLETED

    def test_rewind_needs_a_seq(self, reopened_loop: str, db_url: str) -> None:
        """--rewind without --seq is a usage error."""
        result = invoke("fork", reopened_loop, "--rewind", "--db", db_url)
        assert result.exit_code == 2


class TestPruneCommand:
    def test_prunes_finished_loops(self, reopened_loop: str, db_url: str) -> None:
        """prune --older-than 0s prunes the finished loop and reports the count."""
        data = json.loads(invoke("prune", "--older-than", "0s", "--json", "--db", db_url).stdout)
        assert data["loops"] == [reopened_loop]
        assert data["checkpoints_deleted"] > 0

    def test_bad_age_is_a_usage_error(self, db_url: str, engine: LoopEngine) -> None:
        """An age that is not like 30d exits 2 with one line."""
        result = invoke("prune", "--older-than", "soon", "--db", db_url)
        assert result.exit_code == 2
        assert "--older-than" in result.output

    @pytest.mark.parametrize(
        ("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45", 45)]
    )
    def test_ages(self, text: str, seconds: float) -> None:
        """Ages take s, m, h, d, w suffixes; a plain number is seconds."""
        assert parse_age(text) == seconds
