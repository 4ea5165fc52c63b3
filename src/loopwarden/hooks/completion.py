"""Completion hooks: tell the outside world how a run ended.

When ``loopwarden run`` (or ``resume``) finishes, however it finishes, each configured hook
receives one JSON object (:func:`build_payload`, documented by
``docs/completion-hook.schema.json``): a script gets it on stdin, a webhook as an HTTP POST.
A hook is a notification, never a gate: its failure, timeout or exit status is reported as a
warning and never changes the loop's outcome or the process's exit code.

Secrets stay out of the payload: no environment variables, the agent's executable name
rather than its command line, and token-looking values in the log tail redacted.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from loopwarden import process

__all__ = [
    "LOG_TAIL_BYTES",
    "PAYLOAD_VERSION",
    "HookResult",
    "build_payload",
    "fire",
    "git_branch",
    "log_tail",
    "post_webhook",
    "redact",
    "run_script",
    "scripts_from_env",
]

PAYLOAD_VERSION = 1
LOG_TAIL_BYTES = 3072
REDACTED = "[REDACTED]"

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole block.
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # Authorization headers and bearer tokens.
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1\2{REDACTED}"),
    # Provider key formats: OpenAI / Anthropic, GitHub, Slack, AWS, Google, Stripe, JWTs.
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), REDACTED),
    (re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{10,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    # Credentials inside URLs: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:]+:[^\s/@]+@"), rf"\1{REDACTED}@"),
    # NAME=value / NAME: value / "name": "value" where the name says it is a secret.
    (
        re.compile(
            r"""(?ix)
            (\b[\w.-]*(?:api[_-]?key|apikey|secret|token|password|passwd|pwd|credentials?
                |private[_-]?key|access[_-]?key|auth)[\w.-]*["']?\s*[=:]\s*["']?)
            (?!\[REDACTED\]|(?:bearer|basic)\b)([^\s"'&,;]+)
            """
        ),
        rf"\1{REDACTED}",
    ),
)


def redact(text: str) -> str:
    """``text`` with token-looking values replaced by ``[REDACTED]``."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def log_tail(text: str, limit: int = LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log, redacted, starting at a line boundary when it can.

    Redaction runs on a wider window than is kept, so a secret cut in half by the window's
    edge is still recognised whole.
    """
    window = redact(text[-(limit + 2048) :])
    data = window.encode("utf-8")
    if len(data) <= limit:
        return window
    tail = data[-limit:].decode("utf-8", errors="ignore")
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return tail


def git_branch(cwd: str | None) -> str | None:
    """The current branch of the git repository at ``cwd``, or None outside one."""
    argv = ["git", "rev-parse", "--abbrev-ref", "HEAD"]
    if process.missing_executable(argv) is not None:
        return None
    result = process.run(argv, cwd=cwd, timeout=5.0, max_output=4096)
    branch = result.stdout.strip()
    return branch if result.ok and branch else None


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def build_payload(
    *,
    loop_id: str,
    task_id: str,
    status: str,
    terminal_reason: str | None,
    reason: str,
    exit_code: int,
    iterations: int,
    max_iterations: int,
    started_at: float,
    finished_at: float,
    score_history: Sequence[float],
    agent_command: str,
    git_branch: str | None,
    log: str,
) -> dict[str, Any]:
    """The JSON object every completion hook receives (see the JSON Schema in docs/)."""
    return {
        "version": PAYLOAD_VERSION,
        "event": "loop.finished",
        "loop_id": loop_id,
        "task_id": task_id,
        "status": status,
        "terminal_reason": terminal_reason,
        "reason": redact(reason)[:2000],
        "exit_code": exit_code,
        "iterations": iterations,
        "max_iterations": max_iterations,
        "started_at": _iso(started_at),
        "finished_at": _iso(finished_at),
        "duration_seconds": round(max(0.0, finished_at - started_at), 3),
        "score_history": [float(s) for s in score_history],
        "agent_command": agent_command,
        "git_branch": git_branch,
        "log_tail": log_tail(log),
    }


@dataclass(frozen=True, slots=True)
class HookResult:
    """How one hook went: ``ok`` False means a warning was reported."""

    target: str
    ok: bool
    detail: str


def _payload_bytes(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def run_script(
    command: str,
    payload: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    grace: float = 5.0,
    cwd: str | None = None,
) -> HookResult:
    """Run one script hook with the payload on stdin.

    ``command`` is a path or a command line (split like a shell would, never run by one).
    After ``timeout`` seconds the hook's whole process group gets SIGTERM, then SIGKILL after
    ``grace`` seconds.
    """
    try:
        argv = process.split_command(command)
    except ValueError as exc:
        return HookResult(command, False, f"cannot parse the hook command: {exc}")
    problem = process.missing_executable(argv, cwd)
    if problem is not None:
        return HookResult(command, False, f"skipped: {problem}")
    result = process.run(
        argv,
        input=_payload_bytes(payload),
        timeout=timeout,
        grace=grace,
        cwd=cwd,
        max_output=16_384,
        keep="tail",
        extra_env={
            "LOOPWARDEN_LOOP_ID": str(payload.get("loop_id", "")),
            "LOOPWARDEN_TASK_ID": str(payload.get("task_id", "")),
            "LOOPWARDEN_STATUS": str(payload.get("status", "")),
        },
    )
    if result.error:
        return HookResult(command, False, result.error)
    if result.timed_out:
        return HookResult(
            command,
            False,
            f"timed out after {timeout:g}s; its process group was terminated",
        )
    if result.returncode != 0:
        said = redact(result.stderr.strip().splitlines()[-1]) if result.stderr.strip() else ""
        return HookResult(
            command,
            False,
            f"exited with status {result.returncode}" + (f": {said[:300]}" if said else ""),
        )
    return HookResult(command, True, f"done in {result.duration:.2f}s")


def _retryable(exc: httpx.HTTPError) -> bool:
    # Only errors where the server surely did not process the request: a read timeout may
    # mean it did, and a second POST would deliver the notification twice.
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.RemoteProtocolError)


def _safe_url(url: str) -> str:
    """The URL without credentials or query string, for messages."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<invalid URL>"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"


def post_webhook(
    url: str,
    payload: Mapping[str, Any],
    *,
    timeout: float = 10.0,
    attempts: int = 3,
    backoff: float = 0.5,
    transport: httpx.BaseTransport | None = None,
) -> HookResult:
    """POST the payload as JSON; retry (at most ``attempts`` in all) on connection errors and
    5xx answers, waiting ``backoff``, then twice that, between tries."""
    shown = _safe_url(url)
    body = _payload_bytes(payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "loopwarden-completion-hook",
        "X-Loopwarden-Event": str(payload.get("event", "loop.finished")),
    }
    detail = "not attempted"
    try:
        with httpx.Client(timeout=timeout, transport=transport, follow_redirects=False) as client:
            for attempt in range(1, max(1, attempts) + 1):
                try:
                    response = client.post(url, content=body, headers=headers)
                except httpx.HTTPError as exc:
                    detail = f"{type(exc).__name__}: {redact(str(exc))[:200]}"
                    if not _retryable(exc) or attempt >= attempts:
                        break
                else:
                    if response.status_code < 300:
                        return HookResult(shown, True, f"HTTP {response.status_code}")
                    detail = f"HTTP {response.status_code}"
                    if response.status_code < 500 or attempt >= attempts:
                        break
                time.sleep(backoff * 2 ** (attempt - 1))
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
        return HookResult(shown, False, f"invalid webhook URL: {exc}")
    return HookResult(shown, False, f"failed after {attempt} attempt(s): {detail}")


def fire(
    payload: Mapping[str, Any],
    *,
    scripts: Iterable[str] = (),
    webhooks: Iterable[str] = (),
    timeout: float = 30.0,
    cwd: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[HookResult]:
    """Run every script hook and post to every webhook; report failures through ``warn``."""
    results: list[HookResult] = []
    for script in scripts:
        results.append(run_script(script, payload, timeout=timeout, cwd=cwd))
    for url in webhooks:
        results.append(post_webhook(url, payload, timeout=min(timeout, 10.0)))
    if warn is not None:
        for r in results:
            if not r.ok:
                warn(f"completion hook {r.target}: {r.detail}")
    return results


def scripts_from_env(value: str | None) -> list[str]:
    """``LOOPWARDEN_ON_COMPLETE``: one or more hook commands separated by ``os.pathsep``."""
    if not value:
        return []
    return [part.strip() for part in value.split(os.pathsep) if part.strip()]
