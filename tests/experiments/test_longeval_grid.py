"""Scoring the long-context suite: exact match from one teacher-forced pass on a stub whose predictions the test
chooses, the grid's cells, and the effective length on hand-made score tables."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import posformer as pf
from longeval_text import book_bytes, encode
from posformer.experiments.longeval.effective import RULER_THRESHOLD, effective_length, threshold_for
from posformer.experiments.longeval.grid import (
    ANY_DEPTH,
    cell_prompts,
    grid_tokens,
    length_means,
    score_prompts,
    suite_grid,
    task_scores,
)
from posformer.experiments.longeval.items import WORDS

BOOK = book_bytes()
VOCAB = 256


class Stub(nn.Module):
    """Knows the prompts it is given: predicts each next token right, except the last answer token of the prompts
    in `wrong` (one token off). Takes (b, T) ids and `logits_to_keep` as a posformer Transformer does."""

    def __init__(self, prompts, wrong: set[int] = frozenset()) -> None:
        super().__init__()
        self.known = {tuple(p.ids[:-1].tolist()): (p.ids, i in wrong) for i, p in enumerate(prompts)}
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, ids, logits_to_keep: int):
        rows = []
        for row in ids:
            full, off = self.known[tuple(row.tolist())]
            target = full[1:].clone()
            target[-1] = (target[-1] + off) % VOCAB
            rows.append(nn.functional.one_hot(target[-logits_to_keep:], VOCAB).float())
        return SimpleNamespace(logits=torch.stack(rows))


def test_exact_match_counts_prompts_whose_every_answer_token_the_argmax_predicts():
    prompts = cell_prompts("single_word", encode, 400, 0.5, 10, 0, BOOK)  # word answers: several answer lengths
    assert len({p.answer_start for p in prompts}) > 1
    wrong = {1, 4, 7}
    cell = score_prompts(Stub(prompts, wrong), prompts, batch_size=3)
    answer_tokens = [len(p.ids) - p.answer_start for p in prompts]
    assert cell["exact"] == pytest.approx(1 - len(wrong) / len(prompts))
    assert cell["tokens"] == pytest.approx(1 - sum(1 / answer_tokens[i] for i in wrong) / len(prompts))
    assert cell["chance"] == pytest.approx(1 / len(WORDS))  # a single needle: a blind guess among the words


def test_the_grid_has_a_cell_per_task_length_and_depth_and_a_perfect_model_scores_one():
    tasks, lengths, depths, trials = ["single_noise", "multikey", "vt", "fwe"], [300, 600], [0.0, 1.0], 2
    prompts = [
        p
        for task in tasks
        for n in lengths
        for d in (depths if task in ("single_noise", "multikey") else [None])
        for p in cell_prompts(task, encode, n, d, trials, 5, BOOK)
    ]
    counted = []
    grid = suite_grid(Stub(prompts), encode, lengths, tasks, depths, trials, 5, BOOK, 600, counted.append)
    assert set(grid) == set(tasks) and all(set(grid[t]) == {"300", "600"} for t in tasks)
    assert set(grid["multikey"]["300"]) == {"0.0", "1.0"} and set(grid["vt"]["600"]) == {ANY_DEPTH}
    assert all(c["exact"] == c["tokens"] == 1 for t in tasks for by in grid[t].values() for c in by.values())
    assert grid["multikey"]["300"]["0.0"]["chance"] == 1 / 4 and grid["vt"]["300"][ANY_DEPTH]["chance"] == 1 / 120
    assert sum(counted) == grid_tokens(tasks, lengths, depths, trials)
    assert length_means(grid) == {300: 1.0, 600: 1.0}
    assert task_scores(grid, "chance")["multikey"] == {300: 0.25, 600: 0.25}


def test_the_grid_scores_a_real_model_in_batches_of_tokens():
    torch.manual_seed(0)
    model = pf.Transformer(pf.Config(arch="decoder", vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2))
    counted = []
    grid = suite_grid(model, encode, [300], ["single_noise"], [0.5], 3, batch_tokens=600, advance=counted.append)
    prompts = cell_prompts("single_noise", encode, 300, 0.5, 3, 0, None)
    with torch.no_grad():
        agree = [
            model(p.ids[None, :-1]).logits[0, p.answer_start - 1 :].argmax(-1) == p.ids[p.answer_start :]
            for p in prompts
        ]
    assert grid["single_noise"]["300"]["0.5"]["exact"] == pytest.approx(sum(float(a.all()) for a in agree) / 3)
    assert grid["single_noise"]["300"]["0.5"]["tokens"] == pytest.approx(
        sum(float(a.float().mean()) for a in agree) / 3
    )
    assert counted == [600, 300]  # 600 // 300 = 2 prompts a batch


def test_the_grid_refuses_book_tasks_without_enough_book_text():
    model = pf.Transformer(pf.Config(arch="decoder", vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match="task 'single_word' hides its needles in book text: give at least 600"):
        suite_grid(model, encode, [300, 600], ["vt", "single_word"], [0.5], 1, haystack_ids=BOOK[:500])


@pytest.mark.parametrize(
    "means, threshold, expected",
    [
        ({128: 0.95, 256: 0.90, 512: 0.80, 1024: 0.20}, RULER_THRESHOLD, 256),
        ({128: 0.95, 256: 0.90, 512: 0.90}, RULER_THRESHOLD, 512),  # every length passes: the longest
        ({128: 0.80, 256: 0.90}, RULER_THRESHOLD, None),  # the shortest fails: below every length
        ({128: 0.95, 256: 0.50, 512: 0.95}, RULER_THRESHOLD, 128),  # passing again after a failure does not count
        ({256: 0.90, 128: 0.95, 512: 0.856}, RULER_THRESHOLD, 256),  # order-free; equal to the threshold fails
    ],
)
def test_the_effective_length_is_the_longest_length_up_to_which_every_mean_exceeds_the_threshold(
    means, threshold, expected
):
    assert effective_length(means, threshold) == expected


def test_a_relative_threshold_is_a_fraction_of_the_mean_at_the_reference_length():
    means = {128: 0.6, 256: 0.5, 512: 0.4, 1024: 0.1}
    assert threshold_for(means, 0.8, None) == 0.8
    assert threshold_for(means, 0.8, 128) == pytest.approx(0.48)
    assert effective_length(means, threshold_for(means, 0.8, 128)) == 256  # 0.5 > 0.48 > 0.4
    assert effective_length(means, threshold_for(means, 0.5, 128)) == 512
    assert effective_length({128: 0.0, 256: 0.0}, threshold_for({128: 0.0, 256: 0.0}, 0.5, 128)) is None
    with pytest.raises(ValueError, match="reference length 300 was not evaluated"):
        threshold_for(means, 0.8, 300)
    with pytest.raises(ValueError, match="threshold=1.5 is out of range"):
        threshold_for(means, 1.5, None)
