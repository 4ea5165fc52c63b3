"""In-process stop hooks: callables that say whether a task's loop may stop.

A hook receives a :class:`HookContext` (the agent context of one iteration) and answers a
:class:`HookResult` — ``complete``, ``continue`` or ``escalate`` with a reason, optionally a
``next_prompt``, ``checkpoint_data`` (extra agent context to keep) and ``metadata`` — or a
dict with those keys, or None to abstain. Sync and async callables are both accepted.

Hooks compose: ``all_of(a, b)`` / ``a & b`` completes only when every member completes;
``any_of(a, b)`` / ``a | b`` completes when one does; either escalates as soon as a member
escalates. ``when(predicate, hook)`` is active only while ``predicate(context)`` holds.

A task's hooks are evaluated in registration order (:func:`evaluate_hooks`): the first
``complete`` or ``escalate`` wins; if all continue, the last result is used; disabled and
abstaining hooks are skipped; a hook that raises escalates with the error in its metadata.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwarden.errors import ConfigError, UnresolvedReferenceError
from loopwarden.model import JSON, HookAction, Promise, RuleResult, Signal

__all__ = [
    "PRESETS",
    "Hook",
    "HookContext",
    "HookEvaluation",
    "HookRecord",
    "HookResult",
    "all_of",
    "any_of",
    "as_hook",
    "define_hook",
    "evaluate_hooks",
    "resolve_hook",
    "stop_hook",
    "when",
]


@dataclass(frozen=True, slots=True)
class HookContext:
    """The agent context a hook sees for one iteration."""

    task_id: str
    loop_id: str
    iteration: int
    phase: str
    agent_output: str
    files_modified: tuple[str, ...] = ()
    validation_results: tuple[RuleResult, ...] = ()
    promises: tuple[Promise, ...] = ()
    draft_content: str | None = None
    draft_type: str | None = None
    max_iterations: int = 0
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def validation_passed(self) -> bool:
        """True when every rule passed (vacuously true with no rules)."""
        return all(r.passed for r in self.validation_results)

    def promised(self, kind: Signal) -> Promise | None:
        """The first promise of a kind, if the agent made one."""
        return next((p for p in self.promises if p.kind is kind), None)


@dataclass(frozen=True, slots=True)
class HookResult:
    """A hook's answer."""

    action: HookAction
    reason: str = ""
    next_prompt: str | None = None
    checkpoint_data: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: object, hook: str) -> HookResult | None:
        """A HookResult from what a hook returned (a HookResult, a dict, or None)."""
        if value is None or isinstance(value, HookResult):
            return value
        if isinstance(value, Mapping):
            try:
                action = HookAction(str(value.get("action", "")).lower())
            except ValueError:
                raise ConfigError(
                    f"hook {hook}.action",
                    f"must be complete, continue or escalate, got {value.get('action')!r}",
                ) from None
            data = value.get("checkpoint_data")
            return cls(
                action,
                str(value.get("reason", "")),
                value.get("next_prompt"),
                dict(data) if isinstance(data, Mapping) else None,
                dict(value.get("metadata") or {}),
            )
        raise ConfigError(
            f"hook {hook}", f"must return a HookResult, a dict or None, got {type(value).__name__}"
        )


def _run_awaitable(awaitable: Awaitable[Any]) -> Any:
    """Run a coroutine to completion from sync code, even inside a running event loop."""

    async def _wrap() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_wrap())
    box: dict[str, Any] = {}

    def _thread() -> None:
        try:
            box["value"] = asyncio.run(_wrap())
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=_thread, name="loopwarden-async-hook")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


class Hook:
    """A stop hook. Subclasses implement ``__call__``; ``&`` and ``|`` compose."""

    name: str = "hook"

    def __call__(self, context: HookContext) -> HookResult | None:
        raise NotImplementedError

    def __and__(self, other: Hook | Callable[..., Any]) -> Hook:
        return all_of(self, other)

    def __or__(self, other: Hook | Callable[..., Any]) -> Hook:
        return any_of(self, other)


