"""Helpers of the Hugging Face parity tests: tiny random HF models as the oracle.

Each family test builds a tiny random `transformers` model from a config, saves it,
loads it with `posformer.from_hf`, and compares outputs on a batch with padding
(full rows, right padding and left padding), then round-trips through `posformer.to_hf`.
Outputs are compared where attention_mask is 1: what a model computes at a pad
position is not defined (and differs between Hugging Face's own attention kernels).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import posformer as pf

TOLERANCE = 1e-4
ORACLE = f"transformers {transformers.__version__}"  # named in every parity failure
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5


def removed_in_transformers_5(what: str) -> pytest.MarkDecorator:
    """A test of a class or option transformers 5 removed: it runs against transformers 4.57.6 only."""
    return pytest.mark.skipif(TRANSFORMERS_5, reason=f"transformers 5 removed {what}; checked against 4.57.6 only")


def padded_batch(vocab_size: int, length: int = 11, low: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three rows: full, right-padded (4 pads) and left-padded (3 pads). Pads hold token 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab_size, (3, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0
    mask[2, :3] = 0
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def right_padded_batch(vocab_size: int, length: int = 11, low: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    """Two rows: full and right-padded (for models whose positions count from the first token)."""
    batch = padded_batch(vocab_size, length, low, seed)
    return {k: v[:2] for k, v in batch.items()}


def causal_labels(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The batch's input ids as causal-LM labels, -100 where no real token predicts them: at a pad, and right
    after one (the first real token of a left-padded row, predicted from a pad position's undefined logits)."""
    mask = batch["attention_mask"]
    after_pad = torch.cat([torch.zeros_like(mask[:, :1]), mask[:, :-1] == 0], dim=1).bool()
    return batch["input_ids"].masked_fill((mask == 0) | after_pad, -100)


def save_hf(hf_model, directory: Path) -> Path:
    hf_model.save_pretrained(directory, safe_serialization=True)
    return directory


def save_fused_experts(
    hf_model, directory: Path, module: str = "mlp", names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
) -> Path:
    """`hf_model` saved with its experts in transformers 5's in-memory layout: each layer's
    `{layer}.mlp.experts.gate_up_proj` (n_experts, 2 d_ff, hidden), its experts' `names[0]` (gate) rows then
    `names[1]` (up) rows, `down_proj` (n_experts, hidden, d_ff) of `names[2]`, the router `{layer}.mlp.gate`,
    built here from the per-expert tensors under `{layer}.{module}` that `save_pretrained` writes; every other
    tensor (a dense layer, shared experts, a router's bias) as saved. Under transformers 5 that state is its model's
    own `state_dict()`, which is checked."""
    save_hf(hf_model, directory)
    state = load_file(directory / "model.safetensors")
    fused = {key: value for key, value in state.items() if f".{module}.experts." not in key}
    layers = sorted({key.split(f".{module}.")[0] for key in state if f".{module}.experts." in key})
    for layer in layers:
        n = len({key for key in state if key.startswith(f"{layer}.{module}.experts.")}) // 3
        expert = [[state[f"{layer}.{module}.experts.{e}.{name}.weight"] for e in range(n)] for name in names]
        fused[f"{layer}.mlp.experts.gate_up_proj"] = torch.stack([torch.cat(pair) for pair in zip(*expert[:2])])
        fused[f"{layer}.mlp.experts.down_proj"] = torch.stack(expert[2])
        fused[f"{layer}.mlp.gate.weight"] = fused.pop(f"{layer}.{module}.gate.weight")
    if TRANSFORMERS_5:
        own = hf_model.state_dict()
        assert sorted(fused) == sorted(own) and all(torch.equal(fused[k], own[k]) for k in own), "not 5's layout"
    save_file({key: value.contiguous() for key, value in fused.items()}, directory / "model.safetensors")
    return directory


def assert_generates_hf_tokens(
    pf_model: pf.Transformer, hf_model, vocab_size: int, lengths: tuple[int, ...], new_tokens: int = 8
) -> None:
    """Greedy decoding with the cache from a full and a left-padded prompt (rows 0 and 2 of `padded_batch`) of each
    length: posformer's tokens are transformers' (`generate` without sampling or eos)."""
    for length in lengths:
        batch = {key: value[[0, 2]] for key, value in padded_batch(vocab_size, length=length).items()}
        expected = hf_model.generate(
            **batch, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
        )
        ours = pf_model.generate(**batch, max_new_tokens=new_tokens, eos_token_id=[])
        assert torch.equal(ours, expected), f"prompt of {length} tokens"


