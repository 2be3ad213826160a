"""Position encodings behind one contract (see `base.PositionEncoding`)."""

from posformer.positions.base import PositionEncoding
from posformer.positions.registry import build, get, names, register
from posformer.positions.absolute import Learned, NoPosition, Sinusoidal, sinusoidal_table
from posformer.positions.rotary import Rotary, apply_rotary, rope_inv_freq

__all__ = [
    "PositionEncoding", "build", "get", "names", "register",
    "NoPosition", "Sinusoidal", "Learned", "sinusoidal_table",
    "Rotary", "apply_rotary", "rope_inv_freq",
]
