"""Copy rows (`experiments.copy_rows`): each repeats one segment at a later offset and marks exactly what a copy by
content predicts; packed rows hold one such copy per span; `CopyMix` replaces the asked fraction, packs its warm-up
rows and stacks with the other mixes without sharing their rows; bad segment sizes name themselves."""

from __future__ import annotations

import pytest
import torch

from posformer.experiments.copy_rows import CopyMix, packed_copy_row, repeated_segment_row
from posformer.experiments.passkey import PasskeyMix
from posformer.train.batches import WindowBatches


def test_each_row_repeats_one_segment_and_marks_what_follows_its_first_token() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        ids, repeated = repeated_segment_row(64, 1000, 4, 12, g)
        where = repeated.nonzero().flatten()
        size = where.numel() + 1
        assert 4 <= size <= 12 and torch.equal(where, torch.arange(where[0], where[0] + size - 1))
        again = int(where[0]) - 1
        earlier = [s for s in range(0, again - size + 1) if torch.equal(ids[s : s + size], ids[again : again + size])]
        assert earlier, "the marked segment occurs earlier in the row"


@pytest.mark.parametrize("sizes", [(0, 4), (5, 4), (4, 40)])
def test_bad_segment_sizes_are_refused(sizes) -> None:
    with pytest.raises(ValueError, match=r"copy rows: segments of .* expected 1 <= shortest <= longest <= length / 2"):
        repeated_segment_row(64, 100, *sizes, torch.Generator())


def _copies_within(ids: torch.Tensor, repeated: torch.Tensor) -> int:
    """How many marked runs of `repeated` copy an earlier segment of `ids` (the run's first token included)."""
    found, position = 0, 0
    while position < len(ids):
        if not repeated[position]:
            position += 1
            continue
        end = position
        while end < len(ids) and repeated[end]:
            end += 1
        again, size = position - 1, end - position + 1
        found += any(torch.equal(ids[s : s + size], ids[again : again + size]) for s in range(0, again - size + 1))
        position = end
    return found


@pytest.mark.parametrize(("length", "span", "copies"), [(128, 48, 3), (128, 32, 4), (100, 48, 2), (64, 64, 1)])
def test_a_packed_row_holds_one_copy_per_span_each_inside_its_span(length, span, copies) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        ids, repeated = packed_copy_row(length, span, 1000, g)
        assert ids.shape == repeated.shape == (length,)
        assert _copies_within(ids, repeated) == copies
        for begin in range(0, length, span):  # each span, read alone, holds its copy
            piece = slice(begin, begin + span)
            assert _copies_within(ids[piece], repeated[piece]) == (1 if length - begin >= 16 else 0)


def test_a_span_under_16_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="copy_span: expected at least 16 tokens"):
        packed_copy_row(64, 15, 100, torch.Generator())


def _stream() -> torch.Tensor:
    return torch.randint(0, 256, (8_000,), generator=torch.Generator().manual_seed(0))


def test_the_mix_replaces_the_asked_fraction_and_stacks_independently() -> None:
    text = WindowBatches(_stream(), 64, seed=3)
    copies = CopyMix(text, 64, 0.5, seed=3, vocab_size=256)
    both = PasskeyMix(copies, lambda s: list(s.encode()), 64, 0.5, seed=3)
    rows = torch.cat([both.next_batch(16)["input_ids"] for _ in range(40)])
    windows = WindowBatches(_stream(), 64, seed=3)
    plain = torch.cat([windows.next_batch(16)["input_ids"] for _ in range(40)])
    passkey = torch.tensor([b" pass key is" in bytes(r.tolist()) for r in rows.clamp(max=255)])
    copied = ~passkey & (rows != plain).any(-1)
    # independent draws: about half the rows are passkey prompts, a quarter copy rows, a quarter text
    assert 0.4 < passkey.float().mean() < 0.6 and 0.15 < copied.float().mean() < 0.35


def test_a_row_too_short_for_a_segment_is_refused() -> None:
    with pytest.raises(ValueError, match="copy rows"):
        CopyMix(WindowBatches(_stream(), 8, seed=0), 8, 0.5, seed=0, vocab_size=256)


def test_the_warm_up_is_copy_rows_only_and_the_other_mixes_start_after_it() -> None:
    copies = CopyMix(WindowBatches(_stream(), 64, seed=3), 64, 0.25, seed=3, vocab_size=256, warmup=3)
    both = PasskeyMix(copies, lambda s: list(s.encode()), 64, 0.5, seed=3, start=3)
    windows = WindowBatches(_stream(), 64, seed=3)
    for number in range(8):
        rows, plain = both.next_batch(16)["input_ids"], windows.next_batch(16)["input_ids"]
        passkey = torch.tensor([b" pass key is" in bytes(r.tolist()) for r in rows])
        changed = (rows != plain).any(-1)
        if number < 3:
            assert changed.all() and not passkey.any()
        else:
            assert passkey.any() and not changed.all()


def test_warm_up_rows_are_packed_and_later_rows_hold_one_long_copy() -> None:
    copies = CopyMix(WindowBatches(_stream(), 128, seed=3), 128, 1.0, seed=3, vocab_size=256, warmup=2, span=32)
    for number in range(4):
        for row in copies.next_batch(4)["input_ids"]:
            pieces = [row[begin : begin + 32].tolist() for begin in range(0, 128, 32)]
            fourgrams = [[tuple(p[i : i + 4]) for i in range(29)] for p in pieces]
            copies_inside = sum(len(set(grams)) < len(grams) for grams in fourgrams)  # a copy repeats its 4-grams
            assert copies_inside == 4 if number < 2 else copies_inside <= 1


def test_a_negative_warm_up_is_refused() -> None:
    with pytest.raises(ValueError, match="copy_warmup=-1 is invalid"):
        CopyMix(WindowBatches(_stream(), 64, seed=0), 64, 0.5, seed=0, vocab_size=256, warmup=-1)
