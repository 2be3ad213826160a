"""Autoregressive generation over the KV cache: greedy, sampling (temperature, top-k, top-p) and beam search.

`generate` is the one entry point (`Transformer.generate` forwards to it); beam
search lives in `posformer.generation.beam_search`. The conventions follow Hugging Face
`generate` (transformers 4.57.6), token for token for greedy and beam search:

- decoder prompts may be left-padded: positions count from each row's first real token;
- an encoder-decoder model starts its output with `decoder_start_token_id`;
- a row stops at an end-of-sequence token and is then padded with `pad_token_id`
  (falling back to the first eos id), and generation stops when every row has stopped;
- an eos id outside the vocabulary (a Hugging Face config may carry one, e.g. GPT-2's
  50256 in a tiny test model) can never be generated, so it never ends a row: it is dropped.

`return_scores=True` also returns each sequence's score, as HF's
`compute_transition_scores(...).sum(-1)` (greedy, up to the eos) and `sequences_scores` (beam).
"""

from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

from posformer.config import Config
from posformer.generation.beam_search import beam_search
from posformer.generation.decoding import Decoding
from posformer.generation.sampling import next_token
from posformer.utils.validation import (
    LARGEST_INT,
    check_int,
    check_number,
    check_token_in_vocabulary,
    fail,
    is_int,
)

EosIds = Union[int, Sequence[int], None]


def _eos_ids(eos_token_id: EosIds, default: int | None, vocab_size: int) -> list[int]:
    """The end-of-sequence ids a row can generate, as a list (empty: never stop early).

    Ids >= vocab_size are accepted, as Hugging Face accepts them, and dropped: no row can emit them.
    """
    eos = default if eos_token_id is None else eos_token_id
    ids = [] if eos is None else [eos] if not isinstance(eos, (list, tuple)) else list(eos)
    if not all(is_int(i) and i >= 0 for i in ids):
        raise ValueError(f"eos_token_id must be token ids (integers >= 0), got {eos_token_id!r}")
    return [i for i in ids if i < vocab_size]


def _pad_id(pad_token_id: int | None, cfg: Config, eos: list[int]) -> int | None:
    """What fills a row after its eos: `pad_token_id`, else `Config.pad_token_id`, else the first eos id.

    Only when a row can end (`eos` not empty) is it used, and then it must be a token id in the vocabulary.
    """
    if pad_token_id is None and cfg.pad_token_id is None:
        return eos[0] if eos else None
    name, pad = (
        ("pad_token_id", pad_token_id) if pad_token_id is not None else ("Config.pad_token_id", cfg.pad_token_id)
    )
    if eos:
        check_token_in_vocabulary(name, pad, cfg.vocab_size, "it fills the rows that ended at an eos id")
    return pad


def _check_length(max_new_tokens: int, prefix: int) -> None:
    """The `prefix` tokens the decoder starts from (the prompt, or the decoder start token) and `max_new_tokens`
    fit in the positions a cache holds (2**31 - 1)."""
    if max_new_tokens > LARGEST_INT - prefix:
        fail(
            "max_new_tokens",
            max_new_tokens,
            f"an integer in [0, {LARGEST_INT - prefix}]: the {prefix} tokens before the new ones and these must fit "
            "in 2**31 - 1 positions",
        )


def _check_options(
    max_new_tokens: int,
    do_sample: bool,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    num_beams: int,
    num_return_sequences: int,
    length_penalty: float,
    early_stopping: bool | str,
    min_new_tokens: int,
    return_scores: bool,
    generator: torch.Generator | None,
) -> None:
    """Raise ValueError naming the first invalid generation argument."""
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    check_int("min_new_tokens", min_new_tokens, minimum=0)
    check_int("num_beams", num_beams)
    check_int("num_return_sequences", num_return_sequences)
    for name, value in (("do_sample", do_sample), ("return_scores", return_scores)):
        if not isinstance(value, bool):
            fail(name, value, "True or False")
    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        fail("early_stopping", early_stopping, "True, False or 'never'")
    check_number("length_penalty", length_penalty)
    if generator is not None and not isinstance(generator, torch.Generator):
        fail("generator", generator, "None or a torch.Generator")
    if num_beams > 1:
        if do_sample:
            raise ValueError(
                "do_sample=True with num_beams > 1 (beam sampling) is not supported: "
                "use num_beams=1 to sample or do_sample=False for beam search"
            )
        if num_return_sequences > num_beams:
            raise ValueError(f"num_return_sequences={num_return_sequences} must be <= num_beams={num_beams}")
    elif not do_sample and num_return_sequences != 1:
        raise ValueError(
            f"greedy decoding returns one sequence per prompt, got num_return_sequences="
            f"{num_return_sequences}: use num_beams >= num_return_sequences or do_sample=True"
        )
    if do_sample:
        check_number("temperature", temperature, low=0, low_open=True)
        if top_k is not None:
            check_int("top_k", top_k, minimum=0)
        if top_p is not None:
            check_number("top_p", top_p, low=0, high=1, low_open=True)


