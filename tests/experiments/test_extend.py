"""`posformer extend`: the methods' frequencies against Hugging Face and the papers' formulas, only the fine-tune
changing weights, the LongRoPE search, and the CLI end to end on a tiny extrapolate row."""

from __future__ import annotations

import hashlib
import json
import math
import re

import pytest
import torch
from transformers import LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import posformer as pf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.experiments.extension.longrope import search_long_factors, search_short_factors, seed_factors
from posformer.experiments.extension.methods import check_rope_model, extended_params, longrope_scaling, with_params
from posformer.experiments.extension.settings import ExtendSettings
from posformer.experiments.extrapolation.evaluation import perplexity
from posformer.loading import load_model

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


def test_extension_changes_the_scaling_and_nothing_else():
    model = _rope_model()
    for method in ("none", "pi", "ntk", "yarn"):
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


ROW = [
    "--preset",
    "quick",
    "--positions",
    "rope",
    "--train-len",
    "16",
    "--eval-lens",
    "16,32",
    "--steps",
    "3",
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--vocab-size",
    "300",
    "--eval-tokens",
    "256",
    "--tokenizer-chars",
    "20000",
    "--no-progress",
    "--set",
    "train_chars=40000",
    "--set",
    "batch_size=4",
]
EXTEND = [
    "--preset",
    "quick",
    "--target-len",
    "64",
    "--steps",
    "2",
    "--no-progress",
    "--set",
    "eval_tokens=1024",
    "--set",
    "passkey_trials=2",
    "--set",
    "longrope_tokens=256",
    "--set",
    "longrope_generations=1",
]


def _digest(folder) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.safetensors")))).hexdigest()


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    root = tmp_path_factory.mktemp("extend")
    assert main(["extrapolate", *ROW, "--output-dir", str(root / "lm")]) == 0
    source = root / "lm" / "rows" / "rope"
    before = _digest(source)
    assert (
        main(["extend", str(source), *EXTEND, "--methods", "none,pi,longrope", "--output-dir", str(root / "ext")]) == 0
    )
    assert _digest(source) == before  # the source run is read, never written
    return source, root / "ext"


def test_cli_writes_every_row_and_only_the_fine_tune_changes_the_weights(extended):
    source, out = extended
    results = json.loads((out / "results.json").read_text())
    assert set(results["rows"]) == {"source", "none+ft", "pi", "pi+ft", "longrope", "longrope+ft"}
    assert results["config"]["train_len"] == 16 and results["config"]["eval_lens"] == [16, 32, 64, 128]
    for name in ("results.md", "ppl.png", "passkey.png"):
        assert (out / name).stat().st_size > 0
    report = (out / "results.md").read_text()
    assert (
        "| PI fine-tuned vs plain extrapolation fine-tuned (PI paper: PI better) | ppl(pi+ft) / ppl(none+ft) |"
        in report
        and "ppl(yarn+ft)" not in report
    )  # a claim is listed only when both its rows ran
    trained = load_model(source)
    for method in ("none", "pi", "longrope"):
        tuned = load_model(out / "rows" / method)
        scaling = tuned.cfg.position_params["scaling"]
        assert scaling == results["rows"][f"{method}+ft"]["scaling"]
        if method == "pi":
            assert scaling == {"type": "linear", "factor": 4.0}
        theirs = tuned.state_dict()
        assert set(theirs) == set(trained.state_dict())
        assert any(not torch.equal(v, theirs[k]) for k, v in trained.state_dict().items())
    source_row = results["rows"]["source"]["ppl"]
    eval_time = results["rows"]["pi"]["ppl"]
    assert all(math.isfinite(v) for r in (source_row, eval_time) for v in next(iter(r.values())).values())


def test_rerun_skips_recorded_methods_and_a_new_method_is_added(extended, capsys):
    source, out = extended
    assert main(["extend", str(source), *EXTEND, "--methods", "none,pi,longrope,yarn", "--output-dir", str(out)]) == 0
    log = capsys.readouterr().out
    assert "pi: already recorded" in log and "longrope: already recorded" in log
    assert {"yarn", "yarn+ft"} <= set(json.loads((out / "results.json").read_text())["rows"])


