"""Structured logs: one event per transition, rendered as JSON or for the console.

loopwarden logs through ``structlog.get_logger("loopwarden")`` and leaves structlog's global
configuration to the application. :func:`configure_logging` is the one-call set-up that the
CLI and the MCP server use (always to stderr, so stdout stays the program's own).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

__all__ = ["configure_logging", "get_logger"]


def get_logger() -> Any:
    """loopwarden's logger (a structlog bound logger, lazily configured)."""
    return structlog.get_logger("loopwarden")


def configure_logging(
    fmt: Literal["console", "json"] = "console",
    level: str | int = "info",
    stream: TextIO | None = None,
) -> None:
    """Configure structlog for loopwarden's events: ``console`` or ``json``, to ``stream``."""
    numeric = level if isinstance(level, int) else logging.getLevelNamesMapping()[level.upper()]
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
