"""Hypothesis strategies for testing guards, hooks and rules built on loopwarden.

loopwarden's own test suite uses these, and they are public so that you can property-test
your own guards and stop checks against the same kind of evidence the engine produces::

    from hypothesis import given
    from loopwarden import Signal, decide
    from loopwarden.testing import configs_and_evidence

    @given(configs_and_evidence())
    def test_my_guard_never_stops_a_passing_first_iteration(pair):
        config, evidence = pair
        ...

The strategies:

- :func:`agent_outputs` / :func:`annotated_outputs`: agent output text mixing prose, real
  promises (any case, with reasons inside or after the tag), promises quoted inside HTML
  comments, fenced code (backticks and tildes) and inline code, and decoys (misspelled or
  different tags, unknown words, bare words). ``annotated_outputs`` also gives the promises
  that :func:`loopwarden.detect_promises` must find.
- :func:`promises`, :func:`rule_results`, :func:`validation_reports`,
  :func:`score_sequences`, :func:`hook_verdicts`, :func:`stop_checks`: the values that make
  up a decision's evidence.
- :func:`configs`: valid :class:`~loopwarden.LoopConfig` values (data-only rules: pattern,
  coverage and command rules, never run by the strategies themselves).
- :func:`evidence` and :func:`configs_and_evidence`: :class:`~loopwarden.Evidence` consistent
  with a config (iteration within the limit, one result per configured rule, counters that
  agree with the report).

For whole loops, :class:`LoopHarness` is a stateful test base that drives a real engine with
random outputs, rule results, restarts, blocks and reopens, checking the engine's invariants
after every step; subclass it to add your guard's or hook's own properties. The pytest
fixture ``loopwarden_engine`` (a fresh engine on a temporary SQLite file) comes with the
package's pytest plugin, loaded automatically when loopwarden is installed.

hypothesis is a development dependency of loopwarden (the ``dev`` extra), not a runtime one:
importing this module needs it installed; importing :mod:`loopwarden` does not. This module
does not import pytest.
"""

from __future__ import annotations

import functools
import os
import shutil
import string
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from loopwarden import diagrams as _diagrams
from loopwarden import rules as _rules
from loopwarden.engine import LoopEngine
from loopwarden.errors import InvalidTransitionError
from loopwarden.model import (
    CompletionPolicy,
    Decision,
    Evidence,
    HookAction,
    HookVerdict,
    LoopConfig,
    Promise,
    RuleResult,
    RuleStatus,
    Signal,
    StopCheck,
    ValidationReport,
    score_of,
)
from loopwarden.promises import DEFAULT_WORDS

__all__ = [
    "AnnotatedOutput",
    "LoopHarness",
    "agent_outputs",
    "annotated_outputs",
    "configs",
    "configs_and_evidence",
    "evidence",
    "hook_verdicts",
    "promises",
    "rule_names",
    "rule_results",
    "score_sequences",
    "scores",
    "stop_checks",
    "validation_reports",
]

# Prose never contains the characters that open a tag, a comment or a code span, so whatever
# is placed around it keeps its meaning.
_PROSE_ALPHABET = string.ascii_letters + string.digits + " .,;!?'\"()[]{}=+*/%&#@$^|\\"
# A reason must not start with the dashes or colon detect_promises strips, so it starts
# with a letter; it never holds "<" (it ends the tag) or a code/newline character.
_REASON_ALPHABET = string.ascii_letters + string.digits + " .,;!?'()="
_NOT_PROMISE_WORDS = ("COMPLETED", "DONE", "FINISHED", "COMPLET", "BLOCK", "ESCALATED", "OK")
_MISSPELT_TAGS = ("promis", "promises", "promse", "task", "result", "p")
_RULE_NAME_ALPHABET = string.ascii_letters + string.digits + "_.:-"
_MESSAGES = st.text(max_size=300)
_DURATIONS = st.floats(min_value=0, max_value=600, allow_nan=False)


@dataclass(frozen=True, slots=True)
class AnnotatedOutput:
    """Agent output text and the promises detect_promises must find in it, in order."""

    text: str
    promises: tuple[Promise, ...]


def _word_table(words: Mapping[str, Signal] | None) -> dict[str, Signal]:
    return {w.upper(): kind for w, kind in (words or DEFAULT_WORDS).items()}


