"""What happens to the next-token scores before a token is chosen: repetition penalty, no-repeat n-grams, no eos
before the minimum length. The rules and their order are Hugging Face `generate`'s (transformers 4.57.6 and 5.x).

Each rule reads the whole sequence of its row: for a decoder the prompt and the tokens generated so far; for an
encoder-decoder the decoder's tokens, the start token first. The n-gram rule reads a prompt's left padding too; the
repetition penalty does not (transformers 5.x: its `prompt_ignore_length` from the attention mask; 4.57.6 penalizes
the pad id of a left-padded row too). Greedy decoding and sampling process the float32 logits; beam search processes
their log_softmax (Hugging Face's order too).
"""

from __future__ import annotations

import torch
from torch import Tensor


def penalize_repetitions(scores: Tensor, sequences: Tensor, penalty: float, padding: Tensor | None = None) -> Tensor:
    """CTRL's repetition penalty (Keskar et al., 2019, section 4.1), as Hugging Face's RepetitionPenaltyLogitsProcessor
    applies it: every token id present in a row's sequence, however often, has its score divided by `penalty` when it
    is >= 0 and multiplied by it when negative (penalty > 1 discourages repeats, < 1 encourages them).

    scores (N, V), sequences (N, L), padding (N,): the first padding[i] tokens of row i (its left padding) do not
    count -> (N, V).
    """
    vocab = scores.shape[1]
    if padding is not None:
        ignored = torch.arange(sequences.shape[1], device=sequences.device)[None, :] < padding[:, None]
        sequences = sequences.masked_fill(ignored, vocab)  # an id past the vocabulary, dropped below
    present = torch.zeros(scores.shape[0], vocab + 1, dtype=torch.bool, device=scores.device)
    present = present.scatter(1, sequences, True)[:, :vocab]
    return torch.where(present, torch.where(scores < 0, scores * penalty, scores / penalty), scores)


def ban_repeated_ngrams(scores: Tensor, sequences: Tensor, size: int) -> Tensor:
    """No n-gram of `size` tokens twice in a row's sequence (fairseq's `no_repeat_ngram_size`): a token gets score -inf
    when the last size - 1 tokens followed by it form an n-gram the sequence already holds.

    scores (N, V), sequences (N, L) -> (N, V). Nothing is banned while L < size.
    """
    length = sequences.shape[1]
    if length < size:
        return scores
    windows = sequences.unfold(1, size, 1)  # (N, L - size + 1, size): every n-gram so far
    last = sequences[:, length - size + 1 :]  # (N, size - 1): what the next token would extend
    repeats = (windows[..., :-1] == last[:, None, :]).all(-1)  # (N, L - size + 1)
    banned = torch.zeros_like(scores).scatter_add(1, windows[..., -1], repeats.to(scores.dtype)) > 0
    return scores.masked_fill(banned, float("-inf"))


class LogitsProcessors:
    """The rules `generate` applies to the scores of every step, in Hugging Face's order: repetition penalty, no-repeat
    n-grams, then no eos id (score -inf) while fewer than `min_new_tokens` tokens are generated."""

    def __init__(self, repetition_penalty: float, no_repeat_ngram_size: int, eos: list[int], min_new_tokens: int):
        self.repetition_penalty = repetition_penalty
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.eos = eos
        self.min_new_tokens = min_new_tokens
        self.padding = None
        self._eos_ids: Tensor | None = None  # `eos` as a tensor on the scores' device, made at its first use

    @property
    def padding(self) -> Tensor | None:
        """(B,) each prompt's left padding, set once the prompt is known; None: no padding to leave out."""
        return self._padding

    @padding.setter
    def padding(self, padding: Tensor | None) -> None:
        self._padding = padding
        self._row_padding = padding  # one entry per row of the scores: repeated for beams at their first step

    def _padding_of_rows(self, rows: int) -> Tensor | None:
        """The left padding of each of `rows` rows: the prompts' (rows = B) or their beams' (rows = B * beams)."""
        if self._row_padding is not None and self._row_padding.shape[0] != rows:
            self._row_padding = self._padding.repeat_interleave(rows // self._padding.shape[0])
        return self._row_padding

    def __call__(self, scores: Tensor, sequences: Tensor, generated: int) -> Tensor:
        """scores (N, V) of rows whose sequences so far are (N, L), `generated` of their tokens new -> (N, V). The
        rows are the prompts' (N = B) or, in beam search, their beams next to each other (N = B * num_beams)."""
        if self.repetition_penalty != 1.0:
            padding = self._padding_of_rows(scores.shape[0])
            scores = penalize_repetitions(scores, sequences, self.repetition_penalty, padding)
        if self.no_repeat_ngram_size > 0:
            scores = ban_repeated_ngrams(scores, sequences, self.no_repeat_ngram_size)
        if generated < self.min_new_tokens and self.eos:
            if self._eos_ids is None or self._eos_ids.device != scores.device:
                self._eos_ids = torch.tensor(self.eos, device=scores.device)
            scores = scores.index_fill(-1, self._eos_ids, float("-inf"))
        return scores
