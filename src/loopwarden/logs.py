"""Structured logs: one event per transition, rendered as JSON or for the console.

loopwarden logs through structlog and leaves structlog's global configuration to the
application: once the application has configured structlog, loopwarden's events go wherever it
said. Until then, loopwarden writes nothing to stdout (it is the program's own, and an MCP
server's protocol channel): events at ``LOOPWARDEN_LOG_LEVEL`` (default ``warning``) and above
go to stderr. :func:`configure_logging` is the one-call set-up that the CLI and the MCP
server use.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any, Literal, TextIO

import structlog

__all__ = ["configure_logging", "get_logger"]


def _level(name: str | int) -> int:
    if isinstance(name, int):
        return name
    try:
        return logging.getLevelNamesMapping()[name.upper()]
    except KeyError:
        return logging.WARNING


@functools.cache
def _fallback() -> Any:
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            _level(os.environ.get("LOOPWARDEN_LOG_LEVEL", "warning"))
        ),
    )


def get_logger() -> Any:
    """loopwarden's logger: structlog's when the application configured it, else stderr."""
    if structlog.is_configured():
        return structlog.get_logger("loopwarden")
    return _fallback()


def configure_logging(
    fmt: Literal["console", "json"] = "console",
    level: str | int = "info",
    stream: TextIO | None = None,
) -> None:
    """Configure structlog for loopwarden's events: ``console`` or ``json``, to ``stream``."""
    numeric = _level(level)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=True,
    )
