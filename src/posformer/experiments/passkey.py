"""Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention", section 4.2) for a language model.

A prompt of exactly `length` tokens hides a random 5-digit key in repeated filler, at a relative `depth`
(0: the key line right after the start, 1: right before the question), then asks for it:

    The grass is green. The sky is blue. ... The pass key is 71432. The grass is green. ... The pass key is| 71432

The paper's filler; its instruction preamble, its "Remember it. 71432 is the pass key." and its "What is the
pass key?" are left out, so that a prompt fits 64 tokens (45 bytes without filler): our models are not
instruction-tuned and are trained on short contexts. Scoring is teacher-forced: a trial is retrieved when the
model's argmax agrees with every token of " 71432" given the prompt and the key's own prefix (what greedy
decoding writes, see `experiments.synthetic.evaluation`); the digit accuracy counts the agreeing answer tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from posformer.experiments.row_mix import RowMix
from posformer.model import Transformer

FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_LINE = " The pass key is {key}."
QUESTION = " The pass key is"
ANSWER = " {key}"


class AnswerPrompt(Protocol):
    """What `retrieval` scores: ids (T,), the whole sequence, the answer last from index answer_start (a
    `PasskeyPrompt`, or a prompt of the long-context suite)."""

    ids: Tensor
    answer_start: int


@dataclass(frozen=True)
class PasskeyPrompt:
    """ids: (length,) the whole sequence, answer included; answer_start: the index of the answer's first token;
    key_start, key_end: the key line's tokens are ids[key_start:key_end]."""

    ids: Tensor
    answer_start: int
    key: str
    key_start: int
    key_end: int


