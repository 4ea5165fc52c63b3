"""Promise detection: what counts as a promise in an agent's output, and what does not."""

from __future__ import annotations

import pytest
from hypothesis import given

from loopwarden import LoopConfig, Promise, Signal, detect_promises
from loopwarden.promises import DEFAULT_WORDS, strip_quoted
from loopwarden.testing import AnnotatedOutput, agent_outputs, annotated_outputs, configs


def kinds(text: str) -> list[Signal]:
    return [p.kind for p in detect_promises(text)]


class TestRecognisedPromises:
    @pytest.mark.parametrize(
        ("text", "kind"),
        [
            ("<promise>COMPLETE</promise>", Signal.COMPLETE),
            ("<promise>BLOCKED</promise>", Signal.BLOCKED),
            ("<promise>ESCALATE</promise>", Signal.ESCALATE),
        ],
    )
    def test_each_default_word(self, text: str, kind: Signal) -> None:
        """Each default word inside the tag is a promise of its kind."""
        assert detect_promises(text) == [Promise(kind, kind.value, "")]

    @pytest.mark.parametrize(
        "text",
        [
            "<PROMISE>COMPLETE</PROMISE>",
            "<promise>complete</promise>",
            "<Promise>Complete</pRoMiSe>",
        ],
    )
    def test_tag_and_word_are_case_insensitive(self, text: str) -> None:
        """The tag name and the word match in any case; the word is reported upper-case."""
        assert detect_promises(text) == [Promise(Signal.COMPLETE, "COMPLETE", "")]

    def test_whitespace_around_the_word(self) -> None:
        """Whitespace (even newlines) around the word inside the tag is allowed."""
        assert kinds("<promise>  COMPLETE \n</promise>") == [Signal.COMPLETE]
        assert kinds("<promise>\nBLOCKED\n</promise>") == [Signal.BLOCKED]

    def test_promise_amid_prose(self) -> None:
        """A promise anywhere in longer text is found."""
        text = "I fixed the parser.\nAll tests pass now. <promise>COMPLETE</promise>\nBye."
        assert kinds(text) == [Signal.COMPLETE]

    def test_several_promises_on_separate_lines_in_order(self) -> None:
        """Every promise is reported, in order of appearance."""
        text = "<promise>COMPLETE</promise>\nthen\n<promise>BLOCKED</promise>"
        assert kinds(text) == [Signal.COMPLETE, Signal.BLOCKED]

    def test_two_promises_on_one_line(self) -> None:
        """Two promises on one line are both found, so a BLOCKED one cannot be hidden."""
        text = "<promise>COMPLETE</promise> and <promise>BLOCKED</promise>"
        assert kinds(text) == [Signal.COMPLETE, Signal.BLOCKED]


class TestReasons:
    @pytest.mark.parametrize(
        "text",
        [
            "<promise>BLOCKED: no credentials</promise>",
            "<promise>BLOCKED no credentials</promise>",
            "<promise>BLOCKED - no credentials</promise>",
            "<promise>BLOCKED \u2014 no credentials</promise>",
            "<promise>BLOCKED</promise> no credentials",
            "<promise>BLOCKED</promise>: no credentials",
            "<promise>BLOCKED</promise> - no credentials   ",
        ],
    )
    def test_reason_inside_or_after_the_tag(self, text: str) -> None:
        """Text after the word inside the tag, or after the tag on its line, is the reason."""
        assert detect_promises(text) == [Promise(Signal.BLOCKED, "BLOCKED", "no credentials")]

    def test_inner_reason_wins_over_trailing_text(self) -> None:
        """When both are given, the reason inside the tag is used."""
        [promise] = detect_promises("<promise>ESCALATE: inner</promise> outer")
        assert promise.reason == "inner"

    def test_reason_stops_at_end_of_line(self) -> None:
        """Only the rest of the tag's own line is the reason."""
        [promise] = detect_promises("<promise>COMPLETE</promise> tests pass\nnext line")
        assert promise.reason == "tests pass"

    def test_no_reason(self) -> None:
        """A bare tag has an empty reason."""
        assert detect_promises("<promise>COMPLETE:</promise>")[0].reason == ""

    def test_reason_may_contain_a_less_than_sign(self) -> None:
        """A reason like 'needs python < 3.12' does not hide the promise."""
        assert detect_promises("<promise>BLOCKED: needs python < 3.12</promise>") == [
            Promise(Signal.BLOCKED, "BLOCKED", "needs python < 3.12")
        ]


