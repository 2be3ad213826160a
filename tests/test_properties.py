"""Property tests: every small valid config builds and trains one step; every corrupted one is refused
with a ValueError that names the corrupted field."""

from __future__ import annotations

import string

import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import posformer as pf
from posformer.config import checks as C

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# rotary fractions giving an even, non-zero rotary dimension for each head_dim
ROPE_FRACTIONS = {4: [0.5, 1.0], 8: [0.25, 0.5, 0.75, 1.0]}
probabilities = st.sampled_from([0.0, 0.0, 0.1, 0.25, 0.5])


@st.composite
def valid_config_dicts(draw) -> dict:
    position = draw(st.sampled_from(pf.positions.names()))
    arch = "decoder" if pf.positions.get(position).causal_only else draw(st.sampled_from(C.ARCHS))
    n_heads = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([4, 8]))
    n_kv_heads = draw(st.sampled_from([None] + [k for k in (1, 2, 4) if n_heads % k == 0]))
    norm = draw(st.sampled_from(C.NORMS))
    placement = "post" if norm == "deepnorm" else draw(st.sampled_from(C.NORM_PLACEMENTS))
    if position == "rope":
        params = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "theta": st.sampled_from([100.0, 10000.0, 500000.0]),
                    "layout": st.sampled_from(["half", "interleaved"]),
                    "rotary_fraction": st.sampled_from(ROPE_FRACTIONS[head_dim]),
                },
            )
        )
    elif position == "sinusoidal":
        params = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "base": st.sampled_from([100.0, 10000.0]),
                    "layout": st.sampled_from(["interleaved", "half"]),
                },
            )
        )
    else:
        params = {}
    vocab_size = draw(st.integers(8, 64))
    return dict(
        arch=arch,
        vocab_size=vocab_size,
        d_model=n_heads * head_dim,
        n_layers=draw(st.integers(1, 2)),
        n_decoder_layers=draw(st.integers(1, 2)) if arch == "encoder_decoder" else None,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=draw(st.integers(8, 48)),
        position=position,
        position_params=params,
        max_positions=draw(st.integers(6, 16)),
        norm=norm,
        norm_bias=draw(st.booleans()),
        norm_placement=placement,
        final_norm=draw(st.sampled_from([None, True, False])),
        embed_norm=draw(st.booleans()),
        activation=draw(st.sampled_from(C.ACTIVATIONS)),
        dropout=draw(probabilities),
        attention_dropout=draw(probabilities),
        activation_dropout=draw(probabilities),
        qkv_bias=draw(st.booleans()),
        attn_out_bias=draw(st.booleans()),
        ffn_bias=draw(st.booleans()),
        attn_scale=draw(st.sampled_from([None, None, 1.0, 0.3])),
        attn_impl=draw(st.sampled_from(("sdpa", "eager"))),  # "flex" has no CPU backward: test_flex_attention.py
        scale_embeddings=draw(st.booleans()),
        tie_embeddings=draw(st.booleans()),
        type_vocab_size=draw(st.sampled_from([0, 2])),
        pad_token_id=draw(st.sampled_from([None, 0])),
        decoder_start_token_id=0 if arch == "encoder_decoder" else None,
    )


def _check_model_trains(data: dict, batch: int, length: int, tgt_length: int, seed: int) -> None:
    cfg = pf.Config.from_dict(data)
    torch.manual_seed(seed)
    model = pf.Transformer(cfg)  # training mode: dropout active
    ids = torch.randint(0, cfg.vocab_size, (batch, length))
    if cfg.arch == "encoder_decoder":
        labels = torch.randint(0, cfg.vocab_size, (batch, tgt_length))
    else:
        labels = torch.randint(0, cfg.vocab_size, (batch, length))
    out = model(ids, labels=labels)
    assert out.logits.shape == (*labels.shape, cfg.vocab_size)
    assert torch.isfinite(out.logits).all()
    assert out.loss is not None and torch.isfinite(out.loss), (data, out.loss)
    out.loss.backward()
    grad = model.embed_tokens.weight.grad
    assert grad is not None, data
    assert torch.isfinite(grad).all(), data
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), (name, data)


