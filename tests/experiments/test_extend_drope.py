"""DroPE in `posformer extend` (Gelberg et al. 2025, github.com/SakanaAI/DroPE): the dropped model is the trained
weights without RoPE (against a model built with position "none", and against the reference's own mechanism on
Hugging Face Llama: every layer's cos set to 1 and sin to 0); the recalibration trains every weight at L with the
fine-tunes' tokens a step; the grid lists its rows and claims; a source without RoPE is refused by name."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import posformer as pf
from hf_oracle import TOLERANCE, padded_batch, save_hf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.data.text import default_corpus
from posformer.experiments.extension import experiment
from posformer.experiments.extension.methods import extended_params, position_of, with_params
from posformer.experiments.extension.settings import ExtendSettings
from posformer.loading import checkpoint_dir, load_model, tokenizer_paths

TRAIN_LEN, TARGET = 16, 64
SIZES = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_positions=TRAIN_LEN)


def _dropped(model: pf.Transformer) -> pf.Transformer:
    """What `extend` scores as the drope row: the method's params and position on `model`'s weights."""
    return with_params(model, extended_params(model, "drope", TARGET, TRAIN_LEN), TARGET, position_of("drope"))


@torch.no_grad()
def test_dropping_rope_gives_the_same_weights_built_without_positions_logit_for_logit():
    """Built independently: a Config with position "none" and the same sizes, each parameter copied by name. The
    dropped model computes its logits bit for bit, keeps no position information (any position_ids give the same
    logits, where the RoPE source's change), and differs from the source only in position and max_positions."""
    torch.manual_seed(0)
    source = pf.Transformer(pf.Config(arch="decoder", position="rope", position_params={"theta": 500.0}, **SIZES))
    dropped = _dropped(source.eval()).eval()
    built = pf.Transformer(pf.Config(arch="decoder", position="none", **SIZES)).eval()
    weights = dict(source.named_parameters())
    for name, parameter in built.named_parameters():
        parameter.copy_(weights[name])
    ids = torch.randint(0, 50, (2, 3 * TARGET), generator=torch.Generator().manual_seed(1))
    assert torch.equal(dropped(ids).logits, built(ids).logits)
    shuffled = torch.randperm(ids.shape[1], generator=torch.Generator().manual_seed(2)).expand(2, -1)
    assert torch.equal(dropped(ids, position_ids=shuffled).logits, dropped(ids).logits)
    short, reordered = ids[:, :TRAIN_LEN], shuffled[:, :TRAIN_LEN]
    assert not torch.allclose(source(short, position_ids=reordered).logits, source(short).logits)
    ours, theirs = source.cfg.to_dict(), dropped.cfg.to_dict()
    assert {k for k in ours if ours[k] != theirs[k]} == {"position", "position_params", "max_positions"}
    assert theirs["position"] == "none" and theirs["position_params"] == {}
    assert all(torch.equal(v, dropped.state_dict()[k]) for k, v in source.state_dict().items())


@torch.no_grad()
def test_dropped_llama_equals_the_reference_nope_attention_on_hugging_face(tmp_path):
    """The reference code (SakanaAI/DroPE, custom_models/attention.py) removes RoPE by handing every attention layer
    cos = 1 and sin = 0. A tiny HF Llama with that done, against the same checkpoint loaded by posformer and dropped
    (GQA, a padded batch, compared where the mask is 1)."""
    torch.manual_seed(0)
    hf = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=97,
            hidden_size=32,
            intermediate_size=40,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=TRAIN_LEN,
            initializer_range=0.2,
            attn_implementation="eager",
        )
    ).eval()
    source = pf.from_hf(str(save_hf(hf, tmp_path / "llama"))).eval()
    rotary = hf.model.rotary_emb.forward

    def identity_rotation(x, position_ids):
        cos, sin = rotary(x, position_ids)
        return torch.ones_like(cos), torch.zeros_like(sin)

    hf.model.rotary_emb.forward = identity_rotation
    batch = padded_batch(97, length=2 * TARGET)
    mask = batch["attention_mask"].bool()
    expected = hf(**batch).logits[mask]
    torch.testing.assert_close(_dropped(source).eval()(**batch).logits[mask], expected, rtol=0, atol=TOLERANCE)
    assert not torch.allclose(source(**batch).logits[mask], expected, rtol=0, atol=TOLERANCE)


def test_the_recalibration_batch_reads_a_fine_tuning_steps_tokens_in_windows_of_l():
    assert ExtendSettings(target_len=512, batch_size=8).resolve(64).recalibration_batch() == 64
    assert ExtendSettings(target_len=100, batch_size=3).resolve(48).recalibration_batch() == 6  # 6.25 rounded
    settings = ExtendSettings(target_len=512, batch_size=8, methods=["drope"]).resolve(64)
    model = pf.Transformer(pf.Config(arch="decoder", position="rope", **SIZES))
    needs = [n for n in experiment.memory_needs(settings, model, torch.device("cpu")) if n.what == "recalibration"]
    assert [(n.length, n.batch) for n in needs] == [(64, 64)]
    assert not any(n.what == "fine-tuning" for n in experiment.memory_needs(settings, model, torch.device("cpu")))


