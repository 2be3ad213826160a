"""`posformer extrapolate --preset retrieval` end to end on a tiny setting (bytes as the tokenizer: a BPE of 257
symbols, no merges), over 2 seeds: each seed's table and the table over seeds, `posformer report` of it; and bad
input refused by name before any row is trained."""

from __future__ import annotations

import json

import pytest

from posformer.cli import main
from posformer.experiments.extrapolation.settings import ExtrapolationSettings

TINY = [
    "--preset", "retrieval", "--positions", "rope,alibi", "--corpus", "shakespeare", "--train-len", "128",
    "--steps", "3", "--d-model", "32", "--layers", "1", "--heads", "2", "--vocab-size", "257",
    "--eval-tokens", "1024", "--tokenizer-chars", "20000", "--no-progress",
    "--set", "train_chars=40000", "--set", "batch_size=4", "--set", "save_every=3", "--set", "copy_warmup=1",
    "--set", "eval_lens=128,256,512", "--set", "retrieval_trials=2", "--set", "retrieval_suite_trials=1",
    "--set", "retrieval_tasks=[single_noise,single_number]", "--set", "threads=1",
]  # fmt: skip


def test_the_preset_is_pk128s_recipe_with_30pct_passkey_at_l_2l_4l_and_8l_with_every_row_the_issue_names():
    """pk128's 6,000 steps and warm-up, 30% passkey prompts (20% left RoPE under the gate: docs/longeval.md)."""
    s = ExtrapolationSettings.preset("retrieval")
    assert (s.train_len, s.eval_lens, s.d_model, s.layers, s.heads, s.vocab_size) == (128, [128, 256, 512, 1024],
                                                                                    128, 4, 4, 2048)  # fmt: skip
    assert (s.steps, s.lr, s.warmup, s.split_digits, s.key_smear, s.copy_warmup, s.passkey_fraction) == (
        6000,
        5e-3,
        200,
        True,
        True,
        600,
        0.3,
    )
    assert s.positions == ["none", "rope", "alibi", "t5", "fire", "kerple", "fox", "stick_breaking"]
    assert s.rope_scalings == ["yarn"] and s.retrieval_trials == 20 and s.retrieval_gate == 0.9
    assert s.retrieval_tasks == ["single_noise", "single_number", "single_word", "single_uuid"]
    assert ExtrapolationSettings.preset("retrieval", train_len=64).eval_lens == [64, 128, 256, 512]
    assert not ExtrapolationSettings.preset("cpu").scores_retrieval  # the other presets: perplexity only


@pytest.mark.parametrize(
    "change, message",
    [
        (["--positions", "rope,learned"], "positions: row 'learned' cannot be read past train_len=128"),
        (["--positions", "relative_key"], "positions: row 'relative_key' cannot be read past train_len=128"),
        (
            ["--positions", "fire", "--set", "position_params={fire: {mlp_width: 0}}"],
            "positions: row 'fire' cannot be a causal LM here: Config.position_params['mlp_width']=0",
        ),
        (["--set", "eval_lens=64,128,256"], "eval_lens=[64, 128, 256] is invalid: expected lengths of at least"),
        (["--set", "retrieval_depths=[0, 0.5, 1.5]"], "retrieval_depths=[0, 0.5, 1.5] is invalid"),
        (["--set", "retrieval_depths=[-0.1]"], "retrieval_depths=[-0.1] is invalid: expected a non-empty list"),
        (["--set", "retrieval_tasks=[needle]"], "retrieval_tasks=['needle'] is invalid"),
        (["--train-len", "48", "--set", "eval_lens=48,96"], "task 'single_noise' needs prompts of at least"),
    ],
)
def test_bad_input_is_refused_by_name_before_any_row_is_trained(tmp_path, capsys, change, message):
    assert main(["extrapolate", *TINY, *change, "--output-dir", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "rows").exists()


def test_the_command_writes_the_table_of_each_seed_and_over_seeds(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["extrapolate", *TINY, "--seeds", "2", "--output-dir", str(out)]) == 0
    record = json.loads((out / "results.json").read_text())
    for seed in ("0", "1"):
        rows = record["per_seed"][seed]["rows"]
        assert set(rows) == {"rope", "rope+yarn", "alibi"}
        for row in rows.values():
            passkey, suite = row["retrieval"]["passkey"], row["retrieval"]["suite"]
            assert set(passkey) == {"128", "256", "512"}
            assert set(passkey["512"]) == {"0.0", "0.25", "0.5", "0.75", "1.0"}
            assert passkey["512"]["0.0"]["reach"] == ["far", "far"] and passkey["512"]["1.0"]["reach"] == ["near"] * 2
            assert set(suite) == {"single_noise", "single_number"} and set(suite["single_number"]) == set(passkey)
        table = (out / f"seed-{seed}" / "results.md").read_text()
        assert "| row | length | passkey: every depth | within the last 128 | further back |" in table
        assert "#### rope+yarn" in table and "Retrieves at L = 128" in table
    over_seeds = (out / "results.md").read_text()
    assert "## Retrieval beside perplexity, over seeds" in over_seeds and "| alibi | 512 |" in over_seeds
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "## Retrieval beside perplexity, over seeds" in capsys.readouterr().out
