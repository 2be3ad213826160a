"""`posformer extrapolate`: train short, test long (Press, Smith & Lewis 2022, the ALiBi benchmark).

One small causal LM per position encoding is trained at train_len L with the shared
`Trainer`; everything but the encoding is identical: tokenizer, data order (one batch
seed), steps and schedule, and the initial weights (every tensor of a reference model
whose name and shape match is copied in). Each row is then evaluated at L, 2L, ... 16L
on the same held-out tokens; the RoPE row also with eval-time scalings (linear/PI, NTK,
dynamic NTK, YaRN; factor eval_len / L). With retrieval_trials > 0 (`--preset retrieval`)
every row, scaled ones too, is also scored on passkey retrieval by depth and on the
suite's needles at each eval length (`retrieval`). Results go to OUTPUT/results.json and
results.md (after each row, atomically) and ppl.png; row r's run is OUTPUT/rows/r (`layout`).
Re-running into the same OUTPUT skips recorded rows and resumes a half-trained one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch

from posformer import positions
from posformer.data.shared import default_data_dir
from posformer.experiments import corpus
from posformer.experiments.copy_rows import CopyMix
from posformer.experiments.extrapolation.evaluation import block_losses, represents, tokens_read
from posformer.experiments.extrapolation.figure import plot
from posformer.experiments.extrapolation.report import markdown
from posformer.experiments.extrapolation.retrieval import RetrievalScorer
from posformer.experiments.extrapolation.settings import ExtrapolationSettings, model_config
from posformer.experiments.layout import ExperimentLayout
from posformer.experiments.longeval.haystacks import text_ids
from posformer.experiments.longeval.mix import SuiteMix
from posformer.experiments.memory_fit import Need, check_fit, evaluation_advice, evaluation_need, training_need
from posformer.experiments.passkey import PasskeyMix
from posformer.experiments.rows import fit_row, seeded_model
from posformer.experiments.runner import Runner
from posformer.model import Transformer
from posformer.positions.contract import Rescalable
from posformer.train.batches import WindowBatches
from posformer.train.distributed import resolve_device
from posformer.train.trainer import Trainer, TrainingStopped
from posformer.utils.progress import progress_bar
from posformer.utils.safe_write import write_text_atomic
from posformer.utils.tokenizer_config import saved_tokenizer_files


def initial_model(
    settings: ExtrapolationSettings, position: str, vocab_size: int, reference: Transformer | None = None
) -> Transformer:
    """The row's model before training: seeded init, then the shared tensors of the reference ("none") model."""
    if reference is None:
        reference = seeded_model(model_config(settings, "none", vocab_size), settings.seed)
    return seeded_model(model_config(settings, position, vocab_size), settings.seed, reference)


def rescaled(model: Transformer, scaling: str, length: int, train_len: int) -> Transformer:
    """`model` with its RoPE rescaled by the context-extension method `scaling` for `length` (factor
    max(length, train_len) / train_len), the same weights, on the same device."""
    cfg = model.cfg
    params = positions.get(cfg.position).rescaled_params(
        cfg.position_params, scaling, max(length, train_len), train_len
    )
    scored = Transformer(cfg.replace(position_params=params))
    scored.load_state_dict(model.state_dict())
    return scored.to(next(model.parameters()).device)


