"""loopwarden: a durable loop engine for agent iteration loops.

The public API is what this module exports; everything else is private and may change.
"""

from loopwarden import hooks, rules
from loopwarden.decide import decide
from loopwarden.engine import LoopEngine, compose_prompt
from loopwarden.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidTransitionError,
    LeaseError,
    LeaseHeldError,
    LoopNotFoundError,
    LoopwardenError,
    SchemaVersionError,
    StaleOwnerError,
    StoreError,
    UnresolvedReferenceError,
)
from loopwarden.guards import (
    CircuitBreaker,
    Guard,
    MaxIterations,
    Regression,
    Trip,
    guard,
    safety_guard,
)
from loopwarden.logs import configure_logging
from loopwarden.model import (
    CheckpointInfo,
    CompletionPolicy,
    Decision,
    Evidence,
    HookAction,
    HookVerdict,
    IterationRecord,
    LoopConfig,
    LoopSnapshot,
    Promise,
    RuleResult,
    RuleStatus,
    Signal,
    State,
    StopCheck,
    TerminalReason,
    ValidationReport,
)
from loopwarden.promises import detect_promises

__version__ = "0.1.0"

__all__ = [
    "CheckpointInfo",
    "CircuitBreaker",
    "CompletionPolicy",
    "ConfigError",
    "CorruptRecordError",
    "Decision",
    "Evidence",
    "Guard",
    "HookAction",
    "HookVerdict",
    "InvalidTransitionError",
    "IterationRecord",
    "LeaseError",
    "LeaseHeldError",
    "LoopConfig",
    "LoopEngine",
    "LoopNotFoundError",
    "LoopSnapshot",
    "LoopwardenError",
    "MaxIterations",
    "Promise",
    "Regression",
    "RuleResult",
    "RuleStatus",
    "SchemaVersionError",
    "Signal",
    "StaleOwnerError",
    "State",
    "StopCheck",
    "StoreError",
    "TerminalReason",
    "Trip",
    "UnresolvedReferenceError",
    "ValidationReport",
    "__version__",
    "compose_prompt",
    "configure_logging",
    "decide",
    "detect_promises",
    "guard",
    "hooks",
    "rules",
    "safety_guard",
]
