"""T5 (v1.0 and v1.1 / Flan) and mT5: pre-RMSNorm encoder-decoder with a bucketed relative bias.

Layout: no biases anywhere, attention scale 1.0, one relative-bias table per
stack (HF keeps it in block 0 and reuses it in every layer: posformer's
`T5Bias.table` of the stack), a final norm per stack. v1.0 ("relu", tied
embeddings) multiplies the decoder output by d_model**-0.5 before the tied LM
head (`Config.scale_tied_head`); v1.1 ("gated-gelu": the tanh GELU, posformer's
"geglu_tanh") has an untied `lm_head`. transformers 5 ties every T5 and mT5 head
(it unties one stored with other values than the shared embedding, and so does
posformer), scales a T5 head as `scale_decoder_outputs` says and never an mT5 one;
transformers 4 scales every tied head (`posformer.hf.versions`). HF's gated FFN: `wi_0` is the activated
branch, `wi_1` the linear one, i.e. posformer's rows [gate; value] of `ffn.up`.
Heads: *ForConditionalGeneration (seq2seq_lm), *Model (none), *EncoderModel (an
encoder stack only).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.activations import TO_HF, activation_from_hf, activation_to_hf
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.hf.versions import writer_major
from posformer.modules.feedforward import GATED as GATED_FFN

MODEL_TYPES = ("t5", "mt5")
PREFIX = {"t5": "T5", "mt5": "MT5"}
# checked in this order: "EncoderModel" also ends with "Model"
HEADS = {"ForConditionalGeneration": "seq2seq_lm", "EncoderModel": "encoder", "Model": "none"}
# the activation of a "gated-<act>" feed_forward_proj -> posformer's gated unit
GATED_FROM_HF = {
    "relu": "reglu",
    "gelu": "geglu",
    "gelu_python": "geglu",
    "gelu_new": "geglu_tanh",
    "gelu_fast": "geglu_tanh",
    "gelu_pytorch_tanh": "geglu_tanh",
    "silu": "swiglu",
    "swish": "swiglu",
    "sigmoid": "glu",
}
# "gated-gelu" means the tanh GELU in HF (a v1.1 legacy), so the exact one is written "gated-gelu_python"
GATED_TO_HF = {
    "reglu": "gated-relu",
    "geglu": "gated-gelu_python",
    "geglu_tanh": "gated-gelu",
    "swiglu": "gated-silu",
    "glu": "gated-sigmoid",
}
DEFAULTS = {
    "t5": {"feed_forward_proj": "relu", "tie_word_embeddings": True},
    "mt5": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
}


def _activation(model_type: str, proj: str) -> str:
    """HF's `feed_forward_proj` ("relu", "gated-gelu", ...) -> posformer's activation."""
    parts = proj.split("-")
    if len(parts) == 1:
        return activation_from_hf(model_type, parts[0])
    act = "gelu_new" if proj == "gated-gelu" else parts[1]
    if len(parts) != 2 or parts[0] != "gated" or act not in GATED_FROM_HF:
        raise unsupported(
            model_type,
            f"feed_forward_proj={proj!r} (supported: an activation, or gated-<one of {', '.join(GATED_FROM_HF)}>)",
        )
    return GATED_FROM_HF[act]


def _arch_and_head(hf: dict) -> tuple[str, str]:
    kind = architecture(hf, HEADS, "seq2seq_lm")
    return ("encoder", "none") if kind == "encoder" else ("encoder_decoder", kind)


def _tied_and_scaled(model_type: str, hf: dict) -> tuple[bool, bool]:
    """Whether the LM head is tied to the shared embedding, and whether its input is scaled by d_model**-0.5, as
    the transformers that wrote `hf` means them."""
    tied = bool(hf["tie_word_embeddings"])
    if "scale_decoder_outputs" in hf:  # transformers 5's T5 says it outright
        return tied, tied and bool(hf["scale_decoder_outputs"])
    if not tied or model_type == "t5":
        return tied, tied
    writer = writer_major(hf)
    if writer is None:
        raise unsupported(
            model_type,
            "tie_word_embeddings=true without transformers_version (transformers 4 scales a tied mT5 head by "
            "d_model**-0.5, transformers 5 does not), so its logits cannot be told",
        )
    return True, writer < 5


def config_for_state(cfg: Config, state: dict[str, Tensor]) -> Config:
    """`cfg` untied where the checkpoint stores an LM head with other values than the shared embedding, as
    transformers 5 loads it (it writes tie_word_embeddings=true for every T5)."""
    head, shared = state.get("lm_head.weight"), state.get("shared.weight")
    if not cfg.tie_embeddings or head is None or shared is None or torch.equal(head, shared):
        return cfg
    if cfg.scale_tied_head and cfg.hf_model_type == "t5":
        raise unsupported("t5", "an untied LM head scaled by d_model**-0.5 (scale_decoder_outputs=true)")
    return cfg.replace(tie_embeddings=False)


def config_from_hf(hf: dict) -> Config:
    model_type = hf["model_type"]
    hf = {**DEFAULTS[model_type], **hf}
    tied, scaled = _tied_and_scaled(model_type, hf)
    if hf.get("tie_encoder_decoder"):
        raise unsupported(model_type, "encoder and decoder weights tied to each other (tie_encoder_decoder)")
    arch, head = _arch_and_head(hf)
    pad = hf.get("pad_token_id", 0)
    eos = hf.get("eos_token_id", 1)
    dropout = hf.get("dropout_rate", 0.1)
    return Config(
        arch=arch,
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        n_layers=hf["num_layers"],
        n_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
        n_heads=hf["num_heads"],
        d_head=hf["d_kv"],
        d_ff=hf["d_ff"],
        position="t5",
        position_params={
            "num_buckets": hf.get("relative_attention_num_buckets", 32),
            "max_distance": hf.get("relative_attention_max_distance", 128),
        },
        max_positions=hf.get("n_positions") or 512,
        norm="rmsnorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-6),
        norm_placement="pre",
        activation=_activation(model_type, hf["feed_forward_proj"]),
        dropout=dropout,
        attention_dropout=dropout,
        activation_dropout=dropout,
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        attn_scale=1.0,
        tie_embeddings=tied,
        scale_tied_head=scaled,
        head=head,
        pad_token_id=pad,
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        decoder_start_token_id=hf.get("decoder_start_token_id"),
        init_std=hf.get("initializer_factor", 1.0) * hf["d_model"] ** -0.5,
        hf_model_type=model_type,
    )


def _layout_problems(cfg: Config) -> list[str]:
    """Every way `cfg` differs from what a T5 checkpoint can express."""
    wanted = {
        "position": "t5",
        "norm": "rmsnorm",
        "norm_placement": "pre",
        "qkv_bias": False,
        "attn_out_bias": False,
        "ffn_bias": False,
        "scale_embeddings": False,
        "embed_norm": False,
        "head_bias": False,
        "type_vocab_size": 0,
        "parallel_residual": False,
        "first_attn_norm": True,
        "qk_norm": False,
        "sliding_window": None,
        "layer_types": None,
        "head_transform": False,
        "separate_decoder_embeddings": False,  # the encoder and the decoder read one `shared` table
    }
    problems = [f"{k}={getattr(cfg, k)!r}" for k, v in wanted.items() if getattr(cfg, k) != v]
    if cfg.arch == "decoder" or cfg.head_kind not in ("seq2seq_lm", "none"):
        problems.append(f"arch={cfg.arch!r} with head={cfg.head_kind!r}")
    if not math.isclose(cfg.scale, 1.0):
        problems.append(f"attention scale {cfg.scale:g} (T5 uses 1.0)")
    if cfg.kv_heads != cfg.n_heads:
        problems.append(f"n_kv_heads={cfg.kv_heads} (grouped-query attention)")
    if not cfg.use_final_norm:
        problems.append("no final norm")
    if cfg.activation not in GATED_TO_HF and cfg.activation not in TO_HF:
        problems.append(f"activation={cfg.activation!r}")
    return problems


def config_to_hf(cfg: Config) -> dict:
    model_type = cfg.hf_model_type
    problems = _layout_problems(cfg)
    if problems:
        raise unsupported(model_type, f"a layout T5 cannot express ({'; '.join(problems)}) (to_hf)")
    params = cfg.position_params
    suffix = {"encoder": "EncoderModel", "seq2seq_lm": "ForConditionalGeneration", "none": "Model"}
    kind = "encoder" if cfg.arch == "encoder" else cfg.head_kind
    proj = GATED_TO_HF.get(cfg.activation) or activation_to_hf(model_type, cfg.activation)
    return {
        "model_type": model_type,
        "architectures": [PREFIX[model_type] + suffix[kind]],
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.head_dim,
        "d_ff": cfg.ff_dim,
        "num_layers": cfg.n_layers,
        "num_decoder_layers": cfg.decoder_layers,
        "num_heads": cfg.n_heads,
        "relative_attention_num_buckets": params["num_buckets"],
        "relative_attention_max_distance": params["max_distance"],
        "n_positions": cfg.max_positions,
        "dropout_rate": cfg.dropout,
        "layer_norm_epsilon": cfg.norm_eps,
        "initializer_factor": cfg.init_std * cfg.d_model**0.5,
        "feed_forward_proj": proj,
        "tie_word_embeddings": cfg.tie_embeddings,
        "is_encoder_decoder": True,
        "pad_token_id": cfg.pad_token_id,
        "eos_token_id": cfg.eos_token_id,
        "decoder_start_token_id": cfg.decoder_start_token_id,
    }


def _attention(ours: str, theirs: str, inner: int, cross: bool) -> list[Rule]:
    """One HF T5Attention (q, k, v, o; no biases) -> posformer's fused projections."""
    q, k, v = (f"{theirs}.{name}" for name in "qkv")
    if cross:
        rules = linear(f"{ours}.q", q, bias=False) + fused_linear(f"{ours}.kv", (k, v), (inner, inner), False)
    else:
        rules = fused_linear(f"{ours}.qkv", (q, k, v), (inner, inner, inner), False)
    return rules + linear(f"{ours}.out", f"{theirs}.o", bias=False)


