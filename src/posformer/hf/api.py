"""`from_hf`, `to_hf` and `load_tokenizer`: Hugging Face checkpoints in and out of posformer."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from posformer.checkpoints.generation_file import read_generation_config
from posformer.checkpoints.manifest import verify_if_present
from posformer.checkpoints.sizes import check_fits, meta_model
from posformer.config import Config
from posformer.config.model_card import README, TrainingRun, model_card
from posformer.generation import GENERATION_CONFIG_FILE
from posformer.hf.char_byte_tokenizers import char_tokenizer, fast_tokenizer, stored_chars
from posformer.hf.config_kinds import check_hf_config_kinds
from posformer.hf.family import FAMILIES, Family, UnsupportedCheckpoint, family_for, supported
from posformer.hf.hf_checkpoint import CONFIG, CheckpointError, read_config, read_state, resolve, write_checkpoint
from posformer.hf.infer_family import infer_family
from posformer.hf.mapping import export_state, import_state
from posformer.hf.position_holders import position_refusal
from posformer.hf.rope import v5_rope_parameters
from posformer.hf.tokenizer_class import read_fast, unknown_class
from posformer.hf.tokenizer_files import TOKENIZER_CONFIG, check_tokenizer_dir, has_vocabulary
from posformer.hf.versions import export_version
from posformer.model import Transformer
from posformer.modules.heads import build_head
from posformer.utils.safe_write import write_text_atomic

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Allocate new floating tensors in `dtype` (so a bf16 model is never built in float32 first)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _hf_names(family: Family, model: Transformer, prefix: str = "head.") -> list[str]:
    """The Hugging Face names of the model's tensors under `prefix` (posformer names where no rule maps them)."""
    rules = {rule.ours: rule.theirs for rule in family.rules(model.cfg)}
    ours = [k for k in model.state_dict() if k.startswith(prefix)]
    return sorted({name for k in ours for name in rules.get(k, (k,))})


def replace_head(model: Transformer, head: str) -> list[str]:
    """Give `model` a freshly initialised head of kind `head` (a `Config.head`), in place.

    The old head's tensors are dropped; the body (embeddings, layers) is untouched. New
    linear and embedding weights are drawn from N(0, cfg.init_std), biases are 0, as
    `Transformer` initialises them; an LM head is tied to the (decoder's) token embeddings
    when the config ties them. Returns the posformer names of the newly initialised tensors.
    """
    cfg = dataclasses.replace(model.cfg, head=head)
    reference = next(model.parameters())
    with _default_dtype(reference.dtype):
        new_head = build_head(cfg)
    model.cfg, model.head = cfg, new_head
    if new_head is None:
        return []
    new_head.to(reference.device).apply(model._init_weights)
    model.tie_head()
    words = model.token_embeddings("decoder")[0].weight
    return sorted(f"head.{k}" for k, v in new_head.named_parameters() if v is not words)


def config_from_hf_file(hf_config: dict[str, Any], path: str) -> tuple[Config, Family]:
    """(posformer Config, family) of the Hugging Face config read from `path`; every error names `path`.

    The known keys' kinds are checked first (`config_kinds`); what a family's mapping still cannot read
    (a value of the right kind that makes no sense to it, a size beyond `utils.limits.MODEL_SIZES`) is
    reported as a `CheckpointError` naming the file."""
    check_hf_config_kinds(hf_config, path)
    family = family_for(hf_config.get("model_type"), path)
    try:
        cfg = family.config_from_hf(hf_config)
    except UnsupportedCheckpoint as err:
        raise UnsupportedCheckpoint(f"{path}: {err}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise CheckpointError(
            f"{path} cannot be read as a {hf_config.get('model_type')} config: {type(err).__name__}: {err}"
        ) from err
    return cfg, family


