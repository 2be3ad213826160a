"""What `generate(..., return_dict_in_generate=True)` returns, with Hugging Face's field names."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class GenerateOutput:
    """The sequences and, when asked for, what each step saw (Hugging Face's GenerateDecoderOnlyOutput and
    GenerateBeamDecoderOnlyOutput, and their encoder-decoder forms).

    sequences: (B', T + new), as `generate` returns them without the dict.
    scores (output_scores): one (B', V) tensor per step, the scores a token was chosen from: greedy, the logits after
      the logits processors; sampling, after the temperature and the top-k / top-p filters too; beam search, the
      log_softmax after the processors, one row per running beam ((B * num_beams, V)), before the beam's own score.
    logits (output_logits): one tensor per step, the float32 logits before any processing, rows as in `scores`.
    sequences_scores (beam search with output_scores): (B',) each returned hypothesis' length-penalized score.
    beam_indices (beam search): (B', new) the running beam (batch * num_beams + beam) each step of a hypothesis came
      from, -1 after its end, as Hugging Face's `compute_transition_scores` reads them.
    """

    sequences: Tensor
    scores: tuple[Tensor, ...] | None = None
    logits: tuple[Tensor, ...] | None = None
    sequences_scores: Tensor | None = None
    beam_indices: Tensor | None = None


class Recorder:
    """Keeps each step's scores and logits when they were asked for (None: not asked)."""

    def __init__(self, scores: bool, logits: bool) -> None:
        self.scores: list[Tensor] | None = [] if scores else None
        self.logits: list[Tensor] | None = [] if logits else None

    def add(self, scores: Tensor, logits: Tensor) -> None:
        """One step: the processed scores (N, V) and the raw logits (N, V)."""
        if self.scores is not None:
            self.scores.append(scores)
        if self.logits is not None:
            self.logits.append(logits)

    def output(self, sequences: Tensor, **beam: Tensor | None) -> GenerateOutput:
        """The GenerateOutput of `sequences`, with what was recorded (and beam search's `beam` fields)."""
        scores = None if self.scores is None else tuple(self.scores)
        logits = None if self.logits is None else tuple(self.logits)
        return GenerateOutput(sequences, scores, logits, **beam)
