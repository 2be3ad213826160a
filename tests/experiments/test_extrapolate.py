"""`posformer extrapolate`: the CLI end to end (tiny), shared init, the two protocols, resume, errors."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
import torch.nn.functional as F

import posformer as pf
from posformer.cli import main
from posformer.experiments.extrapolation.evaluation import chunk_nll, perplexity, sliding_nll
from posformer.experiments.extrapolation.experiment import initial_model
from posformer.experiments.extrapolation.settings import ExtrapolationSettings, model_config
from posformer.loading import load_model, load_text_tokenizer

TINY = [
    "--preset",
    "quick",
    "--positions",
    "learned,rope,alibi",
    "--train-len",
    "16",
    "--eval-lens",
    "16,32,64",
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
    "--set",
    "save_every=2",
]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("extrapolate")
    assert main(["extrapolate", *TINY, "--output-dir", str(out)]) == 0
    return out


def _mtimes(out) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in (out / "rows").rglob("model.safetensors")}


def test_cli_writes_tables_json_plot_and_loadable_rows(finished_run, capsys):
    out = finished_run
    for name in ("results.md", "results.json", "ppl.png"):
        assert (out / name).stat().st_size > 0
    results = json.loads((out / "results.json").read_text())
    rows = results["rows"]
    assert set(rows) == {"learned", "rope", "alibi", "rope+linear", "rope+ntk", "rope+dynamic", "rope+yarn"}
    for name, row in rows.items():
        values = row["ppl"]["tinyshakespeare"]
        assert set(values) == {"16", "32", "64"}
        for length, ppl in values.items():
            if name == "learned" and length != "16":
                assert ppl is None
            else:
                assert math.isfinite(ppl) and ppl > 1
    for kind in ("linear", "ntk", "dynamic", "yarn"):
        assert rows[f"rope+{kind}"]["ppl"]["tinyshakespeare"]["16"] == pytest.approx(
            rows["rope"]["ppl"]["tinyshakespeare"]["16"], rel=1e-5
        )
    assert results["config"]["train_len"] == 16 and results["versions"]["torch"] == torch.__version__
    assert rows["rope"]["train_wall_s"] > 0
    table = (out / "results.md").read_text()
    assert "| learned |" in table and "n/a" in table and "ppl(kL) / ppl(L)" in table
    model, tokenizer = load_model(out / "rows" / "rope"), load_text_tokenizer(out / "rows" / "rope")
    ids = tokenizer.encode("ROMEO: what light")
    assert model.cfg.position == "rope" and model.cfg.vocab_size == results["data"]["vocab_size"]
    assert tokenizer.decode(ids) == "ROMEO: what light"


def test_rerun_skips_recorded_rows(finished_run, capsys):
    before = _mtimes(finished_run)
    assert before
    assert main(["extrapolate", *TINY, "--output-dir", str(finished_run), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "learned: already recorded" in printed and "rope: already recorded" in printed
    assert _mtimes(finished_run) == before


def test_changed_config_is_refused(finished_run, capsys):
    assert main(["extrapolate", *TINY, "--output-dir", str(finished_run), "--set", "lr=0.5"]) == 2
    assert "differing keys: lr" in capsys.readouterr().err


def test_results_older_than_a_knob_resume_while_it_keeps_its_default(finished_run, capsys):
    path = finished_run / "results.json"
    written = json.loads(path.read_text())
    try:
        older = {**written, "config": {k: v for k, v in written["config"].items() if k != "copy_span"}}
        path.write_text(json.dumps(older))  # as a run from before copy_span existed wrote it
        assert main(["extrapolate", *TINY, "--output-dir", str(finished_run), "--resume"]) == 0
        path.write_text(json.dumps(older))
        assert main(["extrapolate", *TINY, "--output-dir", str(finished_run), "--set", "copy_span=32"]) == 2
        assert "differing keys: copy_span" in capsys.readouterr().err
    finally:
        path.write_text(json.dumps(written))


def test_half_trained_row_resumes_from_its_checkpoint(tmp_path, capsys):
    args = [*TINY, "--positions", "rope", "--output-dir", str(tmp_path)]
    with pytest.raises(KeyboardInterrupt):  # stop the row after its step-2 checkpoint
        _interrupt_after_checkpoint(args)
    results = json.loads((tmp_path / "results.json").read_text())
    assert "rope" not in results["rows"]
    assert main(["extrapolate", *args]) == 0
    printed = capsys.readouterr().out
    assert "resumed from" in printed and "step-00000002" in printed
    assert "rope" in json.loads((tmp_path / "results.json").read_text())["rows"]


def test_a_row_stopped_after_its_last_step_records_the_loss_it_trained_to(tmp_path, capsys):
    """Killed between the last checkpoint and the evaluation: the rerun trains no step, and takes the final loss
    from the row's training log."""
    args = [*TINY, "--positions", "rope", "--output-dir", str(tmp_path)]
    with pytest.raises(KeyboardInterrupt):
        _interrupt_after_checkpoint(args, at_step=3)
    logged = [json.loads(line) for line in (tmp_path / "rows" / "rope" / "metrics.jsonl").read_text().splitlines()]
    assert main(["extrapolate", *args]) == 0
    row = json.loads((tmp_path / "results.json").read_text())["rows"]["rope"]
    assert row["steps"] == 3 and row["final_loss"] == [r["loss"] for r in logged if "loss" in r][-1]


