"""Greedy decoding and sampling over the KV cache: one token per row and step, as Hugging Face's `_sample`."""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.generation.decoding import Decoding
from posformer.generation.plan import Plan
from posformer.generation.sampling import choose, warp


def greedy_or_sample(state: Decoding, plan: Plan) -> tuple[Tensor, Tensor]:
    """Decode from `state` (the prefix not run yet) by `plan`; plan.max_new_tokens >= 1.

    Each step: the float32 logits go through the processors (and, when sampling, the temperature and the top-k /
    top-p filters); the argmax, or a draw, is the row's token. A row ends at an eos id or a stop string and gets
    `pad` afterwards (a model with no eos id at all has no pad here, as in Hugging Face: a row that met a stop
    string then goes on until every row has ended). Generation stops when every row has ended.
    The streamer gets the prefix (B, T), then each step's tokens (B,), then end().

    Returns the sequences (B, T + new) and the sums (B,) of the chosen tokens' log-probs (log_softmax of the
    unprocessed logits) up to and including each row's end.
    """
    tokens = state.tokens
    eos_ids = torch.tensor(plan.eos, dtype=torch.long, device=tokens.device)
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    scores = torch.zeros(tokens.shape[0], device=tokens.device)
    if plan.streamer is not None:
        plan.streamer.put(tokens.cpu())
    logits = state.start()
    for step in range(plan.max_new_tokens):
        processed = plan.processors(logits, tokens, step)
        if plan.do_sample:
            processed = warp(processed, plan.temperature, plan.top_k, plan.top_p)
        plan.recorder.add(processed, logits)
        new = choose(processed, plan.do_sample, plan.generator)
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, new[:, None]).squeeze(-1)
        scores += chosen.masked_fill(done, 0.0)
        if plan.pad is not None:
            new = new.masked_fill(done, plan.pad)
        tokens = torch.cat((tokens, new[:, None]), dim=1)
        if plan.streamer is not None:
            plan.streamer.put(new.cpu())
        if plan.eos:
            done |= torch.isin(new, eos_ids)
        if plan.stop is not None:
            done |= plan.stop(tokens)
        if step == plan.max_new_tokens - 1 or bool(done.all()):
            break
        logits = state.step(new)
    if plan.streamer is not None:
        plan.streamer.end()
    return tokens, scores