# Strategies are built once and reused: hypothesis validates a strategy on first use, and
# building fresh ones inside every draw makes the suites several times slower.
@functools.cache
def _prose(max_size: int = 40) -> st.SearchStrategy[str]:
    return st.text(alphabet=_PROSE_ALPHABET, max_size=max_size)


@functools.cache
def _reasons() -> st.SearchStrategy[str]:
    head = st.sampled_from(string.ascii_letters)
    tail = st.text(alphabet=_REASON_ALPHABET, max_size=30)
    return st.builds(lambda h, t: (h + t).strip(), head, tail)


@functools.cache
def _optional_reasons() -> st.SearchStrategy[str]:
    return st.one_of(st.just(""), _reasons())


@functools.cache
def _flips(size: int) -> st.SearchStrategy[list[bool]]:
    return st.lists(st.booleans(), min_size=size, max_size=size)


@functools.cache
def _choice(options: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(options)


@st.composite
def _any_case(draw: st.DrawFn, word: str) -> str:
    flips = draw(_flips(len(word)))
    return "".join(c.lower() if flip else c.upper() for c, flip in zip(word, flips, strict=True))


@st.composite
def _tag(draw: st.DrawFn, word: str, tag: str = "promise") -> str:
    """A promise tag with an optional reason inside, the tag name and word in any case."""
    opening = draw(_any_case(tag))
    closing = draw(_any_case(tag))
    return f"<{opening}>{draw(_any_case(word))}</{closing}>"


@st.composite
def _real_promise(draw: st.DrawFn, table: Mapping[str, Signal]) -> tuple[str, Promise]:
    word = draw(_choice(tuple(sorted(table))))
    reason = draw(_optional_reasons())
    where = draw(_choice(("none", "inner-colon", "inner-space", "inner-dash", "after")))
    opening = draw(_any_case("promise"))
    closing = draw(_any_case("promise"))
    shown = draw(_any_case(word))
    if not reason or where == "none":
        inner, after, reason = "", "", ""
    elif where == "inner-colon":
        inner, after = f": {reason}", ""
    elif where == "inner-space":
        inner, after = f" {reason}", ""
    elif where == "inner-dash":
        inner, after = f" - {reason}", ""
    else:
        inner, after = "", f" {reason}"
    lead = draw(_prose(20))
    # A real promise ends its line: text after the closing tag on that line is its reason.
    text = f"{lead} <{opening}>{shown}{inner}</{closing}>{after}".lstrip()
    return text, Promise(table[word], word, reason)


@st.composite
def _quoted_promise(draw: st.DrawFn, table: Mapping[str, Signal]) -> str:
    """A promise the agent talks about rather than makes: it must not count."""
    word = draw(_choice(tuple(sorted(table))))
    tag = draw(_tag(word))
    before, after = draw(_prose(15)), draw(_prose(15))
    how = draw(_choice(("comment", "backticks", "tildes", "inline", "double-inline")))
    if how == "comment":
        return f"{before} <!-- {tag} {after} --> "
    if how in ("backticks", "tildes"):
        fence = ("`" if how == "backticks" else "~") * draw(st.integers(3, 5))
        lang = draw(_choice(("", "xml", "text", "markdown")))
        return f"{fence}{lang}\n{before}\n{tag}\n{after}\n{fence}"
    ticks = "`" if how == "inline" else "``"
    return f"{before} {ticks}{tag}{ticks} {after}"


@st.composite
def _decoy(draw: st.DrawFn, table: Mapping[str, Signal]) -> str:
    """Text that looks like a promise and is not one."""
    unknown = [w for w in _NOT_PROMISE_WORDS if w not in table]
    how = draw(_choice(("misspelt-tag", "unknown-word", "bare-word", "brackets")))
    if how == "misspelt-tag":
        word = draw(_choice(tuple(sorted(table))))
        return draw(_tag(word, tag=draw(_choice(_MISSPELT_TAGS))))
    if how == "unknown-word" and unknown:
        return draw(_tag(draw(_choice(tuple(unknown)))))
    word = draw(_choice(tuple(sorted(table))))
    if how == "brackets":
        return f"[promise]{word}[/promise]"
    return f"{draw(_prose(15))} {draw(_any_case(word))} {draw(_prose(15))}"


@functools.cache
def _segments(kinds: tuple[str, ...], max_size: int) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(kinds), max_size=max_size)