# the fields a family with one full attention per layer, no QK-norm and a plain head has no key for, each with
# the name its refusal gives: the seq2seq families' (T5, Marian) shared part, then the decoder-only families'
PLAIN_STACK_REFUSALS = [
    ({"qk_norm": True}, "qk_norm=True"),
    ({"sliding_window": 4}, "sliding_window=4"),
    ({"head_transform": True}, "head_transform=True"),
    ({"query_temperature": {"scale": 0.1, "floor_size": 4}}, "query_temperature="),
]
PLAIN_DECODER_REFUSALS = PLAIN_STACK_REFUSALS + [
    ({"layer_types": ["full_attention", "nope"], "layer_settings": {"nope": {"position": "none"}}}, "layer_types="),
    ({"n_decoder_layers": 1}, "decoder_layers=1"),
]


def assert_to_hf_refuses(cfg: pf.Config, changes: dict, name: str, directory: Path) -> None:
    """`pf.to_hf` of a model of `cfg` with `changes` raises `UnsupportedCheckpoint` naming `name` (a pattern)."""
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.to_hf(pf.Transformer(cfg.replace(**changes)), directory)


def max_diff(ours: torch.Tensor, theirs: torch.Tensor, keep: torch.Tensor) -> float:
    """max |ours - theirs| over the positions where keep (B, T) is 1. Tensors: (B, T, ...)."""
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    return float((ours - theirs).abs()[keep.bool()].max())


@torch.no_grad()
def assert_same_outputs(
    pf_model: pf.Transformer,
    hf_model,
    batch: dict,
    field: str | tuple[str, ...] = "logits",
    hf_field: str | None = None,
    per_token: bool = True,
    **extra,
) -> float:
    """Run both models on `batch` and assert max |diff| <= TOLERANCE on the kept positions.

    `field` may name several outputs (QA: ("start_logits", "end_logits")); `per_token=False`
    compares every entry of a (B, ...) sequence-level output (classification logits).
    """
    hf_model.eval()
    pf_model.eval()
    fields = (field,) if isinstance(field, str) else tuple(field)
    ours_out, theirs_out = pf_model(**batch, **extra), hf_model(**batch, **extra)
    worst = 0.0
    for name in fields:
        ours = getattr(ours_out, name)
        theirs = getattr(theirs_out, (hf_field or name) if len(fields) == 1 else name)
        if per_token:
            keep = (
                batch["attention_mask"]
                if "decoder_input_ids" not in extra
                else extra.get("decoder_attention_mask", torch.ones(ours.shape[:2]))
            )
        else:
            keep = torch.ones(ours.shape[:1])
        diff = max_diff(ours, theirs, keep)
        assert diff <= TOLERANCE, f"{name}: max |diff| = {diff:.3g} > {TOLERANCE} against {ORACLE}"
        worst = max(worst, diff)
    return worst


def round_trip(pf_model: pf.Transformer, hf_class, directory: Path):
    """`pf.to_hf` into `directory`, then `hf_class.from_pretrained` (eager attention, float32)."""
    pf.to_hf(pf_model, directory)
    return hf_class.from_pretrained(directory, attn_implementation="eager").eval()


def check_family(
    hf_model,
    hf_class,
    tmp_path: Path,
    batch: dict,
    field: str | tuple[str, ...] = "logits",
    per_token: bool = True,
    **extra,
) -> pf.Transformer:
    """The whole parity protocol: save, from_hf, compare, to_hf, from_pretrained, compare again."""
    hf_model.eval()
    model = pf.from_hf(save_hf(hf_model, tmp_path / "hf"))
    assert_same_outputs(model, hf_model, batch, field, per_token=per_token, **extra)
    reloaded = round_trip(model, hf_class, tmp_path / "roundtrip")
    assert_same_outputs(model, reloaded, batch, field, per_token=per_token, **extra)
    return model
