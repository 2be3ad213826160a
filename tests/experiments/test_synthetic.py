"""The synthetic length-generalisation tasks: exact inputs and targets at the lengths asked, no example shared
between training and evaluation, teacher-forced exact match equal to greedy decoding, and the quick preset of
`posformer extrapolate --task` end to end."""

from __future__ import annotations

import json
import random

import pytest
import torch

import posformer as pf
from posformer.cli import main
from posformer.experiments.synthetic import generators as g
from posformer.experiments.synthetic.dataset import TaskBatches, encode, eval_examples, is_eval_prompt
from posformer.experiments.synthetic.evaluation import exact_match
from posformer.experiments.synthetic.report import markdown, mean_reciprocal_rank
from posformer.experiments.synthetic.settings import TaskSettings, model_config
from posformer.modules.heads import IGNORE_INDEX


def digits(ids) -> list[int]:
    return [int(g.VOCAB[i]) for i in ids]


def number(ids) -> int:
    """A little-endian digit string's value."""
    return sum(d * 10**k for k, d in enumerate(digits(ids)))


@pytest.mark.parametrize("n", [1, 5, 17])
def test_each_task_writes_the_exact_target_at_the_length_asked(n: int) -> None:
    rng = random.Random(n)
    for _ in range(50):
        copy, rev, srt, par = g.copy(rng, n), g.reverse(rng, n), g.sort(rng, n), g.parity(rng, n)
        assert len(copy.prompt) == n and copy.target == copy.prompt
        assert len(rev.prompt) == n and rev.target == tuple(reversed(rev.prompt))
        assert len(srt.prompt) == n and digits(srt.target) == sorted(digits(srt.prompt))
        assert len(par.prompt) == n and set(digits(par.prompt)) <= {0, 1}
        assert digits(par.target) == [sum(digits(par.prompt)) % 2]
        add = g.addition(rng, n)
        plus = add.prompt.index(g.PLUS)
        a, b = add.prompt[:plus], add.prompt[plus + 1 :]
        assert len(a) == len(b) == n and number(add.target) == number(a) + number(b)
        assert n == 1 or digits(a)[-1] != 0  # n digits: no leading zero (written last)
        assert len(add.target) in (n, n + 1)


@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_the_passkey_sits_at_its_depth_and_is_the_target(depth: float) -> None:
    example = g.passkey(random.Random(0), 40, depth=depth)
    assert len(example.prompt) == 40 and example.prompt[-1] == g.QUERY
    key_at = example.prompt.index(g.KEY)
    assert example.prompt[key_at + 1 : key_at + 6] == example.target and len(example.target) == 5
    assert key_at == round(depth * (40 - 7))
    with pytest.raises(ValueError, match="passkey: length 6 is too short"):
        g.passkey(random.Random(0), 6)


def test_no_example_is_both_trained_on_and_evaluated() -> None:
    """Training batches draw only prompts of the training side, evaluation sets only the other side, at every
    length, trained or not; about one prompt in ten is set aside."""
    batches = TaskBatches("copy", 8, seed=0)
    trained = set()
    for _ in range(40):
        batch = batches.next_batch(32)
        for row, mask in zip(batch["input_ids"], batch["attention_mask"]):
            tokens = row[mask.bool()].tolist()
            trained.add(tuple(tokens[: tokens.index(g.SEP)]))
    evaluated = {e.prompt for n in (4, 8, 16) for e in eval_examples("copy", n, 200, seed=0)}
    assert not trained & evaluated
    assert all(not is_eval_prompt(p) for p in trained) and all(is_eval_prompt(p) for p in evaluated)
    share = sum(is_eval_prompt(tuple(random.Random(i).choices(range(3, 13), k=6))) for i in range(5000)) / 5000
    assert 0.08 < share < 0.12


def test_training_lengths_stay_within_train_len_and_batches_resume_exactly() -> None:
    batches = TaskBatches("reverse", 6, seed=3)
    first = [batches.next_batch(16) for _ in range(3)]
    prompt_lengths = {int(row.tolist().index(g.SEP)) for b in first for row in b["input_ids"]}
    assert prompt_lengths <= set(range(1, 7)) and len(prompt_lengths) > 3
    resumed = TaskBatches("reverse", 6, seed=3)
    resumed.load_state_dict({"index": 2, "seed": 3})
    assert torch.equal(resumed.next_batch(16)["input_ids"], first[2]["input_ids"])