def _interrupt_after_checkpoint(args: list[str], at_step: int = 2) -> None:
    from posformer.train import trainer as trainer_module

    save = trainer_module.Trainer._save

    def save_then_stop(self, step):
        path = save(self, step)
        if step == at_step:
            raise KeyboardInterrupt
        return path

    trainer_module.Trainer._save = save_then_stop
    try:
        from posformer.cli import build_parser
        from posformer.cli.extrapolate import settings_from_args
        from posformer.experiments.extrapolation.experiment import run_extrapolation

        parsed = build_parser().parse_args(["extrapolate", *args])
        run_extrapolation(settings_from_args(parsed), parsed.output_dir, progress=False)
    finally:
        trainer_module.Trainer._save = save


def test_rows_start_from_the_same_shared_weights():
    s = ExtrapolationSettings.preset("quick", d_model=32, layers=2, heads=2, vocab_size=300)
    alibi, shaw = initial_model(s, "alibi", 300), initial_model(s, "shaw", 300)
    a, b = alibi.state_dict(), shaw.state_dict()
    shared = [k for k in a if k in b and a[k].shape == b[k].shape]
    assert any("embed_tokens" in k for k in shared) and sum("attn" in k for k in shared) >= 2
    assert any("ffn" in k for k in shared) and any("norm" in k for k in shared)
    for name in shared:
        assert torch.equal(a[name], b[name]), name
    assert set(b) - set(a), "shaw has position tables of its own"


def _tiny_model() -> pf.Transformer:
    torch.manual_seed(0)
    return pf.Transformer(
        pf.Config(arch="decoder", vocab_size=50, d_model=16, n_layers=2, n_heads=2, position="rope", max_positions=64)
    ).eval()


