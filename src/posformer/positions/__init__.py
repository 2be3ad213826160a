"""Position encodings behind one contract (`contract`: the hooks of `PositionEncoding` and the capabilities)."""

from posformer.positions.absolute import Learned, NoPosition, Sinusoidal, sinusoidal_table
from posformer.positions.alibi import ALiBi, alibi_slopes
from posformer.positions.contract import AttentionKind, PositionEncoding
from posformer.positions.cope import ContextualPosition
from posformer.positions.deberta import DeBERTa, log_bucket_position
from posformer.positions.dual_chunk import DualChunk
from posformer.positions.fire import FIRE
from posformer.positions.forgetting import ForgettingAttention
from posformer.positions.hope import HighFrequencyRotary
from posformer.positions.kerple import KerpleLog
from posformer.positions.mrope import check_axes_positions, continued_axes, image_position_ids, token_positions
from posformer.positions.params import PositionParams
from posformer.positions.path import PaTH
from posformer.positions.polar import Polar
from posformer.positions.query_temperature import check_query_temperature, query_temperature
from posformer.positions.registry import build, get, names, register, usable
from posformer.positions.relative_bert import RelativeKey, RelativeKeyQuery
from posformer.positions.rerope import ReRoPE
from posformer.positions.rotary import Rotary, apply_rotary, rope_inv_freq
from posformer.positions.self_extend import SelfExtend
from posformer.positions.shaw import Shaw
from posformer.positions.sizes import Sizes
from posformer.positions.stick_breaking import StickBreaking
from posformer.positions.streaming import Streaming
from posformer.positions.t5 import T5Bias, t5_bucket
from posformer.positions.transformer_xl import TransformerXL
from posformer.positions.xpos import XPos

__all__ = [
    "AttentionKind",
    "PositionEncoding",
    "PositionParams",
    "Sizes",
    "build",
    "get",
    "names",
    "register",
    "usable",
    "NoPosition",
    "Sinusoidal",
    "Learned",
    "sinusoidal_table",
    "Rotary",
    "HighFrequencyRotary",
    "Polar",
    "PaTH",
    "apply_rotary",
    "rope_inv_freq",
    "XPos",
    "T5Bias",
    "t5_bucket",
    "ALiBi",
    "alibi_slopes",
    "KerpleLog",
    "FIRE",
    "ForgettingAttention",
    "RelativeKey",
    "RelativeKeyQuery",
    "Shaw",
    "TransformerXL",
    "DeBERTa",
    "log_bucket_position",
    "ContextualPosition",
    "ReRoPE",
    "SelfExtend",
    "DualChunk",
    "Streaming",
    "StickBreaking",
    "query_temperature",
    "check_query_temperature",
    "check_axes_positions",
    "continued_axes",
    "image_position_ids",
    "token_positions",
]
