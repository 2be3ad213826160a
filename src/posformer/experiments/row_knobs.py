"""The rows an experiment compares and the model they share, declared once: `posformer extrapolate` (its
language-model rows and its `--task` rows) inherits them beside the training knobs (`training_knobs`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posformer.experiments.mechanism_rows import MECHANISM_ROWS, row_base, with_mechanism
from posformer.utils.limits import MAX_HEADS, MAX_LAYERS, MAX_LENGTH, MAX_WIDTH
from posformer.utils.options import option

if TYPE_CHECKING:  # the knobs are read without torch (`posformer extrapolate --help`); a row's Config at first use
    from posformer.config import Config

DEFAULT_ROWS = ["none", "sinusoidal", "learned", "rope", "alibi", "t5", "shaw", "fire", "kerple", "xpos"]


@dataclass
class RowKnobs:
    """One row per position encoding, trained at train_len and evaluated at eval_lens; the decoder's shape is every
    row's. An experiment may give a knob a default of its own (`positions: list[str] = field(...)`)."""

    positions: list[str] = option(
        default_factory=lambda: list(DEFAULT_ROWS),
        help=f"comma-separated rows: registered encodings, or mechanisms ({', '.join(MECHANISM_ROWS)})",
        metavar="ROW",
    )
    train_len: int = option(128, "training length L", minimum=1, maximum=MAX_LENGTH)
    eval_lens: list[int] | None = option(
        None,
        "comma-separated eval lengths, L included (default: L, 2L, 4L, 8L, 16L; --task: L, 1.25L, 1.5L, 2L, 3L, 4L)",
        metavar="N",
        minimum=1,
        maximum=MAX_LENGTH,
    )
    d_model: int = option(192, "model width", minimum=1, maximum=MAX_WIDTH)
    layers: int = option(4, "decoder layers", minimum=1, maximum=MAX_LAYERS)
    heads: int = option(4, "attention heads", minimum=1, maximum=MAX_HEADS)
    position_params: dict = option(
        default_factory=dict,
        help="{row: Config.position_params} for the rows that differ from the defaults",
        flag=False,
    )

    def row_config(self, position: str, vocab_size: int, max_positions: int, d_ff: int, **extra: Any) -> Config:
        """Row `position`'s decoder, identical for every row but the encoding (and its `position_params`), or the
        mechanism (`mechanism_rows`): every row's shape, pre-norm RMSNorm, SwiGLU, no biases, tied embeddings;
        `extra`: the experiment's own fields."""
        from posformer.config import Config

        cfg = Config(
            arch="decoder",
            vocab_size=vocab_size,
            d_model=self.d_model,
            n_layers=self.layers,
            n_heads=self.heads,
            d_ff=d_ff,
            position=row_base(position),
            position_params=dict(self.position_params.get(position) or {}),
            max_positions=max_positions,
            norm="rmsnorm",
            norm_placement="pre",
            activation="swiglu",
            qkv_bias=False,
            attn_out_bias=False,
            ffn_bias=False,
            tie_embeddings=True,
            **extra,
        )
        return with_mechanism(position, cfg, self.train_len)
