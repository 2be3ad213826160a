"""Every prompt of the long-context suite is answerable from its text: a solver written here, from the task's
description alone, parses the prompt (answer left out) and computes the answer, which must be the prompt's; it
also counts the candidates a guess picks among, which must give the prompt's chance."""

from __future__ import annotations

import re
from collections import Counter
from math import perm

import pytest

from longeval_text import book_bytes, decode, encode
from posformer.experiments.longeval.grid import trial_generator
from posformer.experiments.longeval.items import WORDS
from posformer.experiments.longeval.tasks import TASKS

BOOK = book_bytes()
NEEDLE = re.compile(r" The key of ([a-z]+) is ([0-9a-z-]+)\.")


def values_like(value: str) -> int:
    """How many values have the form of `value`: 5-digit numbers, 8-hex-digit codes or the suite's words."""
    if re.fullmatch(r"[0-9]{5}", value):
        return 90_000
    if re.fullmatch(r"[0-9a-f]{4}-[0-9a-f]{4}", value):
        return 16**8
    assert value in WORDS
    return len(WORDS)


def solve_needles(text: str) -> tuple[str, int]:
    """The values of the asked keys (every value of a key asked alone when it has several), in the order asked (a
    key's values in the order they appear); the candidates: ordered picks of that many among the needles, or, for
    a lone needle, every value of its form (a guess that never finds it)."""
    needles = NEEDLE.findall(text)
    one = re.search(r" The key of ([a-z]+) is$", text)
    asked = [one.group(1)] if one else re.search(r" The keys of (.+) are$", text).group(1).split(" and ")
    values = [v for key in asked for k, v in needles if k == key]
    if one:
        assert len(values) == 1  # a single needle of the asked key
    if len(needles) == 1:
        return " " + values[0], values_like(values[0])
    return " " + ", ".join(values), perm(len(needles), len(values))


def solve_variables(text: str) -> tuple[str, int]:
    """The variables whose chain of assignments ends in the asked value, in the order they are assigned."""
    statements = re.findall(r" VAR ([A-Z]{2}) = ([A-Z]{2}|\d{5})\.", text)
    value = re.search(r" The VARs equal to (\d{5}) are$", text).group(1)
    source = dict(statements)
    assert len(source) == len(statements)  # each variable assigned once

    def resolve(name: str) -> str:
        while name in source:
            name = source[name]
        return name

    holding = [name for name, _ in statements if resolve(name) == value]
    return " " + " ".join(holding), perm(len(source), len(holding))


def listed_words(text: str, question: str) -> list[str]:
    return text[text.index(" Words:") + len(" Words:") : text.rindex(question)].split()


def solve_common(text: str) -> tuple[str, int]:
    """The three words that occur more often than every other, in the order they first appear."""
    words = listed_words(text, " The common words are")
    counts = Counter(words).most_common()
    assert counts[2][1] > counts[3][1]
    top = {w for w, _ in counts[:3]}
    return " " + " ".join(sorted(top, key=words.index)), perm(len(counts), 3)


def solve_frequent(text: str) -> tuple[str, int]:
    """The three most frequent words, most frequent first (their counts strictly decreasing, above the rest)."""
    counts = Counter(listed_words(text, " The top words by count are")).most_common()
    assert counts[0][1] > counts[1][1] > counts[2][1] > counts[3][1]
    return " " + " ".join(w for w, _ in counts[:3]), perm(len(counts), 3)


SOLVERS = {"vt": solve_variables, "cwe": solve_common, "fwe": solve_frequent}


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("split", ["train", "eval"])
def test_a_solver_reading_the_text_finds_the_answer_and_counts_the_candidates(task, split):
    solve = SOLVERS.get(task, solve_needles)
    for length in (TASKS[task].minimum_length(encode), 500, 1500):
        for trial in range(8):
            depth = 0.1 * trial if TASKS[task].uses_depth else None
            prompt = TASKS[task].prompt(encode, length, depth, trial_generator(3, task, trial), split, BOOK)
            answer, candidates = solve(decode(prompt.ids[: prompt.answer_start]))
            assert decode(prompt.ids[prompt.answer_start :]) == answer == prompt.answer
            assert prompt.candidates == candidates and prompt.chance == 1 / candidates


def test_the_word_lists_grow_with_the_length():
    """cwe and fwe fill the length with words: more of them, and more distinct ones, at 4x the length."""
    for task, question in (("cwe", " The common words are"), ("fwe", " The top words by count are")):
        sizes = []
        for length in (400, 1600):
            prompt = TASKS[task].prompt(encode, length, None, trial_generator(0, task, 0), "eval")
            words = listed_words(decode(prompt.ids[: prompt.answer_start]), question)
            sizes.append((len(words), len(set(words))))
            assert sum(len(w) + 1 for w in words) > 0.8 * (length - len(prompt.answer) - len(question) - 7)
        assert sizes[1][0] > 3 * sizes[0][0] and sizes[1][1] > sizes[0][1]
