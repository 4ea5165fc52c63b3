"""Validation rules: command, pattern, coverage and predicate; reports and the score."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwarden import ConfigError, RuleResult, RuleStatus, UnresolvedReferenceError, rules
from loopwarden.model import ValidationReport, score_of
from loopwarden.rules import PredicateRule, Submission, evaluate_all, rule_from_dict
from loopwarden.testing import validation_reports

PY = sys.executable


def submit(output: str = "", draft: str | None = None, workdir: str | None = None) -> Submission:
    return Submission(output=output, draft=draft, workdir=workdir)


def py(code: str) -> list[str]:
    return [PY, "-c", code]


class TestCommandRule:
    def test_exit_zero_passes(self) -> None:
        """A command that exits 0 passes."""
        result = rules.command("ok", py("pass"), timeout=10).evaluate(submit())
        assert result.status is RuleStatus.PASSED
        assert result.name == "ok"
        assert result.duration > 0

    def test_non_zero_fails_with_status_and_output(self) -> None:
        """A non-zero exit fails and the message has the exit status and the output."""
        code = "import sys; print('something broke'); sys.exit(3)"
        result = rules.command("bad", py(code), timeout=10).evaluate(submit())
        assert result.status is RuleStatus.FAILED
        assert result.message == "exit status 3\nsomething broke"

    def test_long_output_keeps_the_tail_bounded(self) -> None:
        """With long output the message keeps the last lines and stays bounded."""
        code = "import sys; print('x' * 5000); print('the-last-line'); sys.exit(3)"
        result = rules.command("bad", py(code), timeout=10).evaluate(submit())
        assert result.status is RuleStatus.FAILED
        assert result.message.endswith("the-last-line")
        assert len(result.message) < 2000

    def test_long_output_keeps_the_exit_status(self) -> None:
        """Even with long output the message still says the exit status."""
        code = "import sys; print('x' * 5000); sys.exit(3)"
        result = rules.command("bad", py(code), timeout=10).evaluate(submit())
        assert "exit status 3" in result.message

    def test_stderr_is_in_the_message(self) -> None:
        """What the command wrote to stderr is part of the failure message."""
        code = "import sys; sys.stderr.write('boom on stderr'); sys.exit(1)"
        result = rules.command("bad", py(code), timeout=10).evaluate(submit())
        assert "boom on stderr" in result.message

    def test_timeout_errors(self) -> None:
        """A command that outlives its timeout is errored, not failed."""
        rule = rules.command("slow", py("import time; time.sleep(30)"), timeout=0.3)
        result = rule.evaluate(submit())
        assert result.status is RuleStatus.ERRORED
        assert "timed out" in result.message
        assert result.duration < 5

    def test_missing_executable_errors(self) -> None:
        """A command that cannot be found is errored with a message naming it."""
        result = rules.command("gone", ["no-such-program-lw"], timeout=5).evaluate(submit())
        assert result.status is RuleStatus.ERRORED
        assert "no-such-program-lw" in result.message

    def test_argument_list_runs_without_a_shell(self) -> None:
        """Arguments are passed verbatim: shell metacharacters are not interpreted."""
        code = "import sys; sys.exit(0 if sys.argv[1] == '$HOME; exit 7' else 1)"
        rule = rules.command("argv", [*py(code), "$HOME; exit 7"], timeout=10)
        assert rule.evaluate(submit()).status is RuleStatus.PASSED

    def test_string_is_split_without_shell(self) -> None:
        """A command string without shell=True is split into an argument list."""
        rule = rules.command("split", f"{PY} -c 'import sys; sys.exit(0)'", timeout=10)
        assert rule.argv == (PY, "-c", "import sys; sys.exit(0)")
        assert rule.evaluate(submit()).status is RuleStatus.PASSED

    def test_string_with_shell(self) -> None:
        """With shell=True a string runs in the shell."""
        rule = rules.command("sh", "test 2 -gt 1 && exit 4", shell=True, timeout=10)
        assert rule.argv == "test 2 -gt 1 && exit 4"
        result = rule.evaluate(submit())
        assert result.status is RuleStatus.FAILED
        assert "exit status 4" in result.message

    def test_runs_in_the_workdir(self, tmp_path: Path) -> None:
        """A relative cwd is resolved against the submission's workdir."""
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "marker").write_text("x")
        rule = rules.command(
            "cwd", py("import os; assert os.path.exists('marker')"), cwd="sub", timeout=10
        )
        assert rule.evaluate(submit(workdir=str(tmp_path))).status is RuleStatus.PASSED

    def test_env_is_added(self) -> None:
        """Extra environment variables reach the command."""
        code = "import os, sys; sys.exit(os.environ.get('LW_FLAG') != 'on')"
        rule = rules.command("env", py(code), env={"LW_FLAG": "on"}, timeout=10)
        assert rule.evaluate(submit()).status is RuleStatus.PASSED

    @pytest.mark.parametrize("timeout", [0, -1, True, "10"])
    def test_bad_timeout(self, timeout: object) -> None:
        """A timeout that is not a positive number is a ConfigError naming it."""
        with pytest.raises(ConfigError, match=r"rules\[t\]\.timeout"):
            rules.command("t", ["true"], timeout=timeout)  # type: ignore[arg-type]

    def test_empty_command(self) -> None:
        """An empty command is a ConfigError."""
        with pytest.raises(ConfigError, match="command"):
            rules.command("e", [])

    def test_repr(self) -> None:
        """The repr names the rule, its command and timeout."""
        assert repr(rules.command("tests", ["pytest", "-q"], timeout=60)) == (
            "<command rule 'tests': ('pytest', '-q') timeout=60s>"
        )


