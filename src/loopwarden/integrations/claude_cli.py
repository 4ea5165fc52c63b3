"""`loopwarden claude ...`: loopwarden as Claude Code's Stop hook (commands mounted by cli.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import structlog
import typer

from loopwarden.errors import LoopwardenError
from loopwarden.integrations import claude_code
from loopwarden.logs import configure_logging

claude_app = typer.Typer(
    name="claude",
    help="Run Claude Code as a durable, guarded loop (loopwarden as its Stop hook).",
    no_args_is_help=True,
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL or file (default: <project>/.loopwarden/loopwarden.db).",
    ),
]


@claude_app.callback()
def _logging() -> None:
    """Keep stdout for the command's own output (Claude Code parses the hook's stdout)."""
    if not structlog.is_configured():
        configure_logging("console", level="warning", stream=sys.stderr)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@claude_app.command()
def start(
    prompt: Annotated[str | None, typer.Argument(help="The task prompt.")] = None,
    prompt_file: Annotated[
        Path | None, typer.Option("--prompt-file", help="Read the prompt from this file.")
    ] = None,
    max_iterations: Annotated[
        int, typer.Option("--max-iterations", min=1, help="Iteration budget.")
    ] = 15,
    circuit_breaker: Annotated[
        int,
        typer.Option(
            "--circuit-breaker", min=1, help="Escalate after N failed validations in a row."
        ),
    ] = 3,
    completion_promise: Annotated[
        str,
        typer.Option(
            "--completion-promise", help="The word in <promise>WORD</promise> that ends it."
        ),
    ] = "COMPLETE",
    validate: Annotated[
        list[str] | None,
        typer.Option(
            "--validate",
            help="A shell command that must exit 0 before completion is accepted (repeatable).",
        ),
    ] = None,
    validate_timeout: Annotated[
        float, typer.Option("--validate-timeout", help="Seconds each --validate command may run.")
    ] = 300.0,
    db: DbOption = None,
) -> None:
    """Create a loop for this project and install the Stop hook in .claude/settings.local.json."""
    if (prompt is None) == (prompt_file is None):
        _fail("give the prompt either as an argument or with --prompt-file (exactly one)")
    try:
        text = prompt_file.read_text(encoding="utf-8") if prompt_file is not None else prompt
        loop, changed = claude_code.start_loop(
            Path.cwd(),
            text or "",
            max_iterations=max_iterations,
            circuit_breaker=circuit_breaker,
            completion_promise=completion_promise,
            validate=validate or (),
            validate_timeout=validate_timeout,
            db_url=db,
        )
    except (
        OSError,
        LoopwardenError,
        claude_code.ClaudeLoopError,
        claude_code.SettingsFileError,
    ) as exc:
        _fail(str(exc))
        return
    settings = claude_code.settings_local_path(Path.cwd().resolve())
    typer.echo(f"loop {loop.id} started: up to {loop.max_iterations} iterations")
    typer.echo(f"Stop hook {'written to' if changed else 'already in'} {settings}")
    word = completion_promise.upper()
    if f"<promise>{word}</promise>".lower() not in (text or "").lower():
        typer.echo(
            f"note: the prompt does not ask for <promise>{word}</promise>; the loop completes "
            "only when the agent outputs it",
            err=True,
        )
    typer.echo('Now run Claude Code in this directory: claude "$(loopwarden claude prompt)"')


@claude_app.command()
def status(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the loop as JSON.")] = False,
) -> None:
    """Show this project's active loop (or its latest one)."""
    try:
        data = claude_code.loop_status(Path.cwd(), db)
    except LoopwardenError as exc:
        _fail(str(exc))
        return
    if data is None:
        if as_json:
            typer.echo("null")
        else:
            typer.echo("no loopwarden Claude Code loop in this project")
        return
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    last = data.get("last_decision") or {}
    lines = [
        f"loop       {data['id']}",
        f"state      {data['state']}"
        + (f" ({data['terminal_reason']})" if data.get("terminal_reason") else ""),
        f"iteration  {data['iteration']}/{data['max_iterations']}",
        f"scores     {', '.join(f'{s:g}' for s in data['scores']) or '-'}",
        f"last       {last.get('reason', '-')}",
        f"session    {data.get('claude_session_id') or '(not bound yet)'}",
        f"hook       {'installed' if data.get('hook_installed') else 'not installed'}",
    ]
    if data.get("reason"):
        lines.append(f"reason     {data['reason']}")
    typer.echo("\n".join(lines))


@claude_app.command()
def cancel(
    db: DbOption = None,
    remove_hook: Annotated[
        bool,
        typer.Option("--remove-hook", help="Also remove the Stop hook from settings.local.json."),
    ] = False,
) -> None:
    """Block this project's active loop (the hook then lets Claude Code stop)."""
    try:
        loop = claude_code.cancel_loop(Path.cwd(), db)
        removed = remove_hook and claude_code.remove_stop_hook(
            claude_code.settings_local_path(Path.cwd().resolve())
        )
    except (LoopwardenError, claude_code.SettingsFileError) as exc:
        _fail(str(exc))
        return
    if loop is None:
        typer.echo("no active loop in this project")
    else:
        typer.echo(f"loop {loop.id} cancelled at iteration {loop.iteration}")
    if removed:
        typer.echo("Stop hook removed from .claude/settings.local.json")


@claude_app.command()
def prompt(db: DbOption = None) -> None:
    """Print the active loop's current prompt (for `claude "$(loopwarden claude prompt)"`)."""
    data = claude_code.loop_status(Path.cwd(), db)
    if data is None or data["state"] in ("completed", "blocked", "escalated"):
        _fail("no active loop in this project; start one with `loopwarden claude start`")
        return
    typer.echo(data["current_prompt"])


@claude_app.command()
def release(db: DbOption = None) -> None:
    """Unbind the active loop from its Claude Code session; the next session to stop takes it."""
    data = claude_code.loop_status(Path.cwd(), db)
    if data is None or data["state"] in ("completed", "blocked", "escalated"):
        _fail("no active loop in this project")
        return
    old = claude_code.release_session(Path.cwd().resolve(), data["id"])
    typer.echo(f"loop {data['id']} released from session {old or '(none)'}")


@claude_app.command("stop-hook")
def stop_hook(db: DbOption = None) -> None:
    """The command Claude Code runs as its Stop hook (reads the hook JSON on stdin)."""
    try:
        stdin_text = sys.stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        stdin_text = ""
        typer.echo(f"loopwarden stop hook: cannot read stdin ({exc})", err=True)
    response = claude_code.run_stop_hook(stdin_text, db_url=db)
    if response.stdout:
        sys.stdout.write(response.stdout + "\n")
    if response.stderr:
        sys.stderr.write(response.stderr)
    raise typer.Exit(response.exit_code)


if __name__ == "__main__":
    claude_app()
