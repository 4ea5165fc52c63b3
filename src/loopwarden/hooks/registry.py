"""The per-task hook registry, persisted with the loops.

Registrations are rows of ``lw_hooks``: a preset or a registered hook name, or a completion
validator's spec, with its order, enabled flag and metadata. Callables are stored by name and
found again through :func:`~loopwarden.hooks.stop.define_hook` / ``define_validator`` in the
process that resumes the loop; a name that cannot be found is an error raised at resume.
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopwarden.errors import ConfigError, CorruptRecordError
from loopwarden.hooks.base import StopContext
from loopwarden.hooks.stop import _REGISTRY, PRESETS, Hook, as_hook, define_hook, resolve_hook
from loopwarden.hooks.validators import (
    CompletionValidator,
    ValidatorInput,
    resolve_validator,
)
from loopwarden.model import JSON, StopCheck

if TYPE_CHECKING:
    from loopwarden.store import Database

__all__ = ["HookInfo", "HookRegistry", "ValidatorChecker"]


@dataclass(frozen=True, slots=True)
class HookInfo:
    """One registration: what ``hooks.list(task_id)`` returns."""

    id: str
    task_id: str
    name: str
    kind: str  # "hook" or "validator"
    type: str  # "preset", "named" or "builtin"
    enabled: bool
    metadata: JSON = field(default_factory=dict)
    order: int = 0

    def to_dict(self) -> JSON:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "name": self.name,
            "kind": self.kind,
            "type": self.type,
            "enabled": self.enabled,
            "metadata": self.metadata,
            "order": self.order,
        }


def _load(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(f"{where} holds invalid JSON ({exc})") from None


class ValidatorChecker:
    """The task's completion validators as one stop check (AND: first incomplete vetoes)."""

    name = "validators"

    def __init__(self, validators: builtins.list[tuple[str, CompletionValidator]]) -> None:
        self.validators = validators

    def check(self, context: StopContext) -> StopCheck | None:
        given = ValidatorInput(
            context.stop_reason,
            context.tool_count,
            context.retry_count,
            context.context,
            context.workdir,
        )
        passed = []
        for hook_id, validator in self.validators:
            outcome = validator.check(given)
            if not outcome.complete:
                return StopCheck(f"validator {validator.name} ({hook_id})", False, str(outcome))
            passed.append(str(outcome))
        return StopCheck("validators", True, "; ".join(passed))