class TestPatternRule:
    def test_must_match(self) -> None:
        """A must-match pattern passes when found and fails when absent."""
        rule = rules.pattern("tests", r"\d+ passed")
        assert rule.evaluate(submit("12 passed in 1s")).status is RuleStatus.PASSED
        failed = rule.evaluate(submit("3 failed"))
        assert failed.status is RuleStatus.FAILED
        assert "must appear" in failed.message

    def test_must_not_match(self) -> None:
        """A must-not-match pattern fails when found, naming the line."""
        rule = rules.pattern("no-todo", r"TODO", must_match=False)
        assert rule.evaluate(submit("all done")).status is RuleStatus.PASSED
        failed = rule.evaluate(submit("line one\n  # TODO: later\n"))
        assert failed.status is RuleStatus.FAILED
        assert "line 2" in failed.message
        assert "# TODO: later" in failed.message

    def test_draft_target(self) -> None:
        """With target='draft' the pattern looks at the draft, not the output."""
        rule = rules.pattern("title", r"^# ", target="draft")
        assert rule.evaluate(submit("# in output", draft="no title")).status is RuleStatus.FAILED
        assert rule.evaluate(submit("none", draft="# Title")).status is RuleStatus.PASSED

    def test_missing_draft(self) -> None:
        """No draft fails a must-match rule and passes a must-not-match one."""
        assert rules.pattern("a", "x", target="draft").evaluate(submit()).status is (
            RuleStatus.FAILED
        )
        must_not = rules.pattern("b", "x", target="draft", must_match=False)
        assert must_not.evaluate(submit()).status is RuleStatus.PASSED

    def test_multiline_and_ignore_case(self) -> None:
        """^ matches at each line start; ignore_case makes matching case-insensitive."""
        assert rules.pattern("m", r"^ok$").evaluate(submit("a\nok\nb")).passed
        assert not rules.pattern("c", "done").evaluate(submit("DONE")).passed
        assert rules.pattern("i", "done", ignore_case=True).evaluate(submit("DONE")).passed

    @pytest.mark.parametrize("regex", ["(unclosed", "[a-", "*", "(?P<x>a)(?P<x>b)"])
    def test_invalid_regex_is_a_config_error_at_construction(self, regex: str) -> None:
        """An invalid regex fails when the rule is made, naming the rule's pattern field."""
        with pytest.raises(ConfigError, match="invalid regular expression") as info:
            rules.pattern("lint", regex)
        assert info.value.field == "rules[lint].pattern"

    def test_bad_target(self) -> None:
        """A target other than output or draft is a ConfigError naming it."""
        with pytest.raises(ConfigError) as info:
            rules.pattern("t", "x", target="stdout")  # type: ignore[arg-type]
        assert info.value.field == "rules[t].target"

    def test_repr(self) -> None:
        """The repr says what must (not) match what."""
        assert repr(rules.pattern("no-todo", "TODO", must_match=False)) == (
            "<pattern rule 'no-todo': output must not match 'TODO'>"
        )