class Experiment:
    """The data, tokenizer and reference model shared by every row, and the per-row work."""

    def __init__(
        self, settings: ExtrapolationSettings, layout: ExperimentLayout, log: Callable[[str], None], progress: bool
    ):
        self.s, self.layout, self.log, self.progress = settings, layout, log, progress
        data_dir = settings.data_dir or default_data_dir()
        texts = corpus.load_corpus(settings.corpus, data_dir, settings.held_out, settings.wikitext)
        self.tokenizer = self._tokenizer(texts.train)
        self.files = saved_tokenizer_files(self.tokenizer)
        self.vocab_size = len(self.tokenizer)
        self.train_ids = corpus.train_stream(self.tokenizer, texts.train, settings.train_chars)
        longest = max(settings.eval_lens)
        self.streams = {
            name: corpus.eval_streams(self.tokenizer, docs, settings.eval_tokens, longest)
            for name, docs in texts.eval_sets.items()
        }
        self.summary = {
            "held_out": texts.held_out,
            "train_documents": list(texts.train),
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
                name: corpus.unigram_perplexity(self.train_ids, st, self.vocab_size)
                for name, st in self.streams.items()
            },
        }
        self.reference = seeded_model(model_config(settings, "none", self.vocab_size), settings.seed)
        self.retrieval = self._retrieval_scorer(texts.eval_sets) if settings.scores_retrieval else None

    def _retrieval_scorer(self, eval_sets: dict[str, dict[str, str]]) -> RetrievalScorer:
        """The retrieval scoring, its book haystacks the first evaluation set's held-out texts (checked before any
        row is trained)."""
        name = next(iter(eval_sets))
        haystack = text_ids(self.encode, list(eval_sets[name].values()))
        self.summary["retrieval_haystack"] = {"eval_set": name, "tokens": haystack.numel()}
        s = self.s
        return RetrievalScorer(s, self.encode, haystack, s.train_len, s.eval_lens, s.seed, s.eval_batch_tokens,
                               self.progress)  # fmt: skip

    def _tokenizer(self, texts: dict[str, str]):
        """Trained once per output dir and kept in OUTPUT/tokenizer, so a resumed run reuses it."""
        from transformers import PreTrainedTokenizerFast

        folder = self.layout.tokenizer_dir
        if (folder / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(folder))
        self.log(
            f"training a byte-level BPE tokenizer (vocab {self.s.vocab_size}, {self.s.tokenizer_chars:,} characters)"
        )
        tokenizer = corpus.train_bpe(texts, self.s.vocab_size, self.s.tokenizer_chars, self.s.split_digits)
        for name, text in saved_tokenizer_files(tokenizer).items():
            write_text_atomic(folder / name, text, self.layout.root)
        return tokenizer

    def encode(self, text: str) -> list[int]:
        """text -> ids with the experiment's tokenizer, no special tokens (the prompts mixed into training)."""
        return corpus.encode(self.tokenizer, text).tolist()

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
            scored = model if scaling is None else rescaled(model, scaling, n, s.train_len)
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
        s, run_dir = self.s, self.layout.new_row_dir(position)
        model = initial_model(s, position, self.vocab_size, self.reference)
        self.log(f"\n== {position}: {model.num_parameters():,} parameters, training in {run_dir}")
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
            record.update(fit_row(trainer, run_dir))
        except TrainingStopped as err:
            self.log(f"{position}: {err}")
            record.update(error=str(err), ppl={name: {str(n): None for n in s.eval_lens} for name in self.streams})
            return {position: record}
        started = time.monotonic()
        record["ppl"], record["blocks"] = self.evaluate(model, position)
        record["eval_wall_s"] = round(time.monotonic() - started, 2)
        if self.retrieval is not None:
            record["retrieval"] = self.retrieval.score(lambda n: model, position)
        rows = {position: record}
        encoding = positions.get(position) if position in positions.names() else None  # a mechanism is its own row
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
            if self.retrieval is not None:
                rows[row]["retrieval"] = self.retrieval.score(lambda n, k=kind: rescaled(model, k, n, s.train_len), row)
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
    runner = Runner(output_dir, settings.threads, markdown, lambda results, layout: plot(results, layout.plot_png))
    layout = runner.layout
    results = runner.open(settings, "extrapolation")
    rows, device = [p for p in settings.positions if p not in results["rows"]], resolve_device(settings.device)
    check_fit("extrapolate", memory_needs(settings, rows, device), device)  # before any data is read or trained
    started = time.monotonic()
    experiment = Experiment(settings, layout, log, progress)
    results["data"] = experiment.summary
    runner.save(results, draw=False)
    runner.run_rows(results, settings.positions, experiment.run_row, log, started)
    if results["rows"]:
        runner.save(results)
    return results
