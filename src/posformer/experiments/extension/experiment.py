"""`posformer extend`: extend a trained RoPE model's context, the way the papers do, and measure what it gained.

For each method (none, pi, ntk, yarn, dynyarn, longrope, rerope, self_extend, dual_chunk, streaming, window,
drope; `methods`), from the same trained weights:
  1. eval-time: the method's RoPE scaling for factor target_len / L (dynyarn: its factor from each forward's
     length), or its RoPE with a piecewise distance, or (drope) no position encoding, on the trained weights (not
     for none);
  2. fine-tuned, for the methods whose papers fine-tune (`methods.FINE_TUNED`: the scalings): the same scaling
     (dynyarn: YaRN's at target_len, dynamic past it, `methods`), then `steps` optimizer steps at target_len on the
     run's training text (Chen et al. 2023 fine-tune PI for 1000 steps, Peng et al. 2023 YaRN for 400). Every
     method sees the same batches in the same order. DroPE is recalibrated instead: RoPE dropped, `steps` steps at
     L on the same text, each step the same tokens as a fine-tuning step (`ExtendSettings.recalibration_batch`).
Every model (the source too) is scored by perplexity at each eval length on the same held-out tokens, with
bootstrap intervals over blocks of the longest eval length, by passkey retrieval on a length x depth grid, and by
the long-context suite's tasks on the same grid (`extension.suite`: exact match, effective length).
Results go to OUTPUT/results.json and results.md after each method (atomically) and ppl.png, passkey.png; the
fine-tune of method m is the Trainer run OUTPUT/rows/m (resumable; `posformer generate --model OUTPUT/rows/m`).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import torch

from posformer import positions
from posformer.checkpoints.native import save_pretrained
from posformer.experiments import corpus
from posformer.experiments.extension import figure, report, suite_report
from posformer.experiments.extension.longrope import search_long_factors, search_short_factors
from posformer.experiments.extension.methods import (
    DROPPED,
    FINE_TUNED,
    PIECEWISE,
    check_rope_model,
    extended_params,
    position_of,
    with_params,
)
from posformer.experiments.extension.settings import ExtendSettings
from posformer.experiments.extension.source import Source, load_source
from posformer.experiments.extension.source_identity import check_same_source, source_record
from posformer.experiments.extension.suite import fitting_lengths, score_suite, suite_tokens
from posformer.experiments.extrapolation.evaluation import block_losses, tokens_read
from posformer.experiments.layout import ExperimentLayout
from posformer.experiments.longeval.haystacks import book_ids
from posformer.experiments.longeval.tasks import get_task
from posformer.experiments.memory_fit import Need, check_fit, evaluation_advice, evaluation_need, training_need
from posformer.experiments.passkey import PasskeyMix, grid_tokens, passkey_grid
from posformer.experiments.rows import fit_row
from posformer.experiments.runner import Runner
from posformer.model import Transformer
from posformer.train.batches import WindowBatches
from posformer.train.distributed import resolve_device
from posformer.train.trainer import Trainer, TrainingStopped
from posformer.utils.progress import ProgressBar, progress_bar
from posformer.utils.safe_write import make_dirs


class Extension:
    """The source run, its evaluation tokens, and the per-method work."""

    def __init__(
        self,
        settings: ExtendSettings,
        source: Source,
        layout: ExperimentLayout,
        log: Callable[[str], None],
        progress: bool,
        data_dir: str | None = None,
    ):
        self.s, self.source, self.layout, self.log, self.progress = settings, source, layout, log, progress
        self.streams = {
            name: corpus.eval_streams(source.tokenizer, docs, settings.eval_tokens, max(settings.eval_lens))
            for name, docs in source.eval_docs.items()
        }
        self.suite_cells = fitting_lengths(settings.suite_tasks, settings.passkey_lengths, source.encode)
        self.haystack_ids = self._held_out_books(data_dir)

    def _held_out_books(self, data_dir: str | None) -> torch.Tensor | None:
        """The held-out books' tokens for the suite's book tasks; without the books (a --text run on a machine
        without ../shared/data), those tasks are dropped with a message naming them and the folder."""
        books = [t for t, lengths in self.suite_cells.items() if lengths and get_task(t).haystack == "book"]
        if not books:
            return None
        try:
            return book_ids(self.source.encode, "eval", data_dir)
        except FileNotFoundError as err:
            self.log(f"suite: tasks {', '.join(books)} skipped: {err}")
            for task in books:
                del self.suite_cells[task]
            return None

    def score(self, model: Transformer, row: str) -> dict:
        """{"ppl": {set: {len: ppl}}, "blocks": {set: {len: {nll, count}}}, "passkey": grid} of one model; a
        progress bar counts the tokens read (perplexity, then passkey)."""
        s, started = self.s, time.monotonic()
        ppl: dict = {name: {} for name in self.streams}
        blocks: dict = {name: {} for name in self.streams}
        read = sum(tokens_read(streams, n) for n in s.eval_lens for streams in self.streams.values())
        with self._bar(f"ppl {row}", read) as bar:
            for n in s.eval_lens:
                for name, streams in self.streams.items():
                    bar.set_postfix_str(f"{name} @ {n}")
                    losses = block_losses(
                        model,
                        streams,
                        n,
                        max(s.eval_lens),
                        batch_tokens=s.eval_batch_tokens,
                        precision=s.precision,
                        advance=bar.update,
                    )
                    ppl[name][str(n)] = losses.perplexity()
                    blocks[name][str(n)] = {"nll": losses.nll.tolist(), "count": losses.count.tolist()}
        lengths, depths, trials = s.passkey_lengths, s.passkey_depths, s.passkey_trials
        with self._bar(f"passkey {row}", grid_tokens(lengths, depths, trials)) as bar:
            grid = passkey_grid(
                model, self.source.encode, lengths, depths, trials, s.seed, s.eval_batch_tokens, bar.update
            )
        scored = {"ppl": ppl, "blocks": blocks, "passkey": grid}
        if self.suite_cells:
            total = suite_tokens(self.suite_cells, depths, s.suite_trials)
            with self._bar(f"suite {row}", total) as bar:
                scored["suite"] = score_suite(
                    model,
                    self.source.encode,
                    self.suite_cells,
                    depths,
                    s.suite_trials,
                    s.seed,
                    self.haystack_ids,
                    s.eval_batch_tokens,
                    bar.update,
                )
        self.log(
            f"{row}: ppl {', '.join(f'{n}: {v:.3f}' for n, v in next(iter(ppl.values())).items())}; "
            f"passkey {report.mean_exact(grid):.2f} ({time.monotonic() - started:.0f} s)"
        )
        return scored

    def _bar(self, desc: str, total: int) -> ProgressBar:
        """A progress bar of `total` tokens (off with --no-progress)."""
        off = not self.progress
        return progress_bar(total=total, desc=desc, unit="tok", unit_scale=True, dynamic_ncols=True, disable=off)

    def run_method(self, method: str) -> dict[str, dict]:
        """{row: record} for `method`: its eval-time row (not for none) and, for a method that is fine-tuned
        (`FINE_TUNED`), its fine-tuned row (steps > 0; drope: recalibrated at L)."""
        s, model = self.s, self.source.model
        search = self._search(model, s.target_len) if method == "longrope" else None
        long_factor = search and search["long_factor"]
        params = extended_params(model, method, s.target_len, s.train_len, long_factor)
        tune_params = extended_params(model, method, s.target_len, s.train_len, long_factor, fine_tuned=True)
        position = position_of(method)
        rows: dict[str, dict] = {}
        if method != "none":
            rows[method] = {
                "method": method,
                "stage": "eval-time",
                "scaling": params.get("scaling"),
                "longrope_search": search,
                **self._piecewise_record(method, params),
                **self.score(with_params(model, params, s.target_len, position), method),
            }
        if s.steps == 0 or method not in FINE_TUNED:
            return rows
        row, stage = f"{method}+ft", "recalibrated" if method in DROPPED else "fine-tuned"
        try:
            if method == "longrope" and (s.longrope_stages or s.longrope_short):
                tuned, record = self._longrope_recipe(params)
            elif method in DROPPED:  # DroPE: trained at L, the same tokens a step as a fine-tune at target_len
                windows = s.recalibration_batch()
                start = with_params(model, tune_params, s.target_len, position)
                tuned, record = self._train(start, s.train_len, s.steps, method, windows)
                record.update(length=s.train_len, windows=windows)
            else:
                start = with_params(model, tune_params, s.target_len)
                tuned, record = self._train(start, s.target_len, s.steps, method)
        except TrainingStopped as err:
            self.log(f"{method}: {err}")
            rows[row] = {"method": method, "stage": stage, "error": str(err)}
            return rows
        rows[row] = {
            "method": method,
            "stage": stage,
            "scaling": tuned.cfg.position_params.get("scaling"),
            "steps": s.steps,
            **record,
            **self.score(tuned, row),
        }
        return rows

    @staticmethod
    def _piecewise_record(method: str, params: dict) -> dict:
        """For a method of RoPE with a piecewise distance, or drope: its encoding and the parameters it chose ({}
        else)."""
        if method not in PIECEWISE + DROPPED:
            return {}
        own = {k: v for k, v in params.items() if k not in positions.get("rope").defaults}
        return {"position": position_of(method), "method_params": own}

    def _log_generation(self, generation: int, ppl: float) -> None:
        """A LongRoPE search's progress: the best perplexity after each generation."""
        self.log(f"  generation {generation}: best ppl {ppl:.3f}")

    def _search(self, model: Transformer, length: int, previous: tuple[int, list[float]] | None = None) -> dict:
        """LongRoPE's long factors of `model` for `length`; previous: (length, factors) of an earlier stage, whose
        factors times length / that length seed the search too."""
        s = self.s
        self.log(
            f"longrope: searching the long factors for {length} ({s.longrope_population} x {s.longrope_generations})"
        )
        extra = [] if previous is None else [[f * length / previous[0] for f in previous[1]]]
        result = search_long_factors(
            model,
            self.source.train_ids[: max(s.longrope_tokens, length)],  # one window of `length` at least
            length,
            s.train_len,
            s.longrope_population,
            s.longrope_generations,
            seed=s.seed,
            batch_tokens=s.eval_batch_tokens,
            extra_seeds=extra,
            progress=self._log_generation,
        )
        return {
            "length": length,
            "long_factor": result.factors,
            "ppl": result.ppl,
            "history": result.history,
            "evaluated": result.evaluated,
        }

    def _train(
        self, tuned: Transformer, length: int, steps: int, name: str, batch_size: int | None = None
    ) -> tuple[Transformer, dict]:
        """`tuned` (a fresh copy, trained in place) fine-tuned `steps` steps at `length`, `batch_size` windows a
        step (None: the knob's), as the Trainer run rows/NAME -> (the model, {final_loss, train_wall_s}). Raises
        TrainingStopped."""
        s = self.s
        run_dir = self.layout.new_row_dir(name)
        self.log(f"\n== {name}: training {steps} steps at {length} in {run_dir}")
        batches = WindowBatches(self.source.train_ids, length, s.seed)
        if s.passkey_fraction > 0:
            batches = PasskeyMix(batches, self.source.encode, length, s.passkey_fraction, s.seed)
        settings = s.trainer_settings(steps)
        trainer = Trainer(
            tuned,
            batches,
            dataclasses.replace(settings, batch_size=batch_size or settings.batch_size),
            run_dir,
            run_config={"extend": s.to_dict(), "model": tuned.cfg.to_dict()},
            extra_files=self.source.files,
            log=self.log,
            progress=self.progress,
        )
        trained = fit_row(trainer, run_dir)
        return tuned, {"final_loss": trained["final_loss"], "train_wall_s": trained["train_wall_s"]}

    def _longrope_recipe(self, params: dict) -> tuple[Transformer, dict]:
        """LongRoPE as the paper runs it (section 3.3): search and fine-tune at each of `longrope_stages`, then
        search again from the fine-tuned model and fine-tune at target_len; with `longrope_short`, then search
        the short factors that restore the perplexity at train_len (the readjusted model is saved to
        rows/longrope/readjusted). params: the eval-time row's (its search), used when there are no stages."""
        s, model, record = self.s, self.source.model, {"stages": []}
        steps, previous = s.stage_steps(), None
        for length, n in zip(s.longrope_stages, steps):
            found = self._search(model, length, previous)
            stage = extended_params(model, "longrope", length, s.train_len, found["long_factor"])
            model, trained = self._train(with_params(model, stage, length), length, n, f"longrope-{length}")
            record["stages"].append({**found, "steps": n, **trained})
            previous = (length, found["long_factor"])
        if previous is not None:
            found = self._search(model, s.target_len, previous)
            params = extended_params(model, "longrope", s.target_len, s.train_len, found["long_factor"])
            record["longrope_search"] = found
        tuned, trained = self._train(with_params(model, params, s.target_len), s.target_len, steps[-1], "longrope")
        record.update(trained)
        if s.longrope_short:
            self.log(f"longrope: searching the short factors for {s.train_len}")
            result = search_short_factors(
                tuned,
                self.source.train_ids[: s.longrope_tokens],
                s.longrope_population,
                s.longrope_generations,
                seed=s.seed,
                batch_tokens=s.eval_batch_tokens,
                progress=self._log_generation,
            )
            scaling = {**tuned.cfg.position_params["scaling"], "short_factor": result.factors}
            tuned = with_params(tuned, {**tuned.cfg.position_params, "scaling": scaling}, s.target_len)
            save_pretrained(
                tuned, make_dirs(self.layout.row_dir("longrope") / "readjusted", self.layout.root), self.source.files
            )
            record["short_search"] = {
                "short_factor": result.factors,
                "ppl": result.ppl,
                "unadjusted_ppl": result.seed_ppl[0],
                "history": result.history,
                "evaluated": result.evaluated,
            }
        return tuned, record