class TestCoverageRule:
    def write_json(self, path: Path, percent: float) -> Path:
        path.write_text(json.dumps({"meta": {}, "totals": {"percent_covered": percent}}))
        return path

    def test_coverage_py_json_at_or_above_minimum_passes(self, tmp_path: Path) -> None:
        """A coverage.py JSON total at or above the minimum passes."""
        report = self.write_json(tmp_path / "coverage.json", 80.0)
        assert rules.coverage("cov", str(report), minimum=80).evaluate(submit()).passed

    def test_coverage_py_json_below_minimum_fails(self, tmp_path: Path) -> None:
        """A total below the minimum fails with both numbers in the message."""
        report = self.write_json(tmp_path / "coverage.json", 79.4)
        result = rules.coverage("cov", str(report), minimum=80).evaluate(submit())
        assert result.status is RuleStatus.FAILED
        assert "79.4%" in result.message
        assert "80%" in result.message

    def test_cobertura_xml(self, tmp_path: Path) -> None:
        """A Cobertura XML line-rate is read as a percentage."""
        report = tmp_path / "coverage.xml"
        report.write_text('<?xml version="1.0" ?>\n<coverage line-rate="0.85" version="7"/>')
        assert rules.coverage("cov", str(report), minimum=85).evaluate(submit()).passed
        assert not rules.coverage("cov", str(report), minimum=86).evaluate(submit()).passed

    def test_relative_report_is_found_in_the_workdir(self, tmp_path: Path) -> None:
        """A relative report path is resolved against the submission's workdir."""
        self.write_json(tmp_path / "coverage.json", 95)
        rule = rules.coverage("cov", "coverage.json", minimum=90)
        assert rule.evaluate(submit(workdir=str(tmp_path))).passed

    def test_missing_report_errors(self, tmp_path: Path) -> None:
        """A missing report is errored, not failed."""
        rule = rules.coverage("cov", str(tmp_path / "nope.json"), minimum=50)
        result = rule.evaluate(submit())
        assert result.status is RuleStatus.ERRORED
        assert "not found" in result.message

    @pytest.mark.parametrize(
        "content",
        [
            "not json at all",
            '{"totals": {}}',
            '{"totals": {"percent_covered": "lots"}}',
            "[1, 2]",
            "<coverage/>",
            "<report line-rate='0.9'/>",
            "<coverage line-rate='0.9'",
            "",
        ],
    )
    def test_unreadable_report_errors(self, tmp_path: Path, content: str) -> None:
        """A report that is not coverage.py JSON or Cobertura XML is errored."""
        path = tmp_path / "cov.out"
        path.write_text(content)
        result = rules.coverage("cov", str(path), minimum=50).evaluate(submit())
        assert result.status is RuleStatus.ERRORED

    @pytest.mark.parametrize("minimum", [-1, 101, True, "80"])
    def test_bad_minimum(self, minimum: object) -> None:
        """A minimum outside 0..100 or not a number is a ConfigError naming it."""
        with pytest.raises(ConfigError) as info:
            rules.coverage("cov", "c.json", minimum=minimum)  # type: ignore[arg-type]
        assert info.value.field == "rules[cov].minimum"


class TestPredicateRule:
    def test_true_passes_false_fails(self) -> None:
        """A predicate returning True passes and False fails."""
        assert rules.predicate("yes", lambda s: True).evaluate(submit()).passed
        result = rules.predicate("no", lambda s: False).evaluate(submit())
        assert result.status is RuleStatus.FAILED
        assert "'no'" in result.message

    def test_tuple_answer_carries_the_message(self) -> None:
        """A (bool, message) answer uses the message."""
        rule = rules.predicate("long", lambda s: (len(s.output) > 3, "output too short"))
        result = rule.evaluate(submit("ab"))
        assert (result.status, result.message) == (RuleStatus.FAILED, "output too short")
        assert rule.evaluate(submit("abcd")).passed

    def test_sees_the_submission(self) -> None:
        """The predicate receives the submission."""
        rule = rules.predicate("draft", lambda s: s.draft == "d" and s.output == "o")
        assert rule.evaluate(submit("o", draft="d")).passed

    def test_raising_errors(self) -> None:
        """A predicate that raises is errored with the exception in the message."""

        def broken(s: Submission) -> bool:
            raise RuntimeError("kaput")

        result = rules.predicate("broken", broken).evaluate(submit())
        assert result.status is RuleStatus.ERRORED
        assert "RuntimeError: kaput" in result.message

    def test_registered_by_name(self) -> None:
        """A predicate rule rebuilt from its JSON finds the registered callable."""
        rules.predicate("registered-lw", lambda s: True)
        rebuilt = rule_from_dict({"type": "predicate", "name": "registered-lw"})
        assert rebuilt.resolvable
        assert rebuilt.evaluate(submit()).passed

    def test_unregistered_name_errors(self) -> None:
        """An unregistered predicate is not resolvable and its evaluation errors, naming it."""
        rule = PredicateRule("never-registered-lw")
        assert not rule.resolvable
        with pytest.raises(UnresolvedReferenceError, match="never-registered-lw"):
            rule.check(submit())
        assert rule.evaluate(submit()).status is RuleStatus.ERRORED

    def test_not_callable(self) -> None:
        """A non-callable is a ConfigError."""
        with pytest.raises(ConfigError, match="callable"):
            rules.predicate("x", 3)  # type: ignore[arg-type]


