"""Chunked attention (Config.attention_chunk, Llama 4): each query sees the keys of its own chunk of C tokens,
counted from the row's first real token. Oracle: transformers 4.57.6's mask functions (`chunked_overlay` on a
causal mask with padding). Properties: a stack whose every layer chunks computes each chunk as if it stood alone;
cached decoding of a Llama-4-like stack (chunked RoPE layers, global NoPE layers) equals the full pass."""

import pytest
import torch
from transformers.masking_utils import and_masks, causal_mask_function, chunked_overlay, padding_mask_function

import posformer as pf
from posformer.ops.masks import MaskRule, build_mask
from tests.positions.test_positions_conformance import config

CHUNK = 4


@pytest.mark.parametrize("q_len, k_len", [(11, 11), (3, 11), (1, 9)])
def test_the_mask_is_transformers_chunked_causal_mask(q_len: int, k_len: int) -> None:
    """Rows unpadded, left padded by 3 and by 6, with the queries after cached keys: the pairs transformers 4.57.6
    allows (causal, padding, and (j - lead) // C == (i - lead) // C) are exactly the rule's."""
    keep = torch.ones(3, k_len, dtype=torch.bool)
    keep[1, :3] = False
    keep[2, : min(6, k_len - 1)] = False
    lead = (keep.long().cumsum(-1) == 0).sum(-1)
    hf = and_masks(causal_mask_function, padding_mask_function(keep), chunked_overlay(CHUNK, lead))
    offset = k_len - q_len
    b, i, j = torch.arange(3)[:, None, None], torch.arange(q_len)[None, :, None], torch.arange(k_len)[None, None, :]
    expected = hf(b, torch.zeros(()), offset + i, j).expand(3, q_len, k_len)
    rule = MaskRule(q_len, k_len, torch.device("cpu"), keep, causal=True, chunk=CHUNK)
    assert torch.equal(rule.allowed(0, q_len, k_len)[:, 0], expected)


def test_every_chunk_is_computed_as_if_it_stood_alone() -> None:
    """Every layer chunks: the logits of the tokens of chunk n are those of its tokens run alone at their
    positions (any encoding that reads the positions sees the same ones)."""
    torch.manual_seed(0)
    model = pf.Transformer(config("alibi", "decoder", attention_chunk=CHUNK, max_positions=64)).eval()
    ids = torch.randint(1, model.cfg.vocab_size, (2, 3 * CHUNK + 2))
    whole = model(ids).logits
    for start in range(0, ids.shape[1], CHUNK):
        part = ids[:, start : start + CHUNK]
        positions = torch.arange(start, start + part.shape[1]).expand(2, -1)
        torch.testing.assert_close(model(part, position_ids=positions).logits, whole[:, start : start + CHUNK])


@pytest.mark.parametrize("name", ["rope", "fox", "stick_breaking"])
def test_cached_decoding_of_a_llama4_like_stack_equals_the_full_pass(name: str) -> None:
    """Chunked layers with the encoding beside global NoPE layers (Llama 4's pattern); a left-padded batch;
    greedy tokens through the cache equal the argmax of one full pass, prompt and generation across chunks."""
    torch.manual_seed(0)
    cfg = config(
        name,
        "decoder",
        n_layers=4,
        layer_types=["chunked", "chunked", "chunked", "global"],
        layer_settings={"chunked": {"attention_chunk": CHUNK}, "global": {"position": "none"}},
    )
    model = pf.Transformer(cfg).eval()
    prompt = torch.randint(1, cfg.vocab_size, (2, 6))
    mask = torch.tensor([[1] * 6, [0] * 3 + [1] * 3])
    out = model.generate(prompt, attention_mask=mask, max_new_tokens=6, eos_token_id=[])
    full_mask = torch.cat([mask, torch.ones(2, 6, dtype=mask.dtype)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(out, attention_mask=full_mask, position_ids=positions).logits
    assert torch.equal(logits[:, 5:-1].argmax(-1), out[:, 6:])


def test_a_chunk_as_long_as_the_keys_changes_nothing() -> None:
    mask = build_mask(None, True, 8, 8, torch.float32, torch.device("cpu"), chunk=8)
    assert mask.is_causal and mask.rule.chunk is None


def test_an_encoder_refuses_chunks_by_name() -> None:
    with pytest.raises(ValueError, match=r"Config.attention_chunk=4 is invalid: expected None with arch='encoder'"):
        config("rope", "encoder", attention_chunk=4)


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"attention_sinks": True}, "attention_sinks=True"),
        (
            {"layer_types": ["c", "full_attention"], "layer_settings": {"c": {"attention_chunk": 4}}},
            "attention_chunk=4",
        ),
    ],
)
def test_to_hf_refuses_what_no_family_writes(tmp_path, fields: dict, named: str) -> None:
    """Chunks (in one layer type) and learned sinks: Llama has neither (of the families posformer writes, only
    GPT-OSS has sinks), so the export is refused by name rather than written to give other logits."""
    cfg = config("rope", "decoder", hf_model_type="llama", **fields)
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=rf"Config.{named}"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)
