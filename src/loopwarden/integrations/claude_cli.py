"""`loopwarden claude ...`: loopwarden as Claude Code's Stop hook (commands mounted by cli.py)."""

from __future__ import annotations

import typer

claude_app = typer.Typer(
    name="claude",
    help="Run Claude Code as a durable, guarded loop (loopwarden as its Stop hook).",
    no_args_is_help=True,
)
