"""Embed loopwarden as the loop engine of your own orchestrator.

    python examples/embedded_loop.py [--db PATH]

A scripted "agent" fixes a tiny function one bug per iteration; a command rule runs the
project's checks; the agent claims completion too early once (the claim is rejected because
a rule fails), then for real. Everything is stored in SQLite (default: a temporary file), so
the loop could be killed at any point and resumed with ``engine.resume(loop_id)``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from loopwarden import LoopConfig, LoopEngine, State, rules

CHECK = """\
from calc import add, mul
failures = []
if add(2, 3) != 5: failures.append("add(2, 3) should be 5")
if mul(2, 3) != 6: failures.append("mul(2, 3) should be 6")
print("\\n".join(failures) or "all checks passed")
raise SystemExit(1 if failures else 0)
"""

BROKEN = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
FIXES = [("return a - b", "return a + b"), ("return a + b\n", "return a * b\n")]


def scripted_agent(project: Path, prompt: str, iteration: int) -> str:
    """Pretend to be a coding agent: apply one fix per iteration, then claim completion."""
    source = (project / "calc.py").read_text()
    if iteration == 1:
        old, new = FIXES[0]
        (project / "calc.py").write_text(source.replace(old, new, 1))
        return "Fixed add(). <promise>COMPLETE</promise>"  # too early: mul is still wrong
    if "mul(2, 3) should be 6" in prompt:
        head, _, tail = source.rpartition("return a + b\n")
        (project / "calc.py").write_text(head + "return a * b\n" + tail)
        return "Fixed mul() as the feedback asked. <promise>COMPLETE</promise>"
    return "Nothing left that I can see."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", help="SQLite file or database URL (default: a temporary file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "calc.py").write_text(BROKEN)
        (project / "check.py").write_text(CHECK)
        engine = LoopEngine(args.db or str(Path(tmp) / "loopwarden.db"))
        config = LoopConfig(
            max_iterations=5,
            workdir=str(project),
            rules=[
                rules.command("checks", [sys.executable, "check.py"], timeout=60),
                rules.pattern("no-todo", r"\bTODO\b", must_match=False, target="output"),
            ],
        )
        loop = engine.start("CALC-1", config, prompt="Make check.py pass.")
        budget = f"{loop.iteration}/{config.max_iterations}"
        print(f"loop {loop.id}: {loop.state.value}, iteration {budget}")
        snapshot = loop
        while snapshot.state is State.EXECUTING:
            output = scripted_agent(project, snapshot.current_prompt, snapshot.iteration)
            decision = engine.submit(loop.id, output, files_modified=["calc.py"])
            print(
                f"iteration {decision.iteration}: score {decision.score:5.1f}  "
                f"{decision.signal.value:8}  {decision.reason}"
            )
            for line in decision.feedback:
                print(f"    feedback: {line.splitlines()[0]}")
            snapshot = engine.get(loop.id)
        reason = snapshot.terminal_reason.value if snapshot.terminal_reason else "-"
        print(
            f"final state: {snapshot.state.value} ({reason}) after {snapshot.iteration} iterations"
        )
        print(f"checkpoints written: {len(engine.checkpoints(loop.id))}")
        engine.close()
        return 0 if snapshot.state is State.COMPLETED else 1


if __name__ == "__main__":
    raise SystemExit(main())
