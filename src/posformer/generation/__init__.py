"""Autoregressive generation over the KV cache.

| module | what |
|---|---|
| generate | `generate`, the one entry point (`Transformer.generate` forwards to it): checks, greedy and sampling |
| decoding | `Decoding`, the state of a batch being decoded: model, cache, mask, positions |
| sampling | the next token from the logits: greedy, temperature, top-k, top-p |
| beam_search | beam search over a `Decoding` |
"""

from posformer.generation.decoding import Decoding
from posformer.generation.generate import generate
from posformer.generation.sampling import filter_logits, next_token

__all__ = ["Decoding", "filter_logits", "generate", "next_token"]
