"""The contract of a stop check: consulted when a loop is about to complete.

A checker answers a :class:`~loopwarden.model.StopCheck` (``allowed=False`` vetoes the stop:
the loop continues with the reason as feedback) or None (no opinion). The engine records
every answer in the iteration's evidence, so the decision is re-applied identically on
resume. After ``max_stop_retries`` vetoes in a row the engine allows the stop without asking
and records it as forced; a checker that raises is logged and the stop is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from loopwarden.model import Promise, StopCheck, ValidationReport

__all__ = ["StopChecker", "StopContext"]


@dataclass(frozen=True, slots=True)
class StopContext:
    """What a stop check sees about the loop that is about to complete."""

    loop_id: str
    task_id: str
    iteration: int
    max_iterations: int
    output: str
    stop_reason: str
    retry_count: int
    report: ValidationReport
    promises: tuple[Promise, ...] = ()
    files_modified: tuple[str, ...] = ()
    parent_id: str | None = None
    workdir: str | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    prompt: str = ""

    @property
    def stop_hook_active(self) -> bool:
        """True when this iteration runs because a stop check vetoed the previous stop."""
        return self.retry_count > 0

    @property
    def tool_count(self) -> int:
        """How many tool calls the agent reported (``tool_count`` in the agent context)."""
        value = self.context.get("tool_count", 0)
        return int(value) if isinstance(value, int | float) else 0


@runtime_checkable
class StopChecker(Protocol):
    """Anything with a ``name`` and ``check(context) -> StopCheck | None``."""

    name: str

    def check(self, context: StopContext) -> StopCheck | None:
        """Veto (``allowed=False``), allow, or None for no opinion."""
        ...
