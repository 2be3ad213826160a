"""The checks `generate` runs before any compute: each bad argument is a ValueError naming it (or, for a value a
generation config gave, `model.generation_config.<name>`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posformer.generation.generation_config import GenerationConfig
from posformer.utils.validation import LARGEST_INT, check_int, check_number, fail


def check_settings(settings: GenerationConfig, labels: dict[str, str]) -> None:
    """The merged settings (`generation_config.resolve`), each named by its label; then how they combine."""
    s, name = settings, labels.__getitem__
    for field, minimum in (("max_new_tokens", 0), ("max_length", 1), ("min_new_tokens", 0), ("min_length", 0)):
        if getattr(s, field) is not None:
            check_int(name(field), getattr(s, field), minimum=minimum)
    check_int(name("num_beams"), s.num_beams)
    check_int(name("num_return_sequences"), s.num_return_sequences)
    check_int(name("no_repeat_ngram_size"), s.no_repeat_ngram_size, minimum=0)
    for field in ("do_sample", "return_dict_in_generate", "output_scores", "output_logits"):
        if not isinstance(getattr(s, field), bool):
            fail(name(field), getattr(s, field), "True or False")
    if not (isinstance(s.early_stopping, bool) or s.early_stopping == "never"):
        fail(name("early_stopping"), s.early_stopping, "True, False or 'never'")
    check_number(name("length_penalty"), s.length_penalty)
    check_number(name("repetition_penalty"), s.repetition_penalty, low=0, low_open=True)
    if s.num_beams > 1:
        if s.do_sample:
            raise ValueError(
                "do_sample=True with num_beams > 1 (beam sampling) is not supported: "
                "use num_beams=1 to sample or do_sample=False for beam search"
            )
        if s.num_return_sequences > s.num_beams:
            raise ValueError(f"num_return_sequences={s.num_return_sequences} must be <= num_beams={s.num_beams}")
    elif not s.do_sample and s.num_return_sequences != 1:
        raise ValueError(
            f"greedy decoding returns one sequence per prompt, got num_return_sequences="
            f"{s.num_return_sequences}: use num_beams >= num_return_sequences or do_sample=True"
        )
    if s.do_sample:
        check_number(name("temperature"), s.temperature, low=0, low_open=True)
        if s.top_k is not None:
            check_int(name("top_k"), s.top_k, minimum=0)
        if s.top_p is not None:
            check_number(name("top_p"), s.top_p, low=0, high=1, low_open=True)


def check_extras(return_scores: Any, generator: Any, streamer: Any, num_beams: int, return_dict: bool) -> None:
    """The arguments a generation config never holds: return_scores, generator, streamer."""
    if not isinstance(return_scores, bool):
        fail("return_scores", return_scores, "True or False")
    if return_scores and return_dict:
        raise ValueError(
            "return_scores=True and return_dict_in_generate=True: choose one (the dict's sequences_scores and "
            "scores, with output_scores=True, hold the scores)"
        )
    if generator is not None and not isinstance(generator, torch.Generator):
        fail("generator", generator, "None or a torch.Generator")
    if streamer is not None:
        if not all(callable(getattr(streamer, method, None)) for method in ("put", "end")):
            fail("streamer", type(streamer).__name__, "an object with put(token_ids) and end(), as TextStreamer")
        if num_beams > 1:
            raise ValueError("streamer cannot be used with beam search (as in transformers): use num_beams=1")


def check_length(max_new_tokens: int, prefix: int) -> None:
    """The `prefix` tokens the decoder starts from (the prompt, or the decoder start token) and `max_new_tokens`
    fit in the positions a cache holds (2**31 - 1)."""
    if max_new_tokens > LARGEST_INT - prefix:
        fail(
            "max_new_tokens",
            max_new_tokens,
            f"an integer in [0, {LARGEST_INT - prefix}]: the {prefix} tokens before the new ones and these must fit "
            "in 2**31 - 1 positions",
        )


def check_prompt(input_ids: Tensor, attention_mask: Tensor | None) -> None:
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


def check_prompt_positions(position_ids: Tensor | None, input_ids: Tensor, arch: str) -> None:
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