class HookRegistry:
    """Register, list, enable/disable and clear a task's stop hooks and completion validators."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def _insert(self, task_id: str, kind: str, ref: JSON, enabled: bool, metadata: Any) -> str:
        if not isinstance(task_id, str) or not task_id.strip():
            raise ConfigError("task_id", f"must be a non-empty string, got {task_id!r}")
        meta = dict(metadata or {})
        try:
            meta_json = json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ConfigError("metadata", f"must be JSON-serialisable: {exc}") from None
        hook_id = "hk_" + uuid.uuid4().hex[:16]
        with self._db.transaction():
            existing = self._db.fetch_all("task_hooks", {"task_id": task_id})
            position = max((int(r["position"]) for r in existing), default=0) + 1
            self._db.execute(
                "insert_hook",
                {
                    "id": hook_id,
                    "task_id": task_id,
                    "position": position,
                    "kind": kind,
                    "ref": json.dumps(ref),
                    "enabled": bool(enabled),
                    "meta": meta_json,
                    "created_at": time.time(),
                },
            )
        return hook_id

    def register(
        self,
        task_id: str,
        hook: str | Hook | Callable[..., Any],
        *,
        name: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        enabled: bool = True,
    ) -> str:
        """Register a stop hook for a task: a preset name, a registered name, or a callable.

        A callable is registered under ``name`` (default: its qualified name) so a loop
        resumed in this process evaluates it; another process must define it again.
        """
        if isinstance(hook, str):
            resolve_hook(hook)
            ref = hook
        else:
            registered = next((n for n, h in _REGISTRY.items() if h is hook), None)
            own = hook.name if isinstance(hook, Hook) else getattr(hook, "__qualname__", "")
            ref = name or registered or str(own)
            if not ref or ("<lambda>" in ref and not name):
                raise ConfigError("name", "a lambda needs name= so a resumed loop can find it")
            if ref != registered:
                define_hook(ref, as_hook(hook, ref))
        return self._insert(task_id, "hook", {"name": ref}, enabled, metadata)

    def register_validator(
        self,
        task_id: str,
        validator: CompletionValidator,
        *,
        metadata: Mapping[str, Any] | None = None,
        enabled: bool = True,
    ) -> str:
        """Register a completion validator (built-in, or defined with define_validator)."""
        if not isinstance(validator, CompletionValidator):
            raise ConfigError(
                "validator",
                "must be a CompletionValidator (todos_done, command_succeeds, define_validator)",
            )
        spec = validator.spec()
        resolve_validator(spec)
        return self._insert(task_id, "validator", spec, enabled, metadata)

    def _info(self, row: Mapping[str, Any]) -> HookInfo:
        where = f"hook {row['id']}"
        ref = _load(row["ref"], where)
        if row["kind"] == "hook":
            name = str(ref.get("name"))
            kind_type = "preset" if name in PRESETS else "named"
        else:
            name = str(ref.get("name") or ref.get("builtin") or "all_of")
            kind_type = "builtin" if "builtin" in ref or "all_of" in ref else "named"
        return HookInfo(
            id=row["id"],
            task_id=row["task_id"],
            name=name,
            kind=row["kind"],
            type=kind_type,
            enabled=bool(row["enabled"]),
            metadata=_load(row["meta"], where),
            order=int(row["position"]),
        )

    def list(self, task_id: str) -> builtins.list[HookInfo]:
        """A task's registrations in evaluation order."""
        return [self._info(r) for r in self._db.fetch_all("task_hooks", {"task_id": task_id})]

    def get(self, hook_id: str) -> HookInfo:
        row = self._db.fetch_one("select_hook", {"id": hook_id})
        if row is None:
            raise LookupError(f"no hook with id {hook_id!r}; list them with hooks.list(task_id)")
        return self._info(row)

    def _set_enabled(self, hook_id: str, enabled: bool) -> HookInfo:
        self.get(hook_id)
        with self._db.transaction():
            self._db.execute("set_hook_enabled", {"id_": hook_id, "enabled": enabled})
        return self.get(hook_id)

    def enable(self, hook_id: str) -> HookInfo:
        """Enable one registration."""
        return self._set_enabled(hook_id, True)

    def disable(self, hook_id: str) -> HookInfo:
        """Disable one registration (it is skipped, not removed)."""
        return self._set_enabled(hook_id, False)

    def clear(self, task_id: str) -> int:
        """Remove every registration of a task; how many there were."""
        with self._db.transaction():
            return self._db.execute("delete_task_hooks", {"task_id": task_id})

    def resolved(
        self, task_id: str
    ) -> tuple[
        builtins.list[tuple[str, str, Hook, bool]],
        builtins.list[tuple[str, CompletionValidator]],
    ]:
        """The task's hooks ``(id, name, hook, enabled)`` and enabled validators, resolved.

        Raises UnresolvedReferenceError naming the first registration this process lacks.
        """
        hooks: builtins.list[tuple[str, str, Hook, bool]] = []
        validators: builtins.list[tuple[str, CompletionValidator]] = []
        for row in self._db.fetch_all("task_hooks", {"task_id": task_id}):
            ref = _load(row["ref"], f"hook {row['id']}")
            if row["kind"] == "hook":
                name = str(ref.get("name"))
                hooks.append((row["id"], name, resolve_hook(name), bool(row["enabled"])))
            elif row["enabled"]:
                validators.append((row["id"], resolve_validator(ref)))
        return hooks, validators
