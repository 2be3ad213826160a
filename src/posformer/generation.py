"""Autoregressive generation over the KV cache: greedy and sampling (temperature, top-k, top-p)."""

from __future__ import annotations

import torch
from torch import Tensor

from posformer.cache import Cache


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to -inf every logit outside the top-k and outside the smallest set of mass >= top_p.

    logits: (B, V) -> (B, V).
    """
    if top_k is not None and top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative - sorted_logits.softmax(-1) >= top_p  # keep the token that crosses top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(logits: Tensor, do_sample: bool, temperature: float, top_k: int | None, top_p: float | None,
               generator: torch.Generator | None) -> Tensor:
    """Pick one token per row. logits: (B, V) -> (B,)."""
    if not do_sample:
        return logits.argmax(-1)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model,
    input_ids: Tensor,
    max_new_tokens: int = 32,
    attention_mask: Tensor | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Generate up to `max_new_tokens` tokens after input_ids (B, T).

    Decoder: returns (B, T + new), the prompt followed by the continuation;
    prompts may be left-padded (attention_mask 0 on the pads): positions are
    counted from each row's first real token. Encoder-decoder: input_ids is the
    source and the result (B, 1 + new) starts with decoder_start_token_id.
    Rows that produce `eos_token_id` are padded with it afterwards.
    """
    cfg = model.cfg
    if cfg.arch == "encoder":
        raise ValueError("generate() needs a decoder: Config.arch is 'encoder'")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    eos = cfg.eos_token_id if eos_token_id is None else eos_token_id
    batch = input_ids.shape[0]
    cache = Cache(len(model.decoder.layers))
    was_training = model.training
    model.eval()
    try:
        if cfg.arch == "decoder":
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            out = model(input_ids, attention_mask=mask, position_ids=pos, cache=cache)
            tokens = input_ids
        else:
            if cfg.decoder_start_token_id is None:
                raise ValueError("Config.decoder_start_token_id is None: needed to start encoder-decoder generation")
            tokens = torch.full((batch, 1), cfg.decoder_start_token_id, dtype=torch.long, device=input_ids.device)
            out = model(input_ids, attention_mask=attention_mask, decoder_input_ids=tokens, cache=cache)
        done = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
        for step in range(max_new_tokens):
            new = next_token(out.logits[:, -1], do_sample, temperature, top_k, top_p, generator)
            if eos is not None:
                new = new.masked_fill(done, eos)
                done |= new == eos
            tokens = torch.cat((tokens, new[:, None]), dim=1)
            if step == max_new_tokens - 1 or bool(done.all()):
                break
            if cfg.arch == "decoder":
                mask = torch.cat((mask, mask.new_ones(batch, 1)), dim=1)
                pos = pos[:, -1:] + 1
                out = model(new[:, None], attention_mask=mask, position_ids=pos, cache=cache)
            else:
                out = model(input_ids, decoder_input_ids=new[:, None], cache=cache,
                            decoder_position_ids=torch.full_like(new[:, None], tokens.shape[1] - 1))
        return tokens
    finally:
        model.train(was_training)
