"""Beam search over the KV cache, with the rules of Hugging Face `generate` (transformers 4.57.6).

Each prompt keeps `num_beams` running hypotheses and a list of at most
`num_beams` finished ones. One step, for every prompt:

1. Candidates: each running beam's next-token log-probs (log_softmax of the
   float32 logits) plus the beam's score; the best K = max(2, 1 + n_eos) * num_beams
   of the num_beams * V candidates, best first. K > num_beams so that enough
   candidates remain to continue when some of them end.
   The log-probs first go through the logits processors (repetition penalty, no-repeat n-grams, no eos before
   the minimum length: `logits_processors`), which read each running beam's whole sequence.
2. A candidate ends when its token is an eos id, its text ends in a stop string, or it reaches max_new_tokens.
   Ending candidates among the first num_beams of the K join the finished list
   with score = log-prob sum / new_tokens ** length_penalty (new_tokens counts
   the generated tokens, eos included; neither the prompt nor the decoder start
   token), unless the prompt is already done; the list keeps its best num_beams.
3. The best num_beams candidates that did not end become the running beams;
   the KV cache rows follow their source beams.
4. A prompt is done once its finished list is full and, by `early_stopping`:
   True: at once; False: when the best running beam, scored at its current
   length, cannot beat the worst finished score; "never": the same, but scored
   at max_new_tokens when length_penalty > 0 (longer may then score higher).

Generation ends when every prompt is done or at max_new_tokens; each prompt
returns its best `num_return_sequences` finished hypotheses, best first.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.generation.decoding import Decoding, initial_room
from posformer.generation.plan import Plan

# The score of the beams that do not exist yet at the first step: every
# continuation comes from beam 0 (all beams hold the same prefix), yet the
# others stay finite candidates, as in Hugging Face, should V < K.
UNBORN = -1e9


def _gather(x: Tensor, index: Tensor) -> Tensor:
    """x (B, N, ...) -> (B, M, ...) along dim 1 with index (B, M)."""
    return torch.take_along_dim(x, index.view(*index.shape, *([1] * (x.dim() - 2))), dim=1)


class Finished:
    """The best finished hypotheses of each prompt: tokens and beam indices (B, N, room), lengths and scores
    (B, N). The room starts at `decoding.initial_room(max_new)` new tokens and grows (doubling, up to max_new) when
    a longer hypothesis joins, so a huge max_new_tokens allocates only what the search reaches; past a
    hypothesis's length its row holds `fill` and beam -1."""

    def __init__(self, batch: int, num_beams: int, max_new: int, fill: int, device: torch.device) -> None:
        room = initial_room(max_new)
        self.tokens = torch.full((batch, num_beams, room), fill, dtype=torch.long, device=device)
        self.beams = torch.full((batch, num_beams, room), -1, dtype=torch.long, device=device)
        self.lengths = torch.zeros(batch, num_beams, dtype=torch.long, device=device)
        self.scores = torch.full((batch, num_beams), float("-inf"), device=device)
        self.fill, self.max_new = fill, max_new

    def _make_room(self, n: int) -> None:
        """Widen tokens and beams to hold `n` new tokens at least (doubling, at most max_new)."""
        room = self.tokens.shape[-1]
        if n > room:
            more = min(max(2 * room, n), self.max_new) - room
            self.tokens = torch.nn.functional.pad(self.tokens, (0, more), value=self.fill)
            self.beams = torch.nn.functional.pad(self.beams, (0, more), value=-1)

    def full(self) -> Tensor:
        """(B,) whether every slot holds a hypothesis."""
        return (self.scores > float("-inf")).all(dim=1)

    def add(self, tokens: Tensor, beams: Tensor, scores: Tensor) -> None:
        """Merge candidates tokens and beam indices (B, M, n) with scores (B, M) (-inf: not a candidate); keep the
        best N."""
        n = tokens.shape[-1]
        self._make_room(n)
        room = self.tokens.shape[-1]
        padded = torch.nn.functional.pad(tokens, (0, room - n), value=self.fill)
        padded_beams = torch.nn.functional.pad(beams, (0, room - n), value=-1)
        all_scores = torch.cat((self.scores, scores), dim=1)
        best = all_scores.topk(self.scores.shape[1], dim=1).indices
        self.scores = _gather(all_scores, best)
        self.tokens = _gather(torch.cat((self.tokens, padded), dim=1), best)
        self.beams = _gather(torch.cat((self.beams, padded_beams), dim=1), best)
        self.lengths = _gather(torch.cat((self.lengths, torch.full_like(scores, n, dtype=torch.long)), dim=1), best)


