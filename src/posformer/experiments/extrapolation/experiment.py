"""`posformer extrapolate`: train short, test long (Press, Smith & Lewis 2022, the ALiBi benchmark).

One small causal LM per position encoding is trained at train_len L with the shared
`Trainer`; everything but the encoding is identical: tokenizer, data order (one batch
seed), steps and schedule, and the initial weights (every tensor of a reference model
whose name and shape match is copied in). Each row is then evaluated at L, 2L, ... 16L
on the same held-out tokens; the RoPE row also with eval-time scalings (linear/PI, NTK,
dynamic NTK, YaRN; factor eval_len / L). Results go to OUTPUT/results.json and
results.md (after each row, atomically) and ppl.png; row r's run is OUTPUT/rows/r (`layout`).
Re-running into the same OUTPUT skips recorded rows and resumes a half-trained one.
"""

from __future__ import annotations

import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

import torch

from posformer import positions
from posformer.checkpoints.atomic import write_json_atomic, write_text_atomic
from posformer.data.shared import default_data_dir
from posformer.experiments.copy_rows import CopyMix
from posformer.experiments.extrapolation import data
from posformer.experiments.extrapolation.evaluation import block_losses, represents, tokens_read
from posformer.experiments.extrapolation.figure import plot
from posformer.experiments.extrapolation.layout import ExperimentLayout
from posformer.experiments.extrapolation.report import markdown
from posformer.experiments.extrapolation.settings import ExtrapolationSettings, model_config
from posformer.experiments.longeval.mix import SuiteMix
from posformer.experiments.memory_fit import Need, check_fit, evaluation_advice, evaluation_need, training_need
from posformer.experiments.passkey import PasskeyMix
from posformer.model import Transformer
from posformer.positions.rotary import Rescalable
from posformer.train.batches import WindowBatches
from posformer.train.distributed import resolve_device
from posformer.train.metrics_log import MetricsLog
from posformer.train.rng import seed_everything
from posformer.train.run_lock import check_output_dir
from posformer.train.trainer import Trainer, TrainingStopped
from posformer.utils.options import options
from posformer.utils.progress import progress_bar
from posformer.utils.provenance import provenance
from posformer.utils.user_files import read_mapping_file