def draw(results: dict, layout: ExperimentLayout) -> None:
    """The figures of an extension run: perplexity and passkey by length, and the long-context suite's."""
    figure.plot_ppl(results, layout.root / "ppl.png")
    figure.plot_passkey(results, layout.root / "passkey.png")
    if suite_report.suite_rows(results):
        figure.plot_suite(results, layout.root / "suite.png")
        figure.plot_effective(results, layout.root / "effective_length.png")


def memory_needs(settings: ExtendSettings, model: Transformer, device: torch.device) -> list[Need]:
    """The estimated peak of scoring at each eval and passkey length (as RoPE and as each piecewise method, whose
    bias is computed in blocks), of the LongRoPE search at its lengths, and of a fine-tuning step at target_len
    (and at LongRoPE's stages) when a method is fine-tuned; the source model and an extended copy held."""
    s, needs = settings, []
    cfg = model.cfg.replace(max_positions=max(model.cfg.max_positions, *s.eval_lens, *s.passkey_lengths))
    scored = {*s.eval_lens, *s.passkey_lengths}
    if "longrope" in s.methods:
        scored |= {s.target_len, *s.longrope_stages}
    scorers = {"scoring": cfg} | {
        f"scoring {m}": cfg.replace(position=position_of(m)) for m in s.methods if m in PIECEWISE
    }
    for n in sorted(scored):
        batch = max(1, s.eval_batch_tokens // n)
        advice = evaluation_advice(n, batch, "eval_lens and passkey_lengths: --set KNOB=[...]")
        needs += [evaluation_need(c, n, batch, what, advice, device, 2) for what, c in scorers.items()]
    advice = "Lower batch_size (--batch-size) or target_len, or give --steps 0 (eval-time scaling only)."
    if s.steps > 0 and any(m in FINE_TUNED and m not in DROPPED for m in s.methods):
        for n in {s.target_len, *(s.longrope_stages if "longrope" in s.methods else [])}:
            needs.append(training_need(cfg, n, s.batch_size, "fine-tuning", advice, device, 2))
    if s.steps > 0 and "drope" in s.methods:
        dropped = cfg.replace(position="none", position_params={})
        needs.append(training_need(dropped, s.train_len, s.recalibration_batch(), "recalibration", advice, device, 2))
    return needs


def _has_method(results: dict, method: str) -> bool:
    return any(r.get("method") == method for r in results["rows"].values())


def run_extend(
    settings: ExtendSettings,
    run_dir: str | Path,
    output_dir: str | Path,
    log: Callable[[str], None] = print,
    progress: bool = True,
    data_dir: str | None = None,
) -> dict:
    """Extend the model of `run_dir` by every method of `settings` into `output_dir`; the results dict."""
    runner = Runner(output_dir, settings.threads, report.markdown, draw)
    layout = runner.layout
    source = load_source(run_dir, settings.text, data_dir)
    if source.train_len is None and settings.train_len is None:
        raise ValueError(f"extend: {run_dir} does not record its training length; give --train-len")
    settings.resolve(source.train_len)
    check_rope_model(source.model, str(run_dir), settings.methods)
    device = resolve_device(settings.device)
    check_fit("extend", memory_needs(settings, source.model, device), device)  # before any scoring or training
    results = runner.open(settings, "extend")
    found = source_record(run_dir, source)
    check_same_source(results.get("source", {}), found, layout.root)
    results["source"] = found
    runner.save(results)  # the configuration is on record before any training: a resume with other settings fails
    started = time.monotonic()
    extension = Extension(settings, source, layout, log, progress, data_dir)
    results["data"] = {
        "eval_sets": {
            name: {"tokens": sum(t.numel() for t in st.values()), "documents": {d: t.numel() for d, t in st.items()}}
            for name, st in extension.streams.items()
        }
    }
    if "source" not in results["rows"]:
        results["rows"]["source"] = {"method": None, "stage": "trained", **extension.score(source.model, "source")}
    runner.run_rows(results, settings.methods, extension.run_method, log, started, _has_method)
    runner.save(results)
    return results
