"""The context-extension methods of `posformer extend`: the RoPE model's position settings that read target_len
tokens, with its weights unchanged.

RoPE scalings (position "rope", a `scaling`; s = target_len / trained_len), fine-tuned after the eval-time row:
none         RoPE unchanged: plain extrapolation (fine-tuned, the "direct fine-tuning" baseline of Chen et al. 2023)
pi           position interpolation (Chen et al. 2023): every frequency / s
ntk          NTK-aware scaling (bloc97 2023): theta * s^(d/(d-2))
yarn         YaRN (Peng et al. 2023): NTK-by-parts ramp and the 0.1 ln s + 1 attention factor
dynyarn      dynamic YaRN (Peng et al. 2023, section 3.3): YaRN with s = max(1, l / trained_len) for each
             forward's length l (RoPE unchanged up to trained_len). Fine-tuned ("+ft") as the paper uses it: YaRN
             fine-tuned at s (at target_len the dynamic factor is s, so the fine-tune is yarn's), then scaled
             dynamically, s = max(target_len, l) / trained_len (the paper code's `finetuned=True`,
             github.com/jquesnelle/yarn)
longrope     LongRoPE (Ding et al. 2024): one searched factor per rotated pair (`longrope.search_long_factors`),
             used past trained_len; below it RoPE is unchanged (short factors 1)

RoPE with a piecewise (query, key) distance (position of the method's name, `positions.piecewise`), training-free
as their papers use them: an eval-time row only. Each encoding's `for_lengths` chooses its parameters:
rerope       ReRoPE (Su 2023): window w = trained_len / 4 (the reference README's w = 1024 at 4096)
self_extend  Self-Extend (Jin et al. 2024): W = trained_len / 4 and the smallest group G with
             W + (target_len - W) / G < trained_len / 2 (the reference README's empirical rule, cautious end)
dual_chunk   dual chunk attention (An et al. 2024): chunk_size = 3 trained_len / 4, local_size = trained_len / 8
             (ChunkLlama's `replace_with_chunkllama`)
streaming    StreamingLLM (Xiao et al. 2024): 4 sinks and a window of trained_len - 4 (a cache of trained_len)
window       StreamingLLM's baseline, window attention: the encoding `streaming` without sinks, a window of trained_len

RoPE dropped (position "none" on every layer, every weight kept), then recalibrated at trained_len:
drope        DroPE (Gelberg et al. 2025, github.com/SakanaAI/DroPE): its eval-time row is the trained weights
             without RoPE; its trained row ("+ft") is recalibrated at trained_len (`extension.drope`) and read at
             every length with no scaling
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posformer.model import Transformer

SCALINGS = ("none", "pi", "ntk", "yarn", "dynyarn", "longrope")
PIECEWISE = ("rerope", "self_extend", "dual_chunk", "streaming", "window")
DROPPED = ("drope",)  # RoPE removed, then recalibrated at trained_len
ENCODING_OF = {"window": "streaming", "drope": "none"}  # the other piecewise methods are the name of their encoding
METHODS = SCALINGS + PIECEWISE + DROPPED
FINE_TUNED = SCALINGS + DROPPED  # the methods whose papers train (DroPE: at trained_len); the others training-free
SCALING_OF = {"pi": "linear", "ntk": "ntk", "yarn": "yarn"}


def check_rope_model(model: Transformer, where: str, methods: tuple[str, ...] | list[str] = METHODS) -> None:
    """Raise ValueError unless `model` uses RoPE everywhere without a scaling yet (what `methods` extend)."""
    cfg = model.cfg
    if cfg.arch != "decoder":
        raise ValueError(f"extend: {where} is a {cfg.arch!r} model; extend fine-tunes a causal LM (arch 'decoder')")
    if cfg.position != "rope" or cfg.layer_types:
        raise ValueError(
            f"extend: {where} uses position {cfg.position!r}"
            + (" with per-layer settings" if cfg.layer_types else "")
            + f"; the context-extension methods ({', '.join(methods)}) rescale, remap or drop RoPE: give a run "
            "whose model has position 'rope'"
        )
    if cfg.position_params.get("scaling") is not None:
        raise ValueError(
            f"extend: {where} already has the RoPE scaling {cfg.position_params['scaling']}; give the "
            "run it was trained as (no scaling)"
        )


def longrope_scaling(long_factor: list[float], target_len: int, trained_len: int) -> dict[str, Any]:
    """The `scaling` dict of LongRoPE with these long factors; short factors 1 (RoPE as trained below trained_len)."""
    return {
        "type": "longrope",
        "factor": target_len / trained_len,
        "short_factor": [1.0] * len(long_factor),
        "long_factor": [float(v) for v in long_factor],
        "original_max_position_embeddings": trained_len,
    }


def position_of(method: str) -> str:
    """The position encoding of a model extended by `method`: "rope" for a scaling, "none" for drope, else the
    method's own."""
    return "rope" if method in SCALINGS else ENCODING_OF.get(method, method)


def extended_params(
    model: Transformer,
    method: str,
    target_len: int,
    trained_len: int,
    long_factor: list[float] | None = None,
    fine_tuned: bool = False,
) -> dict[str, Any]:
    """The position_params, for `position_of(method)`, of the model extended by `method` from trained_len to
    target_len (longrope: `long_factor`); `fine_tuned`: those of the method's fine-tune, which differ from its
    eval-time ones for dynyarn only. Raises ValueError naming the method when the model is not a rope one."""
    from posformer import positions  # here, not at the top: `posformer extend --help` reads METHODS without torch

    if model.cfg.position != "rope":
        raise ValueError(
            f"extend: method {method!r} extends RoPE, and this model uses position {model.cfg.position!r}: "
            "give a model with position 'rope'"
        )
    params = dict(model.cfg.position_params)
    if method in PIECEWISE:
        encoding = positions.get(position_of(method))
        if method == "window":
            return dict(encoding.resolve_params({**params, "sinks": 0, "window": trained_len}))
        return dict(encoding.for_lengths(params, target_len, trained_len))
    if method == "none":
        return params
    if method in DROPPED:
        return {}  # position "none" has no parameters: RoPE's are dropped with it
    if method == "dynyarn":  # the training-free form reads any length: its factor comes from the length alone
        return positions.Rotary.rescaled_params(
            params, "dynamic_yarn", target_len if fine_tuned else trained_len, trained_len
        )
    if method == "longrope":
        if long_factor is None:
            raise ValueError("extend: longrope needs its searched long factors")
        return {**params, "scaling": longrope_scaling(long_factor, target_len, trained_len)}
    if method not in SCALING_OF:
        raise ValueError(f"extend: method={method!r} is invalid: expected one of {', '.join(METHODS)}")
    return positions.Rotary.rescaled_params(params, SCALING_OF[method], target_len, trained_len)


def with_params(
    model: Transformer, params: dict[str, Any], max_positions: int, position: str | None = None
) -> Transformer:
    """A new model with `model`'s weights (copied) and these position_params, of `position` (None: the model's);
    the same device and dtype."""
    from posformer.model import Transformer

    cfg = model.cfg.replace(
        position=position or model.cfg.position,
        position_params=params,
        max_positions=max(max_positions, model.cfg.max_positions),
    )
    parameter = next(model.parameters())
    extended = Transformer(cfg).to(device=parameter.device, dtype=parameter.dtype)
    extended.load_state_dict(model.state_dict())
    return extended.train(model.training)