def from_hf(
    path_or_hub_id: str | os.PathLike[str],
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    head: str | None = None,
    changes: dict[str, Any] | None = None,
) -> Transformer:
    """Load a Hugging Face checkpoint (a local directory, or a Hub id when online) as a `Transformer`.

    The config is mapped to a `posformer.Config` and the weights onto posformer's modules; generation_config.json,
    when there, becomes `model.generation_config`, which gives `generate` its defaults as in transformers.
    dtype: the parameters' dtype (default float32, as `transformers` does); device: where they live.
    head: a `Config.head` ("span_qa", "classification", ...) to start a task model from this
    checkpoint, as `AutoModelFor...` does from a base checkpoint: every tensor of the body is
    loaded and the new head is initialised freshly (N(0, init_std) weights, zero biases); a
    warning names the newly initialised tensors. A checkpoint whose own head differs (a
    BertForMaskedLM asked for "span_qa") loses its head's tensors explicitly, and a warning
    names the dropped ones. None, or the checkpoint's own head, loads the checkpoint as it is.
    changes: `Config` fields to change before the model is built (dropout rates for fine-tuning, an encoder span
    head); tensors the change adds keep the model's initialisation, as a new head's do.
    (Unlike transformers, a pooler that a base checkpoint stores is not reused by a new
    "classification" head: it is initialised freshly too.)
    Raises `UnsupportedCheckpoint` for a model_type or a feature posformer does not implement,
    `CheckpointError` for a missing, truncated or corrupt file, and `WeightMapError` listing
    every missing, unknown and mis-shaped tensor. Every file is read through `model_dir.model_file`
    (none outside the directory), and a directory holding a manifest.json is verified against it first.
    """
    directory = resolve(path_or_hub_id)
    verify_if_present(directory)
    hf_config = read_config(directory)
    generation = read_generation_config(directory)  # generate's defaults, as transformers reads them
    cfg, family = config_from_hf_file(hf_config, str(directory / CONFIG))
    if head is not None:
        dataclasses.replace(cfg, head=head)  # validates `head` before any weight is read
    state = read_state(directory)
    cfg = family.config_for_state(cfg, state)
    before = None
    if changes:
        with torch.device("meta"):  # names only
            before = set(Transformer(cfg).state_dict())
        cfg = cfg.replace(**changes)
    dtype = dtype or torch.float32
    if not dtype.is_floating_point:
        raise ValueError(f"from_hf: dtype must be a floating-point dtype, got {dtype}")
    with _default_dtype(dtype):
        check_fits(meta_model(cfg, directory / CONFIG), directory / CONFIG)
        model = Transformer(cfg)
    state = family.prepare_state(cfg, hf_config, state)
    added = set() if before is None else set(model.state_dict()) - before
    import_state(model, family.rules(cfg), state, str(directory), family.ignore(cfg), added)
    if head is not None and head != cfg.head_kind:
        dropped = _hf_names(family, model)
        fresh = replace_head(model, head)
        if dropped:
            log.warning(
                "%s: the checkpoint's %r head was dropped for a new %r head; unused tensors: %s",
                directory,
                cfg.head_kind,
                head,
                ", ".join(dropped),
            )
        if fresh:
            log.warning(
                "%s: these tensors of the %r head were not in the checkpoint and are newly "
                "initialised: %s. Train the model on a %s task before using it.",
                directory,
                head,
                ", ".join(fresh),
                head,
            )
    model.generation_config = generation
    return model.to(device=device).eval()