@st.composite
def annotated_outputs(
    draw: st.DrawFn,
    words: Mapping[str, Signal] | None = None,
    *,
    max_segments: int = 8,
    allow_promises: bool = True,
) -> AnnotatedOutput:
    """Agent output and the promises it makes.

    ``words`` maps the recognised promise words to their kinds (pass
    ``config.promise_words``); the default is COMPLETE, BLOCKED and ESCALATE. Each line is
    prose, a real promise, a quoted promise or a decoy. A real promise ends its line, since
    the rest of the line after the closing tag is its reason. With ``allow_promises=False``
    the output makes no promise at all (quoted promises and decoys still appear).
    """
    table = _word_table(words)
    kinds = ["prose", "quoted", "decoy"] + (["promise"] if allow_promises else [])
    lines: list[str] = []
    found: list[Promise] = []
    for kind in draw(_segments(tuple(kinds), max_segments)):
        if kind == "prose":
            lines.append(draw(_prose()))
        elif kind == "quoted":
            lines.append(draw(_quoted_promise(table)))
        elif kind == "decoy":
            lines.append(draw(_decoy(table)))
        else:
            text, promise = draw(_real_promise(table))
            lines.append(text)
            found.append(promise)
    return AnnotatedOutput("\n".join(lines), tuple(found))


def agent_outputs(
    words: Mapping[str, Signal] | None = None,
    *,
    max_segments: int = 8,
    allow_promises: bool = True,
) -> st.SearchStrategy[str]:
    """Agent output text, with and without promises; see :func:`annotated_outputs`."""
    return annotated_outputs(words, max_segments=max_segments, allow_promises=allow_promises).map(
        lambda a: a.text
    )


@st.composite
def promises(
    draw: st.DrawFn,
    words: Mapping[str, Signal] | None = None,
    kinds: Sequence[Signal] | None = None,
) -> Promise:
    """A detected promise: a word from ``words`` (default words if None) with its kind.

    ``kinds`` restricts the kinds drawn (e.g. ``[Signal.COMPLETE]``).
    """
    return _promise(draw, _word_table(words), kinds)


def _promise(
    draw: st.DrawFn, table: Mapping[str, Signal], kinds: Sequence[Signal] | None = None
) -> Promise:
    allowed = tuple(w for w, k in sorted(table.items()) if kinds is None or k in kinds)
    if not allowed:
        raise ValueError(f"no promise word of kinds {kinds!r} in {sorted(table)!r}")
    word = draw(_choice(allowed))
    return Promise(table[word], word, draw(_optional_reasons()))


@functools.cache
def rule_names() -> st.SearchStrategy[str]:
    """Valid rule names (1-64 of letters, digits and ``_.:-``)."""
    return st.text(alphabet=_RULE_NAME_ALPHABET, min_size=1, max_size=24)


@functools.cache
def _statuses(statuses: tuple[RuleStatus, ...]) -> st.SearchStrategy[RuleStatus]:
    return st.sampled_from(statuses)


def _result(draw: st.DrawFn, name: str, statuses: tuple[RuleStatus, ...]) -> RuleResult:
    return RuleResult(name, draw(_statuses(statuses)), draw(_MESSAGES), draw(_DURATIONS))


@st.composite
def rule_results(
    draw: st.DrawFn,
    name: str | None = None,
    statuses: Sequence[RuleStatus] | None = None,
) -> RuleResult:
    """One rule's result; ``name`` and the possible ``statuses`` may be fixed."""
    chosen = name if name is not None else draw(rule_names())
    return _result(draw, chosen, tuple(statuses or RuleStatus))


@st.composite
def validation_reports(
    draw: st.DrawFn,
    names: Sequence[str] | None = None,
    *,
    min_rules: int = 0,
    max_rules: int = 6,
    statuses: Sequence[RuleStatus] | None = None,
) -> ValidationReport:
    """A validation report: one result per name in ``names``, or unique random names."""
    if names is None:
        names = draw(st.lists(rule_names(), min_size=min_rules, max_size=max_rules, unique=True))
    allowed = tuple(statuses or RuleStatus)
    return ValidationReport(tuple(_result(draw, n, allowed) for n in names))


@functools.cache
def scores() -> st.SearchStrategy[float]:
    """A validation score: one the score formula can produce, or any number in 0..100."""
    formula = st.integers(1, 8).flatmap(
        lambda total: st.builds(
            lambda p, e: score_of(p, min(e, total - p), total),
            st.integers(0, total),
            st.integers(0, total),
        )
    )
    return st.one_of(formula, st.floats(min_value=0, max_value=100, allow_nan=False))


