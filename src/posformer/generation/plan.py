"""`Plan`: one decoding, its settings resolved and checked by `generate`; what the decoding loops read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from posformer.generation.logits_processors import LogitsProcessors
from posformer.generation.outputs import Recorder
from posformer.generation.stopping import StopStrings


@dataclass
class Plan:
    """max_new_tokens >= 1; eos: the ids that end a row (may be empty); pad: what fills a row after its end;
    processors: the rules applied to every step's scores; recorder: the per-step outputs asked for; stop: the stop
    strings, if any; sampling (do_sample, temperature, top_k, top_p, generator) for greedy / sampling; beam search's
    own settings; streamer: an object with put(tokens) and end() (greedy and sampling only)."""

    max_new_tokens: int
    eos: list[int]
    pad: int | None
    processors: LogitsProcessors
    recorder: Recorder
    stop: StopStrings | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    streamer: Any = None
