"""The trainer's policies and parts: non-finite losses, up-front errors, schedules, weight decay, accumulation, seeds.

Crash safety and exact resume are in test_trainer_resume.py.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from safetensors.torch import load_file
from torch import nn

import posformer as pf
from posformer.cli import main
from posformer.loading import load_model
from posformer.tasks import causal_lm
from posformer.tasks.causal_lm import train_causal_lm
from posformer.train.batches import WindowBatches
from posformer.train.optim import (
    build_optimizer,
    build_scheduler,
    lr_factor,
    parameter_groups,
)
from posformer.train.settings import RunSettings, TrainerSettings, load_run_settings
from posformer.train.trainer import Trainer, TrainingStopped
from posformer.train.training_checkpoint import verify
from train_helpers import (
    final_weights,
    losses,
    records,
    tiny_run,
    write_config,
    write_corpus,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text.txt")


# ------------------------------------------------------------------------------------------ non-finite losses
POISON = 59  # the data uses ids 0..58; this id's embedding row is NaN, and only poisoned batches hold it


def poisoned_model() -> pf.Transformer:
    torch.manual_seed(0)
    model = pf.Transformer(
        pf.Config(
            arch="decoder",
            vocab_size=POISON + 1,
            d_model=32,
            n_layers=1,
            n_heads=2,
            d_ff=64,
            max_positions=32,
            tie_embeddings=False,
        )
    )
    with torch.no_grad():
        model.embed_tokens.weight[POISON] = float("nan")
    return model


class PoisonedBatches(WindowBatches):
    """Windows of random ids; the batches of the calls in `bad` hold the POISON token (a NaN loss), or, with
    `drop`, are left out instead (the run that never saw them)."""

    def __init__(self, bad: set[int], drop: bool = False) -> None:
        super().__init__(torch.randint(0, POISON, (4096,), generator=torch.Generator().manual_seed(0)), 32, 0)
        self.bad, self.drop, self.calls = bad, drop, 0

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, torch.Tensor]:
        batch = super().next_batch(global_size, rank, world_size)
        self.calls += 1
        if self.calls in self.bad:
            if self.drop:
                return self.next_batch(global_size, rank, world_size)
            ids = batch["input_ids"].clone()
            ids[0, 5] = POISON
            batch = {"input_ids": ids, "labels": ids}
        return batch


def fit_poisoned(out: Path, bad: set[int], drop: bool = False, **settings) -> tuple[Trainer, list[str]]:
    """A 12-step run, a checkpoint every 5 steps; raises what fit raises."""
    logs: list[str] = []
    trainer = Trainer(
        poisoned_model(),
        PoisonedBatches(bad, drop),
        TrainerSettings(steps=12, batch_size=8, lr=1e-2, warmup=2, eval_every=5, device="cpu", **settings),
        out,
        log=logs.append,
        progress=False,
    )
    trainer.fit()
    return trainer, logs


def test_nan_stop_names_the_step_and_an_intact_last_good_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(TrainingStopped) as err:
        fit_poisoned(tmp_path, bad={8}, nan_policy="stop")
    last_good = tmp_path / "checkpoints" / "step-00000005"
    assert "non-finite loss at step 8" in str(err.value) and f"intact: {last_good}" in str(err.value)
    assert [c.name for c in (tmp_path / "checkpoints").iterdir()] == [last_good.name]
    verify(last_good)
    model = load_model(last_good)
    saved = load_file(str(last_good / "model.safetensors"))
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, saved[name], rtol=0, atol=0, equal_nan=True)
    assert torch.isfinite(model(torch.arange(32)[None] % POISON).logits).all()
    assert [s for s, _ in losses(tmp_path)] == list(range(1, 8))  # the bad step is never logged
    assert all(math.isfinite(loss) for _, loss in losses(tmp_path))


def test_nan_skip_leaves_out_exactly_the_bad_batches(tmp_path: Path) -> None:
    skipped, logs = fit_poisoned(tmp_path / "skip", bad={3, 7}, nan_policy="skip", max_skipped_batches=2)
    assert sum("batch skipped" in line for line in logs) == 2
    assert "non-finite loss at step 3: batch skipped (1/2)" in logs
    clean, _ = fit_poisoned(tmp_path / "clean", bad={3, 7}, drop=True)
    assert losses(tmp_path / "skip") == losses(tmp_path / "clean")
    assert [s for s, _ in losses(tmp_path / "skip")] == list(range(1, 13))
    for name, tensor in clean.model.state_dict().items():  # no trace of the bad batches: not even a moment
        torch.testing.assert_close(skipped.model.state_dict()[name], tensor, rtol=0, atol=0, equal_nan=True)


def test_nan_skip_stops_past_max_skipped_batches(tmp_path: Path) -> None:
    with pytest.raises(TrainingStopped) as err:
        fit_poisoned(tmp_path, bad={2, 4, 8}, nan_policy="skip", max_skipped_batches=2)
    assert "non-finite loss at step 6 (3 bad batches, over max_skipped_batches)" in str(err.value)
    assert f"intact: {tmp_path / 'checkpoints' / 'step-00000005'}" in str(err.value)


# ---------------------------------------------------------------------------- errors before any work starts
BAD_INPUT = {  # name -> (--set overrides, words of the error, whether the data is read before the error)
    "output dir under a file": ([], "is not writable", False),
    "missing data file": (["data.train=[/nonexistent/corpus.txt]"], "/nonexistent/corpus.txt does not exist", False),
    "negative lr": (["trainer.lr=-1"], "trainer.lr=-1 is invalid: expected a number > 0", False),
    "unknown trainer key": (["trainer.lrr=1"], "trainer has unknown key(s) ['lrr']", False),
    "--set without =": (["trainer.lr"], "expected SECTION.KEY=VALUE", False),
    "--set of no section": (["optim.lr=1"], "expected SECTION.KEY=VALUE", False),
    "zero steps": (["trainer.steps=0"], "trainer.steps=0 is invalid", False),
    "seq_len 1": (["data.seq_len=1"], "data.seq_len=1 is invalid", False),
    "fp16 on CPU": (["trainer.precision=fp16"], "trainer.precision='fp16' needs a CUDA device", True),
    "heads not dividing d_model": (["model.n_heads=3"], "n_heads", True),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_config_or_path_fails_clearly_before_any_work(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, case: str
) -> None:
    overrides, message, reads_data = BAD_INPUT[case]
    work: list[str] = []
    document_ids = causal_lm.document_ids
    monkeypatch.setattr(causal_lm, "document_ids", lambda *args: work.append("read data") or document_ids(*args))
    monkeypatch.setattr(Trainer, "fit", lambda self, resume=False: work.append("fit"))
    config = write_config(tmp_path / "run.yaml", tiny_run(corpus, 10))
    out = tmp_path / "run"
    if case == "output dir under a file":
        (tmp_path / "file").write_text("a regular file")
        out = tmp_path / "file" / "run"
    sets = [arg for item in overrides for arg in ("--set", item)]
    assert main(["train", "--config", str(config), "--output-dir", str(out), *sets, "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert work == (["read data"] if reads_data else [])
    assert not out.exists() or not any(out.iterdir())  # no checkpoints, metrics or run_config.yaml


# ------------------------------------------------------------------------------------------- lr schedules
def expected_factor(t: int, schedule: str, warmup: int, steps: int, floor: float) -> float:
    """The documented schedule, written out."""
    if t < warmup:
        return (t + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (t - warmup) / (steps - warmup))
    return {
        "linear": 1 - (1 - floor) * progress,
        "cosine": floor + (1 - floor) * (1 + math.cos(math.pi * progress)) / 2,
    }[schedule]


@hsettings(max_examples=60, deadline=None)
@given(
    schedule=st.sampled_from(["constant", "linear", "cosine"]),
    warmup=st.integers(0, 20),
    extra=st.integers(1, 200),
    floor=st.floats(0, 1),
)
def test_lr_factor_follows_warmup_then_the_schedule(schedule: str, warmup: int, extra: int, floor: float) -> None:
    steps = warmup + extra
    s = TrainerSettings(steps=steps, warmup=warmup, schedule=schedule, min_lr_ratio=floor)
    factors = [lr_factor(t, s) for t in range(steps + 1)]
    for t, factor in enumerate(factors):
        assert factor == pytest.approx(expected_factor(t, schedule, warmup, steps, floor), abs=1e-12)
    assert factors[:warmup] == [(t + 1) / warmup for t in range(warmup)]  # the linear ramp up to 1
    after = factors[warmup:]
    assert after[0] == pytest.approx(1.0) and all(a >= b - 1e-12 for a, b in itertools.pairwise(after))
    assert factors[steps] == pytest.approx(1.0 if schedule == "constant" else floor, abs=1e-12)
    assert all(min(floor, 1 / max(warmup, 1)) - 1e-12 <= f <= 1 + 1e-12 for f in factors)
    # the scheduler sets exactly lr * factor on every parameter group
    model = nn.Linear(2, 2)
    optimizer = build_optimizer(model, s)
    scheduler = build_scheduler(optimizer, s)
    for t in range(min(steps, 30)):
        assert all(g["lr"] == pytest.approx(s.lr * factors[t], abs=1e-15) for g in optimizer.param_groups)
        optimizer.step()
        scheduler.step()


# ------------------------------------------------------------------------------------------- weight decay
def kind(module: nn.Module, name: str) -> str:
    if isinstance(module, nn.Embedding):
        return "table"
    return "matrix" if isinstance(module, nn.Linear) and name == "weight" else "other"


ARCHS = [("decoder", p) for p in pf.positions.names()] + [("encoder", "learned"), ("encoder_decoder", "t5")]


@pytest.mark.parametrize("arch, position", ARCHS, ids=[f"{a}-{p}" for a, p in ARCHS])
def test_parameter_groups_decay_only_linear_matrices_each_parameter_once(arch: str, position: str) -> None:
    cfg = pf.Config(
        arch=arch,
        vocab_size=61,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=48,
        max_positions=64,
        position=position,
        tie_embeddings=True,
        decoder_start_token_id=0 if arch == "encoder_decoder" else None,
    )
    model = pf.Transformer(cfg)
    frozen = next(p for n, p in model.named_parameters() if n.endswith("bias") or "norm" in n)
    frozen.requires_grad_(False)
    decay, no_decay = parameter_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    kinds: dict[int, set[str]] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            kinds.setdefault(id(param), set()).add(kind(module, name))
    trainable = [p for p in model.parameters() if p.requires_grad]  # tied parameters once
    decayed, kept = [id(p) for p in decay["params"]], [id(p) for p in no_decay["params"]]
    assert sorted(decayed + kept) == sorted(map(id, trainable)), "every trainable parameter exactly once"
    assert {i for i in decayed} == {id(p) for p in trainable if kinds[id(p)] == {"matrix"}}
    names = {id(p): n for n, p in model.named_parameters()}
    kept_names = {names[i] for i in kept}
    assert "embed_tokens.weight" in kept_names  # the tied output head too: it is the embedding table
    assert {n for n in kept_names if n.endswith("bias") or "norm" in n} == {
        n for n, p in model.named_parameters() if p.requires_grad and (n.endswith("bias") or "norm" in n)
    }


# ------------------------------------------------------------------------ accumulation, seeds, run outputs
def run_in_process(config: dict, out: Path) -> None:
    train_causal_lm(RunSettings.from_dict(config), str(out), log=lambda line: None, progress=False)


def test_grad_accum_equals_the_larger_batch(corpus: Path, tmp_path: Path) -> None:
    run_in_process(tiny_run(corpus, 6, dropout=0.0, batch_size=4, grad_accum=2), tmp_path / "accum")
    run_in_process(tiny_run(corpus, 6, dropout=0.0, batch_size=8, grad_accum=1), tmp_path / "big")
    accum, big = losses(tmp_path / "accum"), losses(tmp_path / "big")
    assert [s for s, _ in accum] == [s for s, _ in big] == list(range(1, 7))
    for (_, a), (_, b) in zip(accum, big):
        assert a == pytest.approx(b, abs=1e-5)
    weights, expected = final_weights(tmp_path / "accum", 6), final_weights(tmp_path / "big", 6)
    for name, tensor in expected.items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-5)


def test_one_seed_makes_runs_identical_and_the_run_writes_its_config_log_and_plot(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    config = write_config(tmp_path / "run.yaml", tiny_run(corpus, 20, eval_every=10))
    first, again, other = tmp_path / "first", tmp_path / "again", tmp_path / "other"
    assert main(["train", "--config", str(config), "--output-dir", str(first), "--seed", "3", "--no-progress"]) == 0
    resolved = load_run_settings(str(first / "run_config.yaml"))  # the resolved config reads back as settings
    assert resolved.trainer.seed == 3 and resolved.data.seq_len == 32
    as_yaml = yaml.safe_load(yaml.safe_dump(resolved.to_dict(), sort_keys=False))  # betas: a list in YAML
    assert as_yaml == yaml.safe_load((first / "run_config.yaml").read_text())
    assert main(["train", "--config", str(first / "run_config.yaml"), "--output-dir", str(again), "--no-progress"]) == 0
    assert main(["train", "--config", str(config), "--output-dir", str(other), "--seed", "4", "--no-progress"]) == 0
    capsys.readouterr()
    assert losses(first) == losses(again) and losses(first) != losses(other)
    for name, tensor in final_weights(first, 20).items():
        assert torch.equal(final_weights(again, 20)[name], tensor)
    log = records(first)
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 21))
    s = resolved.trainer
    for r in (r for r in log if "loss" in r):
        factor = expected_factor(r["step"] - 1, s.schedule, s.warmup, s.steps, s.min_lr_ratio)
        assert r["lr"] == pytest.approx(s.lr * factor, abs=1e-15)
        assert r["tokens_per_s"] > 0 and math.isfinite(r["loss"])
    assert [(r["step"], sorted(r["eval"])) for r in log if "eval" in r] == [
        (10, ["val_loss", "val_ppl"]),
        (20, ["val_loss", "val_ppl"]),
    ]
    assert (first / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bf16_autocast_on_cpu_trains_float32_weights_close_to_fp32(corpus: Path, tmp_path: Path) -> None:
    """bf16 autocast on the CPU: the weights stay float32, and the losses track the fp32 run to bf16 precision."""
    run_in_process(tiny_run(corpus, 10, dropout=0.0, precision="bf16"), tmp_path / "bf16")
    run_in_process(tiny_run(corpus, 10, dropout=0.0), tmp_path / "fp32")
    low, full = losses(tmp_path / "bf16"), losses(tmp_path / "fp32")
    assert [s for s, _ in low] == list(range(1, 11))
    assert all(w.dtype == torch.float32 for w in final_weights(tmp_path / "bf16", 10).values())
    assert any(a != b for (_, a), (_, b) in zip(low, full))  # autocast did change the arithmetic
    for (_, a), (_, b) in zip(low, full):
        assert a == pytest.approx(b, rel=1e-3)  # observed: 3e-5 over these 10 steps
    assert low[-1][1] < low[0][1]


def test_compiled_training_equals_eager_training(corpus: Path, tmp_path: Path) -> None:
    """trainer.compile runs the steps through torch.compile (Inductor, on the CPU here): the same losses and
    final weights as the eager run, up to float32 reordering."""
    run_in_process(tiny_run(corpus, 3, dropout=0.0, eval_every=3), tmp_path / "eager")
    run_in_process(tiny_run(corpus, 3, dropout=0.0, eval_every=3, compile=True), tmp_path / "compiled")
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert [s for s, _ in compiled] == [1, 2, 3]
    for (_, a), (_, b) in zip(eager, compiled):
        assert b == pytest.approx(a, abs=1e-5)
    weights = final_weights(tmp_path / "compiled", 3)
    for name, tensor in final_weights(tmp_path / "eager", 3).items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-5)


def test_activation_checkpointing_trains_the_same_losses_and_weights(corpus: Path, tmp_path: Path) -> None:
    """trainer.activation_checkpointing recomputes each block in the backward pass, dropout masks included: the
    same losses and final weights as the plain run."""
    run_in_process(tiny_run(corpus, 4, dropout=0.1, eval_every=4), tmp_path / "plain")
    run_in_process(tiny_run(corpus, 4, dropout=0.1, eval_every=4, activation_checkpointing=True), tmp_path / "ckpt")
    plain, checkpointed = losses(tmp_path / "plain"), losses(tmp_path / "ckpt")
    assert [s for s, _ in checkpointed] == [1, 2, 3, 4] and checkpointed == plain
    weights = final_weights(tmp_path / "ckpt", 4)
    for name, tensor in final_weights(tmp_path / "plain", 4).items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-6)


def test_training_steps_ask_a_token_head_for_the_loss_alone(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer's steps call the model with `return_logits=False`, so the (B, T, V) logits are never held."""
    calls, forward = [], pf.Transformer.forward

    def recording_forward(model: pf.Transformer, *args, **kwargs):
        if model.training:
            calls.append(kwargs.get("return_logits", True))
        return forward(model, *args, **kwargs)

    monkeypatch.setattr(pf.Transformer, "forward", recording_forward)
    run_in_process(tiny_run(corpus, 2, dropout=0.0), tmp_path / "run")
    assert calls == [False, False]
