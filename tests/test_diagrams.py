"""The diagrams are generated from the machine itself, and the committed ones are current."""

from __future__ import annotations

from pathlib import Path

from loopwarden import LoopConfig, LoopEngine, diagrams
from loopwarden.machine import TRANSITIONS

DIAGRAMS = Path(__file__).resolve().parents[1] / "diagrams"


class TestCommittedDiagrams:
    def test_mermaid_is_current(self) -> None:
        """diagrams/loop.mmd is what the machine generates (python -m loopwarden.diagrams)."""
        assert (DIAGRAMS / "loop.mmd").read_text(encoding="utf-8") == diagrams.mermaid()

    def test_svg_is_current(self) -> None:
        """diagrams/loop.svg is what the machine generates (python -m loopwarden.diagrams)."""
        assert (DIAGRAMS / "loop.svg").read_text(encoding="utf-8") == diagrams.svg()


class TestGeneratedFromMachine:
    def test_every_declared_transition_is_drawn(self) -> None:
        """Each (source, trigger, dest) of the transition table appears as an edge."""
        drawn = {e.key for e in diagrams.edges()}
        for t in TRANSITIONS:
            sources = t["source"] if isinstance(t["source"], list) else [t["source"]]
            for source in sources:
                assert (source, t["trigger"], t["dest"]) in drawn

    def test_guards_are_labelled(self) -> None:
        """Conditional transitions carry their guard names."""
        text = diagrams.mermaid()
        assert "decide [signal_is_complete]" in text
        assert "reopen [has_iterations_left]" in text

    def test_dot_is_a_digraph(self) -> None:
        """The DOT output is one digraph naming every state."""
        text = diagrams.dot()
        assert text.startswith("digraph loopwarden {")
        for state in ("initialized", "executing", "completed", "escalated"):
            assert state in text


class TestLoopPath:
    def test_counts_follow_the_checkpoints(self, engine: LoopEngine) -> None:
        """A loop's path counts each transition it took, from its checkpoints."""
        loop = engine.start("T", LoopConfig(max_iterations=3))
        engine.submit(loop.id, "working")
        engine.submit(loop.id, "done <promise>COMPLETE</promise>")
        counts = diagrams.transition_counts(engine.checkpoints(loop.id))
        assert counts[("initialized", "start", "executing")] == 1
        assert counts[("executing", "submit", "validating")] == 2
        assert counts[("deciding", "decide", "executing")] == 1
        assert counts[("deciding", "decide", "completed")] == 1
        text = diagrams.mermaid(counts)
        assert "submit (2x)" in text
        assert "class completed visited" in text
        assert "class escalated visited" not in text
