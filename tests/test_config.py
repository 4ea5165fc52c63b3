"""LoopConfig: defaults, validation at creation (naming the field), and its JSON form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from loopwarden import CompletionPolicy, ConfigError, LoopConfig, LoopwardenError, Signal, rules
from loopwarden.testing import configs


def field_of(**kwargs: Any) -> str:
    """The field named by the ConfigError that LoopConfig(**kwargs) raises."""
    with pytest.raises(ConfigError) as info:
        LoopConfig(**kwargs)
    assert str(info.value).startswith(f"{info.value.field}: ")
    return info.value.field


class TestDefaults:
    def test_defaults_match_the_design(self) -> None:
        """Defaults: 15 iterations, breaker 3, window 3, drop 10, promise_and_rules."""
        c = LoopConfig()
        assert (c.max_iterations, c.circuit_breaker_threshold) == (15, 3)
        assert (c.regression_window, c.regression_min_drop) == (3, 10.0)
        assert c.completion is CompletionPolicy.PROMISE_AND_RULES
        assert c.policy is CompletionPolicy.PROMISE_AND_RULES
        assert c.rules == ()
        assert c.max_stop_retries == 3

    def test_default_promise_words(self) -> None:
        """The default words map to their kinds."""
        assert LoopConfig().promise_words == {
            "COMPLETE": Signal.COMPLETE,
            "BLOCKED": Signal.BLOCKED,
            "ESCALATE": Signal.ESCALATE,
        }

    def test_policy_given_as_a_string(self) -> None:
        """A policy given by name is stored as the enum."""
        assert LoopConfig(completion="promise").completion is CompletionPolicy.PROMISE

    def test_promise_words_are_normalised(self) -> None:
        """Words are stripped and upper-cased; a list becomes a tuple."""
        c = LoopConfig(completion_promises=[" done ", "Ship_It"])
        assert c.completion_promises == ("DONE", "SHIP_IT")

    def test_rules_list_becomes_a_tuple(self) -> None:
        """The rules given as a list are stored as a tuple."""
        rule = rules.pattern("p", "x")
        assert LoopConfig(rules=[rule]).rules == (rule,)


class TestValidation:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"max_iterations": 0}, "max_iterations"),
            ({"max_iterations": -5}, "max_iterations"),
            ({"max_iterations": 2.5}, "max_iterations"),
            ({"max_iterations": True}, "max_iterations"),
            ({"max_iterations": "10"}, "max_iterations"),
            ({"circuit_breaker_threshold": 0}, "circuit_breaker_threshold"),
            ({"circuit_breaker_threshold": None}, "circuit_breaker_threshold"),
            ({"regression_window": 1}, "regression_window"),
            ({"regression_window": 0}, "regression_window"),
            ({"regression_min_drop": -0.5}, "regression_min_drop"),
            ({"regression_min_drop": float("nan")}, "regression_min_drop"),
            ({"regression_min_drop": float("inf")}, "regression_min_drop"),
            ({"regression_min_drop": "10"}, "regression_min_drop"),
            ({"feedback_limit": 10}, "feedback_limit"),
            ({"max_stop_retries": -1}, "max_stop_retries"),
            ({"completion": "sometimes"}, "completion"),
            ({"completion": "rules"}, "completion"),
            ({"completion_promises": ()}, "completion_promises"),
            ({"completion_promises": "DONE"}, "completion_promises"),
            ({"completion_promises": ("two words",)}, "completion_promises"),
            ({"completion_promises": ("",)}, "completion_promises"),
            ({"completion_promises": ("<tag>",)}, "completion_promises"),
            ({"blocked_promises": (3,)}, "blocked_promises"),
            ({"escalate_promises": ("COMPLETE",)}, "escalate_promises"),
            ({"blocked_promises": ("escalate",)}, "escalate_promises"),
            ({"rules": "tests"}, "rules"),
            ({"rules": 5}, "rules"),
            ({"rules": [lambda s: True]}, "rules[0]"),
            ({"rules": [rules.pattern("a", "x"), "pytest"]}, "rules[1]"),
            ({"rules": [rules.pattern("a", "x"), rules.pattern("a", "y")]}, "rules[1].name"),
            ({"workdir": 42}, "workdir"),
        ],
    )
    def test_invalid_field_names_itself(self, kwargs: dict[str, Any], field: str) -> None:
        """Each invalid value raises ConfigError whose message starts with the field's name."""
        assert field_of(**kwargs) == field

    def test_message_says_what_was_wrong(self) -> None:
        """The message gives the rule and the value given."""
        with pytest.raises(ConfigError, match=r"max_iterations: must be >= 1, got 0"):
            LoopConfig(max_iterations=0)

    def test_unknown_policy_lists_the_valid_ones(self) -> None:
        """An unknown completion policy names the valid policies."""
        with pytest.raises(ConfigError, match="promise_and_rules, promise, rules"):
            LoopConfig(completion="maybe")

    def test_rules_policy_needs_a_rule(self) -> None:
        """The rules policy without rules says it needs at least one rule."""
        with pytest.raises(ConfigError, match="at least one rule"):
            LoopConfig(completion="rules")
        assert LoopConfig(completion="rules", rules=[rules.pattern("p", "x")]).rules

    def test_config_error_is_a_loopwarden_and_value_error(self) -> None:
        """ConfigError is catchable as LoopwardenError and as ValueError."""
        with pytest.raises(LoopwardenError):
            LoopConfig(max_iterations=0)
        with pytest.raises(ValueError):  # noqa: PT011 - the base class is the point here
            LoopConfig(max_iterations=0)

    def test_with_changes_validates_again(self) -> None:
        """with_changes returns a validated copy."""
        c = LoopConfig()
        assert c.with_changes(max_iterations=30).max_iterations == 30
        assert c.max_iterations == 15
        with pytest.raises(ConfigError, match="max_iterations"):
            c.with_changes(max_iterations=0)

    def test_frozen(self) -> None:
        """A config cannot be changed in place."""
        c = LoopConfig()
        with pytest.raises(AttributeError):
            c.max_iterations = 3  # type: ignore[misc]