def _without_a_family(cfg: Config) -> list[tuple[str, Any]]:
    """The (field, value) pairs of `cfg`, or of one of its layer types, that its family of `to_hf` cannot write:
    smeared keys, sink tokens, a pointer-generator, gated attention, learned attention sinks (but in a family that
    has them: gpt_oss), and chunked attention, a query temperature, an L2 QK-norm or a QK-norm on some layers only
    (but in a family that writes them, `Family.writes`: llama4_text); KV sharing, per-layer inputs, layer scalars, a
    value norm, a logit soft cap, values from the keys and head or FFN sizes of some layers only (gemma4_text writes
    them); gated attention and gated DeltaNet layers (qwen3_next and qwen3_5_text write them), a gated shared expert
    (qwen3_next)."""
    family = None if cfg.hf_model_type is None else FAMILIES.get(cfg.hf_model_type)
    writes = () if family is None else family.writes + (("attention_sinks",) if family.attention_sinks else ())
    names: tuple[str, ...] = (
        "key_smear",
        "sink_tokens",
        "pointer_generator",
        "attention_output_gate",
        "attention_sinks",
    )
    names += ("sigmoid_router",)  # DeepSeek-V3's router, which the softmax-routed families cannot write
    names += ("shared_expert_gate",)  # Qwen3-Next's gate on the shared expert
    names += ("kv_sources", "per_layer_inputs", "layer_scalars", "value_norm", "logit_softcap")  # Gemma 4's
    found = [(name, getattr(cfg, name)) for name in names if getattr(cfg, name) and name not in writes]
    layers = cfg.layer_configs(cfg.decoder_layers)
    per_layer: dict[str, list[Any]] = {
        "attention_chunk": [c.attention_chunk for c in layers if c.attention_chunk is not None],
        "query_temperature": [c.query_temperature for c in layers if c.query_temperature is not None],
        "qk_norm_kind": [c.qk_norm_kind for c in layers if c.qk_norm_kind != "norm"],
        "mixer": [c.mixer for c in layers if c.mixer != "attention"],  # gated DeltaNet layers
        "values_from_keys": [True for c in layers if c.values_from_keys],  # Gemma 4's attention_k_eq_v
        **{  # sizes of some layers only (Gemma 4's global head width, double-wide FFNs)
            name: [getattr(c, name) for c in layers if getattr(c, name) != getattr(cfg, name)]
            for name in ("d_head", "n_kv_heads", "d_ff")
        },
    }
    found += [(name, values[0]) for name, values in per_layer.items() if values and name not in writes]
    if "qk_norm" not in writes:
        found += [
            (f"layer_settings[{label!r}]['qk_norm']", settings["qk_norm"])
            for label, settings in cfg.layer_settings.items()
            if settings.get("qk_norm", cfg.qk_norm) != cfg.qk_norm
        ][:1]
    return found


def to_hf(
    model: Transformer,
    out_dir: str | os.PathLike[str],
    rope_parameters: bool = False,
    hf_model_type: str | None = None,
    transformers_version: str | None = None,
    run: TrainingRun | None = None,
) -> Path:
    """Write `model` as a Hugging Face checkpoint (`config.json` + `model.safetensors`) into `out_dir`, with a
    model card (README.md, `posformer.config.model_card`: the config, the encoding, `run`'s data, steps and final
    metrics where given, how to load it; it names AutoTokenizer when `out_dir` already holds tokenizer files).
    The model's `generation_config`, when it sets anything, is written as generation_config.json.

    The family is `hf_model_type` when given, else `model.cfg.hf_model_type` (set by `from_hf` and by the
    presets), else the first family that writes the config and reads it back the same (`infer_family`: llama,
    gpt2, bert, t5, ...). `transformers`' `from_pretrained` then loads it and gives the same logits.
    `transformers_version`: the transformers the checkpoint is for, recorded in config.json (default: the
    installed one, else the newest, `posformer.hf.versions`); where 4 and 5 read a key differently (T5's head
    scaling), the config says it in that version's words, and a model that version cannot express is refused.
    `rope_parameters`: write the RoPE settings in transformers v5's form (`rope_parameters`, see
    `posformer.hf.rope`), which 4.57.6 does not read, instead of v4's (`rope_theta`, `rope_scaling`).
    """
    cfg = model.cfg
    model_type = infer_family(cfg, hf_model_type)
    if model_type != cfg.hf_model_type:
        cfg = cfg.replace(hf_model_type=model_type)
    for field, value in _without_a_family(cfg):
        raise UnsupportedCheckpoint(
            f"to_hf: Config.{field}={value!r}: {cfg.hf_model_type} has no such setting, so the export "
            "would not give the same logits"
        )
    family = family_for(cfg.hf_model_type, "to_hf")
    if cfg.logit_scale != 1 and not family.logit_scale:
        raise UnsupportedCheckpoint(
            f"to_hf: Config.logit_scale={cfg.logit_scale}: {cfg.hf_model_type} does not scale its logits "
            "(cohere2 does), so the export would not give the same logits"
        )
    if cfg.n_experts is not None and not family.experts:
        raise UnsupportedCheckpoint(
            f"to_hf: Config.n_experts={cfg.n_experts}: {cfg.hf_model_type} has no mixture-of-experts layers "
            f"(these families do: {', '.join(t for t in supported() if family_for(t, 'to_hf').experts)})"
        )
    if (cfg.latent_attention is not None) != family.latent_attention:
        raise UnsupportedCheckpoint(
            f"to_hf: Config.latent_attention={cfg.latent_attention!r}: {cfg.hf_model_type}'s attention "
            f"{'is' if family.latent_attention else 'is not'} multi-head latent attention"
        )
    try:
        hf_config = family.config_to_hf(cfg)
    except UnsupportedCheckpoint as err:  # the encoding itself, when it is the reason: who holds it, if anyone
        reason = position_refusal(cfg, model_type)
        if reason is None:
            raise
        raise UnsupportedCheckpoint(f"to_hf: {reason} ({err})") from None
    if rope_parameters and "rope_parameters" not in hf_config:  # a family may write v5's form itself
        if "rope_theta" not in hf_config and "global_rope_theta" not in hf_config:
            raise UnsupportedCheckpoint(
                f"to_hf(rope_parameters=True): {cfg.hf_model_type} has no RoPE settings "
                f"to write (position={cfg.position!r})"
            )
        hf_config = v5_rope_parameters(hf_config)
    hf_config.setdefault("torch_dtype", str(next(model.parameters()).dtype).removeprefix("torch."))
    hf_config["transformers_version"] = export_version(transformers_version)
    state = export_state(model, family.rules(cfg))
    family.finish_export(model, hf_config, state)
    out_dir = write_checkpoint(out_dir, hf_config, state)
    if not model.generation_config.is_empty():  # generate's defaults, in the file transformers reads them from
        write_text_atomic(out_dir / GENERATION_CONFIG_FILE, model.generation_config.to_json())
    has_tokenizer = has_vocabulary(out_dir) or (out_dir / TOKENIZER_CONFIG).is_file()
    card = model_card(
        cfg,
        out_dir.resolve().name,
        hf_config=hf_config,
        parameters=model.num_parameters(),
        tokenizer=has_tokenizer,
        run=run,
    )
    write_text_atomic(out_dir / README, card)  # replaces a symlink at the name, never writes through it
    return out_dir