def test_steps_zero_scales_at_eval_time_only(extended, tmp_path):
    source, _ = extended
    assert (
        main(["extend", str(source), *EXTEND, "--steps", "0", "--methods", "pi", "--output-dir", str(tmp_path / "e")])
        == 0
    )
    assert set(json.loads((tmp_path / "e" / "results.json").read_text())["rows"]) == {"source", "pi"}
    assert not (tmp_path / "e" / "rows").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target-len", "16"], "target_len=16 is invalid"),
        (["--target-len", "64", "--methods", "pi,rope"], "methods='rope' is invalid"),
        ([], "--target-len is required"),
    ],
)
def test_bad_arguments_are_named(extended, tmp_path, capsys, args, message):
    source, _ = extended
    base = [a for a in EXTEND if a not in ("--target-len", "64")]
    assert main(["extend", str(source), *base, *args, "--output-dir", str(tmp_path / "e")]) != 0
    assert message in capsys.readouterr().err


def test_a_run_without_data_needs_text(extended, tmp_path, capsys):
    source, _ = extended
    model = load_model(source)
    save_pretrained(model, tmp_path / "bare")
    assert main(["extend", str(tmp_path / "bare"), *EXTEND, "--output-dir", str(tmp_path / "e")]) != 0
    assert "give --text FILE" in capsys.readouterr().err


def test_plot_redraws_the_figures_of_results_directories(extended, tmp_path, capsys):
    source, out = extended
    lm = source.parent.parent
    assert main(["plot", "--output-dir", str(tmp_path), "--results", str(out), str(lm)]) == 0
    for name in (f"{out.name}-ppl.png", f"{out.name}-passkey.png", f"{lm.name}-ppl.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert main(["plot", "--output-dir", str(tmp_path), "--results", str(tmp_path)]) != 0
    assert "no results.json" in capsys.readouterr().err


def test_any_run_extends_on_a_text_file(extended, tmp_path):
    from posformer.data.text import default_corpus

    source, _ = extended
    assert (
        main(
            [
                "extend",
                str(source),
                *EXTEND,
                "--methods",
                "ntk",
                "--steps",
                "1",
                "--text",
                str(default_corpus()),
                "--train-len",
                "16",
                "--output-dir",
                str(tmp_path / "e"),
            ]
        )
        == 0
    )
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert list(results["data"]["eval_sets"]) == [default_corpus().stem]
    assert set(results["rows"]) == {"source", "ntk", "ntk+ft"} and results["config"]["train_len"] == 16


def test_longrope_recipe_extends_progressively_and_readjusts_the_short_factors(extended, tmp_path):
    """With a stage at 32: a search and a fine-tune there, a new search at 64 and the fine-tune at 64 (each model
    with its stage's searched factors), then the short factors: the readjusted model is the last fine-tune's
    weights and long factors with the recorded short factors."""
    source, _ = extended
    out = tmp_path / "e"
    assert (
        main(
            [
                "extend",
                str(source),
                *EXTEND,
                "--methods",
                "longrope",
                "--steps",
                "4",
                "--set",
                "longrope_stages=[32]",
                "--set",
                "longrope_short=true",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    row = results["rows"]["longrope+ft"]
    assert [(st["length"], st["steps"]) for st in row["stages"]] == [(32, 2)]
    assert row["longrope_search"]["length"] == 64 and row["steps"] == 4
    stage, final = load_model(out / "rows" / "longrope-32"), load_model(out / "rows" / "longrope")
    assert stage.cfg.position_params["scaling"]["long_factor"] == row["stages"][0]["long_factor"]
    assert final.cfg.position_params["scaling"]["long_factor"] == row["longrope_search"]["long_factor"]
    readjusted = load_model(out / "rows" / "longrope" / "readjusted")
    scaling = readjusted.cfg.position_params["scaling"]
    assert scaling == {**final.cfg.position_params["scaling"], "short_factor": row["short_search"]["short_factor"]}
    assert row["scaling"] == scaling and row["short_search"]["ppl"] <= row["short_search"]["unadjusted_ppl"]
    for name, tensor in final.state_dict().items():
        assert torch.equal(readjusted.state_dict()[name], tensor), name
    assert "LongRoPE recipe: searched at 32" in (out / "results.md").read_text()


def test_the_short_factor_readjustment_runs_without_stages(extended, tmp_path):
    """longrope_short alone: the eval-time search's factors are fine-tuned with every step, then readjusted."""
    source, _ = extended
    out = tmp_path / "e"
    assert (
        main(
            [
                "extend",
                str(source),
                *EXTEND,
                "--methods",
                "longrope",
                "--steps",
                "2",
                "--set",
                "longrope_short=true",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    row = json.loads((out / "results.json").read_text())["rows"]["longrope+ft"]
    assert row["stages"] == [] and "longrope_search" not in row and row["steps"] == 2
    scaling = load_model(out / "rows" / "longrope" / "readjusted").cfg.position_params["scaling"]
    assert scaling["short_factor"] == row["short_search"]["short_factor"]
