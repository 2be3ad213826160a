"""Exact-match accuracy of a task model, from one teacher-forced pass.

A greedy decoder writes the target exactly when, given the prompt and the target's own prefix, the most likely
next token is the target's next token at every step, EOS included: at the first step where it is not, greedy
decoding has followed the same prefix and writes that wrong token. So exact match under greedy decoding is the
fraction of rows whose argmax agrees at every target position, which one forward pass gives.
"""

from __future__ import annotations

import torch

from posformer.experiments.synthetic.dataset import encode
from posformer.experiments.synthetic.generators import Example
from posformer.model import Transformer
from posformer.modules.heads import IGNORE_INDEX


@torch.no_grad()
def exact_match(model: Transformer, examples: list[Example], batch_size: int = 64) -> float:
    """The fraction of `examples` whose target (and EOS) greedy decoding would write exactly."""
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, len(examples), batch_size):
        batch = {k: v.to(device) for k, v in encode(examples[start : start + batch_size]).items()}
        labels = batch.pop("labels")
        predicted = model(**batch).logits.argmax(-1)[:, :-1]
        scored = labels[:, 1:] != IGNORE_INDEX
        agree = (predicted == labels[:, 1:]) | ~scored
        correct += int(agree.all(dim=-1).sum())
    return correct / len(examples)