def _check_prompt(input_ids: Tensor, attention_mask: Tensor | None) -> None:
    """input_ids (B, T) with B, T >= 1; attention_mask None or (B, T). (A row of padding only is generated from, as
    Hugging Face does.)"""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        fail("input_ids", shape, "a tensor of token ids of shape (batch, length)")
    if 0 in input_ids.shape:
        fail(
            "input_ids",
            tuple(input_ids.shape),
            "a shape (batch, length) with at least one prompt of at least one "
            "token (a decoder continues its prompt: start it with the bos token)",
        )
    if attention_mask is None:
        return
    if not isinstance(attention_mask, Tensor) or tuple(attention_mask.shape) != tuple(input_ids.shape):
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        fail("attention_mask", shape, f"None or a tensor of input_ids' shape {tuple(input_ids.shape)}")


def _check_prompt_positions(position_ids: Tensor | None, input_ids: Tensor, arch: str) -> None:
    """position_ids None, or the prompt's (B, T) or (3, B, T) integer ids, for a decoder."""
    if position_ids is None:
        return
    if arch != "decoder":
        fail("position_ids", "given", "None for an encoder-decoder (its decoder counts its own positions)")
    shapes = (tuple(input_ids.shape), (3, *input_ids.shape))
    if not isinstance(position_ids, Tensor) or tuple(position_ids.shape) not in shapes:
        shape = tuple(position_ids.shape) if isinstance(position_ids, Tensor) else type(position_ids).__name__
        fail("position_ids", shape, f"None or integer ids of shape {shapes[0]} or, with axes (M-RoPE), {shapes[1]}")
    if position_ids.is_floating_point() or position_ids.is_complex() or position_ids.dtype == torch.bool:
        fail("position_ids", position_ids.dtype, "integer positions")


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
    eos_token_id: EosIds = None,
    pad_token_id: int | None = None,
    generator: torch.Generator | None = None,
    num_beams: int = 1,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    num_return_sequences: int = 1,
    return_scores: bool = False,
    min_new_tokens: int = 0,
    position_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Generate up to `max_new_tokens` tokens after input_ids (B, T).

    Decoder: returns (B', T + new), the prompt followed by the continuation;
    prompts may be left-padded (attention_mask (B, T) 0 on the pads). Encoder-decoder:
    input_ids (B, S) is the source, with its padding mask attention_mask (B, S),
    and the result (B', 1 + new) starts with decoder_start_token_id.
    B' = B * num_return_sequences, the sequences of one prompt next to each other.

    eos_token_id (default `Config.eos_token_id`; an int or a list): a row ends
    at any of them and is then padded with pad_token_id (default
    `Config.pad_token_id`, then the first eos id); new is the longest row.
    Eos ids outside the vocabulary never end a row (as in Hugging Face). A
    `ValueError` names decoder_start_token_id (encoder-decoder) or the pad id (when
    a row can end) if it is not a token id in [0, vocab_size).
    do_sample: sample from softmax(logits / temperature) after the top_k / top_p
    filters, drawing from `generator`; else greedy. num_beams > 1: beam search with
    HF's `length_penalty` (score = sum of log-probs / generated length ** length_penalty)
    and `early_stopping` (True, False or "never"); see `posformer.generation.beam_search`.

    min_new_tokens: no eos id can be chosen before this many new tokens (HF's
    `min_new_tokens`); scores still use the unmasked log-probs.

    position_ids (decoder): the prompt's, (B, T), or with axes (3, B, T) for M-RoPE (`positions.mrope`: text and
    images), whose new tokens then go on from the prompt's largest position + 1 on every axis, as Hugging Face's
    rope deltas do; None: each row's real tokens counted from 0 (left padding skipped).

    return_scores: return (sequences, scores) with scores (B',) float32. Greedy and
    sampling: the sum of the chosen tokens' log-probs (log_softmax of the float32
    logits, before temperature and filters) up to and including the eos. Beam search:
    the finished hypothesis' score, sum of log-probs / new_tokens ** length_penalty.
    """
    cfg = model.cfg
    if cfg.arch == "encoder":
        raise ValueError("generate() needs a decoder: Config.arch is 'encoder'")
    if cfg.head_kind not in ("causal_lm", "seq2seq_lm"):
        raise ValueError(f"generate() needs a language-model head: Config.head is {cfg.head_kind!r}")
    _check_options(
        max_new_tokens,
        do_sample,
        temperature,
        top_k,
        top_p,
        num_beams,
        num_return_sequences,
        length_penalty,
        early_stopping,
        min_new_tokens,
        return_scores,
        generator,
    )
    _check_prompt(input_ids, attention_mask)
    _check_prompt_positions(position_ids, input_ids, cfg.arch)
    _check_length(max_new_tokens, input_ids.shape[1] if cfg.arch == "decoder" else 1)
    eos = _eos_ids(eos_token_id, cfg.eos_token_id, cfg.vocab_size)
    pad = _pad_id(pad_token_id, cfg, eos)
    was_training = model.training
    model.eval()
    try:
        if do_sample and num_return_sequences > 1:
            input_ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
            if attention_mask is not None:
                attention_mask = attention_mask.repeat_interleave(num_return_sequences, dim=0)
            if position_ids is not None:
                position_ids = position_ids.repeat_interleave(num_return_sequences, dim=position_ids.dim() - 2)
        state = Decoding(model, input_ids, attention_mask, max_new_tokens, position_ids)
        if max_new_tokens == 0:
            tokens = state.tokens.repeat_interleave(num_return_sequences if num_beams > 1 else 1, dim=0)
            scores = torch.zeros(tokens.shape[0], device=tokens.device)
        elif num_beams > 1:
            tokens, scores = beam_search(
                state,
                max_new_tokens,
                num_beams,
                eos,
                pad,
                length_penalty,
                early_stopping,
                num_return_sequences,
                min_new_tokens,
            )
        else:
            tokens, scores = _greedy_or_sample(
                state, max_new_tokens, eos, pad, do_sample, temperature, top_k, top_p, generator, min_new_tokens
            )
        return (tokens, scores) if return_scores else tokens
    finally:
        model.train(was_training)


def _greedy_or_sample(
    state: Decoding,
    max_new_tokens: int,
    eos: list[int],
    pad: int | None,
    do_sample: bool,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
    min_new_tokens: int = 0,
) -> tuple[Tensor, Tensor]:
    """One token per row and step; a row that emitted an eos id gets `pad` afterwards.

    Before `min_new_tokens` tokens the eos ids cannot be chosen; the score of a chosen
    token is its log-prob under the unmasked logits.

    Returns the sequences (B, T + new) and their log-prob sums up to the eos (B,).
    """
    tokens = state.tokens
    eos_ids = torch.tensor(eos, dtype=torch.long, device=tokens.device)
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    scores = torch.zeros(tokens.shape[0], device=tokens.device)
    logits = state.start()
    for step in range(max_new_tokens):
        allowed = logits.index_fill(-1, eos_ids, float("-inf")) if step < min_new_tokens and eos else logits
        new = next_token(allowed, do_sample, temperature, top_k, top_p, generator)
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, new[:, None]).squeeze(-1)
        scores += chosen.masked_fill(done, 0.0)
        if eos:
            new = new.masked_fill(done, pad)
            done |= torch.isin(new, eos_ids)
        tokens = torch.cat((tokens, new[:, None]), dim=1)
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        logits = state.step(new)
    return tokens, scores
