"""Stop hooks, completion validators and the stop-check contract.

- In-process stop hooks (:mod:`loopwarden.hooks.stop`): callables answering complete /
  continue / escalate for each iteration, registered per task with ``engine.hooks``.
- Completion validators (:mod:`loopwarden.hooks.validators`): consulted when a loop is about
  to complete; an incomplete answer vetoes the stop.
- Command hooks (:class:`CommandHooks`, :mod:`loopwarden.hooks.command`): Claude Code's
  Stop / SubagentStop hooks from the settings files; ``loopwarden run`` consults them.
- :class:`StopChecker` (:mod:`loopwarden.hooks.base`): the contract both validators and
  command hooks follow.
"""

from loopwarden.hooks.base import StopChecker, StopContext
from loopwarden.hooks.command import CommandHooks, SettingsProblem, load_settings
from loopwarden.hooks.registry import HookInfo, HookRegistry
from loopwarden.hooks.stop import (
    PRESETS,
    Hook,
    HookContext,
    HookEvaluation,
    HookRecord,
    HookResult,
    all_of,
    any_of,
    define_hook,
    resolve_hook,
    stop_hook,
    when,
)
from loopwarden.hooks.validators import (
    CompletionValidator,
    ValidationOutcome,
    command_succeeds,
    define_validator,
    todos_done,
    validator,
)

__all__ = [
    "PRESETS",
    "CommandHooks",
    "CompletionValidator",
    "Hook",
    "HookContext",
    "HookEvaluation",
    "HookInfo",
    "HookRecord",
    "HookRegistry",
    "HookResult",
    "SettingsProblem",
    "StopChecker",
    "StopContext",
    "ValidationOutcome",
    "all_of",
    "any_of",
    "command_succeeds",
    "define_hook",
    "define_validator",
    "load_settings",
    "resolve_hook",
    "stop_hook",
    "todos_done",
    "validator",
    "when",
]