ROW = (  # a tiny extrapolate rope row, as test_extend_cli.py trains it
    "--preset quick --positions rope --train-len 16 --eval-lens 16,32 --steps 3 --d-model 32 --layers 1 --heads 2 "
    "--vocab-size 300 --eval-tokens 256 --tokenizer-chars 20000 --no-progress --set train_chars=40000 "
    "--set batch_size=4"
).split()
EXTEND = (
    "--preset quick --target-len 64 --steps 2 --no-progress --set eval_tokens=1024 --set passkey_trials=2 "
    "--set suite_tasks=[]"
).split()


class _RecordedWindows(experiment.WindowBatches):
    """The training batches of `extend`, recording each run's window length and the windows of each step."""

    reads: list[tuple[int, int]] = []

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, torch.Tensor]:
        batch = super().next_batch(global_size, rank, world_size)
        self.reads.append(tuple(batch["input_ids"].shape))
        return batch


@pytest.fixture(scope="module")
def drope_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("drope")
    assert main(["extrapolate", *ROW, "--output-dir", str(root / "lm")]) == 0
    source = root / "lm" / "rows" / "rope"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment, "WindowBatches", _RecordedWindows)
        assert main(["extend", str(source), *EXTEND, "--methods", "drope,yarn", "--output-dir", str(root / "e")]) == 0
    return source, root / "e", list(_RecordedWindows.reads)


def test_the_grid_lists_the_drope_rows_beside_yarn_and_the_claims_that_compare_them(drope_run):
    _, out, _ = drope_run
    results = json.loads((out / "results.json").read_text())
    rows = results["rows"]
    assert set(rows) == {"source", "drope", "drope+ft", "yarn", "yarn+ft"}
    assert (rows["drope"]["stage"], rows["drope"]["position"], rows["drope"]["scaling"]) == ("eval-time", "none", None)
    tuned = rows["drope+ft"]
    assert (tuned["stage"], tuned["steps"], tuned["length"], tuned["windows"]) == ("recalibrated", 2, 16, 16)
    for row in ("drope", "drope+ft"):
        assert rows[row]["ppl"].keys() == rows["source"]["ppl"].keys()
        lengths = {n for by_length in rows[row]["ppl"].values() for n in by_length}
        assert lengths == {"16", "32", "64", "128"}
        assert all(math.isfinite(v) for by_length in rows[row]["ppl"].values() for v in by_length.values())
        assert rows[row]["passkey"].keys() == rows["source"]["passkey"].keys()
    report = (out / "results.md").read_text()
    assert "| drope+ft | recalibrated |" in report and "DroPE: 2 steps of 16 x 16 tokens." in report
    for claim in ("ppl(drope+ft) / ppl(drope)", "ppl(drope+ft) / ppl(yarn+ft)", "ppl(drope+ft) / ppl(yarn)",
                  "| drope+ft - source |", "| drope+ft - yarn+ft |"):  # fmt: skip
        assert claim in report, claim


def test_the_recalibration_trains_every_weight_without_rope_at_l_with_a_fine_tunes_tokens(drope_run):
    """DroPE's Trainer run read 2 steps of 16 windows of L = 16 (4 x 64 tokens, yarn's step); yarn's read 4 windows
    of 64. The recalibrated model has no position encoding, the source's every other setting, and every weight
    trained (the reference recalibrates the whole model, nothing frozen and nothing added)."""
    source, out, reads = drope_run
    assert reads == [(16, 16), (16, 16), (4, 64), (4, 64)]  # drope first, as --methods lists it
    trained, tuned = load_model(source), load_model(out / "rows" / "drope")
    ours, theirs = trained.cfg.to_dict(), tuned.cfg.to_dict()
    assert {k for k in ours if ours[k] != theirs[k]} == {"position", "position_params", "max_positions"}
    assert (theirs["position"], theirs["position_params"], theirs["max_positions"]) == ("none", {}, TARGET)
    before, after = trained.state_dict(), tuned.state_dict()
    assert set(before) == set(after)
    assert [k for k, v in before.items() if torch.equal(v, after[k])] == []


def test_a_source_without_rope_is_refused_by_name_for_drope(drope_run, tmp_path, capsys):
    source, _, _ = drope_run
    alibi = pf.Transformer(load_model(source).cfg.replace(position="alibi", position_params={}))
    files = {name: path.read_text(encoding="utf-8") for name, path in tokenizer_paths(checkpoint_dir(source)).items()}
    save_pretrained(alibi, tmp_path / "alibi", files)
    args = ["--methods", "drope", "--text", str(default_corpus()), "--train-len", "16"]
    assert main(["extend", str(tmp_path / "alibi"), *EXTEND, *args, "--output-dir", str(tmp_path / "e")]) != 0
    assert "uses position 'alibi'; the context-extension methods (drope) rescale, remap or drop RoPE" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "e" / "rows").exists()
    with pytest.raises(ValueError, match="method 'drope' extends RoPE, and this model uses position 'alibi'"):
        extended_params(alibi, "drope", TARGET, TRAIN_LEN)
