"""Marian (Helsinki-NLP opus-mt): the original Transformer shape of "Attention Is All You Need".

Post-LayerNorm encoder-decoder, no final norm, biases everywhere, fixed
sinusoidal positions with the sines in the first half of each vector and the
cosines in the second (posformer's "sinusoidal" with layout "half"), counted
from 0 in both stacks, token embeddings scaled by sqrt(d_model)
(`scale_embedding`), one embedding shared by both stacks and (tied) the LM
head, and a `final_logits_bias` added to the logits (`Config.head_bias`).
The tables HF may store as `embed_positions.weight` are fixed, so they are
dropped on load and not written by `to_hf` (`transformers` rebuilds them).
Heads: MarianMTModel (seq2seq_lm) and MarianModel (none).

Untied (`tie_word_embeddings=False`), transformers 4 still feeds both stacks from `shared`, and saves it alone;
transformers 5 gives the encoder, the decoder and `shared` embeddings of their own (the stacks use theirs,
`shared` none) and saves the three. A config is read by its writer's meaning (`versions.writer_major`): from 5, an
untied model's stacks read `encoder.embed_tokens` and `decoder.embed_tokens`, the decoder's own embeddings
(`Config.separate_decoder_embeddings`) where the two differ. `to_hf` writes the three for 5 (an untied export),
and refuses separate decoder embeddings for 4, or tied to the head.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.activations import activation_from_hf, activation_to_hf
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.hf.versions import writer_major

MODEL_TYPE = "marian"
HEADS = {"MTModel": "seq2seq_lm", "Model": "none"}
POSITIONS = {"base": 10000.0, "layout": "half"}


def _check_features(hf: dict) -> None:
    vocab = hf["vocab_size"]
    if not hf.get("share_encoder_decoder_embeddings", True):
        raise unsupported(
            MODEL_TYPE, "separate encoder and decoder embeddings (share_encoder_decoder_embeddings=False)"
        )
    if hf.get("decoder_vocab_size") not in (None, vocab):
        raise unsupported(
            MODEL_TYPE,
            f"a decoder vocabulary of {hf['decoder_vocab_size']} tokens different from "
            f"the encoder's {vocab} (decoder_vocab_size)",
        )
    for name in ("ffn_dim", "attention_heads"):
        enc, dec = hf.get(f"encoder_{name}"), hf.get(f"decoder_{name}")
        if enc != dec:
            raise unsupported(MODEL_TYPE, f"encoder_{name}={enc} different from decoder_{name}={dec}")
    if hf["d_model"] % 2:
        raise unsupported(MODEL_TYPE, f"an odd d_model={hf['d_model']} (its sinusoidal table is uneven)")


def _own_stack_embeddings(hf: dict) -> bool:
    """Whether each stack reads embeddings of its own: an untied model written by transformers 5."""
    return writer_major(hf) == 5 and not hf.get("tie_word_embeddings", True)


def _base(cfg: Config) -> str:
    return "model." if cfg.head_kind == "seq2seq_lm" else ""


def config_for_state(cfg: Config, state: dict[str, Tensor]) -> Config:
    """One embedding for both stacks where transformers 5's encoder and decoder ones are equal (or not stored)."""
    if not cfg.separate_decoder_embeddings:
        return cfg
    encoder, decoder = (state.get(f"{_base(cfg)}{stack}.embed_tokens.weight") for stack in ("encoder", "decoder"))
    if encoder is None or decoder is None or torch.equal(encoder, decoder):
        return cfg.replace(separate_decoder_embeddings=False)
    return cfg


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """An untied model written by transformers 5: its encoder's embeddings (which its encoder reads, unlike
    `shared`) in the place of `shared`, which `rules` read."""
    base = _base(cfg)
    if not _own_stack_embeddings(hf) or f"{base}encoder.embed_tokens.weight" not in state:
        return state
    return {**state, f"{base}shared.weight": state[f"{base}encoder.embed_tokens.weight"]}