def _stack(cfg: Config, stack: str, n_layers: int, cross: bool) -> list[Rule]:
    """The rules of one stack: `stack` is "encoder" or "decoder" (the same prefix in both layouts)."""
    inner = cfg.n_heads * cfg.head_dim
    table = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    out = [same(f"{stack}.position.table.weight", table)]
    for i in range(n_layers):
        ours, theirs = f"{stack}.layers.{i}", f"{stack}.block.{i}.layer"
        out += norm(f"{ours}.attn_res.norm", f"{theirs}.0.layer_norm", bias=False)
        out += _attention(f"{ours}.attn", f"{theirs}.0.SelfAttention", inner, cross=False)
        if cross:
            out += norm(f"{ours}.cross_res.norm", f"{theirs}.1.layer_norm", bias=False)
            out += _attention(f"{ours}.cross_attn", f"{theirs}.1.EncDecAttention", inner, cross=True)
        ff = f"{theirs}.{2 if cross else 1}"
        out += norm(f"{ours}.ffn_res.norm", f"{ff}.layer_norm", bias=False)
        dense = f"{ff}.DenseReluDense"
        if cfg.activation in GATED_FFN:
            out += fused_linear(f"{ours}.ffn.up", (f"{dense}.wi_0", f"{dense}.wi_1"), (cfg.ff_dim, cfg.ff_dim), False)
        else:
            out += linear(f"{ours}.ffn.up", f"{dense}.wi", bias=False)
        out += linear(f"{ours}.ffn.down", f"{dense}.wo", bias=False)
    return out + norm(f"{stack}.norm", f"{stack}.final_layer_norm", bias=False)


