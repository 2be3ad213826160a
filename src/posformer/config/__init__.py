"""`Config`: one flat dataclass that describes every model posformer builds.

A config is plain data: it round-trips through dict, JSON and YAML, and
`validate()` (called on construction) raises a `ValueError` that names the
field, the value and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posformer import positions
from posformer.config.checks import DEFAULT_HEAD, check_config
from posformer.config.latent import latent_scale
from posformer.positions.contract import OwnAttnScale
from posformer.utils.safe_write import write_text_atomic


@dataclass
class Config:
    """Everything needed to build a `posformer.Transformer`.

    Sizes: `d_head` defaults to `d_model // n_heads`, `n_kv_heads` to `n_heads`
    (fewer gives GQA, 1 gives MQA), `d_ff` to `4 * d_model`, and
    `n_decoder_layers` (encoder-decoder only) to `n_layers`.
    `attn_scale=None` means 1/sqrt(d_head); T5 uses 1.0.
    `position` names a registered encoding (`posformer.positions.names()`);
    `position_params` holds its parameters, resolved on validation by the encoding
    (its defaults, then the values given) and tagged with it: changing `position`
    (`replace`, a preset override) starts from the new encoding's defaults. `attn_impl` picks the attention
    kernel: "sdpa" (PyTorch's fused kernel), "eager" (plain matmuls) or "flex" (FlexAttention, the
    position bias as a `score_mod`: every encoding but Shaw, CoPE and Transformer-XL, no
    attention dropout, forward only on the CPU; see `posformer.ops.flex`); encodings that need the
    probabilities use eager regardless.
    `qk_norm` normalises each head's query and key vector (the `norm` kind over head_dim, its own
    weights in every attention layer) before the position encoding rotates them (Qwen3, Gemma 3).
    `qk_norm_over` says over what: "head" (each head's vector, as above) or "projection" (the whole query
    projection, n_heads * head_dim features, and the whole key projection, n_kv_heads * head_dim, before the
    split into heads: Olmo 2 and 3); other than "head" only with `qk_norm`.
    `qk_norm_kind` says with what: "norm" (the `norm` kind, with its weights, as above) or "l2" (no weights:
    x / sqrt(mean(x^2) + norm_eps), in float32, Llama 4's `L2Norm` on its RoPE layers; the same before or after a
    rotation, which keeps each head's norm); other than "norm" only with `qk_norm`.
    `key_smear` mixes each key with its predecessor's through a learned per-head weight before the position
    encoding (Olsson et al.'s smeared keys, `posformer.modules.key_smear`): one layer can then match a query
    against the token before each key, as induction heads do. No Hugging Face family has it (`to_hf` refuses).
    `sliding_window` W limits self-attention to the keys fewer than W slots from the query: in a decoder each
    query's last W tokens, itself included (Mistral; `posformer.ops.masks.build_mask`), counted over the cache and
    the input, the KV cache keeping every key and the mask hiding the older ones; in an encoder the W - 1 tokens on
    either side of the query and itself, 2W - 1 slots (ModernBERT's local layers: W = local_attention // 2 + 1).
    Slots count pads, as Hugging Face counts them. None: no window.
    `attention_sinks` gives each self-attention layer one learned logit per head that joins the softmax's
    denominator, a key every query sees with a value of zero (GPT-OSS's `sinks`): a head can then attend to
    nothing. Its attention runs the eager kernel (`posformer.ops.softmax_attention`), in blocks of queries.
    `attention_output_gate` multiplies each self-attention head's output, before the output projection, by
    sigmoid(x W_g), a gate of head_dim features per head computed from the layer's input x (Qwen3-Next's gated
    attention); W_g is the last n_heads * head_dim rows of the fused `qkv` projection (q, k, v, then the gate).
    `values_from_keys` makes the values the key projection's output, before QK-norm and the position encoding, with
    no value projection (Gemma 4's `attention_k_eq_v`); `value_norm` divides each head's value vector by its root
    mean square, without weights, in float32 (Gemma 4's `v_norm`). `kv_sources` (one entry per layer, None or an
    earlier layer's index j) makes a layer attend over the keys and values layer j made in the same forward
    instead of its own: KV sharing, Gemma 4's `num_kv_shared_layers` (`posformer.config.kv_sharing`,
    `posformer.modules.shared_kv`). None: every layer makes its own.
    `sink_tokens` n prepends n learned embeddings to every sequence of a decoder (arch "decoder"), at positions
    0..n-1 before the first input token, which then sits at position n (StreamingLLM's learnable sink token, Xiao
    et al. 2024; x-transformers' memory tokens). Every query sees them; their outputs are dropped, so the logits,
    the labels and the attention_mask keep the input's length. Given position_ids count from the first input
    token, as without sinks. The KV cache holds the sinks from the first call on. 0: none.
    `attention_chunk` C limits it to the keys of the query's own chunk of C tokens, counted from each row's
    first real token (Llama 4's chunked attention, `attention_chunk_size`; its RoPE layers chunk and its NoPE
    layers do not, through `layer_types`). None: no chunks.
    `query_temperature` {"scale": s, "floor_size": f} multiplies each query at position p by
    1 + s * ln(1 + floor((p + 1) / f)) (log-n scaling, Llama 4's `attn_temperature_tuning`;
    `posformer.positions.query_temperature`). None: no temperature.
    `random_positions` L: while training, the default position ids are an ordered random subset of [0, L)
    (Ruoss et al. 2023; `posformer.modules.random_positions`); evaluation keeps 0..T-1. None: off.
    `layer_types` labels each layer of the stack (arch decoder or encoder; one label per layer), and
    `layer_settings` maps a label to the fields its layers use instead of the config's own: `position`,
    `position_params`, `sliding_window`, `attention_chunk`, `query_temperature`, `qk_norm`, `qk_norm_kind`,
    `mixer`, `d_head`, `n_kv_heads`, `d_ff`, `values_from_keys` (NoPE layers: {"position": "none"}; Gemma 3's
    local layers: a window and their own RoPE base; Gemma 4's global layers: a wider head; Llama 4's iRoPE:
    `posformer.config.irope.irope_layers`). Each label is one of `layer_settings` or "full_attention", which keeps
    the config's own (a mistyped label is refused, not taken for the config's own). The
    stack resolves each layer's config once, when it is built (`layer_config`); the config's own `position`
    embeds the tokens.
    `norm` "rmsnorm_unit_offset" is RMSNorm whose scale is 1 + weight, in float32 (Gemma).
    `norm_placement` places the norm of each residual sub-layer f (attention, cross-attention, FFN;
    `modules.blocks.Residual`): "pre" x + f(norm(x)); "post" norm(x + f(x)) (no final norm by default);
    "sandwich" x + norm2(f(norm1(x))) (Gemma 2 and 3); "output" x + norm(f(x)), no norm before f, the
    sub-layer's output normalised before the residual adds it (Olmo 2 and 3, EXAONE 4).
    `n_experts` E makes the feed-forward a mixture of E experts (`posformer.modules.moe`; None: one dense FFN):
    a linear router scores the experts of each token, which goes to its `experts_per_token` best ones (required
    with E); its output is their outputs weighted by the softmax of the router's logits over all E experts, kept
    for its experts and divided by their sum (`norm_topk_prob`; False keeps the softmax's values, as Qwen3-MoE
    can). Each expert is a feed-forward network of `activation` and `ffn_bias` with `expert_d_ff` hidden units
    (default `d_ff`). `moe_layers` (one bool per layer, arch decoder or encoder) gives experts to the layers
    marked True only, a dense FFN of `d_ff` to the others (None: every layer). `ModelOutput.aux_loss` is the
    Switch load-balancing loss of the routers, and a training forward with labels adds `router_aux_loss_coef`
    times it to the loss. `router_bias` gives the router a bias; `router_softmax` "top_k" weights a token's
    experts by the softmax over their k logits alone (GPT-OSS; "all": over every expert's, as above);
    `expert_activation` "swiglu_clamped" makes each expert GPT-OSS's clamped SwiGLU instead of `activation`
    (`posformer.modules.moe.clamped_swiglu`); `router_softmax` "sigmoid_input" (Llama 4) passes each of a token's
    top-k logits through a sigmoid and scales its expert's input by it, not its output, the weights not normalised.
    `shared_expert_d_ff` F gives each expert layer a shared expert: a feed-forward of F hidden units (`activation`,
    `ffn_bias`) that every token goes through, its output added to the experts' (Llama 4's `shared_expert`).
    `shared_expert_gate` scales the shared expert's output by sigmoid(x w) before it is added, w a learned vector
    of d_model (one scalar gate per token; Qwen3-Next's `shared_expert_gate`); needs `shared_expert_d_ff`.
    `sigmoid_router` {"groups", "top_groups", "scale"} routes by DeepSeek-V3's sigmoid scores instead of a softmax:
    a bias that steers the choice only, the top k within the best groups, the weights scaled
    (`posformer.modules.sigmoid_router`, `posformer.config.sigmoid_router`; DeepSeek-V3, GLM-4.5).
    These fields other than their defaults need `n_experts`.
    `latent_attention` {"q_lora_rank", "kv_lora_rank", "nope_dim", "v_dim"} makes self-attention multi-head
    latent attention (MLA, DeepSeek-V2/V3; `posformer.modules.latent_attention`, `posformer.config.latent`):
    keys and values made from one low-rank latent, whose KV cache keeps that latent and one shared rope key per
    token; `d_head` is then the rope width of a head. None: ordinary attention.
    `mixer` "gated_deltanet" (default "attention") mixes the tokens of a layer by the gated delta rule instead of
    self-attention (Qwen3-Next's and Qwen3.5's linear-attention layers; `posformer.modules.gated_deltanet`,
    `posformer.config.linear_attention`): a state per head, decayed and corrected at each token, after a short
    causal convolution; no position encoding, no attention weights, a state of fixed size in the KV cache, arch
    decoder. Usually a per-layer setting: `layer_settings={"linear_attention": {"mixer": "gated_deltanet"}}`.
    `gated_deltanet` {"key_heads", "value_heads", "key_dim", "value_dim", "conv_kernel", "chunk_size"} sizes those
    layers (None, or any key left out: n_heads, key_heads, d_head, key_dim, 4, 64), resolved when a layer uses it.
    `scale_embeddings` multiplies token embeddings by sqrt(d_model) (Vaswani et al.).
    `per_layer_inputs` {"dim": P, "vocab_size": V} gives each layer of a decoder P features of each token of its
    own, from a table and a projection of the token embeddings, mixed into the residual stream after the layer's
    feed-forward (Gemma 4's per-layer embeddings; `posformer.modules.per_layer_inputs`,
    `posformer.config.per_layer_inputs`). None: none. `layer_scalars` gives each layer a stored scalar (a buffer,
    1 at first) that multiplies its output, the whole residual stream (Gemma 4's `layer_scalar`).
    `parallel_residual` computes attention and FFN from the same input,
    x + attn(norm1(x)) + ffn(norm2(x)) (GPT-NeoX, GPT-J); pre-norm, no cross-attention.
    `head_bias` gives the LM head a bias (Marian's `final_logits_bias`, BERT's `cls.predictions.bias`).
    `head_transform` makes an LM head (causal_lm, seq2seq_lm) first apply BERT's prediction-head
    transform: dense (d_model -> d_model), the activation, LayerNorm (BertLMHeadModel); the span_qa head too
    (ModernBertForQuestionAnswering). Its LayerNorm has a bias with `norm_bias`, its dense with
    `head_transform_bias` (ModernBERT's `classifier_bias`). `mlm_head` says what the masked_lm head is: "bert",
    the transform and a bias whatever `head_transform` and `head_bias` say (BERT), or "lm", an LM head that
    follows them (EuroBERT: the projection alone; ModernBERT: the transform, and the decoder's bias).
    `first_attn_norm` False leaves out the norm before the first layer's self-attention (norm_placement "pre"),
    whose input the embedding norm (`embed_norm`) has just normalised (ModernBERT).
    `pointer_generator` (encoder_decoder with the seq2seq_lm head only) lets the decoder copy source tokens: its
    logits are the log-probabilities of a mixture of the LM head's distribution and an attention over the
    encoder's input tokens (See et al. 2017; `posformer.modules.pointer_generator`). No Hugging Face family has it.
    `encoder_span_loss` w > 0 (encoder_decoder with the seq2seq_lm head only) gives the encoder a span head of its
    own (`Transformer.encoder_span`, start and end logits from the encoder's output) and, when the forward is given
    start_positions and end_positions, adds w times its span loss to the loss: an auxiliary task that teaches the
    encoder to mark where the answer lies for the decoder to find (question answering). 0: none.
    `separate_decoder_embeddings` (encoder_decoder only) gives the decoder its own token and
    token-type embeddings (`Transformer.decoder_embed_tokens`, `decoder_token_types`) instead of
    sharing the encoder's; a tied LM head ties to the decoder's (BERT2BERT, Hugging Face's
    `EncoderDecoderModel` with tie_encoder_decoder=False).
    `scale_tied_head` multiplies the hidden states by d_model**-0.5 before a tied
    LM head (T5 v1.0, Mesh TensorFlow).
    `logit_scale` multiplies the logits of a causal or seq2seq LM head (Cohere's `logit_scale`); other heads
    ignore it. Other than 1 only for a head without bias or transform (the head scales its input).
    `logit_softcap` c caps the logits of a causal or seq2seq LM head smoothly: c * tanh(logits / c) (Gemma 2 and
    4's `final_logit_softcapping`). None: no cap.
    `init` picks the weight initialisation (`posformer.modules.init`): "normal" draws every
    linear and embedding weight from N(0, init_std); "t5" is Mesh TensorFlow's
    fan-in scheme that T5 (attention scale 1.0) needs to train from scratch.
    `hf_model_type` names the Hugging Face family `posformer.to_hf` writes
    (set by `from_hf` and the presets; None: not exportable until set).
    The special token ids (`pad_token_id`, `bos_token_id`, `eos_token_id`,
    `decoder_start_token_id`) are None or integers >= 0; one outside the vocabulary
    is kept as metadata, as Hugging Face keeps it, and refused (`check_token_in_vocabulary`)
    only where it is used as a token: generation and `Transformer.shift_right`.
    """

    arch: str = "decoder"
    vocab_size: int = 32000
    d_model: int = 512
    n_layers: int = 6
    n_decoder_layers: int | None = None
    n_heads: int = 8
    n_kv_heads: int | None = None
    d_head: int | None = None
    d_ff: int | None = None
    position: str = "sinusoidal"
    position_params: dict[str, Any] = field(default_factory=dict)
    max_positions: int = 512
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_bias: bool = True
    norm_placement: str = "pre"
    final_norm: bool | None = None
    embed_norm: bool = False
    first_attn_norm: bool = True
    activation: str = "gelu"
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    qkv_bias: bool = True
    attn_out_bias: bool = True
    ffn_bias: bool = True
    n_experts: int | None = None
    experts_per_token: int | None = None
    expert_d_ff: int | None = None
    norm_topk_prob: bool = True
    router_aux_loss_coef: float = 0.0
    moe_layers: list[bool] | None = None
    router_bias: bool = False
    router_softmax: str = "all"
    expert_activation: str | None = None
    shared_expert_d_ff: int | None = None
    shared_expert_gate: bool = False
    sigmoid_router: dict[str, Any] | None = None
    attn_scale: float | None = None
    qk_norm: bool = False
    qk_norm_over: str = "head"
    qk_norm_kind: str = "norm"
    key_smear: bool = False
    sliding_window: int | None = None
    attention_chunk: int | None = None
    attention_sinks: bool = False
    attention_output_gate: bool = False
    values_from_keys: bool = False
    value_norm: bool = False
    kv_sources: list[int | None] | None = None
    sink_tokens: int = 0
    query_temperature: dict[str, Any] | None = None
    latent_attention: dict[str, Any] | None = None
    mixer: str = "attention"
    gated_deltanet: dict[str, Any] | None = None
    random_positions: int | None = None
    layer_types: list[str] | None = None
    layer_settings: dict[str, Any] = field(default_factory=dict)
    attn_impl: str = "sdpa"
    scale_embeddings: bool = False
    per_layer_inputs: dict[str, Any] | None = None
    layer_scalars: bool = False
    parallel_residual: bool = False
    tie_embeddings: bool = True
    separate_decoder_embeddings: bool = False
    pointer_generator: bool = False
    encoder_span_loss: float = 0.0
    head_bias: bool = False
    head_transform: bool = False
    head_transform_bias: bool = True
    mlm_head: str = "bert"
    scale_tied_head: bool = False
    logit_scale: float = 1.0
    logit_softcap: float | None = None
    type_vocab_size: int = 0
    head: str | None = None
    num_labels: int = 2
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    decoder_start_token_id: int | None = None
    init_std: float = 0.02
    init: str = "normal"
    hf_model_type: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    # ----------------------------------------------------------------- derived
    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def expert_ff_dim(self) -> int:
        """The hidden units of each expert: `expert_d_ff`, else `ff_dim`."""
        return self.expert_d_ff if self.expert_d_ff is not None else self.ff_dim

    def uses_experts(self, layer: int) -> bool:
        """Whether layer `layer` of a stack has the mixture-of-experts feed-forward (`n_experts`, `moe_layers`)."""
        return self.n_experts is not None and (self.moe_layers is None or self.moe_layers[layer])

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers if self.n_decoder_layers is not None else self.n_layers

    @property
    def head_kind(self) -> str:
        return self.head if self.head is not None else DEFAULT_HEAD[self.arch]

    @property
    def scale(self) -> float:
        """`attn_scale`, else the position encoding's own default, else 1/sqrt(d_head)."""
        if self.attn_scale is not None:
            return self.attn_scale
        encoding = positions.get(self.position)
        if self.latent_attention is not None:  # MLA: the nope and the rope part of a head together
            return latent_scale(self)
        if isinstance(encoding, OwnAttnScale):  # DeBERTa's
            return encoding.default_attn_scale(self.position_params, self.head_dim)
        return 1.0 / math.sqrt(self.head_dim)

    def layer_config(self, label: str | None) -> "Config":
        """The config of the layers labelled `label` (`layer_types`): the config's own fields with that label's
        `layer_settings` on top, and no per-layer fields of its own. None or a label without settings: self."""
        settings = self.layer_settings.get(label) if label is not None else None
        if not settings:
            return self
        return dataclasses.replace(self, layer_types=None, layer_settings={}, kv_sources=None, **settings)

    def layer_configs(self, n_layers: int) -> list["Config"]:
        """The config of each of a stack's `n_layers` layers: by `layer_types` (one object per label), else self."""
        if self.layer_types is None:
            return [self] * n_layers
        by_label = {label: self.layer_config(label) for label in dict.fromkeys(self.layer_types)}
        return [by_label[label] for label in self.layer_types]

    @property
    def use_final_norm(self) -> bool:
        if self.final_norm is not None:
            return self.final_norm
        return self.norm_placement != "post"

    # -------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise `ValueError` naming the first invalid field."""
        check_config(self)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data (`position_params` resolved: the encoding's defaults included)."""
        data = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["position_params"] = dict(data["position_params"])
        for settings in data["layer_settings"].values():
            if "position_params" in settings:
                settings["position_params"] = dict(settings["position_params"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Config":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Config has no field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        """Write JSON (`.json`) or YAML (`.yaml`/`.yml`), chosen by suffix."""
        path = Path(path)
        if path.suffix in (".yaml", ".yml"):
            import yaml

            text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        elif path.suffix == ".json":
            text = json.dumps(self.to_dict(), indent=2) + "\n"
        else:
            raise ValueError(f"config file {path}: expected a .json, .yaml or .yml suffix")
        write_text_atomic(path, text)

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        """Read a config written by `save` (JSON or YAML, chosen by suffix)."""
        from posformer.utils.user_files import read_json_file, read_yaml_file

        path = Path(path)
        if path.suffix not in (".json", ".yaml", ".yml"):
            raise ValueError(f"config file {path}: expected a .json, .yaml or .yml suffix")
        data = read_json_file(path, "config file") if path.suffix == ".json" else read_yaml_file(path, "config file")
        if not isinstance(data, dict):
            raise ValueError(f"config file {path}: expected a mapping of field names to values")
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError) as err:
            raise ValueError(f"config file {path}: {err}") from None

    def replace(self, **changes: Any) -> "Config":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "Config":
        """A named published configuration; `overrides` replace any of its fields."""
        from posformer.presets import preset_fields

        return cls.from_dict({**preset_fields(name), **overrides})
