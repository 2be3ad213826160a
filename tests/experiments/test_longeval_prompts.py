"""The long-context suite's prompts (`experiments.longeval`): exact lengths, the answer last, determinism under a
seed, the needle at its depth, minimum lengths and the errors of a bad request. Solving the prompts from their text:
test_longeval_solvers.py; the splits: test_longeval_splits.py."""

from __future__ import annotations

import re

import pytest
import torch

from longeval_text import book_bytes, decode, encode
from posformer.experiments.longeval.grid import cell_prompts, check_request, trial_generator
from posformer.experiments.longeval.haystacks import ENDS, SENTENCES
from posformer.experiments.longeval.tasks import TASKS, get_task, parse_length, training_prompt

BOOK = book_bytes()
DEPTH_TASKS = [name for name, task in TASKS.items() if task.uses_depth]


def _depth(task: str, depth: float) -> float | None:
    return depth if TASKS[task].uses_depth else None


@pytest.mark.parametrize("task", list(TASKS))
def test_every_prompt_has_its_exact_length_with_the_answer_last(task):
    minimum = TASKS[task].minimum_length(encode)
    for length in (minimum, minimum + 1, 401, 1000):
        for depth in (0.0, 0.3, 1.0):
            for split in ("train", "eval"):
                prompt = TASKS[task].prompt(
                    encode, length, _depth(task, depth), trial_generator(0, task, 1), split, BOOK
                )
                assert prompt.ids.shape == (length,) and prompt.ids.dtype == torch.long
                assert decode(prompt.ids[prompt.answer_start :]) == prompt.answer
                assert prompt.answer_start == length - len(encode(prompt.answer))
                assert 0 < prompt.chance <= 1


@pytest.mark.parametrize("task", list(TASKS))
def test_a_seed_fixes_the_prompts_and_a_trial_draws_the_same_items_at_every_length(task):
    a = cell_prompts(task, encode, 600, _depth(task, 0.5), 3, 7, BOOK)
    b = cell_prompts(task, encode, 600, _depth(task, 0.5), 3, 7, BOOK)
    assert all(torch.equal(x.ids, y.ids) for x, y in zip(a, b))
    other = cell_prompts(task, encode, 600, _depth(task, 0.5), 3, 8, BOOK)
    assert not any(torch.equal(x.ids, y.ids) for x, y in zip(a, other))
    assert len({decode(p.ids) for p in a}) == 3  # the trials differ
    if task not in ("cwe",):  # cwe's answer order is the order of first appearance, which the length changes
        longer = cell_prompts(task, encode, 1200, _depth(task, 0.5), 3, 7, BOOK)
        assert [p.answer for p in a] == [p.answer for p in longer]


def _needle_start(text: str, answer: str) -> tuple[int, int]:
    """(where the asked needle starts, the bytes of the other needles before it), the asked key read from the
    question at the end of `text`."""
    key = re.search(r" The key of (\w+) is$", text).group(1)
    needles = [(m.start(), m.end()) for m in re.finditer(r" The key of \w+ is [\w-]+\.", text)]
    asked = [s for s, e in needles if text[s:e] == f" The key of {key} is{answer}."]
    assert len(asked) == 1
    return asked[0], sum(e - s for s, e in needles if s < asked[0])


def _boundaries(haystack: str, noise: bool) -> list[int]:
    """Where a needle may go, read from the haystack text: before each filler sentence, or after a book's
    sentence ends, semicolons and line ends."""
    if noise:
        starts = [m.start() for m in re.finditer("|".join(re.escape(s) for s in SENTENCES), haystack)]
        return sorted({0, len(haystack), *starts})
    marks = [e for e in ENDS if len(encode(e)) == 1]  # the marks one byte long
    ends = [m.end() for m in re.finditer("|".join(re.escape(e) for e in marks), haystack)]
    return sorted({0, len(haystack), *ends})


@pytest.mark.parametrize("task", DEPTH_TASKS)
def test_the_asked_needle_sits_at_the_boundary_nearest_its_depth(task):
    for length in (300, 900):
        for depth in (0.0, 0.1, 0.37, 0.5, 0.8, 1.0):
            prompt = TASKS[task].prompt(encode, length, depth, trial_generator(1, task, 0), "eval", BOOK)
            text = decode(prompt.ids[: prompt.answer_start])
            start, before = _needle_start(text, prompt.answer)
            body = text[: text.rindex(" The key of")]
            haystack = re.sub(r" The key of \w+ is [\w-]+\.", "", body)
            offset = start - before  # haystack bytes before the asked needle
            boundaries = _boundaries(haystack, TASKS[task].haystack == "noise")
            target = depth * len(haystack)
            nearest = min(boundaries, key=lambda b: (abs(b - target), b))
            assert offset == nearest, (task, length, depth)
            if TASKS[task].haystack == "noise":
                assert abs(offset - target) <= max(len(s) for s in SENTENCES) / 2
            assert haystack[-1] in ".!?;\n"  # the question follows a sentence (or line) end


def test_a_length_too_short_for_a_task_is_refused_naming_both():
    for name, task in TASKS.items():
        need = task.minimum_length(encode)
        check_request([name], [need, 2 * need], [0.5], 1, encode)
        with pytest.raises(ValueError, match=rf"task '{name}' needs prompts of at least {need} .*length {need - 1} "):
            check_request([name], [need - 1, 2 * need], [0.5], 1, encode)
        depth = 0.5 if task.uses_depth else None
        with pytest.raises(ValueError, match=rf"task '{name}' needs prompts of at least \d+ .*length 20 is too short"):
            task.prompt(encode, 20, depth, trial_generator(0, name, 0), "eval", BOOK)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: get_task("needle"), "unknown task 'needle': expected one of single_noise"),
        (lambda: parse_length("4q"), "length '4q' is not a length"),
        (lambda: parse_length("0"), "length '0' is out of range"),
        (lambda: check_request(["vt"], [512], [1.5], 1, encode), "depth 1.5 is out of range"),
        (lambda: check_request(["vt"], [512], [0.5], 0, encode), "trials=0 is out of range"),
        (lambda: check_request(["nope"], [512], [0.5], 1, encode), "unknown task 'nope'"),
        (lambda: TASKS["single_noise"].prompt(encode, 200, -0.1, torch.Generator(), "eval"), "depth=-0.1 is out"),
        (lambda: TASKS["vt"].prompt(encode, 200, 0.5, torch.Generator(), "eval"), "give depth=None"),
        (lambda: TASKS["vt"].prompt(encode, 200, None, torch.Generator(), "dev"), "split='dev' is invalid"),
        (lambda: TASKS["multikey"].prompt(encode, 400, 0.5, torch.Generator(), "eval"), "give haystack_ids"),
        (lambda: training_prompt("single_word", encode, 400, torch.Generator(), BOOK[:100]), "holds 100"),
    ],
)
def test_bad_input_is_a_clear_error_naming_it(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_lengths_read_as_integers_or_multiples_of_1024():
    assert [parse_length(x) for x in ("128", "4k", "2K", " 1k ", 300)] == [128, 4096, 2048, 1024, 300]