def rules(cfg: Config) -> list[Rule]:
    out = [same("embed_tokens.weight", "shared.weight")] + _stack(cfg, "encoder", cfg.n_layers, cross=False)
    if cfg.arch == "encoder_decoder":
        out += _stack(cfg, "decoder", cfg.decoder_layers, cross=True)
    if cfg.head_kind == "seq2seq_lm" and not cfg.tie_embeddings:
        out.append(same("head.proj.weight", "lm_head.weight"))
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """Copies of the shared embedding, a tied head, and the unused cross-attention table of old checkpoints.

    An encoder-only model also drops a full checkpoint's decoder and head (as HF's T5EncoderModel does).
    """
    patterns = [
        r"(encoder|decoder)\.embed_tokens\.weight",
        r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight",
    ]
    if cfg.arch == "encoder":
        patterns += [r"decoder\..*", r"lm_head\.weight"]
    elif cfg.tie_embeddings or cfg.head_kind == "none":
        patterns.append(r"lm_head\.weight")
    return tuple(patterns)


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """Say how the LM head is scaled in the words of the transformers the export is for (`hf`'s version)."""
    cfg = model.cfg
    tied = cfg.head_kind == "seq2seq_lm" and cfg.tie_embeddings
    scaled = tied and cfg.scale_tied_head
    if writer_major(hf, "to_hf") < 5:
        if tied and not scaled:
            raise unsupported(
                cfg.hf_model_type,
                "a tied LM head without scale_tied_head for transformers 4, which scales every tied T5 head "
                "(to_hf) (transformers 5 does not: transformers_version='5')",
            )
    elif cfg.hf_model_type == "t5":
        hf["scale_decoder_outputs"] = scaled
    elif scaled:
        raise unsupported(
            "mt5",
            "a tied LM head scaled by d_model**-0.5 for transformers 5, whose mT5 never scales it (to_hf) "
            "(write hf_model_type='t5', or for transformers 4: transformers_version='4.57.6')",
        )


FAMILY = register(
    Family(
        MODEL_TYPES,
        config_from_hf,
        config_to_hf,
        rules,
        ignore,
        finish_export=finish_export,
        config_for_state=config_for_state,
    )
)