def score_sequences(
    *, min_size: int = 0, max_size: int = 10, falling: bool | None = None
) -> st.SearchStrategy[tuple[float, ...]]:
    """Score histories, oldest first. About half fall strictly (to exercise regression).

    ``falling=True`` draws only strictly falling sequences, ``False`` only arbitrary ones.
    """
    return _score_sequences(min_size, max_size, falling)


def _draw_scores(
    draw: st.DrawFn, min_size: int, max_size: int, falling: bool | None
) -> tuple[float, ...]:
    strictly = draw(st.booleans()) if falling is None else falling
    if strictly:
        distinct = draw(_score_sets(min_size, max_size))
        return tuple(sorted(distinct, reverse=True))
    return tuple(draw(_score_lists(min_size, max_size)))


@functools.cache
def _score_sequences(
    min_size: int, max_size: int, falling: bool | None
) -> st.SearchStrategy[tuple[float, ...]]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[float, ...]:
        return _draw_scores(draw, min_size, max_size, falling)

    return build()


@functools.cache
def _score_sets(min_size: int, max_size: int) -> st.SearchStrategy[set[float]]:
    return st.sets(scores(), min_size=min_size, max_size=max_size)


@functools.cache
def _score_lists(min_size: int, max_size: int) -> st.SearchStrategy[list[float]]:
    return st.lists(scores(), min_size=min_size, max_size=max_size)


def hook_verdicts(actions: Sequence[HookAction] | None = None) -> st.SearchStrategy[HookVerdict]:
    """A combined stop-hook verdict."""
    return _hook_verdicts(tuple(actions or HookAction))


@functools.cache
def _hook_verdicts(actions: tuple[HookAction, ...]) -> st.SearchStrategy[HookVerdict]:
    return st.builds(
        HookVerdict,
        st.sampled_from(actions),
        _optional_reasons(),
        st.one_of(st.none(), st.text(max_size=60)),
        st.sampled_from(("hooks", "default", "validation", "promise", "my-hook")),
    )


@functools.cache
def stop_checks() -> st.SearchStrategy[StopCheck]:
    """A stop check's answer: a veto, a pass, or a stop forced past earlier vetoes."""
    sources = st.sampled_from(("loopwarden", "tests-green", "validate_completion", "hook"))
    veto = st.builds(StopCheck, sources, st.just(False), _reasons())
    allow = st.builds(StopCheck, sources, st.just(True), _optional_reasons())
    forced = st.builds(StopCheck, st.just("loopwarden"), st.just(True), _reasons(), st.just(True))
    return st.one_of(veto, allow, forced)


_REGEXES = (r"TODO", r"^def \w+", r"(?i)fixme", r"\bpass(ed)?\b")
_COMMANDS = (("pytest", "-q"), ("ruff", "check", "."), ("true",))
_WORD_POOL = ("COMPLETE", "DONE", "SHIPPED", "BLOCKED", "STUCK", "ESCALATE", "HELP", "LGTM")


def _data_rule(draw: st.DrawFn, name: str) -> _rules.Rule:
    kind = draw(_choice(("pattern", "coverage", "command")))
    if kind == "pattern":
        return _rules.pattern(
            name,
            draw(_choice(_REGEXES)),
            must_match=draw(st.booleans()),
            target="draft" if draw(st.booleans()) else "output",
        )
    if kind == "coverage":
        return _rules.coverage(name, "coverage.json", minimum=draw(_ints(0, 100)))
    argv = list(_COMMANDS[draw(_ints(0, len(_COMMANDS) - 1))])
    return _rules.command(name, argv, timeout=draw(_ints(1, 600)))


@functools.cache
def _name_lists(min_size: int, max_size: int) -> st.SearchStrategy[list[str]]:
    return st.lists(rule_names(), min_size=min_size, max_size=max_size, unique=True)


_POLICIES = st.sampled_from(list(CompletionPolicy))
_MIN_DROPS = st.one_of(st.integers(0, 60), st.floats(0, 60, allow_nan=False))
_WORD_ORDERS = st.permutations(_WORD_POOL)


