"""A custom stop hook: escalate when the agent modifies the same file 5 iterations running.

Run it (no API key, no server; a SQLite file in a temporary directory):

    python examples/custom_hook.py

The agent here is scripted: it keeps "fixing" parser.py without ever getting the tests to pass,
which is exactly the thrashing this hook is meant to catch before max_iterations does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from loopwarden import LoopConfig, LoopEngine, rules
from loopwarden.hooks import HookContext, HookResult, stop_hook
from loopwarden.model import HookAction

RUN_LENGTH = 5


@stop_hook("same-file-5x")
def same_file_five_times(ctx: HookContext) -> HookResult:
    """Escalate when one file appears in files_modified for RUN_LENGTH iterations in a row."""
    streaks: dict[str, int] = dict(ctx.context.get("file_streaks", {}))
    streaks = {f: streaks.get(f, 0) + 1 for f in ctx.files_modified}
    worst = max(streaks.items(), key=lambda kv: kv[1], default=("", 0))
    if worst[1] >= RUN_LENGTH:
        return HookResult(
            HookAction.ESCALATE,
            f"{worst[0]} was modified in {worst[1]} iterations running without passing",
        )
    # checkpoint_data is merged into the agent context, so the streaks survive a crash.
    return HookResult(HookAction.CONTINUE, checkpoint_data={"file_streaks": streaks})


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine = LoopEngine(f"sqlite:///{Path(tmp) / 'demo.db'}")
        # Registrations are stored with the task: a resumed loop evaluates the same hook,
        # provided the process that resumes it imported this module (so the name resolves).
        engine.hooks.register("PARSER-7", "same-file-5x")
        loop = engine.start(
            "PARSER-7",
            LoopConfig(
                max_iterations=15,
                circuit_breaker_threshold=10,
                rules=[rules.pattern("tests-pass", r"\b0 failed\b")],
            ),
            prompt="Make the parser tests pass.",
        )
        for i in range(1, 16):
            decision = engine.submit(
                loop.id,
                f"Tweaked the tokenizer again.\n3 failed, 9 passed (attempt {i})",
                files_modified=["parser.py"],
            )
            print(f"iteration {decision.iteration}: {decision.signal.value:8} {decision.reason}")
            if decision.terminal:
                print(
                    f"stopped: {decision.terminal_reason.value if decision.terminal_reason else ''}"
                )
                break
        for record in engine.history(loop.id)[-1:]:
            print("hook evaluations of the last iteration:", record.hooks)
        engine.close()


if __name__ == "__main__":
    main()