@settings(max_examples=40, **SETTINGS)
@given(data=valid_config_dicts(), length=st.integers(1, 6), tgt_length=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_valid_config_builds_runs_and_backprops(data, length, tgt_length, seed):
    _check_model_trains(data, batch=2, length=length, tgt_length=tgt_length, seed=seed)


@settings(max_examples=10, **SETTINGS)
@given(data=valid_config_dicts())
def test_valid_config_round_trips(data):
    cfg = pf.Config.from_dict(data)
    assert pf.Config.from_dict(cfg.to_dict()) == cfg
    resolved = {**pf.positions.get(cfg.position).defaults, **data.get("position_params", {})}
    assert cfg.to_dict() == {**cfg.to_dict(), **data, "position_params": resolved}


# ------------------------------------------------------------ invalid configs
SIZE_FIELDS = [
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "n_decoder_layers",
    "max_positions",
    "num_labels",
    "d_head",
]
NAME_FIELDS = {
    "arch": C.ARCHS,
    "norm": C.NORMS,
    "norm_placement": C.NORM_PLACEMENTS,
    "activation": C.ACTIVATIONS,
    "attn_impl": C.ATTN_IMPLS,
    "position": tuple(pf.positions.names()),
    "head": C.HEADS,
}
PROB_FIELDS = ["dropout", "attention_dropout", "activation_dropout"]
TOKEN_FIELDS = ["pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"]

bad_sizes = st.one_of(st.integers(-1000, 0), st.sampled_from([2.0, 8.5, "8", True, False]))
bad_probs = st.one_of(
    st.floats(1.0, 100.0), st.floats(-100.0, -1e-6), st.sampled_from([float("nan"), float("inf"), "0.1", True])
)
bad_names = st.text(string.ascii_letters + "_-", min_size=1, max_size=10)


@st.composite
def corrupted_config_dicts(draw) -> tuple[dict, str, str, object]:
    """A valid config dict with exactly one field made invalid: (dict, kind of corruption, field, bad value)."""
    data = draw(valid_config_dicts())
    kind = draw(
        st.sampled_from(
            [
                "size",
                "name",
                "prob",
                "kv_heads",
                "d_model",
                "n_heads",
                "params",
                "positive_float",
                "type_vocab",
                "token_id",
            ]
        )
    )
    if kind == "size":
        field = draw(st.sampled_from(SIZE_FIELDS))
        value = draw(bad_sizes)
    elif kind == "name":
        field = draw(st.sampled_from(sorted(NAME_FIELDS)))
        value = draw(bad_names.filter(lambda s: s not in NAME_FIELDS[field]))
    elif kind == "prob":
        field = draw(st.sampled_from(PROB_FIELDS))
        value = draw(bad_probs)
    elif kind == "kv_heads":
        field = "n_kv_heads"
        value = draw(st.integers(1, 9).filter(lambda k: data["n_heads"] % k != 0))
    elif kind == "d_model":  # d_model not divisible by n_heads; the message names n_heads and d_model
        assume(data["n_heads"] > 1)
        field = "d_model"
        value = draw(st.integers(1, 64).filter(lambda d: d % data["n_heads"] != 0))
    elif kind == "n_heads":  # n_heads not dividing d_model
        field = "n_heads"
        value = draw(st.integers(1, 64).filter(lambda h: data["d_model"] % h != 0))
    elif kind == "params":
        field = "position_params"
        key = draw(
            st.text(string.ascii_lowercase + "_", min_size=1, max_size=8).filter(
                lambda k: k not in pf.positions.get(data["position"]).defaults
            )
        )
        value = {**data["position_params"], key: 1}
    elif kind == "positive_float":
        field = draw(st.sampled_from(["norm_eps", "init_std", "attn_scale"]))
        value = draw(st.one_of(st.floats(-10.0, 0.0), st.just(float("nan"))))
    elif kind == "type_vocab":
        field = "type_vocab_size"
        value = draw(st.one_of(st.integers(-10, -1), st.just(1.5)))
    else:
        field = draw(st.sampled_from(TOKEN_FIELDS))
        value = draw(st.one_of(st.integers(-5, -1), st.booleans(), st.floats(0.0, 10.0)))  # ids >= vocab are kept
    return {**data, field: value}, kind, field, value


@settings(max_examples=150, **SETTINGS)
@given(case=corrupted_config_dicts())
def test_corrupted_config_names_the_field(case):
    data, kind, field, value = case
    try:
        pf.Config.from_dict(data)
    except ValueError as error:
        message = str(error)
    else:
        raise AssertionError(f"no ValueError for {field}={value!r}")
    assert field in message, (field, value, message)
    if kind == "d_model":
        assert "n_heads" in message and f"d_model={value}" in message, message
    elif kind != "params":
        assert f"Config.{field}={value!r}" in message, message


@settings(max_examples=10, **SETTINGS)
@given(data=valid_config_dicts(), key=st.text(string.ascii_lowercase + "_", min_size=1, max_size=12))
def test_unknown_field_is_named(data, key):
    assume(key not in data and key not in {f for f in pf.Config.__dataclass_fields__})
    try:
        pf.Config.from_dict({**data, key: 1})
    except ValueError as error:
        assert repr(key) in str(error)
    else:
        raise AssertionError(f"no ValueError for unknown field {key!r}")
