"""Completion promises: ``<promise>WORD</promise>`` in an agent's output.

A promise is the tag with a recognised word inside, tag and word case-insensitive. Text after
the word inside the tag (``<promise>BLOCKED: no credentials</promise>``) or after the closing
tag on the same line is the promise's reason. Quoted promises do not count: a tag inside an
HTML comment, a fenced code block or an inline code span is the agent talking *about* a
promise, not making one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from loopwarden.model import Promise, Signal

__all__ = ["DEFAULT_WORDS", "detect_promises", "strip_quoted"]

DEFAULT_WORDS: Mapping[str, Signal] = {
    "COMPLETE": Signal.COMPLETE,
    "BLOCKED": Signal.BLOCKED,
    "ESCALATE": Signal.ESCALATE,
}

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
# A fence opens with 3+ backticks or tildes at line start and closes with the same run (or EOF).
_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]{0,3}(?P=fence)[`~]*[ \t]*$|\Z)",
    re.DOTALL | re.MULTILINE,
)
_INLINE_CODE = re.compile(r"(?P<ticks>`+)(?!`).+?(?<!`)(?P=ticks)(?!`)", re.DOTALL)
# The reason inside the tag may hold any text but the closing tag; the reason after the tag
# runs to the end of the line or to the next promise on the same line.
_TAG = re.compile(
    r"<promise>\s*(?P<word>[A-Za-z0-9_]+)(?P<inner>(?:[\s:](?:(?!</promise>).)*?)?)</promise>"
    r"(?P<after>(?:(?!<promise>)[^\n])*)",
    re.IGNORECASE | re.DOTALL,
)


def strip_quoted(text: str) -> str:
    """Blank out HTML comments, fenced code blocks and inline code spans."""
    text = _COMMENT.sub(" ", text)
    text = _FENCE.sub(" ", text)
    return _INLINE_CODE.sub(" ", text)


_DASHES = ":-\u2013\u2014"


def _reason(inner: str, after: str) -> str:
    inner = inner.strip().lstrip(_DASHES).strip()
    after = after.strip().lstrip(_DASHES).strip()
    return inner or after


def detect_promises(text: str, words: Mapping[str, Signal] | None = None) -> list[Promise]:
    """Every promise made in ``text``, in order of appearance.

    ``words`` maps each recognised word (any case) to its kind; the default recognises
    COMPLETE, BLOCKED and ESCALATE.
    """
    table = {w.upper(): kind for w, kind in (words or DEFAULT_WORDS).items()}
    found: list[Promise] = []
    for match in _TAG.finditer(strip_quoted(text)):
        word = match.group("word").upper()
        kind = table.get(word)
        if kind is None:
            continue
        found.append(Promise(kind, word, _reason(match.group("inner"), match.group("after"))))
    return found