def _candidates(prefix: Tensor, running: Tensor, beam: Tensor, token: Tensor) -> Tensor:
    """The whole sequences of candidates (B, K): prefix (B, T), then the running beam `beam` (B, K) they extend
    ((B, num_beams, n) new tokens), then `token` (B, K) -> (B * K, T + n + 1)."""
    k = beam.shape[1]
    grown = torch.cat((_gather(running, beam), token[:, :, None]), dim=2).flatten(0, 1)
    return torch.cat((prefix.repeat_interleave(k, dim=0), grown), dim=1)


def beam_search(state: Decoding, plan: Plan) -> tuple[Tensor, Tensor, Tensor]:
    """Beam search from `state` (the prefix not run yet) by `plan` (num_beams, length_penalty, early_stopping,
    num_return_sequences, eos, pad, the processors and stop strings); plan.max_new_tokens >= 1.

    Returns the sequences (B * num_return_sequences, T + new): each prompt's prefix (B, T) followed by its best
    hypotheses, padded with `pad` to the longest one; their scores (B * num_return_sequences,), HF's
    `sequences_scores`; and their beam indices (B * num_return_sequences, new), HF's `beam_indices`.
    """
    prefix, num_beams, max_new_tokens = state.tokens, plan.num_beams, plan.max_new_tokens
    length_penalty, early_stopping = plan.length_penalty, plan.early_stopping
    batch, device = prefix.shape[0], prefix.device
    eos_ids = torch.tensor(plan.eos, dtype=torch.long, device=device)
    keep = max(2, 1 + len(plan.eos)) * num_beams
    finished = Finished(batch, num_beams, max_new_tokens, 0 if plan.pad is None else plan.pad, device)
    running = prefix.new_zeros(batch, num_beams, 0)
    running_beams = prefix.new_zeros(batch, num_beams, 0)
    scores = torch.full((batch, num_beams), UNBORN, device=device)
    scores[:, 0] = 0.0
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)[:, None] * num_beams
    beam_prefix = prefix.repeat_interleave(num_beams, dim=0)  # (B * num_beams, T)

    logits = state.start().repeat_interleave(num_beams, dim=0)
    state.reorder(torch.arange(batch, device=device).repeat_interleave(num_beams))
    for step in range(max_new_tokens):
        length = step + 1  # new tokens in every candidate
        sequences = torch.cat((beam_prefix, running.flatten(0, 1)), dim=1)
        log_probs = plan.processors(torch.log_softmax(logits, dim=-1), sequences, step)
        plan.recorder.add(log_probs, logits)
        log_probs = log_probs.view(batch, num_beams, -1) + scores[:, :, None]
        vocab = log_probs.shape[-1]
        cand_scores, flat = log_probs.view(batch, -1).topk(min(keep, num_beams * vocab), dim=1)
        cand_beam, cand_token = flat // vocab, flat % vocab
        last = length == max_new_tokens
        ends = torch.isin(cand_token, eos_ids) | last
        if plan.stop is not None:
            ends |= plan.stop(_candidates(prefix, running, cand_beam, cand_token)).view(ends.shape)

        top_beam, top_token = cand_beam[:, :num_beams], cand_token[:, :num_beams]
        joins = ends[:, :num_beams] & ~done[:, None]
        penalized = (cand_scores[:, :num_beams] / (length**length_penalty)).masked_fill(~joins, float("-inf"))
        finished.add(
            torch.cat((_gather(running, top_beam), top_token[:, :, None]), dim=2),
            torch.cat((_gather(running_beams, top_beam), (rows + top_beam)[:, :, None]), dim=2),
            penalized,
        )
        if last:
            break

        scores, best = cand_scores.masked_fill(ends, float("-inf")).topk(num_beams, dim=1)
        source, token = _gather(cand_beam, best), _gather(cand_token, best)
        running = torch.cat((_gather(running, source), token[:, :, None]), dim=2)
        running_beams = torch.cat((_gather(running_beams, source), (rows + source)[:, :, None]), dim=2)

        full = finished.full()
        if early_stopping is True:
            done |= full
        else:
            hypothetical = max_new_tokens if early_stopping == "never" and length_penalty > 0 else length
            best_possible = scores[:, 0] / (hypothetical**length_penalty)
            done |= full & (best_possible <= finished.scores.min(dim=1).values)
        if bool(done.all()):
            break
        state.reorder((rows + source).flatten())
        logits = state.step(token.flatten())

    return _assemble(prefix, finished, plan.num_return_sequences)


def _assemble(prefix: Tensor, finished: Finished, num_return_sequences: int) -> tuple[Tensor, Tensor, Tensor]:
    """The prefix (B, T) followed by the best hypotheses -> (B * R, T + longest), their scores (B * R,) and beam
    indices (B * R, longest)."""
    r = num_return_sequences
    longest = int(finished.lengths[:, :r].max())
    best = finished.tokens[:, :r, :longest].flatten(0, 1)
    beams = finished.beams[:, :r, :longest].flatten(0, 1)
    return torch.cat((prefix.repeat_interleave(r, dim=0), best), dim=1), finished.scores[:, :r].flatten(), beams
