"""Rows that only copying by content predicts: random tokens in which one segment reappears at a random later
offset. `CopyMix` mixes them into training as a warm-up for induction heads (docs/longeval.md, Learnability);
`examples/copy_by_content.py` trains on nothing else."""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.experiments.row_mix import RowMix
from posformer.utils.validation import check_int


def repeated_segment_row(
    length: int, vocab_size: int, shortest: int, longest: int, g: torch.Generator
) -> tuple[Tensor, Tensor]:
    """(ids (length,) uniform over the vocabulary, with ids[again : again + size] = ids[first : first + size] for a
    size uniform in [shortest, longest] and first + size <= again; repeated (length,) bool: True on the repeat's
    tokens after its first, those a copy by content predicts)."""
    if not 1 <= shortest <= longest or 2 * longest > length:
        raise ValueError(f"copy rows: segments of {shortest}-{longest} tokens: expected 1 <= shortest <= longest <= "
                         f"length / 2 = {length / 2:g}")  # fmt: skip
    ids = torch.randint(0, vocab_size, (length,), generator=g)
    size = int(torch.randint(shortest, longest + 1, (), generator=g))
    first = int(torch.randint(0, length - 2 * size + 1, (), generator=g))
    again = int(torch.randint(first + size, length - size + 1, (), generator=g))
    ids[again : again + size] = ids[first : first + size]
    repeated = torch.zeros(length, dtype=torch.bool)
    repeated[again + 1 : again + size] = True
    return ids, repeated


def packed_copy_row(length: int, span: int, vocab_size: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """`repeated_segment_row`s of `span` tokens (segments of 4 to span / 4) back to back, the last one shorter
    (random tokens alone when under 16): (ids (length,), repeated (length,) bool). Short copies packed in a long
    row keep the share of tokens a copy predicts that a short row has, and induction forms as soon as in short
    rows (docs/longeval.md)."""
    if span < 16:
        raise ValueError(f"copy_span: expected at least 16 tokens (segments of 4 to span / 4), got {span}")
    pieces = []
    for begin in range(0, length, span):
        size = min(span, length - begin)
        if size < 16:
            pieces.append((torch.randint(0, vocab_size, (size,), generator=g), torch.zeros(size, dtype=torch.bool)))
        else:
            pieces.append(repeated_segment_row(size, vocab_size, 4, size // 4, g))
    ids, repeated = zip(*pieces)
    return torch.cat(ids), torch.cat(repeated)


class CopyMix(RowMix):
    """Replaces every row of the first `warmup` batches by `packed_copy_row`s of `span`-token copies, and a fraction
    of each later batch's rows by `repeated_segment_row`s of 4 to seq_len / 4 tokens (`RowMix`: resumable, the same
    rows after a resume). The warm-up is where induction heads form (docs/longeval.md: in a language-modelling mix
    they did not); the mixes stacked after it start after it (their `start`). span=None: seq_len (one copy a row)."""

    def __init__(
        self, batches, seq_len: int, fraction: float, seed: int, vocab_size: int, warmup: int = 0,
        span: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(batches, seq_len, fraction, seed, "copy_fraction")
        check_int("copy_warmup", warmup, minimum=0)
        if span is not None:
            check_int("copy_span", span, minimum=16)
        self.span = seq_len if span is None else min(span, seq_len)
        self.vocab_size, self.longest, self.warmup = vocab_size, seq_len // 4, warmup
        repeated_segment_row(seq_len, vocab_size, 4, self.longest, torch.Generator())  # refuses a seq_len < 16

    def fraction_now(self) -> float:
        return 1.0 if self.drawn < self.warmup else self.fraction

    def make_row(self, g: torch.Generator) -> Tensor:
        if self.drawn < self.warmup:
            return packed_copy_row(self.seq_len, self.span, self.vocab_size, g)[0]
        return repeated_segment_row(self.seq_len, self.vocab_size, 4, self.longest, g)[0]