def load_tokenizer(path_or_hub_id: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """The tokenizer stored in a checkpoint directory, as a `transformers` fast tokenizer.

    Reads `tokenizer.json` (or the slow files transformers converts, such as
    T5's `spiece.model`) with `AutoTokenizer`; a Hub id is downloaded when online. posformer's own
    character and byte tokenizers are such files; the `{"type": "char"}` tokenizer.json of a run trained
    before they were is read as the same vocabulary (`char_byte_tokenizers`).
    The files are checked first (`tokenizer_files.check_tokenizer_dir`): one that leads outside the
    directory, or a corrupt one, is a `ValueError` naming it. A tokenizer_config.json naming a class the installed
    transformers lacks (5.x's `TokenizersBackend` under 4.x) is read from its tokenizer.json as a
    `PreTrainedTokenizerFast` (`tokenizer_class`): the same ids.
    """
    directory = resolve(path_or_hub_id)
    found = stored_chars(directory)
    if found is not None and found.legacy:
        return fast_tokenizer(char_tokenizer(found.chars))
    if directory.is_dir() and not has_vocabulary(directory):
        raise ValueError(
            f"{directory} holds no tokenizer files (tokenizer.json, vocab.txt, spiece.model, ...): save the "
            "tokenizer beside the model, model.save_pretrained(dir, tokenizer=tok), or give the tokenizer's own "
            "directory"
        )
    overrides = check_tokenizer_dir(directory)
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ImportError("load_tokenizer needs the `transformers` package: pip install transformers") from err
    try:
        if unknown_class(directory) is not None:
            return read_fast(directory, **overrides)
        tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(str(directory), **overrides)
        return tokenizer
    except Exception as err:  # transformers raises many kinds (OSError, ValueError, ImportError, KeyError ...)
        raise ValueError(f"no usable tokenizer in {directory}: {type(err).__name__}: {str(err).strip()}") from err