@st.composite
def configs(
    draw: st.DrawFn,
    *,
    max_rules: int = 4,
    policies: Sequence[CompletionPolicy] | None = None,
    custom_words: bool = True,
) -> LoopConfig:
    """A valid LoopConfig. Rules are pattern / coverage / command rules (never run here).

    ``policies`` restricts the completion policies; ``custom_words=False`` keeps the default
    promise words.
    """
    policy = draw(_POLICIES if policies is None else st.sampled_from(list(policies)))
    min_rules = 1 if policy is CompletionPolicy.RULES else 0
    names = draw(_name_lists(min_rules, max(max_rules, min_rules)))
    completion_words: tuple[str, ...] = ("COMPLETE",)
    blocked_words: tuple[str, ...] = ("BLOCKED",)
    escalate_words: tuple[str, ...] = ("ESCALATE",)
    if custom_words and draw(st.booleans()):
        pool = draw(_WORD_ORDERS)
        a, b, c = (draw(_ints(1, 2)) for _ in range(3))
        completion_words = tuple(pool[:a])
        blocked_words = tuple(pool[a : a + b])
        escalate_words = tuple(pool[a + b : a + b + c])
    return LoopConfig(
        max_iterations=draw(_ints(1, 30)),
        circuit_breaker_threshold=draw(_ints(1, 8)),
        regression_window=draw(_ints(2, 6)),
        regression_min_drop=draw(_MIN_DROPS),
        completion=policy,
        rules=[_data_rule(draw, n) for n in names],
        feedback_limit=draw(_ints(200, 8000)),
        max_stop_retries=draw(_ints(0, 5)),
        completion_promises=completion_words,
        blocked_promises=blocked_words,
        escalate_promises=escalate_words,
    )


@functools.cache
def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


_OPTIONAL_HOOKS = st.one_of(st.none(), hook_verdicts())
_STOP_CHECK_LISTS = st.lists(stop_checks(), max_size=2)


@st.composite
def _evidence_for(draw: st.DrawFn, config: LoopConfig) -> Evidence:
    iteration = draw(_ints(1, config.max_iterations))
    all_statuses = tuple(RuleStatus)
    report = ValidationReport(tuple(_result(draw, r.name, all_statuses) for r in config.rules))
    failures = 0 if report.passed else draw(_ints(1, iteration))
    history = _draw_scores(draw, 0, min(iteration - 1, config.regression_window + 2), None)
    words = config.promise_words
    made = [_promise(draw, words) for _ in range(draw(_ints(0, 3)))]
    hook = draw(_OPTIONAL_HOOKS)
    checks = draw(_STOP_CHECK_LISTS)
    return Evidence(
        iteration=iteration,
        max_iterations=config.max_iterations,
        report=report,
        promises=tuple(made),
        consecutive_failures=failures,
        scores=(*history, report.score),
        hook=hook,
        stop_checks=tuple(checks),
    )


def evidence(config: LoopConfig | None = None) -> st.SearchStrategy[Evidence]:
    """Evidence for one decision, consistent with ``config`` (a random valid one if None).

    The iteration is within ``max_iterations``, the report has one result per configured
    rule, the failure count and the last score agree with the report, and promises use the
    config's promise words.
    """
    if config is None:
        return configs().flatmap(_evidence_for)
    return _evidence_for(config)


def configs_and_evidence(
    configs_strategy: st.SearchStrategy[LoopConfig] | None = None,
) -> st.SearchStrategy[tuple[LoopConfig, Evidence]]:
    """A config and evidence consistent with it, for properties of ``decide``."""
    base = configs() if configs_strategy is None else configs_strategy
    return base.flatmap(lambda c: _evidence_for(c).map(lambda e: (c, e)))


# ----- a stateful harness for property-testing guards and hooks against the engine ----------


