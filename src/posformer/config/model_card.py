"""The README.md that a saved model carries: what it is, how it was trained (where posformer knows), how to load it.

    text = model_card(cfg, "my-model", parameters=model.num_parameters(), tokenizer=True, run=run)
    text = model_card(cfg, "out", hf_config=config_json, run=run)   # a Hugging Face export (`to_hf`)

`Transformer.save_pretrained` and `to_hf` write it beside config.json (`README.md`, the name the Hugging Face Hub
shows). It is a pure function of the `Config`, the exported config.json where there is one, and `TrainingRun`: what a
training run recorded (`posformer.train.run_record.training_run` reads it from a run's checkpoint). Nothing
in it depends on the machine it was written on: the directory is named by its base name. It sits in `config/`, the
layer of what it reads, so that the model's own writer (`pretrained.write_pretrained`) can import it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from posformer.config import Config

README = "README.md"


@dataclass(frozen=True)
class TrainingRun:
    """What a training run recorded about the checkpoint a model was saved from.

    `name`: the run directory's name; `step`: the checkpoint's step, of `steps` the run was set to train;
    `data`: the run's data settings (files, tokenizer, sequence length, ...); `metrics`: the last evaluation at or
    before `step` (at `metrics_step`); `train_loss`: the last training loss logged at or before `step`."""

    name: str
    step: int | None = None
    steps: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    metrics_step: int | None = None
    train_loss: float | None = None


def _value(value: Any) -> str:
    """A setting as card text: lists joined, mappings as `key=value`, None as 'none'."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cell(text: str) -> str:
    """`text` safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---|", *(f"| {name} | {_cell(text)} |" for name, text in rows)]


def encoding_text(cfg: Config) -> str:
    """The position encoding with its parameters (the encoding's defaults resolved), and the layers that differ."""
    data = cfg.to_dict()
    text = f"{cfg.position} ({_value(data['position_params'])})" if data["position_params"] else cfg.position
    labels = cfg.layer_types or []
    for label in dict.fromkeys(labels):
        settings = cfg.layer_settings.get(label)
        if settings:
            text += f"; {labels.count(label)} `{label}` layers: {_value(settings)}"
    return text


def _model_rows(cfg: Config, parameters: int | None) -> list[tuple[str, str]]:
    layers = f"{cfg.n_layers}" if cfg.arch != "encoder_decoder" else f"{cfg.n_layers} + {cfg.decoder_layers}"
    heads = f"{cfg.n_heads} heads of {cfg.head_dim}" + (f", {cfg.kv_heads} KV heads" if cfg.n_kv_heads else "")
    rows = [("architecture", f"{cfg.arch}, {cfg.head_kind} head")]
    if parameters is not None:
        rows.append(("parameters", f"{parameters:,}"))
    rows += [
        ("layers", f"{layers} × d_model {cfg.d_model}, {heads}, d_ff {cfg.ff_dim}"),
        ("position encoding", encoding_text(cfg)),
        ("max positions", str(cfg.max_positions)),
        ("norm", f"{cfg.norm} ({cfg.norm_placement}-norm, eps {cfg.norm_eps:g})"),
        ("activation", cfg.activation),
        ("vocabulary", f"{cfg.vocab_size:,}"),
    ]
    if cfg.n_experts is not None:
        rows.append(("experts", f"{cfg.n_experts}, {cfg.experts_per_token} per token"))
    special = ("bos", "eos", "pad", "decoder_start")
    rows.append(("special ids", ", ".join(f"{n} {_value(getattr(cfg, f'{n}_token_id'))}" for n in special)))
    return rows


def _run_lines(run: TrainingRun) -> list[str]:
    step = "unknown" if run.step is None else f"{run.step:,}"
    rows = [("run", f"`{run.name}`"), ("steps", step + (f" of {run.steps:,}" if run.steps is not None else ""))]
    rows += [(f"data: {key}", _value(value)) for key, value in run.data.items()]
    if run.metrics:
        at = "" if run.metrics_step is None else f" (evaluated at step {run.metrics_step:,})"
        rows.append(("final metrics", _value(run.metrics) + at))
    if run.train_loss is not None:
        rows.append(("final training loss", f"{run.train_loss:.6g}"))
    return ["## Training", "", *_table(rows), ""]


def _loading_lines(name: str, hf_config: dict | None, tokenizer: bool) -> list[str]:
    lines = ["## Loading", "", "```python"]
    if hf_config is not None:
        architectures = hf_config.get("architectures") or ["AutoModel"]
        model_class = architectures[0]
        lines += [f"from transformers import {model_class}" + (", AutoTokenizer" if tokenizer else "")]
        lines += ["", f'model = {model_class}.from_pretrained("{name}")']
        if tokenizer:
            lines += [f'tokenizer = AutoTokenizer.from_pretrained("{name}")']
        lines += ["```", "", f'posformer reads it too: `pf.from_hf("{name}")` gives the same logits.']
    else:
        lines += ["import posformer as pf", "", f'model = pf.load("{name}")  # or pf.Transformer.from_pretrained']
        if tokenizer:
            lines += [f'tokenizer = pf.load_tokenizer("{name}")  # or transformers.AutoTokenizer.from_pretrained']
        lines += ["```"]
    if not tokenizer:
        lines += ["", "No tokenizer was saved with the model: encode text with the tokenizer it was trained with."]
    return lines + [""]


def model_card(
    cfg: Config,
    name: str,
    *,
    hf_config: dict | None = None,
    parameters: int | None = None,
    tokenizer: bool = False,
    run: TrainingRun | None = None,
) -> str:
    """The Markdown of a model's README.md. `name`: the directory's name, used in the loading code; `hf_config`:
    the config.json of a Hugging Face export (`to_hf`), None for posformer's own format; `parameters`: the model's
    count; `tokenizer`: whether the directory holds the tokenizer's files; `run`: its training run, where known."""
    exported = hf_config is not None
    kind = f"A Hugging Face `{hf_config.get('model_type')}` checkpoint written by posformer." if exported else ""
    front = ["---", f"library_name: {'transformers' if exported else 'posformer'}", "tags:", "- posformer"]
    lines = [*front, f"- {cfg.position}", "---", "", f"# {name}", "", kind or "A posformer model.", ""]
    lines += ["## Model", "", *_table(_model_rows(cfg, parameters)), ""]
    lines += _run_lines(run) if run is not None else []
    lines += _loading_lines(name, hf_config, tokenizer)
    lines += ["## Config", "", "posformer's `Config` of this model:", "", "```json"]
    lines += [json.dumps(cfg.to_dict(), indent=2), "```", ""]
    return "\n".join(lines)