def config_from_hf(hf: dict) -> Config:
    _check_features(hf)
    head = architecture(hf, HEADS, "seq2seq_lm")
    pad = hf.get("pad_token_id")
    eos = hf.get("eos_token_id")
    return Config(
        arch="encoder_decoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        n_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        position="sinusoidal",
        position_params=dict(POSITIONS),
        max_positions=hf.get("max_position_embeddings", 1024),
        norm="layernorm",
        norm_eps=1e-5,
        norm_placement="post",
        activation=activation_from_hf(MODEL_TYPE, hf.get("activation_function", "gelu")),
        dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        separate_decoder_embeddings=_own_stack_embeddings(hf),
        head_bias=head == "seq2seq_lm",
        head=head,
        pad_token_id=pad,
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        decoder_start_token_id=hf.get("decoder_start_token_id", pad),
        init_std=hf.get("init_std", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def _layout_problems(cfg: Config) -> list[str]:
    """Every way `cfg` differs from what a Marian checkpoint can express."""
    wanted = {
        "arch": "encoder_decoder",
        "position": "sinusoidal",
        "norm": "layernorm",
        "norm_bias": True,
        "norm_placement": "post",
        "qkv_bias": True,
        "attn_out_bias": True,
        "ffn_bias": True,
        "embed_norm": False,
        "type_vocab_size": 0,
        "norm_eps": 1e-5,  # transformers' nn.LayerNorm default: Marian's config has no eps
        "qk_norm": False,
        "sliding_window": None,
        "head_transform": False,
    }
    problems = [f"{k}={getattr(cfg, k)!r}" for k, v in wanted.items() if getattr(cfg, k) != v]
    if cfg.use_final_norm:
        problems.append("a final norm after each stack (Marian has none)")
    params = cfg.position_params
    if cfg.position == "sinusoidal" and params != POSITIONS:
        problems.append(f"sinusoidal {params} (Marian: {POSITIONS})")
    if cfg.head_kind not in ("seq2seq_lm", "none"):
        problems.append(f"head={cfg.head_kind!r}")
    if cfg.kv_heads != cfg.n_heads or cfg.head_dim * cfg.n_heads != cfg.d_model:
        problems.append(f"n_kv_heads={cfg.kv_heads}, d_head={cfg.head_dim} (Marian: d_model / n_heads, all heads)")
    if not math.isclose(cfg.scale, cfg.head_dim**-0.5):
        problems.append(f"attention scale {cfg.scale:g} (Marian: 1/sqrt(d_head))")
    if cfg.scale_tied_head and cfg.tie_embeddings:
        problems.append("scale_tied_head=True")
    if cfg.separate_decoder_embeddings and cfg.tie_embeddings:
        problems.append("separate_decoder_embeddings=True with tie_embeddings=True (Marian ties one embedding)")
    return problems


def config_to_hf(cfg: Config) -> dict:
    problems = _layout_problems(cfg)
    if problems:
        raise unsupported(MODEL_TYPE, f"a layout Marian cannot express ({'; '.join(problems)}) (to_hf)")
    return {
        "model_type": MODEL_TYPE,
        "architectures": ["MarianMTModel" if cfg.head_kind == "seq2seq_lm" else "MarianModel"],
        "vocab_size": cfg.vocab_size,
        "decoder_vocab_size": cfg.vocab_size,
        "share_encoder_decoder_embeddings": True,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.ff_dim,
        "decoder_ffn_dim": cfg.ff_dim,
        "activation_function": activation_to_hf(MODEL_TYPE, cfg.activation),
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout,
        "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embeddings,
        "tie_word_embeddings": cfg.tie_embeddings,
        "init_std": cfg.init_std,
        "is_encoder_decoder": True,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "decoder_start_token_id": cfg.decoder_start_token_id,
    }


def _attention(ours: str, theirs: str, d_model: int, cross: bool) -> list[Rule]:
    """One HF MarianAttention (q/k/v/out_proj, with biases) -> posformer's fused projections."""
    q, k, v = (f"{theirs}.{name}_proj" for name in "qkv")
    if cross:
        rules = linear(f"{ours}.q", q) + fused_linear(f"{ours}.kv", (k, v), (d_model, d_model), True)
    else:
        rules = fused_linear(f"{ours}.qkv", (q, k, v), (d_model, d_model, d_model), True)
    return rules + linear(f"{ours}.out", f"{theirs}.out_proj")


def _stack(cfg: Config, ours: str, theirs: str, n_layers: int, cross: bool) -> list[Rule]:
    out: list[Rule] = []
    for i in range(n_layers):
        block, layer = f"{ours}.layers.{i}", f"{theirs}.layers.{i}"
        out += _attention(f"{block}.attn", f"{layer}.self_attn", cfg.d_model, cross=False)
        out += norm(f"{block}.attn_res.norm", f"{layer}.self_attn_layer_norm")
        if cross:
            out += _attention(f"{block}.cross_attn", f"{layer}.encoder_attn", cfg.d_model, cross=True)
            out += norm(f"{block}.cross_res.norm", f"{layer}.encoder_attn_layer_norm")
        out += linear(f"{block}.ffn.up", f"{layer}.fc1") + linear(f"{block}.ffn.down", f"{layer}.fc2")
        out += norm(f"{block}.ffn_res.norm", f"{layer}.final_layer_norm")
    return out


def _logits_bias() -> Rule:
    """HF's `final_logits_bias` buffer (1, vocab) <-> posformer's `head.proj.bias` (vocab,)."""
    return Rule("head.proj.bias", ("final_logits_bias",), lambda ts: ts[0].reshape(-1), lambda t: [t.reshape(1, -1)])


def rules(cfg: Config) -> list[Rule]:
    base = _base(cfg)
    out = [same("embed_tokens.weight", f"{base}shared.weight")]
    if cfg.separate_decoder_embeddings:
        out.append(same("decoder_embed_tokens.weight", f"{base}decoder.embed_tokens.weight"))
    out += _stack(cfg, "encoder", f"{base}encoder", cfg.n_layers, cross=False)
    out += _stack(cfg, "decoder", f"{base}decoder", cfg.decoder_layers, cross=True)
    if cfg.head_kind == "seq2seq_lm":
        if not cfg.tie_embeddings:
            out.append(same("head.proj.weight", "lm_head.weight"))
        if cfg.head_bias:
            out.append(_logits_bias())
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """The fixed sinusoidal tables, the stacks' copies of the shared embedding, a tied head."""
    patterns = [
        r"(model\.)?(encoder|decoder)\.embed_positions\.weight",
        r"(model\.)?(encoder|decoder)\.embed_tokens\.weight",
    ]
    if cfg.tie_embeddings:
        patterns.append(r"lm_head\.weight")
    return tuple(patterns)


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """For transformers 5, an untied model's encoder and decoder embeddings stored too (its stacks read them, and
    it does not fill them from `shared`); for 4, separate decoder embeddings refused."""
    cfg, base = model.cfg, _base(model.cfg)
    if writer_major(hf, "to_hf") < 5:
        if cfg.separate_decoder_embeddings:
            raise unsupported(
                MODEL_TYPE,
                "separate_decoder_embeddings=True for transformers 4, whose stacks both read `shared` (to_hf) "
                "(transformers 5 gives an untied model's decoder its own: transformers_version='5.24.0')",
            )
        return
    if not cfg.tie_embeddings:
        shared = state[f"{base}shared.weight"]
        state[f"{base}encoder.embed_tokens.weight"] = shared.clone()
        state.setdefault(f"{base}decoder.embed_tokens.weight", shared.clone())


FAMILY = register(
    Family(
        (MODEL_TYPE,),
        config_from_hf,
        config_to_hf,
        rules,
        ignore,
        prepare_state=prepare_state,
        finish_export=finish_export,
        config_for_state=config_for_state,
    )
)