class LoopHarness(RuleBasedStateMachine):
    """A hypothesis state machine that drives a real engine; subclass it to test your guards.

    It runs one loop on a temporary SQLite file and, step by step, submits agent outputs
    (from :meth:`output_strategy`) whose rule result the harness controls (one predicate
    rule, ``harness-rule``, passes or fails as drawn), restarts the engine (a new process
    would see the same database), blocks and reopens. After every step it checks the
    engine's invariants:

    - never more decided iterations than the loop's max_iterations;
    - consecutive checkpoints follow the machine's edges, with contiguous ``seq``;
    - a terminal state absorbs: submit raises InvalidTransitionError;
    - a decision has a terminal reason exactly when its signal is not CONTINUE;
    - iteration numbers in history are contiguous from 1.

    Override :meth:`make_config`, :meth:`register_hooks`, :meth:`output_strategy` and
    :meth:`check_decision` (your own property, called with every decision and the evidence
    the engine used), and add ``@invariant()`` methods of your own. Use it in pytest as
    ``TestMyGuard = MyHarness.TestCase``.
    """

    task_id = "HARNESS"

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.mkdtemp(prefix="loopwarden-harness-")
        self.url = f"sqlite:///{os.path.join(self._dir, 'harness.db')}"
        self.passes = True
        _rules.predicate("harness-rule", self._rule)
        self.engine = LoopEngine(self.url)
        self.register_hooks(self.engine)
        config = self.make_config()
        if not any(r.name == "harness-rule" for r in config.rules):
            config = config.with_changes(
                rules=(*config.rules, _rules.predicate("harness-rule", self._rule))
            )
        self.loop_id = self.engine.start(self.task_id, config, prompt="harness").id
        self.decisions: list[Decision] = []

    def _rule(self, _submission: _rules.Submission) -> tuple[bool, str]:
        return self.passes, "harness says pass" if self.passes else "harness says fail"

    # ----- what subclasses override -----------------------------------------------------

    def make_config(self) -> LoopConfig:
        """The loop's configuration (a predicate rule ``harness-rule`` is added to it)."""
        return LoopConfig(max_iterations=6, circuit_breaker_threshold=3)

    def register_hooks(self, engine: LoopEngine) -> None:
        """Register the stop hooks / validators under test for ``self.task_id``."""

    def output_strategy(self) -> st.SearchStrategy[str]:
        """The agent outputs to submit."""
        return agent_outputs()

    def check_decision(self, decision: Decision, evidence: Evidence) -> None:
        """Your property of each decision; raise AssertionError when it does not hold."""

    # ----- steps -------------------------------------------------------------------------

    @rule(data=st.data(), passes=st.booleans())
    def submit(self, data: st.DataObject, passes: bool) -> None:
        """Submit one output with the drawn rule result."""
        snapshot = self.engine.get(self.loop_id)
        output = data.draw(self.output_strategy(), label="output")
        self.passes = passes
        if snapshot.terminal:
            try:
                self.engine.submit(self.loop_id, output)
            except InvalidTransitionError:
                return
            raise AssertionError(f"a {snapshot.state.value} loop accepted a submit")
        decision = self.engine.submit(self.loop_id, output)
        self.decisions.append(decision)
        assert (decision.terminal_reason is None) == (decision.signal is Signal.CONTINUE)
        deciding = [c for c in self.engine.checkpoints(self.loop_id) if c.state.value == "deciding"]
        evidence = Evidence.from_dict(deciding[-1].data["evidence"])
        self.check_decision(decision, evidence)

    @rule()
    def restart(self) -> None:
        """Close the engine and open a new one on the same database, then resume."""
        self.engine.close()
        self.engine = LoopEngine(self.url)
        self.engine.resume(self.loop_id)

    @rule(extra=st.integers(min_value=1, max_value=3))
    def block_and_reopen(self, extra: int) -> None:
        """A human blocks the loop (if live) and reopens it with more iterations."""
        if not self.engine.get(self.loop_id).terminal:
            self.engine.block(self.loop_id, "harness")
        if self.engine.get(self.loop_id).state.value != "completed":
            self.engine.reopen(self.loop_id, extra_iterations=extra, note="harness reopen")

    # ----- the engine's invariants ------------------------------------------------------

    @invariant()
    def engine_invariants(self) -> None:
        """Budget, machine edges, contiguous checkpoints and iterations."""
        snapshot = self.engine.get(self.loop_id)
        history = self.engine.history(self.loop_id)
        assert len(history) <= snapshot.max_iterations
        assert [r.iteration for r in history] == list(range(1, len(history) + 1))
        cps = self.engine.checkpoints(self.loop_id)
        assert [c.seq for c in cps] == list(range(1, len(cps) + 1))
        edges = {(e.source, e.trigger, e.dest) for e in _diagrams.edges()}
        for prev, cur in pairwise(cps):
            assert (prev.state.value, cur.trigger, cur.state.value) in edges, (prev, cur)

    def teardown(self) -> None:
        self.engine.close()
        shutil.rmtree(self._dir, ignore_errors=True)
