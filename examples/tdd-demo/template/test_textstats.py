"""The tests that decide whether the work is done (plain unittest: nothing to install)."""

# ruff: noqa: PT009  (unittest assertions on purpose: the demo needs no pytest)

import unittest

from textstats import average_word_length, most_common, word_count


class TestWordCount(unittest.TestCase):
    def test_words_separated_by_any_whitespace(self) -> None:
        self.assertEqual(word_count("the  quick\nbrown fox"), 4)

    def test_empty_text_has_no_words(self) -> None:
        self.assertEqual(word_count(""), 0)


class TestAverageWordLength(unittest.TestCase):
    def test_mean_length(self) -> None:
        self.assertEqual(average_word_length("ab abcd"), 3.0)

    def test_empty_text_is_zero(self) -> None:
        self.assertEqual(average_word_length("   "), 0.0)


class TestMostCommon(unittest.TestCase):
    def test_most_frequent_word(self) -> None:
        self.assertEqual(most_common("b a b c b a"), "b")

    def test_case_insensitive(self) -> None:
        self.assertEqual(most_common("Go go stop"), "go")


if __name__ == "__main__":
    unittest.main()
