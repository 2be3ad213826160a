"""Every Hugging Face family posformer maps, with the HF config class's own defaults (issue 12).

Each case builds the config class with its defaults and overrides only sizes (vocabulary,
width, depth, heads, feed-forward, max positions), so a default the family tests
never set (GPT-2's bos/eos 50256 in a 97-token vocabulary, DeBERTa-v2 without
relative attention, Mistral's sliding window) is loaded exactly as a tiny HF test
checkpoint carries it. The parity protocol is the family tests' (`hf_oracle.check_family`,
max |diff| <= 1e-4 against transformers 4.57.6), and `to_hf` writes the special
token ids back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
import transformers

import posformer as pf
from hf_oracle import check_family, padded_batch, right_padded_batch

VOCAB = 97
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
BERT_SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=40,
    max_position_embeddings=64,
)
LLAMA_SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
V5 = int(transformers.__version__.split(".")[0]) >= 5
T5_SIZES = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=40, num_layers=2, num_heads=4)


@dataclass(frozen=True)
class Case:
    """One family: its HF config and model class names, the size overrides, and how it is fed."""

    config_class: str
    model_class: str
    sizes: dict
    seq2seq: bool = False
    right_padded_only: bool = False  # RoBERTa counts positions over non-pad ids (hf/roberta.py)
    # EncoderDecoderModel: the ids that count are generate's (the top-level ones, else the decoder's)
    generation_ids: bool = False
    extra: dict = field(default_factory=dict)
    output: str = "logits"  # a base model's (the family's only class): last_hidden_state


CASES = {
    "bert": Case("BertConfig", "BertForMaskedLM", BERT_SIZES),
    "bloom": Case("BloomConfig", "BloomForCausalLM", dict(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)),
    # Cohere2: 4 layers, so that the default pattern gives local layers and a global one
    "cohere2": Case("Cohere2Config", "Cohere2ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=4)),
    "deberta-v2": Case("DebertaV2Config", "DebertaV2ForMaskedLM", BERT_SIZES),
    # DeepSeek-V3: its latent sizes shrunk, as many key/value heads as heads (transformers runs no fewer); its
    # first_k_dense_replace=3 leaves both layers dense
    "deepseek_v3": Case(
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        dict(
            LLAMA_SIZES,
            num_key_value_heads=4,
            q_lora_rank=24,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
        ),
    ),
    # EuroBERT (transformers 5 only): its pad id (128001 by default) must lie inside the vocabulary (HF's padding_idx)
    "eurobert": Case("EuroBertConfig", "EuroBertForMaskedLM", dict(LLAMA_SIZES, pad_token_id=VOCAB - 1)),
    # EXAONE 4: 4 layers, so that the default pattern gives local RoPE layers and a global NoPE one
    "exaone4": Case("Exaone4Config", "Exaone4ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=4)),
    # Gemma 3: 6 layers, so that the default pattern gives local layers and a global one
    "gemma3_text": Case("Gemma3TextConfig", "Gemma3ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=6)),
    # Gemma 4 (transformers 5 only): 6 layers, so that the default pattern gives local layers and a global one; the
    # per-layer inputs' table of the vocabulary's size (not 262144 rows); its head widths 256 and 512, per-layer
    # inputs of 256 and proportional RoPE kept
    "gemma4_text": Case(
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        dict(LLAMA_SIZES, num_hidden_layers=6, vocab_size_per_layer_input=VOCAB),
    ),
    # GLM-4.5: 16 experts (not 128) of 24 units (not 1408); its dense first layer, 8 experts per token, one group and
    # one shared expert kept
    "glm4_moe": Case(
        "Glm4MoeConfig", "Glm4MoeForCausalLM", dict(LLAMA_SIZES, n_routed_experts=16, moe_intermediate_size=24)
    ),
    "gpt2": Case(
        "GPT2Config", "GPT2LMHeadModel", dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    ),
    "gpt_neox": Case("GPTNeoXConfig", "GPTNeoXForCausalLM", BERT_SIZES),
    # GPT-OSS: 16 experts (not 128); its default YaRN scaling, head_dim 64 and window of 128 kept
    "gpt_oss": Case("GptOssConfig", "GptOssForCausalLM", dict(LLAMA_SIZES, num_local_experts=16)),
    "llama": Case("LlamaConfig", "LlamaForCausalLM", LLAMA_SIZES),
    # Llama 4: 4 layers, so that the default pattern gives chunked RoPE layers and a NoPE one; its 16 experts on
    # every layer, head_dim 128 and chunks and temperature floor of 8192 kept
    "llama4_text": Case(
        "Llama4TextConfig", "Llama4ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=4, intermediate_size_mlp=40)
    ),
    # Marian's pad id (58100 by default) is the last row of the embedding, which HF's nn.Embedding
    # needs inside the vocabulary (padding_idx): it moves with the vocabulary size.
    "marian": Case(
        "MarianConfig",
        "MarianMTModel",
        dict(
            vocab_size=VOCAB,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=40,
            decoder_ffn_dim=40,
            max_position_embeddings=64,
            pad_token_id=VOCAB - 1,
            decoder_start_token_id=VOCAB - 1,
        ),
        seq2seq=True,
    ),
    "mistral": Case("MistralConfig", "MistralForCausalLM", LLAMA_SIZES),
    # ModernBERT: its pad id (50283 by default) inside the vocabulary (HF's padding_idx); its 2 layers: a global one
    # and a local one with the default window of 128 and RoPE bases of 160k and 10k
    "modernbert": Case("ModernBertConfig", "ModernBertForMaskedLM", dict(BERT_SIZES, pad_token_id=VOCAB - 1)),
    "mixtral": Case("MixtralConfig", "MixtralForCausalLM", LLAMA_SIZES),
    "mt5": Case("MT5Config", "MT5ForConditionalGeneration", T5_SIZES, seq2seq=True),
    # Olmo 3: 4 layers, so that the default pattern gives local layers and a global one
    "olmo3": Case("Olmo3Config", "Olmo3ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=4)),
    # Phi-3's pad id (32000 by default, also its eos) must lie inside the vocabulary (HF's padding_idx)
    "phi3": Case("Phi3Config", "Phi3ForCausalLM", dict(LLAMA_SIZES, pad_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)),
    "qwen2": Case("Qwen2Config", "Qwen2ForCausalLM", LLAMA_SIZES),
    "qwen3": Case("Qwen3Config", "Qwen3ForCausalLM", LLAMA_SIZES),
    # Qwen3.5's text model (transformers 5 only): 4 layers, so that the default pattern gives three gated DeltaNet
    # layers and a gated attention one; its head_dim 256, DeltaNet sizes and M-RoPE section [11, 11, 10] kept
    "qwen3_5_text": Case("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=4)),
    # Qwen3-Next: 4 layers (three gated DeltaNet layers, then gated attention); 16 experts (not 512) of 24 units
    # (not 512) and a shared expert of 24; its 10 experts per token, head_dim 256 and DeltaNet sizes kept
    "qwen3_next": Case(
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        dict(
            LLAMA_SIZES,
            num_hidden_layers=4,
            num_experts=16,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=24,
        ),
    ),
    # Qwen3-MoE: 16 experts (not 128) of 24 units (not 768); its 8 experts per token kept
    "qwen3_moe": Case(
        "Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(LLAMA_SIZES, num_experts=16, moe_intermediate_size=24)
    ),
    # 4.57.6's Qwen3VLTextModel reads mrope_section from rope_scaling and fails when the config has none (its
    # default): there it gets transformers' default section written out; 5.x builds from the defaults alone
    "qwen3_vl_text": Case(
        "Qwen3VLTextConfig",
        "Qwen3VLTextModel",
        dict(LLAMA_SIZES, **({} if V5 else {"rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20]}})),
        output="last_hidden_state",
    ),
    "roberta": Case("RobertaConfig", "RobertaForMaskedLM", BERT_SIZES, right_padded_only=True),
    # SmolLM3's pad id (128004 by default) must lie inside the vocabulary (HF's padding_idx); 4 layers: the
    # fourth is NoPE by default
    "smollm3": Case(
        "SmolLM3Config", "SmolLM3ForCausalLM", dict(LLAMA_SIZES, num_hidden_layers=4, pad_token_id=VOCAB - 1)
    ),
    "t5": Case("T5Config", "T5ForConditionalGeneration", T5_SIZES, seq2seq=True),
    # EncoderDecoderConfig has no sizes of its own: two default BertConfigs, the decoder's as
    # from_encoder_decoder_pretrained sets it (is_decoder, add_cross_attention); no top-level ids.
    "encoder-decoder": Case(
        "EncoderDecoderConfig",
        "EncoderDecoderModel",
        dict(
            encoder=dict(model_type="bert", **BERT_SIZES),
            decoder=dict(model_type="bert", is_decoder=True, add_cross_attention=True, **BERT_SIZES),
        ),
        seq2seq=True,
        generation_ids=True,
    ),
}


@torch.no_grad()
def _perturb_constant_tensors(model: torch.nn.Module, std: float = 0.2, seed: int = 1) -> torch.nn.Module:
    """Add N(0, std) noise to every parameter HF initialises to one constant (norm weights, biases,
    Marian's final_logits_bias), so a mapping that swaps or drops one shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    tensors = dict(model.named_parameters())
    tensors.update((name, t) for name, t in model.named_buffers() if name.endswith("final_logits_bias"))
    for tensor in tensors.values():
        if tensor.numel() > 1 and bool((tensor == tensor.flatten()[0]).all()):
            tensor.add_(torch.randn(tensor.shape, generator=g) * std)
    return model


def _hf_model(case: Case):
    config = getattr(transformers, case.config_class)(**case.sizes, attn_implementation="eager")
    torch.manual_seed(0)
    return _perturb_constant_tensors(getattr(transformers, case.model_class)(config)).eval()


def _inputs(case: Case) -> tuple[dict, dict]:
    """The batch (input_ids, attention_mask) and, for encoder-decoders, the decoder inputs."""
    batch = right_padded_batch(VOCAB) if case.right_padded_only else padded_batch(VOCAB)
    if not case.seq2seq:
        return batch, {}
    decoder = padded_batch(VOCAB, length=7, seed=1)
    return batch, {"decoder_input_ids": decoder["input_ids"], "decoder_attention_mask": decoder["attention_mask"]}


def test_every_mapped_family_has_a_case():
    assert sorted(CASES) == pf.hf.family.supported()


@pytest.mark.parametrize("family", sorted(CASES))
def test_against_hf_default_config(tmp_path, family):
    case = CASES[family]
    if not hasattr(transformers, case.config_class):
        pytest.skip(f"transformers {transformers.__version__} has no {case.config_class} (5.x has)")
    hf = _hf_model(case)
    batch, extra = _inputs(case)
    model = check_family(hf, getattr(transformers, case.model_class), tmp_path, batch, case.output, **extra)
    written = getattr(transformers, case.config_class).from_pretrained(tmp_path / "roundtrip")
    expected = hf.config
    if case.generation_ids:
        expected, written = hf.generation_config, transformers.GenerationConfig.from_model_config(written)
    for name in TOKEN_IDS:  # transformers 5's configs only have the ids their family uses
        assert getattr(model.cfg, name) == getattr(expected, name, None) == getattr(written, name, None), name
