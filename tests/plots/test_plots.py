"""`posformer plot`: the numbers behind each figure, computed independently, and the PNG files."""

from __future__ import annotations

import cmath
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import posformer as pf
from posformer import plots
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main
from posformer.cli.plot import DEFAULT_TEXT
from posformer.data.text import CharTokenizer
from posformer.loading import load_model, load_text_tokenizer
from posformer.positions import rope_inv_freq

STATIC_FIGURES = ("sinusoidal.png", "t5_buckets.png", "rope_decay.png", "rope_wavelengths.png", "alibi_bias.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T5_PARAMS = {"num_buckets": 16, "max_distance": 40}


def assert_png(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def save_run(directory: Path, position: str, **params) -> Path:
    tokenizer = CharTokenizer.from_text(DEFAULT_TEXT + "abc")
    cfg = pf.Config(
        arch="decoder",
        vocab_size=tokenizer.vocab_size,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_positions=64,
        position=position,
        position_params=params,
    )
    model = pf.Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)  # far from init, so wrong indexing cannot pass by accident
    save_pretrained(model, directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {"t5": save_run(root / "t5", "t5", **T5_PARAMS), "rope": save_run(root / "rope", "rope")}


# ------------------------------------------------------------------ numbers


def rope_decay_loop(r: float, d: int, base: float) -> float:
    total = 0.0
    for j in range(1, d // 2 + 1):
        s = sum(cmath.exp(1j * r * base ** (-2 * i / d)) for i in range(j))
        total += abs(s)
    return total / (d // 2)


def test_rope_decay_is_d_over_4_at_zero_and_matches_a_double_loop() -> None:
    r, value = plots.rope_decay(dim=128, base=10000.0, max_distance=256)
    assert r.shape == value.shape == (257,)
    assert value[0] == pytest.approx(32.5, abs=1e-9)
    for distance in (1, 7, 50, 200):
        assert value[distance] == pytest.approx(rope_decay_loop(distance, 128, 10000.0), rel=1e-9)
    _, other = plots.rope_decay(dim=16, base=500.0, max_distance=20)
    assert other[13] == pytest.approx(rope_decay_loop(13, 16, 500.0), rel=1e-9)


def test_rope_decay_oscillates_but_falls() -> None:
    _, value = plots.rope_decay(dim=128, base=10000.0, max_distance=256)
    steps = np.diff(value)
    assert (steps > 0).any() and (steps < 0).any()
    assert value[256] < value[0]


def test_rope_wavelengths_are_two_pi_over_inv_freq() -> None:
    bases = (500.0, 10000.0, 500000.0, 1e6)
    waves = plots.rope_wavelengths(head_dim=128, bases=bases)
    assert list(waves) == list(bases)
    for base, lam in waves.items():
        inv_freq, _ = rope_inv_freq(128, base)
        assert lam.shape == (64,)
        np.testing.assert_allclose(lam, 2 * math.pi / inv_freq.double().numpy(), rtol=1e-5)
        assert lam[0] == pytest.approx(2 * math.pi)


def hf_t5_bucket(rel: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """transformers' T5 bucketing (rel = key - query), the reference for posformer's."""
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


def test_t5_bucket_map_equals_hugging_face_t5() -> None:
    data = plots.t5_bucket_map(distance=200, num_buckets=32, max_distance=128)
    rel = torch.as_tensor(data["rel"])
    assert rel.tolist() == list(range(-200, 201))
    assert data["bidirectional"].tolist() == hf_t5_bucket(rel, True, 32, 128).tolist()
    assert data["causal"].tolist() == hf_t5_bucket(rel, False, 32, 128).tolist()
    # by hand from the T5 rule: bidirectional, 16 buckets a side (keys after the query: +16), exact below 8,
    # then 8 + floor(8 * log(n / 8) / log(128 / 8)) up to the last bucket; causal: 32 buckets for keys at or
    # before the query, exact below 16, then 16 + floor(16 * log(n / 16) / log(128 / 16)), capped at 31
    at = {r: k for k, r in enumerate(rel.tolist())}
    assert [data["bidirectional"][at[r]] for r in (0, 1, -1, -7, -8, -16, -127, 128, 200, -200)] == [
        0,
        17,
        1,
        7,
        8,
        10,
        15,
        31,
        31,
        15,
    ]
    assert [data["causal"][at[r]] for r in (0, 5, -1, -15, -16, -32, -200)] == [0, 0, 1, 15, 16, 21, 31]


def test_sinusoidal_tables_follow_vaswani() -> None:
    tables = plots.sinusoidal_tables(bases=(100.0, 10000.0), n_positions=300, dim=500)
    for base, table in tables.items():
        assert table.shape == (300, 500)
        for pos, i in ((0, 0), (7, 3), (123, 100), (299, 249)):
            angle = pos / base ** (2 * i / 500)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-4)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-4)


def test_alibi_maps_are_minus_slope_times_distance() -> None:
    slopes, maps = plots.alibi_bias_maps(n_heads=8, seq_len=32)
    assert maps.shape == (8, 32, 32)
    np.testing.assert_allclose(slopes, [2.0 ** (-(h + 1)) for h in range(8)])
    for h, i, j in ((0, 5, 2), (3, 31, 0), (7, 10, 10), (5, 20, 19)):
        assert maps[h, i, j] == pytest.approx(-(2.0 ** (-(h + 1))) * (i - j))
    assert np.isnan(maps[:, 2, 5]).all() and not np.isnan(np.tril(maps[0])).any()


def test_t5_learned_bias_reads_the_table_through_its_buckets() -> None:
    cfg = pf.Config(
        arch="encoder_decoder",
        vocab_size=11,
        d_model=16,
        n_layers=1,
        n_heads=2,
        d_ff=16,
        position="t5",
        position_params={"num_buckets": 12, "max_distance": 20},
        decoder_start_token_id=0,
    )
    model = pf.Transformer(cfg)
    stacks = plots.t5_learned_bias(model, distance=30)
    assert [s.label for s in stacks] == ["encoder (bidirectional)", "decoder (causal)"]
    for stack, module, bidirectional in zip(stacks, (model.encoder, model.decoder), (True, False)):
        assert stack.rel.tolist() == list(range(-30, 31 if bidirectional else 1))
        table = module.position.table.weight.detach()
        for k, rel in enumerate(stack.rel.tolist()):
            bucket = int(hf_t5_bucket(torch.tensor(rel), bidirectional, 12, 20))
            np.testing.assert_allclose(stack.bias[:, k], table[bucket].numpy())
        # the same numbers as the encoding's own bias hook, query at position 30
        hook = module.position.bias(None, None, torch.tensor([[30]]), torch.arange(len(stack.rel))[None], 0)
        np.testing.assert_allclose(stack.bias, hook[0, :, 0, :].detach().numpy())
    assert (
        plots.t5_learned_bias(
            pf.Transformer(pf.Config(vocab_size=11, d_model=16, n_layers=1, n_heads=2, position="rope"))
        )
        == []
    )


# ------------------------------------------------------------------ files and the command line


def test_static_figures_without_checkpoint(tmp_path, capsys) -> None:
    assert main(["plot", "--output-dir", str(tmp_path / "figs"), "--train-len", "256", "--alibi-heads", "6"]) == 0
    out = capsys.readouterr().out
    for name in STATIC_FIGURES:
        assert_png(tmp_path / "figs" / name)
        assert str(tmp_path / "figs" / name) in out
    assert "--checkpoint" in out and "skipped" in out
    assert not (tmp_path / "figs" / "attention_maps.png").exists()
    assert not list((tmp_path / "figs").glob(".*"))  # no temporary files left behind


def test_checkpoint_figures_and_their_numbers(runs, tmp_path, capsys) -> None:
    figs = tmp_path / "figs"
    assert main(["plot", "--output-dir", str(figs), "--checkpoint", str(runs["t5"]), str(runs["rope"])]) == 0
    out = capsys.readouterr().out
    for name in (*STATIC_FIGURES, "t5_learned_bias.png", "attention_maps.png"):
        assert_png(figs / name)
        assert str(figs / name) in out

    model = load_model(runs["t5"])
    (stack,) = plots.t5_learned_bias(model)
    assert stack.rel.tolist() == list(range(-60, 1))  # 1.5 * max_distance, causal side only
    table = model.decoder.position.table.weight.detach()
    expected = table[hf_t5_bucket(torch.tensor(stack.rel), False, **T5_PARAMS)].T
    np.testing.assert_allclose(stack.bias, expected.numpy())

    for name in ("t5", "rope"):
        model = load_model(runs[name])
        amap = plots.attention_map(model, load_text_tokenizer(runs[name]), DEFAULT_TEXT)
        assert amap.title == name and amap.layer == 1
        assert amap.probs.shape == (len(DEFAULT_TEXT), len(DEFAULT_TEXT))
        np.testing.assert_allclose(amap.probs.sum(axis=1), 1.0, atol=1e-5)
        assert np.triu(amap.probs, k=1).max() < 1e-6  # a causal model never attends ahead
        assert "".join(amap.tokens) == DEFAULT_TEXT


def test_benchmark_directory_expands_its_rows(runs, tmp_path, capsys) -> None:
    bench = tmp_path / "bench"
    for name, run in runs.items():
        shutil.copytree(run, bench / "rows" / name)
    (bench / "results.json").write_text("{}")
    assert plots.expand_checkpoints([bench, runs["rope"]]) == [
        (bench / "rows" / "rope", "bench/rope"),
        (bench / "rows" / "t5", "bench/t5"),
        (runs["rope"], "rope"),
    ]
    figs = tmp_path / "figs"
    assert main(["plot", "--output-dir", str(figs), "--checkpoint", str(bench), "--text", "abc", "--layer", "0"]) == 0
    assert_png(figs / "attention_maps.png")
    assert_png(figs / "t5_learned_bias.png")
    assert str(figs / "attention_maps.png") in capsys.readouterr().out


def test_bad_checkpoints_give_clear_errors(runs, tmp_path, capsys) -> None:
    missing = tmp_path / "no_such_run"
    assert main(["plot", "--output-dir", str(tmp_path / "a"), "--checkpoint", str(runs["t5"]), str(missing)]) == 2
    err = capsys.readouterr().err
    assert "posformer plot: error" in err and str(missing) in err
    assert not (tmp_path / "a").exists()  # checked before drawing anything

    empty = tmp_path / "empty_dir"
    empty.mkdir()
    assert main(["plot", "--output-dir", str(tmp_path / "b"), "--checkpoint", str(empty)]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "does not load" in err

    assert main(["plot", "--output-dir", str(tmp_path / "c"), "--checkpoint", str(runs["rope"]), "--layer", "5"]) == 2
    err = capsys.readouterr().err
    assert str(runs["rope"]) in err and "--layer 5" in err
    assert not (tmp_path / "c").exists()
