"""Autoregressive generation over the KV cache.

| module | what |
|---|---|
| generate | `generate`, the one entry point (`Transformer.generate` is it): settings resolved, plan built, loop run |
| generation_config | `GenerationConfig`: a model's settings (generation_config.json), merged with the arguments |
| checks | the checks of the arguments, before any compute |
| plan | `Plan`: one decoding's resolved settings, what the loops read |
| decoding | `Decoding`, the state of a batch being decoded: model, cache, mask, positions |
| greedy | greedy decoding and sampling, one token per row and step, with a streamer |
| beam_search | beam search over a `Decoding` |
| logits_processors | repetition penalty, no-repeat n-grams, no eos before the minimum length |
| sampling | the next token from the scores: greedy, temperature, top-k, top-p |
| stopping | eos and pad ids, stop strings |
| outputs | `GenerateOutput` (return_dict_in_generate) and the per-step recorder |
"""

from posformer.generation.decoding import Decoding
from posformer.generation.generate import generate
from posformer.generation.generation_config import GENERATION_CONFIG_FILE, GenerationConfig
from posformer.generation.outputs import GenerateOutput
from posformer.generation.sampling import filter_logits, next_token

__all__ = [
    "GENERATION_CONFIG_FILE",
    "Decoding",
    "GenerateOutput",
    "GenerationConfig",
    "filter_logits",
    "generate",
    "next_token",
]