class TestRuleNames:
    @pytest.mark.parametrize("name", ["", "has space", "x" * 65, "slash/name", 7])
    def test_invalid_name(self, name: object) -> None:
        """A rule name must be 1-64 of letters, digits and _.:- characters."""
        with pytest.raises(ConfigError) as info:
            rules.pattern(name, "x")  # type: ignore[arg-type]
        assert info.value.field == "rule.name"


class TestSerialisation:
    @pytest.mark.parametrize(
        "rule",
        [
            rules.command("tests", ["pytest", "-q"], timeout=30, cwd="sub", env={"A": "1"}),
            rules.command("sh", "make check", shell=True),
            rules.pattern("p", r"TODO", must_match=False, target="draft", ignore_case=True),
            rules.coverage("c", "coverage.xml", minimum=72.5),
        ],
    )
    def test_round_trip(self, rule: rules.Rule) -> None:
        """A rule rebuilt from its JSON form equals the original."""
        data = json.loads(json.dumps(rule.to_dict()))
        assert rule_from_dict(data) == rule

    def test_unknown_type(self) -> None:
        """An unknown rule type is a ConfigError naming the type field."""
        with pytest.raises(ConfigError) as info:
            rule_from_dict({"type": "magic", "name": "m"}, "rules[0]")
        assert info.value.field == "rules[0].type"

    def test_error_field_names_the_position(self) -> None:
        """A bad value inside a stored rule is reported at its position in the list."""
        with pytest.raises(ConfigError) as info:
            rule_from_dict({"type": "pattern", "name": "p", "pattern": "("}, "rules[2]")
        assert info.value.field == "rules[2].pattern"

    def test_not_an_object(self) -> None:
        """A stored rule that is not an object is a ConfigError."""
        with pytest.raises(ConfigError):
            rule_from_dict(["pattern"], "rules[0]")


class TestScore:
    @pytest.mark.parametrize(
        ("statuses", "expected"),
        [
            ([], 100.0),
            (["passed"], 100.0),
            (["failed"], 0.0),
            (["errored"], 0.0),
            (["passed", "failed"], 50.0),
            (["passed", "passed", "passed", "errored"], 50.0),
            (["passed", "errored", "errored"], 0.0),
            (["passed", "passed", "failed", "errored"], 25.0),
            (["passed", "failed", "failed"], 33.3333),
        ],
    )
    def test_formula(self, statuses: list[str], expected: float) -> None:
        """Score = passed/total*100 - errored/total*100, floored at 0; 100 with no rules."""
        report = ValidationReport(
            tuple(RuleResult(f"r{i}", RuleStatus(s)) for i, s in enumerate(statuses))
        )
        assert report.score == pytest.approx(expected)

    @given(validation_reports())
    def test_score_is_the_formula_within_bounds(self, report: ValidationReport) -> None:
        """For any report the score follows the formula and stays within 0..100."""
        total = report.total
        assert 0 <= report.score <= 100
        if total == 0:
            assert report.score == 100
        else:
            raw = (report.passed_count - report.errored_count) / total * 100
            assert report.score == pytest.approx(max(0.0, raw), abs=1e-3)
        assert report.passed == (report.passed_count == total)

    @given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
    def test_errored_counts_against_more_than_failed(self, p: int, f: int, e: int) -> None:
        """Turning a failed rule into an errored one never raises the score."""
        total = p + f + e
        if total and f:
            assert score_of(p, e + 1, total) <= score_of(p, e, total)

    def test_report_round_trip(self) -> None:
        """A report rebuilt from its JSON form equals the original."""
        report = ValidationReport(
            (RuleResult("a", RuleStatus.PASSED, "ok", 0.5), RuleResult("b", RuleStatus.ERRORED))
        )
        assert ValidationReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


class TestEvaluateAll:
    def test_every_rule_runs_in_order(self) -> None:
        """Every rule is evaluated, in order, even after a failure."""
        seen: list[str] = []

        def record(name: str, ok: bool) -> rules.PredicateRule:
            def fn(s: Submission) -> bool:
                seen.append(name)
                return ok

            return rules.predicate(name, fn)

        report = evaluate_all([record("one", False), record("two", True)], submit())
        assert seen == ["one", "two"]
        assert [r.name for r in report.results] == ["one", "two"]
        assert [r.status for r in report.failures] == [RuleStatus.FAILED]
