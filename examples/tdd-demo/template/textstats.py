"""Tiny text statistics: the project the scripted agent fixes, one bug per iteration."""

from __future__ import annotations


def word_count(text: str) -> int:
    """The number of words in ``text`` (any run of whitespace separates words)."""
    return len(text.split(" "))


def average_word_length(text: str) -> float:
    """The mean length of the words in ``text``; 0.0 when there are none."""
    words = text.split()
    return sum(len(w) for w in words) / len(words)


def most_common(text: str) -> str:
    """The most frequent word (lower-cased); the earliest one wins a tie."""
    counts: dict[str, int] = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return min(counts, key=lambda w: counts[w])
