"""`posformer bench --positions` measures every registered encoding on one otherwise identical model."""

import json
import re

import pytest

from posformer.bench.positions import BASELINE, PositionsOptions, positions_config, run
from posformer.cli import main
from posformer.experiments.mechanism_rows import MECHANISM_ROWS
from posformer.positions import registry

TINY = dict(
    batch=2, length=12, d_model=32, layers=1, heads=4, vocab=64, d_ff=48, warmup=0, iters=1, threads=1, progress=False
)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
def test_every_registered_encoding_is_timed_against_none(arch):
    result = run(PositionsOptions(arch=arch, **TINY))
    for phase in ("forward", "train"):
        rows = result[phase]
        mechanisms = set(MECHANISM_ROWS) if arch == "decoder" else set()  # the decoder's mechanism rows too
        assert list(rows)[0] == BASELINE and set(rows) == set(registry.usable(arch)) | mechanisms
        assert rows[BASELINE]["relative"] == 1.0
        base_median = rows[BASELINE]["seconds"][0]
        for name, row in rows.items():
            assert row["relative"] == pytest.approx(row["seconds"][0] / base_median), name
            assert row["tok_s"] == pytest.approx(2 * 12 / row["seconds"][0]), name


def test_models_differ_only_in_their_position_encoding():
    configs = {
        name: positions_config(name, d_model=32, layers=1, heads=4, vocab=64, d_ff=48, length=12).to_dict()
        for name in registry.names()
    }
    for name, cfg in configs.items():
        assert cfg["position"] == name
        others = {key: value for key, value in cfg.items() if key not in ("position", "position_params")}
        reference = {
            key: value for key, value in configs[BASELINE].items() if key not in ("position", "position_params")
        }
        assert others == reference, name


def test_cli_prints_one_row_per_encoding_and_writes_json(tmp_path, capsys):
    out = tmp_path / "positions.json"
    assert (
        main(
            [
                "bench",
                "--positions",
                "--encodings",
                "rope",
                "alibi",
                "--batch",
                "2",
                "--length",
                "12",
                "--d-model",
                "32",
                "--layers",
                "1",
                "--heads",
                "4",
                "--vocab",
                "64",
                "--d-ff",
                "48",
                "--warmup",
                "0",
                "--iters",
                "1",
                "--threads",
                "1",
                "--no-progress",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    report = capsys.readouterr().out
    rows = re.findall(r"^(\w+)\s+(sdpa|eager|flex)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)\s+([\d,]+)$", report, re.MULTILINE)
    assert [row[0] for row in rows] == ["none", "rope", "alibi"], report
    assert rows[0][2] == rows[0][4] == "1.00"
    saved = json.loads(out.read_text())
    assert list(saved["train"]) == ["none", "rope", "alibi"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--encodings", "nope"], "unknown encoding(s) ['nope']"),
        (["--length", "0"], "argument --length: 0 is not a positive integer"),
        (["--arch", "mixture"], "invalid choice: 'mixture'"),
    ],
)
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--positions", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_flex_runs_the_encodings_it_takes_and_the_others_as_before():
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    encodings = ["alibi", "t5", "transformer_xl", "shaw"]
    result = run(PositionsOptions(encodings=encodings, attn="flex", train=False, **TINY))
    assert result["attn"] == {"none": "flex", "alibi": "flex", "t5": "flex", "transformer_xl": "sdpa", "shaw": "eager"}
    assert set(result["forward"]) == set(result["attn"]) and "train" not in result


def test_flex_training_on_the_cpu_is_refused_with_the_remedy():
    with pytest.raises(ValueError, match="add --skip-train or --device cuda"):
        run(PositionsOptions(encodings=["alibi"], attn="flex", **TINY))


def test_a_mechanism_row_is_its_base_encodings_model_changed_by_the_mechanism():
    """`bench --positions` times iRoPE, gated attention and the gated DeltaNet hybrid beside the encodings, each on
    the benchmark's model of its base encoding; an encoder has no mechanism rows."""
    base = positions_config("none", layers=4, length=64).to_dict()
    hybrid = positions_config("deltanet_nope", layers=4, length=64)
    assert [c.mixer for c in hybrid.layer_configs(4)] == ["gated_deltanet"] * 3 + ["attention"]
    assert {k for k, v in hybrid.to_dict().items() if base[k] != v} <= {
        "layer_types",
        "layer_settings",
        "gated_deltanet",
    }
    assert positions_config("irope", layers=4, length=64).layer_configs(4)[0].attention_chunk == 16
    with pytest.raises(ValueError, match="irope"):
        run(PositionsOptions(arch="encoder", encodings=["irope"], **TINY))
