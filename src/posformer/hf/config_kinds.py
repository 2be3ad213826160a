"""The kinds of the Hugging Face config.json keys the families read, checked before any family maps them.

A config.json comes from outside: a hand-edited or damaged one must give an error naming the file and the key
(`.../config.json: hidden_size='32' is invalid: expected an integer`), not a TypeError inside a family's mapping.
None passes here wherever a key may be null; the family decides whether it may.
"""

from __future__ import annotations

from typing import Any

from posformer.utils.validation import fail, is_int, is_number

INTEGER_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "head_dim",
    "sliding_window",
    "pad_token_id",
    "bos_token_id",
    "decoder_start_token_id",
    "num_labels",
    "n_positions",
    "n_layer",
    "n_head",
    "n_inner",
    "n_embd",
    "n_embed",
    "num_layers",
    "num_decoder_layers",
    "num_heads",
    "d_model",
    "d_kv",
    "d_ff",
    "relative_attention_num_buckets",
    "relative_attention_max_distance",
    "position_buckets",
    "max_relative_positions",
    "encoder_layers",
    "decoder_layers",
    "encoder_ffn_dim",
    "encoder_attention_heads",
    "decoder_vocab_size",
    "embedding_size",
    "original_max_position_embeddings",
    "max_window_layers",
    "query_pre_attn_scalar",
    "no_rope_layer_interval",
    "pretraining_tp",
    "seq_length",
    "attention_head_size",
    "conv_kernel_size",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "first_k_dense_replace",
    "n_routed_experts",
    "n_shared_experts",
    "n_group",
    "topk_group",
    "num_nextn_predict_layers",
    "num_mtp_layers",
    "hidden_size_per_layer_input",
    "vocab_size_per_layer_input",
    "num_kv_shared_layers",
    "global_head_dim",
    "num_global_key_value_heads",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "full_attention_interval",
    "shared_expert_intermediate_size",
    "local_attention",
    "global_attn_every_n_layers",
)
NUMBER_KEYS = (
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "initializer_range",
    "init_std",
    "initializer_factor",
    "attention_dropout",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "hidden_dropout",
    "dropout",
    "dropout_rate",
    "resid_pdrop",
    "attn_pdrop",
    "activation_dropout",
    "rope_theta",
    "rope_local_base_freq",
    "partial_rotary_factor",
    "logit_scale",
    "router_aux_loss_coef",
    "router_jitter_noise",
    "routed_scaling_factor",
    "final_logit_softcapping",
    "norm_eps",
    "global_rope_theta",
    "local_rope_theta",
    "embedding_dropout",
    "mlp_dropout",
)
BOOL_KEYS = (
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "use_sliding_window",
    "tie_encoder_decoder",
    "share_att_key",
    "relative_attention",
    "position_biased_input",
    "add_cross_attention",
    "use_parallel_residual",
    "scale_embedding",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "is_decoder",
    "apply_residual_connection_post_layernorm",
    "share_encoder_decoder_embeddings",
    "legacy",
    "norm_topk_prob",
    "output_router_logits",
    "rope_interleave",
    "use_qk_norm",
    "attention_k_eq_v",
    "enable_moe_block",
    "use_double_wide_mlp",
    "norm_bias",
    "classifier_bias",
    "decoder_bias",
)
STRING_KEYS = (
    "model_type",
    "hidden_act",
    "hidden_activation",
    "activation_function",
    "position_embedding_type",
    "feed_forward_proj",
    "norm_rel_ebd",
    "classifier_activation",
)
MAPPING_KEYS = ("rope_scaling", "rope_parameters", "per_layer_config")
LIST_KEYS = ("layer_types", "no_rope_layers", "architectures", "mlp_only_layers")


def check_hf_config_kinds(hf: dict[str, Any], path: str) -> None:
    """Raise `ValueError` naming `path` and the key when a known key of config.json has a value of the wrong kind
    (`eos_token_id` may be an id or a list of ids; `pos_att_type` a string or a list; `sliding_window_pattern` an
    integer or a string, EXAONE 4's "LLLG"; `use_bidirectional_attention` a bool or a string, Gemma 4's "vision"
    or "all")."""
    checks = [
        (INTEGER_KEYS, is_int, "an integer"),
        (NUMBER_KEYS, is_number, "a finite number"),
        (BOOL_KEYS, lambda v: isinstance(v, bool), "true or false"),
        (STRING_KEYS, lambda v: isinstance(v, str), "a string"),
        (MAPPING_KEYS, lambda v: isinstance(v, dict), "an object"),
        (LIST_KEYS, lambda v: isinstance(v, list), "a list"),
    ]
    for keys, ok, expected in checks:
        for key in keys:
            value = hf.get(key)
            if value is not None and not ok(value):
                fail(f"{path}: {key}", value, f"{expected} (or null)")
    eos = hf.get("eos_token_id")
    if eos is not None and not (is_int(eos) or isinstance(eos, list) and all(is_int(i) for i in eos)):
        fail(f"{path}: eos_token_id", eos, "a token id or a list of token ids (or null)")
    pattern = hf.get("sliding_window_pattern")
    if pattern is not None and not (is_int(pattern) or isinstance(pattern, str)):
        fail(f"{path}: sliding_window_pattern", pattern, "an integer or a string (or null)")
    bidirectional = hf.get("use_bidirectional_attention")
    if bidirectional is not None and not isinstance(bidirectional, (bool, str)):
        fail(f"{path}: use_bidirectional_attention", bidirectional, "true, false or a string (or null)")
    pos_att = hf.get("pos_att_type")
    if pos_att is not None and not (
        isinstance(pos_att, str) or isinstance(pos_att, list) and all(isinstance(p, str) for p in pos_att)
    ):
        fail(f"{path}: pos_att_type", pos_att, "a string or a list of strings (or null)")