class _CallableHook(Hook):
    def __init__(self, fn: Callable[[HookContext], Any], name: str) -> None:
        self.fn = fn
        self.name = name

    def __call__(self, context: HookContext) -> HookResult | None:
        value = self.fn(context)
        if inspect.isawaitable(value):
            value = _run_awaitable(value)
        return HookResult.coerce(value, self.name)

    def __repr__(self) -> str:
        return f"<hook {self.name}>"


def as_hook(obj: Hook | Callable[..., Any] | str, name: str | None = None) -> Hook:
    """A Hook as is; a preset or registered name resolved; a callable wrapped as one."""
    if isinstance(obj, str):
        return resolve_hook(obj)
    if isinstance(obj, Hook):
        return obj
    if callable(obj):
        return _CallableHook(obj, name or str(getattr(obj, "__qualname__", "hook")))
    raise ConfigError("hook", f"must be a callable or a preset name, got {obj!r}")


class _AllOf(Hook):
    def __init__(self, hooks: Sequence[Hook]) -> None:
        self.hooks = tuple(hooks)
        self.name = "all_of(" + ", ".join(h.name for h in self.hooks) + ")"

    def __call__(self, context: HookContext) -> HookResult | None:
        results = [r for h in self.hooks if (r := h(context)) is not None]
        for r in results:
            if r.action is HookAction.ESCALATE:
                return r
        if results and all(r.action is HookAction.COMPLETE for r in results):
            return HookResult(HookAction.COMPLETE, "; ".join(r.reason for r in results if r.reason))
        pending = [r for r in results if r.action is not HookAction.COMPLETE]
        if not pending:
            return None
        return HookResult(
            HookAction.CONTINUE,
            "; ".join(r.reason for r in pending if r.reason),
            next((r.next_prompt for r in pending if r.next_prompt), None),
        )


class _AnyOf(Hook):
    def __init__(self, hooks: Sequence[Hook]) -> None:
        self.hooks = tuple(hooks)
        self.name = "any_of(" + ", ".join(h.name for h in self.hooks) + ")"

    def __call__(self, context: HookContext) -> HookResult | None:
        results = [r for h in self.hooks if (r := h(context)) is not None]
        for wanted in (HookAction.ESCALATE, HookAction.COMPLETE):
            for r in results:
                if r.action is wanted:
                    return r
        if not results:
            return None
        return HookResult(
            HookAction.CONTINUE,
            "; ".join(r.reason for r in results if r.reason),
            next((r.next_prompt for r in results if r.next_prompt), None),
        )


class _When(Hook):
    def __init__(self, predicate: Callable[[HookContext], bool], hook: Hook) -> None:
        self.predicate = predicate
        self.hook = hook
        self.name = f"when({getattr(predicate, '__name__', 'predicate')}, {hook.name})"

    def __call__(self, context: HookContext) -> HookResult | None:
        return self.hook(context) if self.predicate(context) else None


def all_of(*hooks: Hook | Callable[..., Any] | str) -> Hook:
    """Complete only when every member completes; escalate when any escalates."""
    return _AllOf([as_hook(h) for h in hooks])


def any_of(*hooks: Hook | Callable[..., Any] | str) -> Hook:
    """Complete when any member completes; escalate when any escalates."""
    return _AnyOf([as_hook(h) for h in hooks])


def when(predicate: Callable[[HookContext], bool], hook: Hook | Callable[..., Any] | str) -> Hook:
    """A hook active only while ``predicate(context)`` holds (else it abstains)."""
    return _When(predicate, as_hook(hook))


# ----- presets -------------------------------------------------------------------------------


def _promise_verdict(context: HookContext) -> HookResult | None:
    done = context.promised(Signal.COMPLETE)
    if done:
        return HookResult(HookAction.COMPLETE, f"agent promised {done.word}")
    for kind in (Signal.ESCALATE, Signal.BLOCKED):
        p = context.promised(kind)
        if p:
            why = f": {p.reason}" if p.reason else ""
            return HookResult(HookAction.ESCALATE, f"agent promised {p.word}{why}")
    return None


