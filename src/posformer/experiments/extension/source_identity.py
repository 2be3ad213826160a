"""Which model an extension extends, on record, so that a resume and every seed extend what the record says.

A source is named by its path and identified by a digest of its weights: a resume into OUTPUT refuses a source
whose weights changed since the record was made (a run re-trained in place, a directory replaced by another).
Over seeds (RUN naming '{seed}') every seed's source must have been trained with the same settings but its seed:
the run_config.yaml of each, less the keys that do not change the model (`IGNORED`), is recorded and compared
with what the other seeds recorded before any work.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from posformer.experiments.extension.source import Source, run_config
from posformer.model import Transformer
from posformer.utils.user_files import read_mapping_file

IGNORED = frozenset({"seed", "threads", "device", "save_every", "positions"})  # the run, not the model it trains


def weights_digest(model: Transformer) -> str:
    """SHA-256 over every tensor of the model's state dict (its name, dtype, shape and bytes), in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def training_settings(run_dir: str | Path) -> dict:
    """The run_config.yaml of the source run without the `IGNORED` keys, at any depth ({} when it has none)."""

    def kept(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: kept(v) for k, v in value.items() if k not in IGNORED}
        return value

    return kept(run_config(Path(run_dir)))


def source_record(run_dir: str | Path, source: Source) -> dict:
    """What results.json records of the source: its path, description, size, weights digest and training."""
    return {
        "run": str(Path(run_dir).resolve()),
        "description": source.description,
        "parameters": source.model.num_parameters(),
        "train_tokens": source.train_ids.numel(),
        "weights_sha256": weights_digest(source.model),
        "trained_with": training_settings(run_dir),
    }


def check_same_source(recorded: dict, found: dict, root: Path) -> None:
    """Refuse, naming OUTPUT, a source other than the one `recorded` (a record without a digest: the path only)."""
    if recorded.get("run") is not None and recorded["run"] != found["run"]:
        raise ValueError(
            f"{root} holds the extension of {recorded['run']}, not of {found['run']}; use another --output-dir"
        )
    old = recorded.get("weights_sha256")
    if old is not None and old != found["weights_sha256"]:
        raise ValueError(
            f"{root} holds the extension of {found['run']} as its weights were (sha256 {old[:12]}); they differ now "
            f"({found['weights_sha256'][:12]}): the run was re-trained or replaced; use another --output-dir"
        )


def _flat(settings: dict, prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            found.update(_flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


def check_seed_sources(root: Path, seed: int, run_dir: str | Path) -> None:
    """Refuse seed `seed`'s source when it was trained with other settings than a source another seed recorded in
    OUTPUT/results.json (each seed must extend the same recipe, its seed aside)."""
    record_path = root / "results.json"
    if not record_path.is_file():
        return
    ours = _flat(training_settings(run_dir))
    for other, run in read_mapping_file(record_path, "the results file").get("per_seed", {}).items():
        theirs = run.get("source", {}).get("trained_with")
        if other == str(seed) or not theirs:
            continue
        theirs = _flat(theirs)
        differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        if differ:
            shown = ", ".join(f"{k}: {theirs.get(k)!r} against {ours.get(k)!r}" for k in differ[:4])
            raise ValueError(
                f"extend --seeds: the source of seed {seed} ({run_dir}) was trained with other settings than seed "
                f"{other}'s ({shown}); every seed must extend the same recipe: use another --output-dir"
            )
