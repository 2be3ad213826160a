"""The figures of the study notes: a pure function returning each figure's numbers, and one drawing it.

| module | figure | numbers | drawing |
|---|---|---|---|
| sinusoidal | sinusoidal tables for bases N | `sinusoidal_tables` | `draw_sinusoidal` |
| t5_buckets | T5 bucket map | `t5_bucket_map` | `draw_t5_buckets` |
| rope | RoPE decay, wavelengths | `rope_decay`, `rope_wavelengths` | `draw_rope_decay`, `draw_rope_wavelengths` |
| alibi | ALiBi bias per head | `alibi_bias_maps` | `draw_alibi` |
| t5_learned | a trained model's T5 bias | `t5_learned_bias` | `draw_t5_learned` |
| attention | a trained model's attention map | `attention_map` | `draw_attention` |
| memory | `bench --memory`: peak memory against length | `memory_curves` | `draw_memory` |
| doc_tables | a result figure from a page's tables | `lm_tables`, `task_panels` | `lm_figure`, `task_figure` |
"""

from posformer.plots.alibi import alibi_bias_maps, draw_alibi
from posformer.plots.attention import AttentionMap, attention_map, draw_attention
from posformer.plots.checkpoints import LoadedCheckpoint, expand_checkpoints, load_checkpoints
from posformer.plots.rope import draw_rope_decay, draw_rope_wavelengths, rope_decay, rope_wavelengths
from posformer.plots.sinusoidal import draw_sinusoidal, sinusoidal_tables
from posformer.plots.t5_buckets import draw_t5_buckets, t5_bucket_map
from posformer.plots.t5_learned import StackBias, draw_t5_learned, t5_learned_bias

__all__ = [
    "alibi_bias_maps",
    "draw_alibi",
    "AttentionMap",
    "attention_map",
    "draw_attention",
    "LoadedCheckpoint",
    "expand_checkpoints",
    "load_checkpoints",
    "draw_rope_decay",
    "draw_rope_wavelengths",
    "rope_decay",
    "rope_wavelengths",
    "draw_sinusoidal",
    "sinusoidal_tables",
    "draw_t5_buckets",
    "t5_bucket_map",
    "StackBias",
    "draw_t5_learned",
    "t5_learned_bias",
]
