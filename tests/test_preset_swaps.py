"""Swap one part, keep everything else: every preset x every registered encoding x every arch.

Each pair either builds a model that trains (finite loss, a gradient on every
parameter that takes part) and decodes with the KV cache exactly as a full pass
does, or is refused up front by a ValueError that names the encoding and the
field it cannot live with. The set of refused pairs is listed here, so a pair
that silently stops working fails this test.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import posformer as pf
from posformer.config.checks import ARCHS
from posformer.modules.cache import Cache
from posformer.presets import PRESETS, preset_names

# Small sizes only; every other field (norm, activation, biases, special ids, ...) is the preset's own.
SMALL = dict(vocab_size=67, d_model=32, n_layers=2, n_heads=4, d_head=None, d_ff=64, max_positions=64)
# (preset, position, arch) -> what the refusal names: encodings of causal attention only, in bidirectional stacks
CANNOT_EXIST: dict[tuple[str, str, str], str] = {
    (preset, name, arch): "arch='decoder' only"
    for preset in preset_names()
    for arch in ARCHS
    for name in sorted(set(pf.positions.names()) - set(pf.positions.usable(arch)))
}
PROMPT, STEPS = 5, 3


def small_preset(preset: str, position: str, arch: str) -> pf.Config:
    fields = dict(SMALL, position=position, arch=arch)
    if "n_decoder_layers" in PRESETS[preset]:
        fields["n_decoder_layers"] = 2
    if arch == "encoder_decoder" and PRESETS[preset].get("decoder_start_token_id") is None:
        fields["decoder_start_token_id"] = 0
    return pf.Config.preset(preset, **fields)


def cached_equals_full(model: pf.Transformer, ids: torch.Tensor, src: torch.Tensor | None) -> None:
    """Decode ids (B, T) one token at a time over the cache and compare with one full pass."""
    extra = {} if src is None else {"decoder_input_ids": ids}
    inputs = ids if src is None else src
    full = model(inputs, **extra).logits
    cache = Cache(len(model.decoder.layers))
    start = {} if src is None else {"decoder_input_ids": ids[:, :PROMPT]}
    steps = [model(inputs if src is not None else ids[:, :PROMPT], cache=cache, **start).logits]
    for t in range(PROMPT, ids.shape[1]):
        step_ids = ids[:, t : t + 1]
        step = (
            model(inputs, decoder_input_ids=step_ids, cache=cache) if src is not None else model(step_ids, cache=cache)
        )
        steps.append(step.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("position", pf.positions.names())
@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_takes_every_encoding(preset: str, position: str, arch: str) -> None:
    if (preset, position, arch) in CANNOT_EXIST:
        with pytest.raises(ValueError, match=position) as err:
            small_preset(preset, position, arch)
        assert CANNOT_EXIST[(preset, position, arch)] in str(err.value)
        return
    cfg = small_preset(preset, position, arch)
    reference = pf.Config.preset(preset)
    kept = (
        {f.name for f in dataclasses.fields(cfg)}
        - set(SMALL)
        - {"position", "position_params", "arch", "n_decoder_layers", "decoder_start_token_id"}
    )
    assert {k: getattr(cfg, k) for k in kept} == {k: getattr(reference, k) for k in kept}
    assert dict(cfg.position_params) == dict(pf.positions.get(position).defaults)

    model = pf.Transformer(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, PROMPT + STEPS))
    src = torch.randint(0, cfg.vocab_size, (2, 6)) if arch == "encoder_decoder" else None
    if cfg.head_kind == "masked_lm":
        out = model(ids, labels=ids)
    elif arch == "encoder_decoder":
        out = model(src, labels=ids)
    else:
        out = model(ids, labels=ids)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert model.embed_tokens.weight.grad is not None and torch.isfinite(model.embed_tokens.weight.grad).all()

    if arch != "encoder":
        model.eval()
        with torch.no_grad():
            cached_equals_full(model, ids, src)
