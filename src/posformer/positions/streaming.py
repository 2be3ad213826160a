"""StreamingLLM (Xiao et al. 2024, "Efficient Streaming Language Models with Attention Sinks"): each query sees
the first `sinks` tokens and its last `window` tokens (itself included), at their positions within that cache.

    key j seen by query i   when j < sinks or i - j < window
    distance(i, j)          i - j                              a window key
                            min(i, sinks + window - 1) - j     a sink: the query sits at the cache's last slot

`sinks = 0` is window attention with cache positions, the baseline the paper shows failing. The full pass hides
the other keys (perplexity over a long text); generation keeps a bounded cache that drops them as they fall out
of the window (`ForgetsKeys`, `modules.cache.Cache`), so streaming decoding holds sinks + window keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from posformer.positions.params import PositionParams
from posformer.positions.piecewise import PiecewiseRotary, Regime, Remap, distances
from posformer.positions.registry import register


@register("streaming")
class Streaming(PiecewiseRotary):
    """RoPE over attention sinks and a window of recent keys, at cache positions (defaults: 4 sinks and a window of
    2000, the reference's `run_streaming_llama.py` start_size and recent_size). Any length."""

    defaults = {**PiecewiseRotary.ROPE_DEFAULTS, "sinks": 4, "window": 2000}

    @classmethod
    def check_method(cls, params: Mapping[str, Any]) -> None:
        cls.require_int(params, "sinks", 0, expected="an integer >= 0 (the first tokens every query sees)")
        cls.require_int(params, "window", 1, expected="an integer >= 1 (the recent tokens, the query included)")

    @classmethod
    def for_lengths(cls, params: Mapping[str, Any], target_len: int, trained_len: int) -> PositionParams:
        """A cache of trained_len: 4 sinks (the paper's; trained_len / 4 below 16) and a window of the rest, so that
        every cache position was trained (any target_len)."""
        sinks = min(4, trained_len // 4)
        return cls.resolve_params({**params, "sinks": sinks, "window": trained_len - sinks})

    def remap(self, q_pos: Tensor, k_pos: Tensor) -> Remap:
        sinks, window = self.params["sinks"], self.params["window"]
        if sinks == 0:
            return Remap(None, [])
        last_slot = q_pos.clamp(max=sinks + window - 1)
        return Remap(None, [Regime((k_pos < sinks)[:, None, :], last_slot)])

    def hidden(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return ~self._seen(distances(q_pos, k_pos), k_pos[:, None, :])

    def keys_seen(self, k_pos: Tensor, q_pos: Tensor) -> Tensor:
        """(B, S): a sink, or within the window of the first query of q_pos (`ForgetsKeys`)."""
        return self._seen(q_pos.min(-1, keepdim=True).values - k_pos, k_pos)

    def _seen(self, distance: Tensor, k_pos: Tensor) -> Tensor:
        return (k_pos < self.params["sinks"]) | (distance < self.params["window"])
