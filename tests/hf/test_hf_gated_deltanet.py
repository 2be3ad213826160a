"""Gated DeltaNet against transformers 4.57.6 and 5: the gated delta rule (`posformer.ops.gated_delta_rule`, both
forms) against `torch_chunk_gated_delta_rule` and `torch_recurrent_gated_delta_rule` (the torch fallbacks that
transformers runs without flash-linear-attention), and the whole layer (`posformer.modules.gated_deltanet`) against
a tiny random `Qwen3NextGatedDeltaNet` (both versions) and `Qwen3_5GatedDeltaNet` (5 only), its weights copied
(`posformer.hf.gated_deltanet`), on a padded batch of 150 tokens (three chunks of 64, the last one partial)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

import posformer as pf
from hf_oracle import ORACLE, TOLERANCE, TRANSFORMERS_5, max_diff
from posformer.hf.gated_deltanet import fuse_qwen3_next, gated_deltanet_rules, split_qwen3_next
from posformer.modules.gated_deltanet import GatedDeltaNet, l2_normalized
from posformer.ops.gated_delta_rule import gated_delta_rule_chunked, gated_delta_rule_recurrent
from posformer.ops.masks import build_mask

SIZES = {"key_heads": 2, "value_heads": 4, "key_dim": 8, "value_dim": 6, "conv_kernel": 4, "chunk_size": 64}
HF_SIZES = dict(
    hidden_size=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=6,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    num_hidden_layers=1,
    layer_types=["linear_attention"],
)
LENGTH = 150


def heads_last(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, ...) -> (B, T, H, ...), HF's layout of the rule's inputs."""
    return x.transpose(1, 2)


def rule_inputs(length: int = LENGTH, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 4, length, 8, generator=g) for _ in range(2))
    v = torch.randn(2, 4, length, 6, generator=g)
    decay = -torch.rand(2, 4, length, generator=g) * 0.5
    beta = torch.rand(2, 4, length, generator=g)
    state = torch.randn(2, 4, 8, 6, generator=g)
    return q, k, v, decay, beta, state


@pytest.mark.parametrize("chunk_size", [16, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_the_chunked_rule_equals_hf(chunk_size, with_state):
    """HF L2-normalises q and k in the kernel (`use_qk_l2norm_in_kernel`) and scales q by dk ** -0.5; we hand the
    rule normalised q and k and take its default scale."""
    q, k, v, g, beta, state = rule_inputs()
    state = state if with_state else None
    theirs, their_state = qwen3_next.torch_chunk_gated_delta_rule(
        *(heads_last(t) for t in (q, k, v, g, beta)),
        chunk_size=chunk_size,
        initial_state=state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    ours, our_state = gated_delta_rule_chunked(l2_normalized(q), l2_normalized(k), v, g, beta, chunk_size, state)
    diff = max(float((heads_last(ours) - theirs).abs().max()), float((our_state - their_state).abs().max()))
    assert diff <= TOLERANCE, f"max |diff| = {diff:.3g} > {TOLERANCE} against {ORACLE}"


@pytest.mark.parametrize("length", [1, 5])
def test_the_recurrent_rule_equals_hf(length):
    q, k, v, g, beta, state = rule_inputs(length)
    theirs, their_state = qwen3_next.torch_recurrent_gated_delta_rule(
        *(heads_last(t) for t in (q, k, v, g, beta)),
        initial_state=state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    ours, our_state = gated_delta_rule_recurrent(l2_normalized(q), l2_normalized(k), v, g, beta, state)
    diff = max(float((heads_last(ours) - theirs).abs().max()), float((our_state - their_state).abs().max()))
    assert diff <= TOLERANCE, f"max |diff| = {diff:.3g} > {TOLERANCE} against {ORACLE}"


@torch.no_grad()
def _shown(module: torch.nn.Module) -> torch.nn.Module:
    """HF starts the gated norm at one; make every parameter a random draw, with decays per token near 0.97, so
    that the state carries the tokens of one chunk into the next."""
    torch.manual_seed(1)
    for name, param in module.named_parameters():
        if name == "A_log":
            param.copy_(torch.empty_like(param).uniform_(-4.5, -3.0))
        elif name == "dt_bias" or name.startswith("norm"):
            param.normal_(0.5 if name == "dt_bias" else 1.0, 0.5)
        else:
            param.normal_(0.0, 0.3)
    return module.eval()


def _ours(state: dict[str, torch.Tensor]) -> GatedDeltaNet:
    cfg = pf.Config(
        d_model=32, n_heads=2, norm_eps=1e-6, mixer="gated_deltanet", gated_deltanet=SIZES, max_positions=256
    )
    layer = GatedDeltaNet(cfg).eval()
    layer.load_state_dict(state)
    return layer


def _padded_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """(3, LENGTH, 32) hidden states and their mask: a full row, a right-padded and a left-padded one."""
    x = torch.randn(3, LENGTH, 32, generator=torch.Generator().manual_seed(2))
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, -37:] = 0
    mask[2, :45] = 0
    return x, mask


def _compare(ours: GatedDeltaNet, theirs: torch.nn.Module) -> None:
    x, mask = _padded_inputs()
    with torch.no_grad():
        expected = theirs(x, attention_mask=mask)
        got, _ = ours(x, build_mask(mask.bool(), True, LENGTH, LENGTH, x.dtype, x.device), torch.zeros_like(mask))
    diff = max_diff(got, expected, mask)
    assert diff <= TOLERANCE, f"max |diff| = {diff:.3g} > {TOLERANCE} against {ORACLE}"


def test_the_layer_equals_hf_qwen3_next():
    """Qwen3-Next's fused, per-key-head projections (`in_proj_qkvz`, `in_proj_ba`) split into ours."""
    theirs = _shown(qwen3_next.Qwen3NextGatedDeltaNet(Qwen3NextConfig(**HF_SIZES), layer_idx=0))
    state = theirs.state_dict()
    ours = split_qwen3_next(state.pop("in_proj_qkvz.weight"), state.pop("in_proj_ba.weight"), SIZES)
    _compare(_ours({**state, **ours}), theirs)
    fused = fuse_qwen3_next(ours, SIZES)  # and back: the same tensors
    assert torch.equal(fused[0], theirs.in_proj_qkvz.weight) and torch.equal(fused[1], theirs.in_proj_ba.weight)


@pytest.mark.skipif(not TRANSFORMERS_5, reason="Qwen3.5 is in transformers 5 only")
def test_the_layer_equals_hf_qwen3_5():
    """Qwen3.5's separate projections, under the names we use: the family's rules copy each tensor."""
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    theirs = _shown(Qwen3_5GatedDeltaNet(Qwen3_5TextConfig(**HF_SIZES), layer_idx=0))
    state = {f"linear_attn.{name}": tensor for name, tensor in theirs.state_dict().items()}
    rules = gated_deltanet_rules("attn", "linear_attn")
    ours = {rule.ours.removeprefix("attn."): rule.to_ours([state[t] for t in rule.theirs]) for rule in rules}
    assert len(ours) == len(state)
    _compare(_ours(ours), theirs)
