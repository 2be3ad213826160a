"""`posformer extend`'s building blocks: the methods' frequencies against Hugging Face and the papers'
formulas, extension changing only the scaling, the LongRoPE long and short factor searches, and the LongRoPE
stage settings. The CLI end to end: test_extend_cli.py."""

from __future__ import annotations

import math
import re

import pytest
import torch
from transformers import LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import posformer as pf
from posformer.experiments.extension.longrope import search_long_factors, search_short_factors, seed_factors
from posformer.experiments.extension.methods import (
    FINE_TUNED,
    METHODS,
    PIECEWISE,
    check_rope_model,
    extended_params,
    longrope_scaling,
    position_of,
    with_params,
)
from posformer.experiments.extension.settings import ExtendSettings
from posformer.experiments.extrapolation.evaluation import perplexity

TRAIN_LEN, TARGET = 16, 64


def _rope_model(theta: float = 10000.0) -> pf.Transformer:
    torch.manual_seed(0)
    return pf.Transformer(
        pf.Config(
            arch="decoder",
            vocab_size=50,
            d_model=32,
            n_layers=2,
            n_heads=2,
            position="rope",
            position_params={"theta": theta},
            max_positions=TRAIN_LEN,
        )
    )


def _hf(kind: str, head_dim: int, theta: float, **keys) -> torch.Tensor:
    cfg = LlamaConfig(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        head_dim=head_dim,
        rope_theta=theta,
        max_position_embeddings=TARGET,
        rope_scaling={"rope_type": kind, **keys},
    )
    return ROPE_INIT_FUNCTIONS[kind](cfg, torch.device("cpu"))


def test_pi_and_ntk_follow_the_papers_formulas():
    model, s = _rope_model(500.0), TARGET / TRAIN_LEN
    d = model.cfg.head_dim
    base = 500.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pi = with_params(model, extended_params(model, "pi", TARGET, TRAIN_LEN), TARGET)
    torch.testing.assert_close(pi.decoder.position.inv_freq.double(), base / s, rtol=1e-6, atol=0)
    ntk = with_params(model, extended_params(model, "ntk", TARGET, TRAIN_LEN), TARGET)
    ntk_base = 500.0 * s ** (d / (d - 2))  # bloc97's NTK-aware base
    torch.testing.assert_close(
        ntk.decoder.position.inv_freq.double(),
        ntk_base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d),
        rtol=1e-6,
        atol=0,
    )
    assert float(ntk.decoder.position.inv_freq[0]) == 1.0  # the highest frequency is kept