def _validation_verdict(context: HookContext) -> HookResult:
    results = context.validation_results
    if not results:
        return HookResult(HookAction.CONTINUE, "no validation rules to judge by")
    failed = [r for r in results if not r.passed]
    if not failed:
        return HookResult(HookAction.COMPLETE, f"all {len(results)} validation rules passed")
    # The failing rules' messages are already the iteration's feedback; name them only.
    names = ", ".join(r.name for r in failed)
    return HookResult(
        HookAction.CONTINUE, f"{len(failed)} of {len(results)} validation rules failing: {names}"
    )


def _preset_default(context: HookContext) -> HookResult:
    return _promise_verdict(context) or _validation_verdict(context)


def _preset_validation(context: HookContext) -> HookResult:
    return _validation_verdict(context)


def _preset_promise(context: HookContext) -> HookResult:
    return _promise_verdict(context) or HookResult(HookAction.CONTINUE, "no promise yet")


PRESETS: dict[str, Hook] = {
    "default": _CallableHook(_preset_default, "default"),
    "validation": _CallableHook(_preset_validation, "validation"),
    "promise": _CallableHook(_preset_promise, "promise"),
}

_REGISTRY: dict[str, Hook] = {}


def define_hook(name: str, hook: Hook | Callable[..., Any]) -> Hook:
    """Register a hook under a name, so a loop resumed in this process can find it again."""
    if not isinstance(name, str) or not name or name in PRESETS:
        raise ConfigError("hook name", f"must be a name other than a preset's, got {name!r}")
    wrapped = as_hook(hook, name)
    wrapped.name = name
    _REGISTRY[name] = wrapped
    return wrapped


def stop_hook(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@stop_hook("same-file-5x")`` registers the function under that name."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        define_hook(name, fn)
        return fn

    return register


def resolve_hook(name: str) -> Hook:
    """The preset or registered hook of that name; UnresolvedReferenceError names it if absent."""
    hook = PRESETS.get(name) or _REGISTRY.get(name)
    if hook is None:
        raise UnresolvedReferenceError(
            f"stop hook {name!r} is not registered in this process; define it with "
            f"loopwarden.hooks.define_hook({name!r}, fn) (or @stop_hook) before resuming"
        )
    return hook


def is_resolvable(name: str) -> bool:
    return name in PRESETS or name in _REGISTRY


@dataclass(frozen=True, slots=True)
class HookRecord:
    """One hook's evaluation, as recorded in the iteration's history."""

    hook_id: str
    name: str
    action: HookAction | None
    reason: str
    duration: float
    metadata: JSON = field(default_factory=dict)

    def to_dict(self) -> JSON:
        return {
            "hook_id": self.hook_id,
            "name": self.name,
            "action": self.action.value if self.action else None,
            "reason": self.reason,
            "duration": round(self.duration, 6),
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class HookEvaluation:
    """The combined result of a task's hooks, and each hook's record."""

    result: HookResult
    hook_id: str | None
    records: tuple[HookRecord, ...]

    @property
    def action(self) -> HookAction:
        return self.result.action


NO_HOOKS_REASON = "No hooks registered for this task"


def evaluate_hooks(
    hooks: Sequence[tuple[str, str, Hook, bool]], context: HookContext
) -> HookEvaluation:
    """Evaluate ``(hook_id, name, hook, enabled)`` in order, by the rules in this module."""
    records: list[HookRecord] = []
    last: tuple[str, HookResult] | None = None
    for hook_id, name, hook, enabled in hooks:
        if not enabled:
            continue
        started = time.perf_counter()
        try:
            result = hook(context)
        except Exception as exc:
            result = HookResult(
                HookAction.ESCALATE,
                f"Hook evaluation failed: {exc}",
                metadata={"error": f"{type(exc).__name__}: {exc}"},
            )
        duration = time.perf_counter() - started
        records.append(
            HookRecord(
                hook_id,
                name,
                result.action if result else None,
                result.reason if result else "abstained",
                duration,
                dict(result.metadata) if result else {},
            )
        )
        if result is None:
            continue
        last = (hook_id, result)
        if result.action is not HookAction.CONTINUE:
            break
    if last is None:
        reason = NO_HOOKS_REASON if not hooks else "No enabled hook answered for this task"
        return HookEvaluation(HookResult(HookAction.CONTINUE, reason), None, tuple(records))
    return HookEvaluation(last[1], last[0], tuple(records))