def test_sliding_with_stride_equal_to_length_is_nonoverlapping():
    model, ids = _tiny_model(), torch.randint(0, 50, (96,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for length in (8, 16, 32):
            chunked, slid = chunk_nll(model, ids, length, 64), sliding_nll(model, ids, length, length, 64)
            assert slid[1] == chunked[1] == (96 // length) * (length - 1)
            assert slid[0] == pytest.approx(chunked[0], rel=1e-6)
    assert perplexity(model, {"a": ids}, 16, "sliding", 16) == pytest.approx(
        perplexity(model, {"a": ids}, 16), rel=1e-6
    )


def _plain_loop_ppl(model, docs, length: int, stride: int) -> float:
    """One window at a time, one token at a time: the protocol as written, without batching."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids in docs:
            start, scored_until = 0, 0
            while start + length <= len(ids):
                window = ids[start : start + length]
                logp = F.log_softmax(model(window[None]).logits[0].double(), -1)
                for t in range(1, length):
                    if start + t >= scored_until:
                        total -= float(logp[t - 1, window[t]])
                        count += 1
                scored_until = start + length
                start += stride
    return math.exp(total / count)


@pytest.mark.parametrize("protocol,stride", [("nonoverlapping", None), ("sliding", 4), ("sliding", 12)])
def test_perplexity_equals_a_plain_loop(protocol, stride):
    model = _tiny_model()
    g = torch.Generator().manual_seed(2)
    docs = {"a": torch.randint(0, 50, (64,), generator=g), "b": torch.randint(0, 50, (40,), generator=g)}
    got = perplexity(model, docs, 16, protocol, stride, batch_tokens=48)
    want = _plain_loop_ppl(model, list(docs.values()), 16, stride or 16)
    assert got == pytest.approx(want, rel=1e-5)


def test_learned_is_none_past_its_table():
    s = ExtrapolationSettings.preset(
        "quick", d_model=16, layers=1, heads=2, vocab_size=300, train_len=8, eval_lens=[8, 16]
    )
    model = pf.Transformer(model_config(s, "learned", 300))
    ids = {"a": torch.randint(0, 300, (64,))}
    assert perplexity(model, ids, 16) is None and math.isfinite(perplexity(model, ids, 8))


def test_gpu_preset_is_about_100m_parameters():
    s = ExtrapolationSettings.preset("gpu")
    assert s.train_len == 512 and s.precision == "bf16" and s.device == "cuda" and max(s.eval_lens) == 8192
    with torch.device("meta"):
        model = pf.Transformer(model_config(s, "rope", s.vocab_size))
    params = sum(p.numel() for p in model.parameters())
    assert 80e6 < params < 120e6


@pytest.mark.parametrize(
    "knob, value, expected",
    [
        ("steps", 0, "a positive integer"),
        ("steps", True, "a positive integer"),
        ("lr", -1.0, "a number >= 0"),
        ("protocol", "strided", "one of nonoverlapping, sliding"),
        ("stride", 0, "a positive integer or null"),
        ("device", "tpu", "one of auto, cpu, cuda"),
        ("corpus", "wiki", "one of gutenberg, shakespeare"),
        ("vocab_size", 256, "an integer >= 257"),
        ("heads", 3, "a divisor of d_model=64"),
        ("eval_lens", [64], "a list that includes train_len=32"),
        ("rope_scalings", ["pi"], "a list drawn from"),
    ],
)
def test_a_bad_knob_is_named_with_its_value_and_what_was_expected(knob, value, expected):
    with pytest.raises(ValueError) as error:
        ExtrapolationSettings.preset("quick", **{knob: value})
    message = str(error.value)
    assert message.startswith(f"extrapolate: {knob}={value!r} is invalid: expected "), message
    assert expected in message, message


def test_unknown_position_lists_the_registered_ones(tmp_path, capsys):
    assert main(["extrapolate", "--preset", "quick", "--positions", "rope,bogus", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and all(name in err for name in pf.positions.names())


def test_missing_data_dir_is_named(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert (
        main(
            [
                "extrapolate",
                *TINY,
                "--corpus",
                "gutenberg",
                "--data-dir",
                str(missing),
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert str(missing) in capsys.readouterr().err


def test_data_dir_env_var(monkeypatch, tmp_path):
    from posformer.data.shared import DATA_DIR_ENV, default_data_dir

    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv(DATA_DIR_ENV)
    assert default_data_dir().parts[-2:] == ("shared", "data") and os.path.isabs(default_data_dir())


def test_gutenberg_markers_are_stripped():
    from posformer.experiments.corpus import strip_gutenberg

    text = "header\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nbody line\n*** END OF THE PROJECT ***\nlicense"
    assert strip_gutenberg(text) == "body line\n"
    assert strip_gutenberg(text.replace("*** START", "***START")) == "body line\n"
    with pytest.raises(ValueError, match="markers"):
        strip_gutenberg("no markers here")
