"""Tiny QA models for tests: a random BERT-shaped base, and `qa train` runs that know three questions by heart."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_bert import save_tiny_bert

CONTEXT = "The Eiffel Tower was completed in 1889 in Paris. It was designed by the engineer Gustave Eiffel."
GOLD = {
    "When was the Eiffel Tower completed?": "1889",
    "Who designed the tower?": "Gustave Eiffel",
    "What colour is the bridge?": "",
}  # "": unanswerable
DOC_STRIDE = 16
TRAINING = {  # windows holding the context and any question whole; steps that make each head answer all
    # three with room to spare (seq2seq: loss ~0.016 at 600 steps; at 300 it was 0.1-0.7 and a CI run missed one)
    "span": dict(max_seq_length=64, max_steps=120, learning_rate=3e-3),
    "seq2seq": dict(
        from_scratch=True,
        max_seq_length=128,
        max_steps=600,
        learning_rate=3e-3,
        d_model=32,
        layers=1,
        heads=2,
        d_ff=64,
        vocab_size=200,
    ),
}


def train_tiny_qa(directory: Path, head: str) -> Path:
    """Train `head` on the three GOLD questions about CONTEXT with `train_qa`, as `qa train` does; the run dir."""
    from posformer.tasks.qa.job import train_qa
    from posformer.tasks.qa.options import QAJobOptions

    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "data.jsonl"
    rows = [
        {
            "id": str(n),
            "context": CONTEXT,
            "question": question,
            "answers": {"text": [gold] if gold else [], "answer_start": [CONTEXT.index(gold)] if gold else []},
        }
        for n, (question, gold) in enumerate(GOLD.items())
    ]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    model = None
    if head == "span":
        model = str(directory / "bert")
        save_tiny_bert(directory / "bert")
    run = directory / "run"
    options = QAJobOptions(
        head=head,
        model=model,
        train_file=str(data),
        eval_file=str(data),
        output_dir=str(run),
        per_device_train_batch_size=2,
        warmup_ratio=0.0,
        doc_stride=DOC_STRIDE,
        progress=False,
        **TRAINING[head],
    )
    train_qa(options, log=lambda _: None)
    return run