class TestQuotedPromisesDoNotCount:
    @pytest.mark.parametrize(
        "text",
        [
            "<!-- <promise>COMPLETE</promise> -->",
            "before <!--\n<promise>COMPLETE</promise>\n--> after",
            "<!-- unterminated <promise>COMPLETE</promise>",
            "```\n<promise>COMPLETE</promise>\n```",
            "```xml\n<promise>COMPLETE</promise>\n```",
            "~~~\n<promise>COMPLETE</promise>\n~~~",
            "~~~~text\n<promise>COMPLETE</promise>\n~~~~",
            "````\n```\n<promise>COMPLETE</promise>\n```\n````",
            "```\n<promise>COMPLETE</promise>",
            "say `<promise>COMPLETE</promise>` when done",
            "say ``<promise>COMPLETE</promise>`` when done",
        ],
        ids=[
            "comment",
            "multiline-comment",
            "unterminated-comment",
            "backtick-fence",
            "fence-with-info",
            "tilde-fence",
            "long-tilde-fence",
            "nested-fence",
            "unterminated-fence",
            "inline-code",
            "double-backtick-inline",
        ],
    )
    def test_quoted(self, text: str) -> None:
        """A tag inside an HTML comment, fenced code or inline code is not a promise."""
        assert detect_promises(text) == []

    def test_text_after_a_closed_block_still_counts(self) -> None:
        """Quoting ends where the comment or fence closes."""
        assert kinds("<!-- note -->\n<promise>COMPLETE</promise>") == [Signal.COMPLETE]
        assert kinds("```\ncode\n```\n<promise>BLOCKED</promise>") == [Signal.BLOCKED]
        assert kinds("~~~\n<promise>COMPLETE</promise>\n~~~\n<promise>ESCALATE</promise>") == [
            Signal.ESCALATE
        ]

    def test_strip_quoted_blanks_only_quoted_text(self) -> None:
        """strip_quoted removes comments and code and keeps prose."""
        stripped = strip_quoted("keep <!-- drop --> this `drop` too\n```\ndrop\n```\nend")
        assert "drop" not in stripped
        assert "keep" in stripped
        assert "end" in stripped


class TestNotPromises:
    @pytest.mark.parametrize(
        "text",
        [
            "COMPLETE",
            "The task is COMPLETE.",
            "<promis>COMPLETE</promis>",
            "<promises>COMPLETE</promises>",
            "<task>COMPLETE</task>",
            "[promise]COMPLETE[/promise]",
            "<promise>COMPLETED</promise>",
            "<promise>COMPLET</promise>",
            "<promise>DONE</promise>",
            "<promise>COMPLETE-ish</promise>",
            "<promise >COMPLETE</promise>",
            "<promise>COMPLETE",
            "",
        ],
    )
    def test_not_a_promise(self, text: str) -> None:
        """Bare words, misspelled or different tags and unknown words are not promises."""
        assert detect_promises(text) == []


class TestConfigurableWords:
    def test_custom_completion_word(self) -> None:
        """A config's own completion word is recognised and the replaced default is not."""
        config = LoopConfig(completion_promises=("DONE",))
        words = config.promise_words
        assert detect_promises("<promise>done</promise> shipped", words) == [
            Promise(Signal.COMPLETE, "DONE", "shipped")
        ]
        assert detect_promises("<promise>COMPLETE</promise>", words) == []
        assert detect_promises("<promise>BLOCKED</promise>", words)[0].kind is Signal.BLOCKED

    def test_several_words_per_kind(self) -> None:
        """Each kind may have several words."""
        config = LoopConfig(completion_promises=("COMPLETE", "LGTM"), blocked_promises=("STUCK",))
        found = detect_promises(
            "<promise>lgtm</promise>\n<promise>stuck</promise>", config.promise_words
        )
        assert [(p.kind, p.word) for p in found] == [
            (Signal.COMPLETE, "LGTM"),
            (Signal.BLOCKED, "STUCK"),
        ]

    def test_word_table_is_case_insensitive(self) -> None:
        """Words given in lower case in the table still match."""
        assert kinds_with("<promise>FINISHED</promise>", {"finished": Signal.COMPLETE}) == [
            Signal.COMPLETE
        ]

    def test_default_words(self) -> None:
        """Without a table the defaults are COMPLETE, BLOCKED and ESCALATE."""
        assert dict(DEFAULT_WORDS) == {
            "COMPLETE": Signal.COMPLETE,
            "BLOCKED": Signal.BLOCKED,
            "ESCALATE": Signal.ESCALATE,
        }


def kinds_with(text: str, words: dict[str, Signal]) -> list[Signal]:
    return [p.kind for p in detect_promises(text, words)]


class TestProperties:
    @given(annotated_outputs())
    def test_finds_exactly_the_promises_made(self, output: AnnotatedOutput) -> None:
        """Real promises are found in order with their reasons; quoted ones and decoys never."""
        assert tuple(detect_promises(output.text)) == output.promises

    @given(configs().flatmap(lambda c: annotated_outputs(c.promise_words).map(lambda a: (c, a))))
    def test_with_configured_words(self, pair: tuple[LoopConfig, AnnotatedOutput]) -> None:
        """The same holds with a config's own promise words."""
        config, output = pair
        assert tuple(detect_promises(output.text, config.promise_words)) == output.promises

    @given(agent_outputs(allow_promises=False))
    def test_no_promise_without_a_real_tag(self, text: str) -> None:
        """Output with only quoted promises and decoys makes no promise."""
        assert detect_promises(text) == []

    @given(agent_outputs())
    def test_total(self, text: str) -> None:
        """Detection never raises and every promise found has a known word."""
        for p in detect_promises(text):
            assert DEFAULT_WORDS[p.word] is p.kind
