"""The same seed and data give the same run in every process: the trained tokenizer byte for byte, and the losses.

Python's hash order (PYTHONHASHSEED) and the `tokenizers` Unigram trainer's hash maps differ per
process, so each check compares two subprocesses started with different PYTHONHASHSEED values.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from posformer.data.stable_unigram import canonical_vocab
from train_helpers import tiny_run, write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = """
import sys
from posformer.data.squad import load_qa_file, squad_sample
from posformer.tasks.qa.seq2seq import qa_training_texts, train_qa_tokenizer
examples = load_qa_file(squad_sample()).examples[:80]
sys.stdout.write(train_qa_tokenizer(qa_training_texts(examples), kind="unigram", vocab_size=500)
                 .backend_tokenizer.to_str())
"""
QA = [
    "qa",
    "train",
    "--from-scratch",
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "64",
    "--vocab-size",
    "300",
    "--max-seq-length",
    "96",
    "--doc-stride",
    "32",
    "--max-train-samples",
    "16",
    "--max-eval-samples",
    "2",
    "--max-steps",
    "3",
    "--save-steps",
    "3",
    "--seed",
    "7",
    "--device",
    "cpu",
    "--no-progress",
]


def _in_two_processes(args_of, cwd: Path = REPO) -> list[subprocess.CompletedProcess]:
    """Run `args_of(n)` for n = 0, 1 side by side, with PYTHONHASHSEED 1 and 2; both must succeed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            args_of(n),
            cwd=cwd,
            env={**env, "PYTHONHASHSEED": str(n + 1)},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(2)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def _losses(run: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r]


def test_the_unigram_tokenizer_is_the_same_in_every_process() -> None:
    first, second = _in_two_processes(lambda n: [sys.executable, "-c", TOKENIZER])
    assert first.stdout == second.stdout


def test_canonical_vocab_does_not_depend_on_the_trainers_order() -> None:
    """Filler characters (scores min, min + 1e-4, ... in hash order), float noise and ties: one canonical vocab."""
    low, special = -12.5, [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    results = set()
    for seed in range(6):
        rng = random.Random(seed)
        vocab, penalty = [["▁the", -3.0 + rng.uniform(-1e-12, 1e-12)], ["ab", -7.25], ["ba", -7.25]], 0.0
        for char in rng.sample("ZQX£", 4):
            vocab.append([char, low + penalty])
            penalty += 0.0001
        rng.shuffle(vocab)
        results.add(json.dumps(canonical_vocab(special + vocab, 3)))
    assert len(results) == 1
    canonical = json.loads(results.pop())
    assert canonical[:3] == special
    assert [p for p, _ in canonical[3:]] == ["▁the", "ab", "ba", "£", "Z", "X", "Q"]  # fillers by character


def test_qa_train_from_scratch_is_the_same_run_in_every_process(tmp_path: Path) -> None:
    runs = [tmp_path / f"run{n}" for n in range(2)]
    _in_two_processes(lambda n: [sys.executable, "-m", "posformer.cli", *QA, "--output-dir", str(runs[n])])
    tokenizers = [(run / "checkpoints" / "step-00000003" / "tokenizer.json").read_bytes() for run in runs]
    assert tokenizers[0] == tokenizers[1]
    assert _losses(runs[0]) == _losses(runs[1]) and len(_losses(runs[0])) == 3


def test_posformer_train_is_the_same_run_in_every_process(tmp_path: Path) -> None:
    config = write_config(tmp_path / "run.yaml", tiny_run(write_corpus(tmp_path / "text.txt"), 6, eval_every=6))
    runs = [tmp_path / f"run{n}" for n in range(2)]
    _in_two_processes(
        lambda n: [
            sys.executable,
            "-m",
            "posformer.cli",
            "train",
            "--config",
            str(config),
            "--output-dir",
            str(runs[n]),
            "--seed",
            "5",
            "--no-progress",
        ]
    )
    assert _losses(runs[0]) == _losses(runs[1]) and len(_losses(runs[0])) == 6