class TestFromDict:
    def test_unknown_key_names_it(self) -> None:
        """An unknown key is a ConfigError naming it and listing the valid fields."""
        with pytest.raises(ConfigError, match="max_iterations") as info:
            LoopConfig.from_dict({"max_iteration": 3})
        assert info.value.field == "max_iteration"

    def test_not_an_object(self) -> None:
        """A config that is not a JSON object is a ConfigError."""
        with pytest.raises(ConfigError) as info:
            LoopConfig.from_dict([("max_iterations", 3)])  # type: ignore[arg-type]
        assert info.value.field == "config"

    def test_invalid_value_names_the_field(self) -> None:
        """A bad value read from a dict names its field."""
        with pytest.raises(ConfigError) as info:
            LoopConfig.from_dict({"circuit_breaker_threshold": 0})
        assert info.value.field == "circuit_breaker_threshold"

    def test_bad_rule_names_its_position(self) -> None:
        """A bad rule in the list is reported with its index."""
        with pytest.raises(ConfigError) as info:
            LoopConfig.from_dict(
                {"rules": [{"type": "pattern", "name": "ok", "pattern": "x"}, {"type": "x"}]}
            )
        assert info.value.field.startswith("rules[1]")

    def test_invalid_regex_fails_at_creation(self) -> None:
        """An invalid regex in a stored rule fails when the config is made."""
        with pytest.raises(ConfigError, match="invalid regular expression") as info:
            LoopConfig.from_dict({"rules": [{"type": "pattern", "name": "p", "pattern": "(("}]})
        assert info.value.field == "rules[0].pattern"

    def test_rules_not_a_list(self) -> None:
        """A rules value that is not a list is a ConfigError naming rules."""
        with pytest.raises(ConfigError) as info:
            LoopConfig.from_dict({"rules": "pytest"})
        assert info.value.field == "rules"

    def test_empty_dict_gives_defaults(self) -> None:
        """An empty dict is the default config."""
        assert LoopConfig.from_dict({}) == LoopConfig()


class TestRoundTrip:
    def test_full_config(self) -> None:
        """A config with every kind of rule survives to_dict → JSON → from_dict."""
        rules.predicate("config-roundtrip-check", lambda s: True)
        config = LoopConfig(
            max_iterations=7,
            circuit_breaker_threshold=2,
            regression_window=4,
            regression_min_drop=12.5,
            completion="rules",
            rules=[
                rules.command("tests", ["pytest", "-q"], timeout=120),
                rules.command("lint", "ruff check . && mypy", shell=True),
                rules.pattern("no-todo", r"TODO|FIXME", must_match=False, ignore_case=True),
                rules.coverage("cov", "coverage.json", minimum=80),
                rules.predicate("config-roundtrip-check", lambda s: True),
            ],
            completion_promises=("DONE", "COMPLETE"),
            blocked_promises=("STUCK",),
            feedback_limit=1000,
            workdir="/tmp/project",
            max_stop_retries=1,
        )
        data = json.loads(json.dumps(config.to_dict()))
        assert LoopConfig.from_dict(data) == config
        assert data["completion"] == "rules"
        assert data["rules"][4] == {"type": "predicate", "name": "config-roundtrip-check"}

    @given(configs())
    def test_any_valid_config(self, config: LoopConfig) -> None:
        """Every valid config round-trips exactly through JSON."""
        data = json.loads(json.dumps(config.to_dict()))
        again = LoopConfig.from_dict(data)
        assert again == config
        assert again.to_dict() == config.to_dict()
