"""Copy rows (`experiments.copy_rows`): each repeats one segment at a later offset and marks exactly what a copy by
content predicts; `CopyMix` replaces the asked fraction and stacks with the other mixes without sharing their
rows; bad segment sizes name themselves."""

from __future__ import annotations

import pytest
import torch

from posformer.experiments.copy_rows import CopyMix, repeated_segment_row
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


def test_a_negative_warm_up_is_refused() -> None:
    with pytest.raises(ValueError, match="copy_warmup=-1 is invalid"):
        CopyMix(WindowBatches(_stream(), 64, seed=0), 64, 0.5, seed=0, vocab_size=256, warmup=-1)
