"""The guard laboratory: replay under other settings, fork / rewind, retention."""

from __future__ import annotations

import pytest

from loopwarden import (
    ConfigError,
    LoopConfig,
    LoopEngine,
    Signal,
    State,
    StoreError,
    TerminalReason,
    rules,
)

OK = rules.pattern("ok", "OK")


def escalated_then_reopened(engine: LoopEngine) -> str:
    """Three failures trip the breaker at 3; reopened, it completes at 5."""
    loop = engine.start("T", LoopConfig(max_iterations=10, rules=[OK]), prompt="P")
    for out in ("no", "no", "no"):
        engine.submit(loop.id, out)
    engine.reopen(loop.id, note="once more")
    for out in ("no", "OK <promise>COMPLETE</promise>"):
        engine.submit(loop.id, out)
    return loop.id


class TestReplay:
    def test_same_settings_same_outcome(self, engine: LoopEngine) -> None:
        """Replaying with no changes reproduces every recorded decision up to the first stop."""
        loop_id = escalated_then_reopened(engine)
        result = engine.replay(loop_id)
        assert not result.differs
        assert result.replayed_end is not None
        assert result.replayed_end.terminal_reason is TerminalReason.CIRCUIT_BREAKER

    def test_higher_threshold_completes_later(self, engine: LoopEngine) -> None:
        """With threshold 5 the loop would have completed at 5 instead of escalating at 3."""
        result = engine.replay(escalated_then_reopened(engine), circuit_breaker_threshold=5)
        assert result.differs
        assert result.first_difference is not None
        assert result.first_difference.iteration == 3
        assert result.replayed_end is not None
        assert result.replayed_end.signal is Signal.COMPLETE
        assert result.summary() == (
            "with circuit_breaker_threshold=5 this loop would have completed at iteration 5 "
            "instead of escalating (circuit_breaker) at iteration 3"
        )

    def test_lower_limit_stops_earlier(self, engine: LoopEngine) -> None:
        """A smaller max_iterations stops the replay where it fires."""
        result = engine.replay(escalated_then_reopened(engine), {"max_iterations": 2})
        assert result.replayed_end is not None
        assert result.replayed_end.terminal_reason is TerminalReason.MAX_ITERATIONS
        assert result.replayed_end.iteration == 2

    def test_running_out_of_history_is_said(self, engine: LoopEngine) -> None:
        """When the new settings never stop the loop, the replay says the history ran out."""
        result = engine.replay(
            escalated_then_reopened(engine),
            circuit_breaker_threshold=10,
            completion_promises=["DONE"],
        )
        assert result.ran_out
        assert "where its recorded history ends" in result.summary()

    def test_only_guard_settings_can_change(self, engine: LoopEngine) -> None:
        """Replay refuses settings that would need the agent or the commands to run again."""
        loop_id = escalated_then_reopened(engine)
        with pytest.raises(ConfigError, match="workdir"):
            engine.replay(loop_id, workdir="/elsewhere")

    def test_replay_writes_nothing(self, engine: LoopEngine) -> None:
        """A replay leaves the loop and its checkpoints untouched."""
        loop_id = escalated_then_reopened(engine)
        before = [c.seq for c in engine.checkpoints(loop_id)]
        engine.replay(loop_id, circuit_breaker_threshold=5)
        assert [c.seq for c in engine.checkpoints(loop_id)] == before


