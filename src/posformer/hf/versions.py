"""Which transformers wrote a checkpoint, and which one an export is for.

A config.json means what the transformers version that wrote it (`transformers_version`) meant by it: transformers 5
changed some keys' meaning (T5 and mT5 tie their LM head always, and say in `scale_decoder_outputs` whether it is
scaled; mT5 never scales it). posformer reads each config by its writer's meaning and writes each export for one
version: by default the installed transformers, else the newest major version.
"""

from __future__ import annotations

import re

NEWEST = "5.24.0"  # the newest release the parity suite runs against (beside 4.57.6)
NEWEST_MAJOR = 5


def major(version: str, source: str) -> int:
    """4 for "4.57.6"; ValueError naming `source` for text that is not a version."""
    match = re.match(r"\s*(\d+)\.", str(version))
    if match is None:
        raise ValueError(f"{source}: transformers_version={version!r} is invalid: expected a version such as '4.57.6'")
    return int(match.group(1))


def writer_major(hf: dict, source: str = "config.json") -> int | None:
    """The major version of the transformers that wrote `hf` (its `transformers_version`; 3 and older read as 4,
    whose meaning they share), None when unrecorded; a version newer than posformer knows is refused."""
    version = hf.get("transformers_version")
    if version is None:
        return None
    found = major(version, source)
    if found > NEWEST_MAJOR:
        raise ValueError(
            f"{source}: transformers_version={version!r}: posformer reads configs written by transformers "
            f"{NEWEST_MAJOR}.x and older, and cannot tell what this one means"
        )
    return max(found, 4)


def export_version(asked: str | None) -> str:
    """The transformers version an export is written for: `asked`, else the installed one, else `NEWEST`."""
    if asked is None:
        try:
            import transformers
        except ImportError:
            return NEWEST
        asked = transformers.__version__
    if major(asked, "to_hf") not in (4, NEWEST_MAJOR):
        raise ValueError(
            f"to_hf: transformers_version={asked!r} is invalid: expected a transformers 4.x or {NEWEST_MAJOR}.x "
            "version such as '4.57.6' or '5.24.0'"
        )
    return str(asked).strip()