def passkey_prompt(encode, length: int, depth: float, key: str) -> PasskeyPrompt | None:
    """The prompt of `length` tokens with the key line at `depth` in [0, 1] of the filler; None if it cannot fit.

    encode: str -> list[int], the tokenizer (each piece encoded alone, then concatenated).
    """
    if not 0 <= depth <= 1:
        raise ValueError(f"passkey: depth={depth} must be in [0, 1]")
    key_line, question = encode(KEY_LINE.format(key=key)), encode(QUESTION)
    answer = encode(ANSWER.format(key=key))
    room = length - len(key_line) - len(question) - len(answer)
    if room < 0:
        return None
    filler = encode(FILLER)
    filler = (filler * (room // len(filler) + 1))[:room]
    cut = round(depth * room)
    ids = filler[:cut] + key_line + filler[cut:] + question + answer
    return PasskeyPrompt(torch.tensor(ids, dtype=torch.long), length - len(answer), key, cut, cut + len(key_line))


def key_reach(prompt: PasskeyPrompt, window: int) -> str:
    """Where the key line lies for a reader of its last `window` tokens (each query sees itself and the window - 1
    tokens before it): "near" when the whole key line is within the prompt's last `window` tokens, so every query
    that predicts an answer token sees all of it; "far" when it ends before the `window` tokens that end at the
    first of those queries (answer_start - 1), so none of them sees any of it; "straddles" otherwise. A prompt of
    at most `window` tokens is always "near"."""
    if prompt.key_start >= prompt.ids.numel() - window:
        return "near"
    return "far" if prompt.key_end <= prompt.answer_start - window else "straddles"


def random_keys(count: int, seed: int | torch.Generator) -> list[str]:
    """`count` 5-digit keys, 10000 .. 99999, from one seeded generator (or the generator given)."""
    g = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    return [str(k) for k in torch.randint(10_000, 100_000, (count,), generator=g).tolist()]


class PasskeyMix(RowMix):
    """Training batches with a fraction of their rows replaced by passkey prompts of the same length (random key,
    uniform depth), so that a model learns retrieval within its training length; `posformer extend` then measures
    whether the skill survives at longer lengths (`RowMix`: resumable, the same prompts after a resume)."""

    def __init__(self, batches, encode, seq_len: int, fraction: float, seed: int, start: int = 0) -> None:
        if passkey_prompt(encode, seq_len, 0.0, "10000") is None:
            raise ValueError(f"passkey_fraction: a passkey prompt needs more than seq_len={seq_len} tokens")
        super().__init__(batches, seq_len, fraction, seed, "passkey_fraction", start)
        self.encode = encode

    def make_row(self, g: torch.Generator) -> Tensor:
        depth = float(torch.rand((), generator=g))
        return passkey_prompt(self.encode, self.seq_len, depth, random_keys(1, g)[0]).ids


@torch.no_grad()
def retrieval(
    model: Transformer,
    prompts: Sequence[AnswerPrompt],
    batch_size: int = 16,
    advance: Callable[[int], None] | None = None,
) -> tuple[Tensor, Tensor]:
    """(exact (n,) bool: greedy decoding writes prompt i's answer exactly; right (n,) float: the fraction of its
    answer tokens predicted right), in the order of `prompts`.

    Every prompt must have the same length and answer length (one grid cell). The head reads only the positions
    that predict the answer (`logits_to_keep`): a prompt of 64k tokens makes logits for a few of them. `advance`
    is told the tokens of each batch scored."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    exact, right = [], []
    try:
        for start in range(0, len(prompts), batch_size):
            batch = prompts[start : start + batch_size]
            ids = torch.stack([p.ids for p in batch]).to(device)
            begin = batch[0].answer_start
            keep = ids.shape[1] - begin  # the logits of input positions begin - 1 .. length - 2
            predicted = model(ids[:, :-1], logits_to_keep=keep).logits.argmax(-1)  # predicts ids[:, begin:]
            agree = (predicted == ids[:, begin:]).cpu()
            exact.append(agree.all(-1))
            right.append(agree.float().mean(-1))
            if advance is not None:
                advance(ids.numel())
    finally:
        model.train(was_training)
    return torch.cat(exact), torch.cat(right)


def passkey_grid(
    model: Transformer,
    encode,
    lengths: list[int],
    depths: list[float],
    trials: int,
    seed: int = 0,
    batch_tokens: int = 8192,
    advance: Callable[[int], None] | None = None,
) -> dict[str, dict[str, dict[str, float] | None]]:
    """{str(length): {str(depth): {"exact": ..., "digits": ..., "hits": [0 or 1 for each key]} or None when the
    prompt cannot fit}}.

    The same `trials` keys, in the same order, at every cell (so two models' hits pair up key by key). Keys whose
    answer tokenizes to a different number of tokens than the first key's are grouped apart so a batch has one
    shape. A batch holds batch_tokens // length prompts, one at least; `advance` is told the tokens of each batch
    scored, and of each cell that cannot fit (`grid_tokens` in all).
    """
    keys = random_keys(trials, seed)
    grid: dict[str, dict[str, dict[str, float] | None]] = {}
    for length in lengths:
        grid[str(length)] = {}
        batch_size = max(1, batch_tokens // length)
        for depth in depths:
            prompts = [passkey_prompt(encode, length, depth, key) for key in keys]
            if any(p is None for p in prompts):
                grid[str(length)][str(depth)] = None
                if advance is not None:
                    advance(trials * length)
                continue
            groups: dict[int, list[int]] = {}
            for i, p in enumerate(prompts):
                groups.setdefault(p.answer_start, []).append(i)
            hits, digits = torch.zeros(trials, dtype=torch.bool), torch.zeros(trials)
            for members in groups.values():
                hits[members], digits[members] = retrieval(model, [prompts[i] for i in members], batch_size, advance)
            grid[str(length)][str(depth)] = {
                "exact": hits.float().mean().item(), "digits": digits.mean().item(), "hits": hits.int().tolist()
            }  # fmt: skip
    return grid


def grid_tokens(lengths: list[int], depths: list[float], trials: int) -> int:
    """The tokens `passkey_grid` reads (what a progress bar counts): trials prompts of each length at each depth."""
    return sum(lengths) * len(depths) * trials
