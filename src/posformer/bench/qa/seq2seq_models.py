"""The two BERT2BERT models of the generative QA benchmark, and HF's behind the predictor's calls.

Hugging Face builds the pair: `EncoderDecoderModel.from_encoder_decoder_pretrained(dir, dir)` from
a checkpoint whose dropout is off (encoder and decoder copied from it, the cross-attention drawn
fresh with the seed), with BERT2BERT's special ids ([CLS] starts, [SEP] ends, [PAD] pads). It is
saved and loaded with `posformer.hf.from_hf`, so both start from the very same tensors, the new
cross-attention included.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posformer.bench.qa.setup import checkpoint_without_dropout, quiet_loggers
from posformer.config import Config
from posformer.tasks.qa.seq2seq import bert2bert_token_ids

QUIET = ("posformer.hf.api", "transformers.modeling_utils", "transformers.models.encoder_decoder")


def load_bert2bert_pair(directory: Path, tokenizer, seed: int) -> tuple[nn.Module, nn.Module]:
    """(posformer's model, HF's `EncoderDecoderModel` in `HFGenerativeQA`), equal weights, float32, dropout 0."""
    import transformers

    from posformer.hf import from_hf

    with quiet_loggers(*QUIET):  # "cross-attention weights newly initialised": expected, and both get the same
        with checkpoint_without_dropout(directory) as plain:
            torch.manual_seed(seed)
            theirs = transformers.EncoderDecoderModel.from_encoder_decoder_pretrained(plain, plain)
        for name, value in bert2bert_token_ids(tokenizer).items():
            setattr(theirs.config, name, value)
            setattr(theirs.generation_config, name, value)
        theirs = theirs.float()
        with tempfile.TemporaryDirectory(prefix="posformer-bench-b2b-") as tmp:
            theirs.save_pretrained(tmp)
            ours = from_hf(tmp).float()
    return ours, HFGenerativeQA(theirs, ours.cfg)


class HFGenerativeQA(nn.Module):
    """A Hugging Face encoder-decoder behind the calls `Seq2SeqPredictor` makes of a posformer model.

    `cfg`: the posformer config of the same model (its special ids); calling it runs HF's forward;
    `generate(..., return_scores=True)` runs HF's `generate` and scores each sequence as posformer
    does: greedy, the sum of the raw log-probabilities of its tokens up to and including the eos
    (`compute_transition_scores` of the unprocessed logits); beam search, HF's `sequences_scores`.
    """

    def __init__(self, model: nn.Module, cfg: Config) -> None:
        super().__init__()
        self.model = model
        self.cfg = cfg

    @property
    def config(self) -> Any:
        return self.model.config

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> Any:
        """input_ids, attention_mask: (B, S); decoder_input_ids or labels: (B, T) -> HF's output."""
        with warnings.catch_warnings():  # two notes HF prints on every call with labels, none about this use
            warnings.filterwarnings("ignore", message="Version v4.12.0 introduces")
            warnings.filterwarnings("ignore", message="To copy construct from a tensor")
            return self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                labels=labels,
                use_cache=False,
            )

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        max_new_tokens: int,
        num_beams: int = 1,
        length_penalty: float = 1.0,
        eos_token_id: int | None = None,
        pad_token_id: int | None = None,
        return_scores: bool = True,
        min_new_tokens: int = 0,
    ) -> tuple[Tensor, Tensor]:
        """(sequences (B, 1 + new) starting with the decoder start token, scores (B,) float32)."""
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
            length_penalty=length_penalty,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            min_new_tokens=min_new_tokens,
            do_sample=False,
            decoder_start_token_id=self.cfg.decoder_start_token_id,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
        )
        if num_beams > 1:
            return out.sequences, out.sequences_scores.float()
        steps = self.model.compute_transition_scores(out.sequences, out.logits, normalize_logits=True)
        new = out.sequences[:, 1:]
        ended = (new == eos_token_id).int()
        before_end = (ended.cumsum(-1) - ended) == 0  # the tokens up to and including the first eos
        return out.sequences, steps.float().masked_fill(~before_end, 0.0).sum(-1)
