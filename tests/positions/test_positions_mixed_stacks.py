"""The conformance suite over mixed stacks (`Config.layer_types`): every registered encoding shares a stack with
NoPE layers, layers of another encoding and, in a decoder, sliding-window layers.

An encoding of the attention layers is the layer type "x" (on a RoPE stack); one that embeds the tokens is the
stack's own encoding, and the layer type "x" is RoPE with another base. A newly registered encoding is covered
here with no new test code.
"""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.ops.masks import build_mask
from posformer.positions.contract import PositionEncoding
from tests.positions.test_positions_conformance import (
    TRAIN_LENGTH,
    assert_sdpa_equals_eager,
    cached_left_padded_steps,
    config,
)

ARCHS = ["encoder", "decoder"]
CASES = [(name, arch) for arch in ARCHS for name in pf.positions.usable(arch)]
WINDOW = 3
TEMPERATURE = {"scale": 0.5, "floor_size": 2}  # log-n query scaling on the NoPE layer, as Llama 4 has it


def embeds(name: str) -> bool:
    return pf.positions.get(name).embed is not PositionEncoding.embed


def mixed(name: str, arch: str, **overrides) -> pf.Config:
    """Four layers: x, NoPE with a query temperature, x (a window of 3 in a decoder), and the stack's own
    encoding."""
    own, layer = (
        (name, {"position": "rope", "position_params": {"theta": 100.0}})
        if embeds(name)
        else ("rope", {"position": name})
    )
    local = {**layer, "sliding_window": WINDOW} if arch == "decoder" else layer
    return config(
        own,
        arch,
        n_layers=4,
        layer_types=["x", "nope", "x_local", "full_attention"],
        layer_settings={"x": layer, "nope": {"position": "none", "query_temperature": TEMPERATURE}, "x_local": local},
        **overrides,
    )


@pytest.mark.parametrize("name, arch", CASES)
def test_each_layer_gets_its_own_encoding_and_window(name: str, arch: str) -> None:
    model = pf.Transformer(mixed(name, arch))
    stack = getattr(model, arch)
    found = [(block.attn.position.name, block.reach.window) for block in stack.layers]
    x = "rope" if embeds(name) else name
    window = WINDOW if arch == "decoder" else None
    assert found == [(x, None), ("none", None), (x, window), (model.cfg.position, None)]
    assert stack.layers[0].attn.position is stack.layers[2].attn.position  # one encoding per position setting
    distinct = 3 if embeds(name) else len({"rope", name, "none"})  # the stack's own, x's and NoPE's settings
    assert len({id(e) for e in stack.encodings}) == len(stack.encodings) == distinct


@pytest.mark.parametrize("name, arch", CASES)
def test_gradients_reach_every_encoding_of_the_stack(name: str, arch: str) -> None:
    model = pf.Transformer(mixed(name, arch))
    ids = torch.randint(1, 53, (2, 7))
    out = model(ids, labels=ids)
    out.loss.backward()
    for encoding in getattr(model, arch).encodings:
        for pname, param in encoding.named_parameters():
            assert param.grad is not None and param.grad.abs().sum() > 0, f"{name}: no gradient reaches {pname}"


@pytest.mark.parametrize("name", pf.positions.names())
def test_kv_cached_decoding_of_a_left_padded_batch_equals_full_pass(name: str) -> None:
    """The prefix, then one token per step, past the window, with a left-padded row and GQA."""
    model = pf.Transformer(mixed(name, "decoder", n_kv_heads=2)).eval()
    ids = torch.randint(1, 53, (2, 10))
    mask = torch.tensor([[0] * 3 + [1] * 7, [1] * 10])
    ids = ids.masked_fill(mask == 0, 0)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(cached_left_padded_steps(model, ids, mask, pos, prefix=5), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, arch", CASES)
def test_left_padding_with_position_ids_equals_each_row_alone(name: str, arch: str) -> None:
    model = pf.Transformer(mixed(name, arch)).eval()
    short, long = torch.randint(1, 53, (1, 4)), torch.randint(1, 53, (1, 7))
    batch = torch.cat((torch.cat((torch.zeros(1, 3, dtype=torch.long), short), 1), long))
    mask = torch.tensor([[0] * 3 + [1] * 4, [1] * 7])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    padded = model(batch, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(padded[0, 3:], model(short).logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded[1], model(long).logits[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, arch", CASES)
def test_sdpa_and_eager_paths_agree(name: str, arch: str) -> None:
    assert_sdpa_equals_eager(
        mixed(name, arch),
        input_ids=torch.randint(1, 53, (2, 7)),
        attention_mask=torch.tensor([[1] * 7, [1] * 5 + [0] * 2]),
    )


@pytest.mark.parametrize("name, arch", CASES)
def test_four_times_the_training_length(name: str, arch: str) -> None:
    model = pf.Transformer(mixed(name, arch)).eval()
    ids = torch.randint(1, 53, (1, 4 * TRAIN_LENGTH))
    if not pf.positions.get(name).extrapolates:
        with pytest.raises(ValueError, match="max_positions"):
            model(ids)
        return
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


@pytest.mark.parametrize("name, arch", [(n, a) for n, a in CASES if not embeds(n)])
def test_a_stack_whose_layers_all_leave_its_encoding_is_a_nope_stack(name: str, arch: str) -> None:
    """Every layer labelled NoPE: the stack's own encoding serves no layer (it is built for none) and the model
    computes what a NoPE model with the same weights computes."""
    nope = pf.Transformer(config("none", arch)).eval()
    cfg = config(name, arch, layer_types=["a", "a"], layer_settings={"a": {"position": "none"}})
    relabelled = pf.Transformer(cfg).eval()
    missing, unexpected = relabelled.load_state_dict(nope.state_dict(), strict=False)
    assert not unexpected and all(key.startswith(f"{arch}.position.") for key in missing)
    ids = torch.randint(1, 53, (2, 7))
    torch.testing.assert_close(relabelled(ids).logits, nope(ids).logits, atol=0, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_nope_layer_is_permutation_equivariant(arch: str) -> None:
    """A layer without position information sees a set: without a mask, permuting its inputs permutes its
    outputs; under causal masking, permuting the tokens before the last leaves the last output unchanged.
    The RoPE layer of the same stack does neither (the check has teeth)."""
    model = pf.Transformer(
        config(
            "rope",
            arch,
            n_layers=2,
            layer_types=["nope", "full_attention"],
            layer_settings={"nope": {"position": "none"}},
        )
    ).eval()
    nope, rope = getattr(model, arch).layers
    x = torch.randn(2, 8, 32)
    pos = torch.arange(8).expand(2, 8)
    perm = torch.cat((torch.randperm(7), torch.tensor([7]))) if arch == "decoder" else torch.randperm(8)
    mask = build_mask(None, arch == "decoder", 8, 8, x.dtype, x.device)

    def run(block, h):
        return block(h, mask, pos)[0]

    if arch == "decoder":
        torch.testing.assert_close(run(nope, x[:, perm])[:, -1], run(nope, x)[:, -1])
        assert not torch.allclose(run(rope, x[:, perm])[:, -1], run(rope, x)[:, -1], atol=1e-4)
    else:
        torch.testing.assert_close(run(nope, x[:, perm]), run(nope, x)[:, perm])
        assert not torch.allclose(run(rope, x[:, perm]), run(rope, x)[:, perm], atol=1e-4)