class TestFork:
    def test_fork_from_an_executing_checkpoint_with_a_new_prompt(self, engine: LoopEngine) -> None:
        """A fork restarts iteration 2 with a new prompt; the original is untouched."""
        loop = engine.start("T", LoopConfig(max_iterations=5, rules=[OK]), prompt="old")
        engine.submit(loop.id, "no")
        engine.submit(loop.id, "no")
        executing_2 = next(
            c.seq
            for c in engine.checkpoints(loop.id)
            if c.state is State.EXECUTING and c.iteration == 2
        )
        fork = engine.fork(loop.id, executing_2, prompt="new approach")
        assert fork.state is State.EXECUTING
        assert fork.iteration == 2
        assert fork.current_prompt.startswith("new approach")
        assert fork.metadata["fork"] == {"parent_loop_id": loop.id, "parent_seq": executing_2}
        assert [c.trigger for c in engine.checkpoints(fork.id)][-1] == "fork"
        assert [r.iteration for r in engine.history(fork.id)] == [1]
        d = engine.submit(fork.id, "OK <promise>COMPLETE</promise>")
        assert d.signal is Signal.COMPLETE
        assert d.iteration == 2
        original = engine.get(loop.id)
        assert original.iteration == 3
        assert original.state is State.EXECUTING

    def test_fork_keeps_counters(self, engine: LoopEngine) -> None:
        """The fork carries the failure count of the point it forked from."""
        loop = engine.start("T", LoopConfig(max_iterations=9, rules=[OK]))
        engine.submit(loop.id, "no")
        engine.submit(loop.id, "no")
        fork = engine.fork(loop.id)
        assert fork.consecutive_failures == 2
        d = engine.submit(fork.id, "no")
        assert d.terminal_reason is TerminalReason.CIRCUIT_BREAKER

    def test_fork_from_validating_resumes_validation(self, engine: LoopEngine) -> None:
        """A fork from a validating checkpoint re-runs validation on resume."""
        loop = engine.start("T", LoopConfig(rules=[OK]))
        engine.submit(loop.id, "OK <promise>COMPLETE</promise>")
        validating = next(c.seq for c in engine.checkpoints(loop.id) if c.state is State.VALIDATING)
        fork = engine.fork(loop.id, validating)
        assert fork.state is State.VALIDATING
        assert engine.resume(fork.id).state is State.COMPLETED

    def test_unknown_checkpoint_is_an_error(self, engine: LoopEngine) -> None:
        """Forking from a checkpoint that does not exist names the range that does."""
        loop = engine.start("T", LoopConfig())
        with pytest.raises(ConfigError, match="no checkpoint 99"):
            engine.fork(loop.id, 99)

    def test_rewind_blocks_the_live_original(self, engine: LoopEngine) -> None:
        """rewind forks and blocks the original so only one of them goes on."""
        loop = engine.start("T", LoopConfig(rules=[OK]))
        engine.submit(loop.id, "no")
        fork = engine.rewind(loop.id, 2, prompt="again")
        original = engine.get(loop.id)
        assert original.state is State.BLOCKED
        assert fork.id in original.reason
        assert fork.state is State.EXECUTING
        assert fork.iteration == 1


class TestPrune:
    def test_prune_keeps_outcome_and_summaries(self, engine: LoopEngine) -> None:
        """Pruning deletes all but the last checkpoint; outcome and iteration summaries stay."""
        loop = engine.start("T", LoopConfig(rules=[OK]))
        engine.submit(loop.id, "no")
        engine.submit(loop.id, "OK <promise>COMPLETE</promise>")
        report = engine.prune(0)
        assert report["loops"] == [loop.id]
        assert len(engine.checkpoints(loop.id)) == 1
        snapshot = engine.get(loop.id)
        assert snapshot.state is State.COMPLETED
        assert snapshot.terminal_reason is TerminalReason.COMPLETED
        history = engine.history(loop.id)
        assert [(h.iteration, h.signal) for h in history] == [
            (1, Signal.CONTINUE),
            (2, Signal.COMPLETE),
        ]
        assert history[0].output == ""
        assert engine.resume(loop.id).state is State.COMPLETED

    def test_prune_spares_live_and_recent_loops(self, engine: LoopEngine) -> None:
        """Live loops and loops newer than the cutoff are not touched."""
        live = engine.start("T", LoopConfig())
        done = engine.start("T", LoopConfig())
        engine.submit(done.id, "<promise>COMPLETE</promise>")
        assert engine.prune(3600)["loops"] == []
        assert engine.prune(0)["loops"] == [done.id]
        assert len(engine.checkpoints(live.id)) == 2

    def test_pruned_loops_cannot_be_replayed(self, engine: LoopEngine) -> None:
        """Replay of a pruned loop says its evidence is gone."""
        loop = engine.start("T", LoopConfig())
        engine.submit(loop.id, "<promise>COMPLETE</promise>")
        engine.prune(0)
        with pytest.raises(StoreError, match="pruned"):
            engine.replay(loop.id)

    def test_negative_age_is_an_error(self, engine: LoopEngine) -> None:
        """A negative age is a ConfigError naming older_than."""
        with pytest.raises(ConfigError, match="older_than"):
            engine.prune(-1)
