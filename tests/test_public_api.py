"""The public API is deliberate: __all__ is sorted, complete and true."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import loopwarden

# Private-looking names that are public on purpose.
INCLUDED_PRIVATE = {"__version__"}


def public_names() -> set[str]:
    """Names loopwarden's namespace defines for users: not private, not a submodule.

    Names that are not identifiers (``@py_builtins``) are pytest's assertion rewriting at work:
    installed, loopwarden is a pytest plugin's package, and pytest rewrites its modules.
    """
    return {
        name
        for name, value in vars(loopwarden).items()
        if name.isidentifier()
        and (not name.startswith("_") or name in INCLUDED_PRIVATE)
        and not (
            isinstance(value, types.ModuleType)
            and value.__name__.startswith("loopwarden.")
            and name not in loopwarden.__all__
        )
    }


class TestAll:
    def test_sorted(self) -> None:
        """__all__ is sorted (dunders, classes and functions in plain string order)."""
        assert loopwarden.__all__ == sorted(loopwarden.__all__)

    def test_no_duplicates(self) -> None:
        """No name is listed twice."""
        assert len(loopwarden.__all__) == len(set(loopwarden.__all__))

    def test_every_listed_name_exists(self) -> None:
        """Every name in __all__ is importable from loopwarden."""
        missing = [name for name in loopwarden.__all__ if not hasattr(loopwarden, name)]
        assert missing == []

    def test_every_public_name_is_listed(self) -> None:
        """Every public non-submodule name in the namespace is in __all__."""
        assert public_names() - set(loopwarden.__all__) == set()

    def test_star_import(self) -> None:
        """from loopwarden import * gives exactly __all__."""
        namespace: dict[str, object] = {}
        exec("from loopwarden import *", namespace)
        assert set(namespace) - {"__builtins__"} == set(loopwarden.__all__)

    def test_exported_objects_claim_a_loopwarden_home(self) -> None:
        """Exported classes and functions are defined inside the loopwarden package."""
        foreign = [
            name
            for name in loopwarden.__all__
            if isinstance(obj := getattr(loopwarden, name), type | types.FunctionType)
            and not obj.__module__.startswith("loopwarden")
        ]
        assert foreign == []


class TestIssueApi:
    def test_names_the_issue_promises(self) -> None:
        """The names other issues and users rely on are exported."""
        expected = {
            "LoopEngine",
            "LoopConfig",
            "Signal",
            "State",
            "detect_promises",
            "rules",
            "decide",
            "ConfigError",
            "InvalidTransitionError",
            "LoopwardenError",
        }
        assert expected <= set(loopwarden.__all__)

    def test_enum_values(self) -> None:
        """State values are the lowercase names; Signal values the upper-case words."""
        assert [s.value for s in loopwarden.State] == [
            "initialized",
            "executing",
            "validating",
            "deciding",
            "completed",
            "blocked",
            "escalated",
        ]
        assert {s.value for s in loopwarden.Signal} == {
            "CONTINUE",
            "COMPLETE",
            "BLOCKED",
            "ESCALATE",
        }

    def test_rule_factories(self) -> None:
        """loopwarden.rules has the four factories."""
        for name in ("command", "pattern", "coverage", "predicate"):
            assert callable(getattr(loopwarden.rules, name))

    def test_errors_share_one_root(self) -> None:
        """Every exported exception derives from LoopwardenError."""
        errors = [
            obj
            for name in loopwarden.__all__
            if isinstance(obj := getattr(loopwarden, name), type) and issubclass(obj, BaseException)
        ]
        assert errors
        assert all(issubclass(e, loopwarden.LoopwardenError) for e in errors)

    def test_version(self) -> None:
        """__version__ is a string."""
        assert isinstance(loopwarden.__version__, str)


class TestTestingModule:
    def test_strategies_are_exported(self) -> None:
        """loopwarden.testing exports the documented strategies."""
        testing = importlib.import_module("loopwarden.testing")
        for name in (
            "agent_outputs",
            "promises",
            "rule_results",
            "validation_reports",
            "score_sequences",
            "configs",
            "evidence",
        ):
            assert name in testing.__all__
            assert callable(getattr(testing, name))
        assert testing.__all__ == sorted(testing.__all__)
        assert testing.__doc__

    def test_hypothesis_and_pytest_stay_optional(self) -> None:
        """loopwarden never imports hypothesis; loopwarden.testing works without pytest."""
        code = (
            "import sys; sys.modules['pytest'] = None\n"
            "import loopwarden\n"
            "assert 'hypothesis' not in sys.modules, 'loopwarden imported hypothesis'\n"
            "import loopwarden.testing as t\n"
            "t.configs_and_evidence()\n"
            "print('ok')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.stdout.strip() == "ok", result.stderr