def test_labels_cover_the_target_and_eos_only() -> None:
    example = g.Example(prompt=(3, 4, 5), target=(6, 7), length=3)
    batch = encode([example, g.Example(prompt=(3,), target=(4,), length=1)])
    assert batch["input_ids"][0].tolist() == [3, 4, 5, g.SEP, 6, 7, g.EOS]
    assert batch["labels"][0].tolist() == [IGNORE_INDEX] * 4 + [6, 7, g.EOS]
    assert batch["labels"][1].tolist() == [IGNORE_INDEX, IGNORE_INDEX, 4, g.EOS] + [IGNORE_INDEX] * 3


def test_teacher_forced_exact_match_equals_greedy_decoding() -> None:
    """On a partly trained model (some rows right, some wrong), the one-pass score equals the fraction of rows
    where `generate` writes the target and then EOS."""
    settings = TaskSettings.preset("quick", task="copy", positions=["rope"])
    torch.manual_seed(0)
    model = pf.Transformer(
        pf.Config(
            arch="decoder",
            vocab_size=len(g.VOCAB),
            d_model=32,
            n_layers=2,
            n_heads=4,
            position="rope",
            max_positions=64,
        )
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = TaskBatches("copy", 4, seed=0)
    for _ in range(120):
        loss = model(**batches.next_batch(32)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    examples = eval_examples("copy", 4, 64, settings.seed)
    score = exact_match(model, examples, batch_size=16)
    model.eval()
    greedy = 0
    for e in examples:
        prompt = torch.tensor([list(e.prompt) + [g.SEP]])
        out = model.generate(prompt, max_new_tokens=len(e.target) + 1, eos_token_id=[])[0, prompt.shape[1] :]
        greedy += out.tolist() == list(e.target) + [g.EOS]
    assert 0 < score < 1 and score == greedy / len(examples)


def test_the_quick_preset_runs_end_to_end(tmp_path, capsys) -> None:
    out = tmp_path / "copy"
    assert (
        main(["extrapolate", "--task", "copy", "--output-dir", str(out), "--positions", "rope,none", "--no-progress"])
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert list(results["rows"]) == ["rope", "none"] and results["config"]["eval_lens"] == [8, 10, 12, 16, 24, 32]
    assert all(0.0 <= acc <= 1.0 for r in results["rows"].values() for acc in r["accuracy"].values())
    assert results["rows"]["rope"]["accuracy"]["8"] > 0.5  # it learns the trained lengths
    assert (out / "accuracy.png").stat().st_size > 0 and "Kazemnejad" in (out / "results.md").read_text()
    assert "| rope |" in capsys.readouterr().out
    assert (
        main(["extrapolate", "--task", "copy", "--output-dir", str(out), "--positions", "rope,none", "--no-progress"])
        == 0
    )  # a second run skips the recorded rows
    assert "already recorded" in capsys.readouterr().out


def test_bad_task_settings_are_refused_by_name(tmp_path, capsys) -> None:
    assert main(["extrapolate", "--task", "copy", "--output-dir", str(tmp_path), "--vocab-size", "100"]) != 0
    assert "--task copy: --vocab-size apply to the language-model benchmark only" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"positions='nope' is invalid: expected one of"):
        TaskSettings.preset("quick", positions=["nope"])
    with pytest.raises(ValueError, match=r"train_len=6 is invalid: expected an integer >= 7"):
        TaskSettings.preset("quick", task="passkey", train_len=6)


def test_position_params_reach_their_row_only_and_name_rows_that_run() -> None:
    settings = TaskSettings.preset(
        "quick", positions=["rope", "hope"], position_params={"hope": {"trained_length": 18}}
    )
    assert model_config(settings, "hope", 40).position_params["trained_length"] == 18
    assert model_config(settings, "rope", 40) == model_config(
        TaskSettings.preset("quick", positions=["rope"]), "rope", 40
    )
    with pytest.raises(ValueError, match=r"position_params=.*over the rows run"):
        TaskSettings.preset("quick", positions=["rope"], position_params={"hope": {"trained_length": 18}})


def test_mean_reciprocal_rank_counts_lengths_beyond_training_and_ties_share_the_best_rank() -> None:
    """At 16: a 1.0, b and c 0.5 (ranks 1, 2, 2); at 24: c 1.0, a and b 0 (ranks 2, 2, 1); n=8 is trained and
    does not count. A stopped row is left out."""
    accuracy = {"a": (0.2, 1.0, 0.0), "b": (0.9, 0.5, 0.0), "c": (0.0, 0.5, 1.0)}
    rows = {row: {"error": None, "accuracy": dict(zip(("8", "16", "24"), values))} for row, values in accuracy.items()}
    rows["d"] = {"error": "stopped: NaN loss", "accuracy": {"8": None, "16": None, "24": None}}
    results = {"config": {"train_len": 8, "eval_lens": [8, 16, 24]}, "rows": rows}
    assert mean_reciprocal_rank(results) == {"a": 0.75, "b": 0.5, "c": 0.75}
    assert results["rows"]["d"]["error"] and "| d | stopped | stopped | stopped |" in markdown(
        {
            **results,
            "config": {
                **results["config"],
                "task": "copy",
                "steps": 1,
                "batch_size": 1,
                "d_model": 8,
                "layers": 1,
                "heads": 1,
                "eval_examples": 1,
            },
        }
    )


def _task_results(task: str, accuracy: dict[str, tuple[float, float]]) -> dict:
    """A results.json of a task run at train_len 8 evaluated at 8 and 16: {row: (at 8, at 16)}."""
    config = {
        "task": task,
        "train_len": 8,
        "eval_lens": [8, 16],
        "steps": 1,
        "batch_size": 1,
        "d_model": 8,
        "layers": 1,
        "heads": 1,
        "eval_examples": 1,
    }
    rows = {row: {"error": None, "accuracy": {"8": at_l, "16": beyond}} for row, (at_l, beyond) in accuracy.items()}
    return {"benchmark": "tasks", "config": config, "rows": rows}


def test_report_sums_up_several_task_runs_with_the_mean_reciprocal_rank_over_tasks(tmp_path, capsys) -> None:
    """copy: none beyond L 0.5, rope 0 (reciprocal ranks 1, 1/2); sort: none 0, rope 0.25 (1/2, 1): means 0.75."""
    runs = {
        "copy": _task_results("copy", {"none": (1.0, 0.5), "rope": (1.0, 0.0)}),
        "sort": _task_results("sort", {"none": (0.5, 0.0), "rope": (1.0, 0.25)}),
    }
    for name, results in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    out = tmp_path / "figs"
    assert main(["plot", "--output-dir", str(out), "--results", str(tmp_path / "copy")]) == 0
    assert not (out / "tasks-summary.png").exists()  # one task run: nothing to sum up
    assert main(["plot", "--output-dir", str(out), "--results", str(tmp_path / "copy"), str(tmp_path / "sort")]) == 0
    assert (out / "tasks-summary.png").stat().st_size > 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "copy"), str(tmp_path / "sort")]) == 0
    summary = capsys.readouterr().out
    assert "| none | 1.00 | 0.50 | 0.75 | 0.69 |" in summary and "| rope | 0.50 | 1.00 | 0.75 | 0.33 |" in summary
    assert "| none | 0.500 | 0.000 |" in summary and "no command recorded" in summary


def test_a_run_stopped_in_its_first_row_refuses_other_settings(tmp_path, capsys, monkeypatch) -> None:
    """The configuration is on record before any training, so a resume with another train_len is refused by name
    even when the first row never finished."""
    out = tmp_path / "copy"

    def stop(self, resume=False):
        raise KeyboardInterrupt

    monkeypatch.setattr("posformer.experiments.synthetic.experiment.Trainer.fit", stop)
    assert (
        main(["extrapolate", "--task", "copy", "--output-dir", str(out), "--positions", "rope", "--no-progress"]) == 130
    )
    assert json.loads((out / "results.json").read_text())["rows"] == {}
    capsys.readouterr()
    assert (
        main(
            [
                "extrapolate",
                "--task",
                "copy",
                "--output-dir",
                str(out),
                "--positions",
                "rope",
                "--set",
                "train_len=6",
                "--no-progress",
            ]
        )
        == 2
    )
    assert "differing keys: eval_lens, train_len" in capsys.readouterr().err
