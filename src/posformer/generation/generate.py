"""`generate`: autoregressive generation over the KV cache, greedy, sampling (temperature, top-k, top-p) or beam search.

`generate` is the one entry point (`Transformer.generate` is this function, so `help(model.generate)` shows it).
The conventions follow Hugging Face `generate` (transformers 4.57.6 and 5.x), token for token for greedy and beam
search, with each of the options below:

- decoder prompts may be left-padded: positions count from each row's first real token;
- an encoder-decoder model starts its output with `decoder_start_token_id`;
- a row stops at an end-of-sequence token (or a stop string) and is then padded with `pad_token_id`
  (falling back to the first eos id), and generation stops when every row has stopped;
- an eos id outside the vocabulary (a Hugging Face config may carry one, e.g. GPT-2's
  50256 in a tiny test model) can never be generated, so it never ends a row: it is dropped;
- the model's `generation_config` (read from generation_config.json) gives the defaults; an argument wins.

The loops live in `greedy` and `beam_search`; the scores' processing in `logits_processors`; how rows end in
`stopping`; the checks in `checks`.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch
from torch import Tensor

from posformer.generation.beam_search import beam_search
from posformer.generation.checks import check_extras, check_length, check_prompt, check_prompt_positions, check_settings
from posformer.generation.decoding import Decoding
from posformer.generation.generation_config import DEFAULT_NEW_TOKENS, GenerationConfig, resolve
from posformer.generation.greedy import greedy_or_sample
from posformer.generation.logits_processors import LogitsProcessors
from posformer.generation.outputs import GenerateOutput, Recorder
from posformer.generation.plan import Plan
from posformer.generation.stopping import EosIds, StopStrings, eos_ids, pad_id
from posformer.utils.validation import fail

log = logging.getLogger(__name__)


@torch.no_grad()
def generate(
    model,
    input_ids: Tensor,
    max_new_tokens: int | None = None,
    attention_mask: Tensor | None = None,
    do_sample: bool | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: EosIds = None,
    pad_token_id: int | None = None,
    generator: torch.Generator | None = None,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    early_stopping: bool | str | None = None,
    num_return_sequences: int | None = None,
    return_scores: bool = False,
    min_new_tokens: int | None = None,
    position_ids: Tensor | None = None,
    *,
    max_length: int | None = None,
    min_length: int | None = None,
    repetition_penalty: float | None = None,
    no_repeat_ngram_size: int | None = None,
    stop_strings: str | Sequence[str] | None = None,
    tokenizer: Any = None,
    streamer: Any = None,
    return_dict_in_generate: bool | None = None,
    output_scores: bool | None = None,
    output_logits: bool | None = None,
    generation_config: GenerationConfig | None = None,
) -> Tensor | tuple[Tensor, Tensor] | GenerateOutput:
    """Generate up to `max_new_tokens` tokens after input_ids (B, T).

    Decoder: returns (B', T + new), the prompt followed by the continuation;
    prompts may be left-padded (attention_mask (B, T) 0 on the pads). Encoder-decoder:
    input_ids (B, S) is the source, with its padding mask attention_mask (B, S),
    and the result (B', 1 + new) starts with decoder_start_token_id.
    B' = B * num_return_sequences, the sequences of one prompt next to each other.

    Defaults: an argument left None takes the value `generation_config` sets, else the one `model.generation_config`
    (read from the model directory's generation_config.json) sets, else posformer's default, given here in brackets.

    max_new_tokens [32]; max_length: the prefix (the prompt, or the decoder start token) plus the new tokens, as
    Hugging Face counts it, used when no max_new_tokens is set. min_new_tokens [0] (or min_length, counted as
    max_length is): no eos id can be chosen before this many new tokens.
    eos_token_id [Config.eos_token_id]: an int or a list; a row ends at any of them and is then padded with
    pad_token_id [Config.pad_token_id, then the first eos id]; new is the longest row. Eos ids outside the
    vocabulary never end a row (as in Hugging Face). A `ValueError` names decoder_start_token_id (encoder-decoder)
    or the pad id (when a row can end) if it is not a token id in [0, vocab_size).
    stop_strings: a string or a list; a row ends once its text ends in one (`stopping.StopStrings`, read with
    `tokenizer`, which they need) and is padded after it, but for a model without any eos id (not even an empty
    list), whose rows go on until every row has ended (as in Hugging Face).
    do_sample [False]: sample from softmax(scores / temperature [1.0]) after the top_k / top_p filters [none],
    drawing from `generator`; else greedy. num_beams [1] > 1: beam search with HF's `length_penalty` [1.0]
    (score = sum of log-probs / generated length ** length_penalty) and `early_stopping` [False] (True, False or
    "never"); see `posformer.generation.beam_search`. num_return_sequences [1].
    repetition_penalty [1.0]: CTRL's penalty on every token already in the sequence (the prompt included);
    no_repeat_ngram_size [0]: no n-gram of that many tokens twice (`logits_processors`).

    position_ids (decoder): the prompt's, (B, T), or with axes (3, B, T) for M-RoPE (`positions.mrope`: text and
    images), whose new tokens then go on from the prompt's largest position + 1 on every axis, as Hugging Face's
    rope deltas do; None: each row's real tokens counted from 0 (left padding skipped).

    streamer (greedy and sampling): an object with put(token_ids) and end(), as transformers' TextStreamer: it gets
    the prefix (B', T), then each step's new tokens (B',), then end().
    return_dict_in_generate [False]: return a `GenerateOutput` (sequences; with output_scores [False] each step's
    scores and, for beam search, sequences_scores; with output_logits [False] each step's raw logits), as Hugging
    Face does. return_scores: return (sequences, scores) with scores (B',) float32. Greedy and sampling: the sum of
    the chosen tokens' log-probs (log_softmax of the float32 logits, before any processing) up to and including
    the end. Beam search: the finished hypothesis' score, sum of log-probs / new_tokens ** length_penalty.
    """
    cfg = model.cfg
    if cfg.arch == "encoder":
        raise ValueError("generate() needs a decoder: Config.arch is 'encoder'")
    if cfg.head_kind not in ("causal_lm", "seq2seq_lm"):
        raise ValueError(f"generate() needs a language-model head: Config.head is {cfg.head_kind!r}")
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        fail("generation_config", type(generation_config).__name__, "None or a posformer GenerationConfig")
    given = {name: value for name, value in locals().items() if name in GenerationConfig.names()}  # the arguments
    s, labels = resolve(
        given,
        [
            ("generation_config", generation_config),
            ("model.generation_config", getattr(model, "generation_config", None)),
        ],
    )
    check_settings(s, labels)
    check_extras(return_scores, generator, streamer, s.num_beams, s.return_dict_in_generate)
    check_prompt(input_ids, attention_mask)
    check_prompt_positions(position_ids, input_ids, cfg.arch)
    prefix = input_ids.shape[1] if cfg.arch == "decoder" else 1
    new_tokens = _new_tokens(s, labels, prefix)
    check_length(new_tokens, prefix)
    eos_setting = cfg.eos_token_id if s.eos_token_id is None else s.eos_token_id
    eos = eos_ids(eos_setting, cfg.vocab_size)
    stop = None if s.stop_strings is None else StopStrings(s.stop_strings, tokenizer, labels["stop_strings"])
    least = s.min_new_tokens if s.min_new_tokens is not None else max(0, s.min_length - prefix)
    plan = Plan(
        max_new_tokens=new_tokens,
        eos=eos,
        pad=pad_id(s.pad_token_id, cfg, eos, eos_setting is not None, can_end=bool(eos) or stop is not None),
        processors=LogitsProcessors(s.repetition_penalty, s.no_repeat_ngram_size, eos, least),
        recorder=Recorder(s.return_dict_in_generate and s.output_scores, s.return_dict_in_generate and s.output_logits),
        stop=stop,
        **{k: getattr(s, k) for k in ("do_sample", "temperature", "top_k", "top_p", "num_beams", "length_penalty")},
        early_stopping=s.early_stopping,
        num_return_sequences=s.num_return_sequences,
        generator=generator,
        streamer=streamer,
    )
    was_training = model.training
    model.eval()
    try:
        return _decode(model, plan, input_ids, attention_mask, position_ids, return_scores, s.return_dict_in_generate)
    finally:
        model.train(was_training)


def _new_tokens(settings: GenerationConfig, labels: dict[str, str], prefix: int) -> int:
    """max_new_tokens, else max_length - prefix (which must leave one new token at least), else 32."""
    if settings.max_new_tokens is not None:
        return settings.max_new_tokens
    if settings.max_length is None:
        return DEFAULT_NEW_TOKENS
    if settings.max_length <= prefix:
        fail(
            labels["max_length"],
            settings.max_length,
            f"more than the {prefix} tokens generation starts from (it counts them): set max_new_tokens instead",
        )
    return settings.max_length - prefix


def _decode(
    model,
    plan: Plan,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    position_ids: Tensor | None,
    return_scores: bool,
    return_dict: bool,
) -> Tensor | tuple[Tensor, Tensor] | GenerateOutput:
    """Run the plan's loop and shape what it returns (the checks are done)."""
    copies = plan.num_return_sequences
    if plan.do_sample and copies > 1:
        input_ids = input_ids.repeat_interleave(copies, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(copies, dim=0)
        if position_ids is not None:
            position_ids = position_ids.repeat_interleave(copies, dim=position_ids.dim() - 2)
    state = Decoding(model, input_ids, attention_mask, plan.max_new_tokens, position_ids)
    if attention_mask is not None and model.cfg.arch == "decoder":  # left padding: no repetition to penalize
        plan.processors.padding = (attention_mask != 0).int().argmax(dim=1)
    beam = {}
    if plan.max_new_tokens == 0:
        tokens = state.tokens.repeat_interleave(copies if plan.num_beams > 1 else 1, dim=0)
        scores = torch.zeros(tokens.shape[0], device=tokens.device)
        if plan.streamer is not None:
            plan.streamer.put(tokens.cpu())
            plan.streamer.end()
    elif plan.num_beams > 1:
        tokens, scores, indices = beam_search(state, plan)
        with_scores = plan.recorder.scores is not None
        beam = {"sequences_scores": scores if with_scores else None, "beam_indices": indices}
    else:
        tokens, scores = greedy_or_sample(state, plan)
    if return_dict:
        return plan.recorder.output(tokens, **beam)
    return (tokens, scores) if return_scores else tokens