IGNORED_FOR_RESUME = ("positions", "methods", "threads")  # rows (methods) may be added to a finished run


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("posformer", "torch", "transformers", "tokenizers"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def open_results(settings: ExtrapolationSettings, layout: ExperimentLayout, benchmark: str = "extrapolation") -> dict:
    """The results recorded in `layout` (checked against `settings`, any object with `to_dict`: the task runs'
    `TaskSettings` too), or a fresh record of `benchmark`."""
    path = layout.results_json
    config = settings.to_dict()
    if path.is_file():
        saved = read_mapping_file(path, "the results file")
        old = saved.get("config") if isinstance(saved.get("config"), dict) else {}
        defaults = {declared.name: declared.default for declared in options(type(settings))}
        differ = sorted(
            k
            for k in set(old) | set(config)
            if k not in IGNORED_FOR_RESUME
            and old.get(k, defaults.get(k)) != config.get(k)  # a knob added since, at its default, still matches
        )
        if differ:
            raise ValueError(
                f"{layout.root} holds results of a different configuration (differing keys: "
                f"{', '.join(differ)}; saved { ({k: old.get(k) for k in differ}) }); use the same "
                "settings or another --output-dir"
            )
        saved["config"] = config
        made_by = saved.setdefault("provenance", [])
        if not made_by or made_by[-1] != provenance():  # a resume by another command or commit is on record too
            made_by.append(provenance())
        return saved
    return {
        "benchmark": benchmark,
        "config": config,
        "data": {},
        "rows": {},
        "versions": versions(),
        "provenance": [provenance()],
    }


def save_results(results: dict, layout: ExperimentLayout, draw: bool = True) -> None:
    write_json_atomic(layout.results_json, results)
    write_text_atomic(layout.results_md, markdown(results))
    if draw and results["rows"]:
        plot(results, layout.plot_png)


def reference_copy(model: Transformer, reference: Transformer) -> list[str]:
    """Copy every tensor of `reference` whose name and shape match into `model`; the names copied."""
    theirs = reference.state_dict()
    shared = {k: v for k, v in model.state_dict().items() if k in theirs and theirs[k].shape == v.shape}
    with torch.no_grad():
        for name, tensor in shared.items():
            tensor.copy_(theirs[name])
    return sorted(shared)


def initial_model(
    settings: ExtrapolationSettings, position: str, vocab_size: int, reference: Transformer | None = None
) -> Transformer:
    """The row's model before training: seeded init, then the shared tensors of the reference ("none") model."""
    if reference is None:
        seed_everything(settings.seed)
        reference = Transformer(model_config(settings, "none", vocab_size))
    seed_everything(settings.seed)
    model = Transformer(model_config(settings, position, vocab_size))
    reference_copy(model, reference)
    return model


class Experiment:
    """The data, tokenizer and reference model shared by every row, and the per-row work."""

    def __init__(
        self, settings: ExtrapolationSettings, layout: ExperimentLayout, log: Callable[[str], None], progress: bool
    ):
        self.s, self.layout, self.log, self.progress = settings, layout, log, progress
        data_dir = settings.data_dir or default_data_dir()
        corpus = data.load_corpus(settings.corpus, data_dir, settings.held_out, settings.wikitext)
        self.tokenizer = self._tokenizer(corpus.train)
        self.files = data.tokenizer_files(self.tokenizer)
        self.vocab_size = len(self.tokenizer)
        self.train_ids = data.train_stream(self.tokenizer, corpus.train, settings.train_chars)
        longest = max(settings.eval_lens)
        self.streams = {
            name: data.eval_streams(self.tokenizer, docs, settings.eval_tokens, longest)
            for name, docs in corpus.eval_sets.items()
        }
        self.summary = {
            "held_out": corpus.held_out,
            "train_documents": list(corpus.train),
            "train_tokens": self.train_ids.numel(),
            "vocab_size": self.vocab_size,
            "data_dir": str(data_dir) if settings.corpus == "gutenberg" or settings.wikitext else None,
            "eval_sets": {
                name: {
                    "tokens": sum(t.numel() for t in st.values()),
                    "documents": {d: t.numel() for d, t in st.items()},
                }
                for name, st in self.streams.items()
            },
            "unigram_ppl": {
                name: data.unigram_perplexity(self.train_ids, st, self.vocab_size) for name, st in self.streams.items()
            },
        }
        seed_everything(settings.seed)
        self.reference = Transformer(model_config(settings, "none", self.vocab_size))

    def _tokenizer(self, texts: dict[str, str]):
        """Trained once per output dir and kept in OUTPUT/tokenizer, so a resumed run reuses it."""
        from transformers import PreTrainedTokenizerFast

        folder = self.layout.tokenizer_dir
        if (folder / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(folder))
        self.log(
            f"training a byte-level BPE tokenizer (vocab {self.s.vocab_size}, {self.s.tokenizer_chars:,} characters)"
        )
        tokenizer = data.train_bpe(texts, self.s.vocab_size, self.s.tokenizer_chars, self.s.split_digits)
        tokenizer.save_pretrained(str(folder))
        return tokenizer

    def encode(self, text: str) -> list[int]:
        """text -> ids with the experiment's tokenizer, no special tokens (the prompts mixed into training)."""
        return data.encode(self.tokenizer, text).tolist()

    def evaluate(self, model: Transformer, row: str, scaling: str | None = None) -> tuple[dict, dict]:
        """(ppl, blocks): {eval set: {str(eval_len): ppl or None}} and {eval set: {str(eval_len): {"nll": [...],
        "count": [...]}}} per block of the longest eval length (for the bootstrap intervals). With `scaling`, the
        model rescaled by that context-extension method (`positions.rotary.Rescalable`) per length."""
        s = self.s
        encoding = positions.get(model.cfg.position)
        if scaling is not None and not isinstance(encoding, Rescalable):
            raise ValueError(f"position={model.cfg.position!r} has no context-extension method {scaling!r}")
        table: dict[str, dict[str, float | None]] = {name: {} for name in self.streams}
        blocks: dict[str, dict[str, dict]] = {name: {} for name in self.streams}
        stride = s.stride or s.train_len // 2
        bar = progress_bar(
            total=sum(
                tokens_read(streams, n, s.protocol, stride)
                for n in s.eval_lens
                if represents(model.cfg, n)
                for streams in self.streams.values()
            ),
            desc=f"eval {row}",
            unit="tok",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not self.progress,
        )
        for n in s.eval_lens:
            scored = model
            if scaling is not None:
                cfg = model.cfg
                params = encoding.rescaled_params(cfg.position_params, scaling, max(n, s.train_len), s.train_len)
                scored = Transformer(cfg.replace(position_params=params))
                scored.load_state_dict(model.state_dict())
                scored.to(next(model.parameters()).device)
            for name, streams in self.streams.items():
                bar.set_postfix_str(f"{name} @ {n}")
                losses = block_losses(
                    scored,
                    streams,
                    n,
                    max(s.eval_lens),
                    s.protocol,
                    stride,
                    s.eval_batch_tokens,
                    s.precision,
                    bar.update,
                )
                table[name][str(n)] = None if losses is None else losses.perplexity()
                if losses is not None:
                    blocks[name][str(n)] = {"nll": losses.nll.tolist(), "count": losses.count.tolist()}
        bar.close()
        return table, blocks

    def run_row(self, position: str) -> dict[str, dict]:
        """Train (or resume) and evaluate one row -> {row name: record}, with the RoPE scaling rows for rope."""
        s, run_dir = self.s, self.layout.row_dir(position)
        model = initial_model(s, position, self.vocab_size, self.reference)
        self.log(f"\n== {position}: {model.num_parameters():,} parameters, training in {run_dir}")
        started = time.monotonic()
        batches = WindowBatches(self.train_ids, s.train_len, s.seed)
        encode = self.encode
        if s.copy_fraction > 0 or s.copy_warmup > 0:
            batches = CopyMix(
                batches, s.train_len, s.copy_fraction, s.seed, self.vocab_size, s.copy_warmup, s.copy_span
            )
        if s.passkey_fraction > 0:
            batches = PasskeyMix(batches, encode, s.train_len, s.passkey_fraction, s.seed, s.copy_warmup)
        if s.suite_fraction > 0:
            batches = SuiteMix(
                batches, encode, s.train_len, s.suite_fraction, s.seed, s.suite_tasks, self.train_ids, s.copy_warmup
            )
        trainer = Trainer(
            model,
            batches,
            s.trainer_settings(),
            run_dir,
            run_config={"extrapolate": s.to_dict(), "model": model.cfg.to_dict()},
            extra_files=self.files,
            log=self.log,
            progress=self.progress,
        )
        record = {"position": position, "parameters": model.num_parameters(), "error": None}
        try:
            fit = trainer.fit(resume=True)
        except TrainingStopped as err:
            self.log(f"{position}: {err}")
            record.update(error=str(err), ppl={name: {str(n): None for n in s.eval_lens} for name in self.streams})
            return {position: record}
        losses = [r["loss"] for r in MetricsLog(run_dir / "metrics.jsonl").records() if "loss" in r]
        record.update(
            steps=fit.step,
            final_loss=losses[-1] if losses else None,  # resumed runs: the whole log
            train_wall_s=round(time.monotonic() - started, 2),
        )
        started = time.monotonic()
        record["ppl"], record["blocks"] = self.evaluate(model, position)
        record["eval_wall_s"] = round(time.monotonic() - started, 2)
        rows = {position: record}
        encoding = positions.get(position)
        scalings = encoding.scalings if isinstance(encoding, Rescalable) else ()
        for kind in (k for k in s.rope_scalings if k in scalings):
            started = time.monotonic()
            row = f"{position}+{kind}"
            ppl, blocks = self.evaluate(model, row, kind)
            rows[row] = {
                "position": position,
                "scaling": kind,
                "parameters": record["parameters"],
                "error": None,
                "ppl": ppl,
                "blocks": blocks,
            }
            rows[row]["eval_wall_s"] = round(time.monotonic() - started, 2)
        return rows


def memory_needs(settings: ExtrapolationSettings, rows: list[str], device: torch.device) -> list[Need]:
    """The estimated peak of each row's training step and of its evaluation at each length it represents (the
    reference model, the row's and a RoPE scaling's rescaled copy held at once)."""
    s, needs = settings, []
    for position in rows:
        cfg = model_config(s, position, s.vocab_size)
        advice = "Lower batch_size (--batch-size) or train_len."
        needs.append(training_need(cfg, s.train_len, s.batch_size, f"training the {position} row", advice, device, 2))
        for n in (n for n in s.eval_lens if represents(cfg, n)):
            batch = max(1, s.eval_batch_tokens // n)
            advice = evaluation_advice(n, batch, "--eval-lens")
            needs.append(evaluation_need(cfg, n, batch, f"evaluating the {position} row", advice, device, 3))
    return needs


def run_extrapolation(
    settings: ExtrapolationSettings, output_dir: str | Path, log: Callable[[str], None] = print, progress: bool = True
) -> dict:
    """Run (or continue) the experiment into `output_dir`; returns the results dict written to results.json."""
    layout = ExperimentLayout(Path(output_dir))
    check_output_dir(layout.root)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    results = open_results(settings, layout)
    rows, device = [p for p in settings.positions if p not in results["rows"]], resolve_device(settings.device)
    check_fit("extrapolate", memory_needs(settings, rows, device), device)  # before any data is read or trained
    started = time.monotonic()
    experiment = Experiment(settings, layout, log, progress)
    results["data"] = experiment.summary
    save_results(results, layout, draw=False)
    for position in settings.positions:
        if position in results["rows"]:
            log(f"{position}: already recorded in {layout.results_json}, skipped")
            continue
        results["rows"].update(experiment.run_row(position))
        results["wall_s"] = round(results.get("wall_s", 0.0) + time.monotonic() - started, 2)
        started = time.monotonic()
        save_results(results, layout)
    if results["rows"]:
        save_results(results, layout)
    return results