def test_yarn_and_longrope_equal_hugging_face():
    model = _rope_model()
    d, s = model.cfg.head_dim, TARGET / TRAIN_LEN
    yarn = with_params(model, extended_params(model, "yarn", TARGET, TRAIN_LEN), TARGET).decoder.position
    inv_freq, factor = _hf("yarn", d, 10000.0, factor=s, original_max_position_embeddings=TRAIN_LEN)
    torch.testing.assert_close(yarn.inv_freq, inv_freq, rtol=1e-6, atol=0)
    assert yarn.attention_factor == pytest.approx(factor) == pytest.approx(0.1 * math.log(s) + 1)
    long = [1.0 + i / 8 for i in range(d // 2)]
    lr = with_params(model, extended_params(model, "longrope", TARGET, TRAIN_LEN, long), TARGET).decoder.position
    phi3 = Phi3Config(
        hidden_size=2 * d,
        num_attention_heads=2,
        rope_theta=10000.0,
        max_position_embeddings=TARGET,
        original_max_position_embeddings=TRAIN_LEN,  # how Hugging Face stores LongRoPE (Phi-3)
        rope_scaling={"type": "longrope", "short_factor": [1.0] * (d // 2), "long_factor": long},
    )
    hf_long, hf_factor = ROPE_INIT_FUNCTIONS["longrope"](phi3, torch.device("cpu"), seq_len=TARGET)
    ours, ours_factor = lr.frequencies_for(TARGET)
    torch.testing.assert_close(ours, hf_long, rtol=1e-6, atol=0)
    assert ours_factor == pytest.approx(hf_factor)
    torch.testing.assert_close(lr.frequencies_for(TRAIN_LEN)[0], _rope_model().decoder.position.inv_freq)


@torch.no_grad()
def test_dynamic_yarn_is_rope_up_to_l_and_yarn_at_each_longer_length():
    """Eval-time: the factor from each forward's length, s = max(1, l / L): the source model's logits up to L,
    YaRN's at l / L past it (so at target_len those of the yarn row). Fine-tuned: YaRN at target_len / L up to
    target_len (the fine-tune is yarn's), the factor l / L past it."""
    model = _rope_model().eval()
    eval_time = extended_params(model, "dynyarn", TARGET, TRAIN_LEN)
    tuned = extended_params(model, "dynyarn", TARGET, TRAIN_LEN, fine_tuned=True)
    assert extended_params(model, "yarn", TARGET, TRAIN_LEN, fine_tuned=True) == extended_params(
        model, "yarn", TARGET, TRAIN_LEN
    )
    assert eval_time["scaling"] == {"type": "dynamic_yarn", "factor": 1.0, "original_max_position_embeddings": 16}
    assert tuned["scaling"] == {**eval_time["scaling"], "factor": TARGET / TRAIN_LEN}
    ids = torch.randint(0, 50, (2, 2 * TARGET), generator=torch.Generator().manual_seed(3))

    def yarn_at(n: int) -> pf.Transformer:
        return with_params(model, extended_params(model, "yarn", n, TRAIN_LEN), TARGET)

    dynamic, dynamic_tuned = with_params(model, eval_time, TARGET), with_params(model, tuned, TARGET)
    for n, expected, expected_tuned in (
        (TRAIN_LEN, model, yarn_at(TARGET)),
        (TRAIN_LEN + 1, yarn_at(TRAIN_LEN + 1), yarn_at(TARGET)),
        (TARGET, yarn_at(TARGET), yarn_at(TARGET)),
        (2 * TARGET, yarn_at(2 * TARGET), yarn_at(2 * TARGET)),
    ):
        assert torch.equal(dynamic(ids[:, :n]).logits, expected(ids[:, :n]).logits), n
        assert torch.equal(dynamic_tuned(ids[:, :n]).logits, expected_tuned(ids[:, :n]).logits), n


def test_extension_changes_the_scaling_and_nothing_else():
    model = _rope_model()
    for method in ("none", "pi", "ntk", "yarn", "dynyarn"):
        extended = with_params(model, extended_params(model, method, TARGET, TRAIN_LEN), TARGET)
        theirs = extended.state_dict()
        assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items()) and set(theirs) == set(
            model.state_dict()
        )
        ours, new = model.cfg.to_dict(), extended.cfg.to_dict()
        changed = {k for k in ours if ours[k] != new[k]}
        assert changed <= {"position_params", "max_positions"}
        assert {k for k in ours["position_params"] if ours["position_params"][k] != new["position_params"][k]} == (
            set() if method == "none" else {"scaling"}
        )


def test_only_rope_decoders_without_a_scaling_are_extended():
    alibi = pf.Transformer(
        pf.Config(arch="decoder", vocab_size=50, d_model=32, n_layers=1, n_heads=2, position="alibi")
    )
    with pytest.raises(ValueError, match="position 'alibi'"):
        check_rope_model(alibi, "runs/x")
    scaled = with_params(_rope_model(), extended_params(_rope_model(), "pi", TARGET, TRAIN_LEN), TARGET)
    with pytest.raises(ValueError, match="already has the RoPE scaling"):
        check_rope_model(scaled, "runs/x")


def test_longrope_search_stays_in_its_space_and_beats_its_seeds():
    model = _rope_model().eval()
    ids = torch.randint(0, 50, (4 * TARGET,), generator=torch.Generator().manual_seed(1))
    result = search_long_factors(model, ids, TARGET, TRAIN_LEN, population=5, generations=3, seed=0)
    s = TARGET / TRAIN_LEN
    factors = torch.tensor(result.factors)
    assert len(factors) == model.cfg.head_dim // 2 and bool((factors >= 1).all() and (factors <= 1.25 * s).all())
    assert bool((factors[1:] >= factors[:-1]).all()) and len(result.history) == 3
    assert result.history == sorted(result.history, reverse=True)  # the best is kept from one generation on
    for seed in seed_factors(model, TARGET, TRAIN_LEN):
        params = {**model.cfg.position_params, "scaling": longrope_scaling(seed.tolist(), TARGET, TRAIN_LEN)}
        assert result.ppl <= perplexity(with_params(model, params, TARGET), {"s": ids}, TARGET) + 1e-9
    chosen = {**model.cfg.position_params, "scaling": longrope_scaling(result.factors, TARGET, TRAIN_LEN)}
    assert perplexity(with_params(model, chosen, TARGET), {"s": ids}, TARGET) == pytest.approx(result.ppl, rel=1e-6)


def test_short_factor_search_never_ends_worse_than_factors_one_and_changes_nothing_past_l():
    """LongRoPE's readjustment searches the factors used up to L only: it keeps or lowers the perplexity at L
    (its first seed is the unadjusted model), and a text longer than L reads exactly as before."""
    model = _rope_model().eval()
    long = seed_factors(model, TARGET, TRAIN_LEN)[0].tolist()  # PI's: every factor s
    scaled = with_params(
        model, {**model.cfg.position_params, "scaling": longrope_scaling(long, TARGET, TRAIN_LEN)}, TARGET
    )
    ids = torch.randint(0, 50, (4 * TARGET,), generator=torch.Generator().manual_seed(2))
    result = search_short_factors(scaled, ids, population=5, generations=3, seed=0)
    assert result.ppl <= result.seed_ppl[0] + 1e-9
    assert result.seed_ppl[0] == pytest.approx(perplexity(scaled, {"s": ids}, TRAIN_LEN), rel=1e-6)
    factors = torch.tensor(result.factors)
    assert bool((factors >= 1).all() and (factors <= 1.25 * TARGET / TRAIN_LEN).all())
    readjusted = with_params(
        scaled,
        {
            **scaled.cfg.position_params,
            "scaling": {**scaled.cfg.position_params["scaling"], "short_factor": result.factors},
        },
        TARGET,
    )
    assert perplexity(readjusted, {"s": ids}, TRAIN_LEN) == pytest.approx(result.ppl, rel=1e-6)
    longer = ids[None, : 2 * TRAIN_LEN]
    with torch.no_grad():
        assert torch.equal(readjusted(longer).logits, scaled(longer).logits)


def test_longrope_stages_split_the_steps_and_bad_stages_are_named():
    s = ExtendSettings(target_len=512, steps=400, longrope_stages=[256]).resolve(64)
    assert s.stage_steps() == [160, 240]
    assert ExtendSettings(target_len=512, steps=7, longrope_stages=[128, 256]).resolve(64).stage_steps() == [1, 1, 5]
    assert ExtendSettings(target_len=512, steps=7, longrope_short=True).resolve(64).stage_steps() == [7]
    for stages, message in (
        ([512], "longrope_stages=[512] is invalid"),
        ([256, 128], "longrope_stages=[256, 128]"),
        ([64], "longrope_stages=64 is invalid"),
        ("256", "longrope_stages='256' is invalid"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            ExtendSettings(target_len=512, longrope_stages=stages).resolve(64)
    with pytest.raises(ValueError, match="steps=2 is invalid"):
        ExtendSettings(target_len=512, steps=2, longrope_stages=[256]).resolve(64)
    assert ExtendSettings(target_len=512, steps=0, longrope_stages=[256]).resolve(64).steps == 0  # eval-time only


def test_piecewise_methods_keep_the_weights_change_the_position_and_choose_the_papers_parameters():
    """ReRoPE, Self-Extend, dual chunk attention and StreamingLLM from L=16 to 64: the rope parameters carried
    over, each method's own chosen from L (and the target) as its module says, every weight copied; a text within
    the method's window reads as in the trained model."""
    model = _rope_model(theta=500.0).eval()
    chosen = {  # the method's parameters, and the longest text it reads as RoPE
        "rerope": ({"window": 4}, 4),
        "self_extend": ({"neighbor_window": 4, "group_size": 16}, 4),  # 4 + 60 / 16 < 16 / 2; G = 15 would not
        "dual_chunk": ({"chunk_size": 12, "local_size": 2}, 12),
        "streaming": ({"sinks": 4, "window": 12}, 16),
        "window": ({"sinks": 0, "window": 16}, 16),
    }
    ids = torch.randint(0, 50, (2, TRAIN_LEN), generator=torch.Generator().manual_seed(3))
    for method, (own, covered) in chosen.items():
        params = extended_params(model, method, TARGET, TRAIN_LEN)
        assert params == {**model.cfg.position_params, **own}
        extended = with_params(model, params, TARGET, position_of(method))
        assert extended.cfg.position == position_of(method) and extended.cfg.max_positions == TARGET
        assert all(torch.equal(v, extended.state_dict()[k]) for k, v in model.state_dict().items())
        ours, new = model.cfg.to_dict(), extended.cfg.to_dict()
        assert {k for k in ours if ours[k] != new[k]} == {"position", "position_params", "max_positions"}
        with torch.no_grad():
            torch.testing.assert_close(extended(ids[:, :covered]).logits, model(ids[:, :covered]).logits)
            assert not torch.allclose(extended(ids).logits, model(ids).logits) or covered == TRAIN_LEN
    assert set(METHODS) - set(FINE_TUNED) == set(PIECEWISE)


def test_a_model_without_rope_is_refused_by_name_for_every_method():
    alibi = pf.Transformer(
        pf.Config(arch="decoder", vocab_size=50, d_model=32, n_layers=1, n_heads=2, position="alibi")
    )
    for method in METHODS:
        with pytest.raises(ValueError, match=f"method '{method}' extends RoPE, and this model uses position 'alibi'"):
            extended_params(alibi, method, TARGET, TRAIN_LEN, [1.0] * 8)
    with pytest.raises(ValueError, match=r"position 'alibi'; the context-extension methods \(rerope, streaming\)"):
        check_rope_model(alibi, "runs/x", ["rerope", "streaming"])
