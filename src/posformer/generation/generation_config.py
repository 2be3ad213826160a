"""`GenerationConfig`: the decoding settings a model carries, read from and written to `generation_config.json`.

As in Hugging Face, a model's generation config gives `generate` its defaults and an argument given to `generate`
wins. Every field is None when unset: the layers are merged field by field (`resolve`), the first that sets a field
giving it its value, and posformer's own default (`DEFAULTS`) filling what no layer sets. The JSON keys are Hugging
Face's names, so the file round-trips with transformers (`GenerationConfig.from_pretrained` reads ours, we read
theirs). Keys posformer does not implement are kept in `other`, written back unchanged, and named in a warning when
they would change the tokens (`unused_settings`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from posformer.utils.validation import check_field_kinds, fail

GENERATION_CONFIG_FILE = "generation_config.json"

# What `generate` uses when no layer sets a field. Fields left out stay None: max_new_tokens (32 new tokens, unless
# max_length says otherwise), eos / pad (the model's Config), top_k / top_p (no filter) and stop_strings (none).
DEFAULTS: dict[str, Any] = {
    "do_sample": False,
    "temperature": 1.0,
    "num_beams": 1,
    "length_penalty": 1.0,
    "early_stopping": False,
    "num_return_sequences": 1,
    "min_new_tokens": None,
    "min_length": 0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "return_dict_in_generate": False,
    "output_scores": False,
    "output_logits": False,
}
DEFAULT_NEW_TOKENS = 32

# Keys of a Hugging Face generation config that never change the tokens: kept, not warned about.
INERT_KEYS = frozenset(
    {
        "transformers_version",
        "_from_model_config",
        "bos_token_id",
        "decoder_start_token_id",  # posformer reads Config.decoder_start_token_id, which from_hf fills from config.json
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "cache_implementation",
        "cache_config",
        "return_legacy_cache",
        "compile_config",
        "disable_compile",
    }
)


def _neutral(value: Any) -> bool:
    """One of Hugging Face's "off" values: None, false, 0, 1 (a factor of 1, one beam group), an empty list or map."""
    if isinstance(value, bool):
        return not value
    return value is None or value in (0, 1) or value in ([], {})


@dataclass
class GenerationConfig:
    """Decoding settings, each None until set; the names and meanings are `generate`'s arguments (and Hugging Face's).

    max_new_tokens wins over max_length (the prefix plus the new tokens, as Hugging Face counts it), and
    min_new_tokens over min_length. `other`: the keys of a generation_config.json that posformer keeps but does not
    use (bos_token_id, Hugging Face options it does not implement).
    """

    max_new_tokens: int | None = None
    max_length: int | None = None
    min_new_tokens: int | None = None
    min_length: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    early_stopping: bool | str | None = None
    num_return_sequences: int | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    stop_strings: str | list[str] | None = None
    return_dict_in_generate: bool | None = None
    output_scores: bool | None = None
    output_logits: bool | None = None
    other: dict = field(default_factory=dict)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings' names (every field but `other`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "other")

    def is_empty(self) -> bool:
        """No setting and no other key: nothing worth writing."""
        return not self.other and all(getattr(self, name) is None for name in self.names())

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of generation_config.json: the settings that are set, and the other keys."""
        data = {name: getattr(self, name) for name in self.names() if getattr(self, name) is not None}
        return dict(sorted({**self.other, **data}.items()))

    def to_json(self) -> str:
        """The text of generation_config.json."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "generation_config") -> "GenerationConfig":
        """Read a generation config's JSON object; a value of the wrong kind is a ValueError naming `source` and the
        key. (Ranges are checked when `generate` uses a value: Hugging Face files carry values, such as a
        temperature of 0 without sampling, that only matter to some decoding modes.)"""
        if not isinstance(data, dict):
            fail(source, type(data).__name__, "a JSON object of generation settings")
        known = set(cls.names())
        config = cls(
            **{k: v for k, v in data.items() if k in known},
            other={k: v for k, v in data.items() if k not in known},
        )
        config.check_kinds(f"{source}: ")
        return config

    def check_kinds(self, prefix: str = "") -> None:
        """Each set field holds a value of its kind (an int, a number, a bool, a list of token ids ...)."""
        if isinstance(self.early_stopping, str) and self.early_stopping != "never":
            fail(f"{prefix}early_stopping", self.early_stopping, "true, false or 'never'")
        if isinstance(self.stop_strings, list) and not self.stop_strings:
            fail(f"{prefix}stop_strings", self.stop_strings, "a string or a non-empty list of strings")
        check_field_kinds(self, prefix, self.names())

    def unused_settings(self) -> dict[str, Any]:
        """The other keys that would change the tokens in Hugging Face's `generate` (bad_words_ids, forced_eos_token_id,
        num_beam_groups > 1 ...): posformer ignores them, so its tokens may differ from transformers' there."""
        return {k: v for k, v in self.other.items() if k not in INERT_KEYS and not _neutral(v)}


def resolve(
    given: dict[str, Any], layers: list[tuple[str, GenerationConfig | None]]
) -> tuple[GenerationConfig, dict[str, str]]:
    """Merge the settings: `given` (the arguments to `generate`, None when not given) first, then each layer
    (label, config) in order, then `DEFAULTS`.

    Returns the merged config and, for each setting, the name an error about it uses: the argument's own name, or
    `{label}.{name}` when a layer set it ("model.generation_config.temperature").
    """
    values, labels = {}, {}
    for name in GenerationConfig.names():
        value, labels[name] = given.get(name), name
        for label, layer in layers:
            if value is None and layer is not None and getattr(layer, name) is not None:
                value, labels[name] = getattr(layer, name), f"{label}.{name}"
        values[name] = DEFAULTS.get(name) if value is None else value
    return GenerationConfig(**values), labels
