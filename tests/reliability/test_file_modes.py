"""Every file posformer writes gets the mode the umask gives a new file, as `open` would, not the 0600 of a
temporary file or of safetensors: a run on a shared file system stays readable by the group the umask allows."""

from __future__ import annotations

import os
import stat

import pytest

import posformer as pf
from posformer.utils.figure import pyplot, save_png
from posformer.utils.safe_write import write_text_atomic
from tests.conftest import tiny


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_written_files_follow_the_umask(tmp_path, mask) -> None:
    previous = os.umask(mask)
    try:
        model = pf.Transformer(pf.Config.preset("llama", vocab_size=32, d_model=16, n_layers=1, n_heads=2, d_ff=32))
        model.save_pretrained(tmp_path / "native")
        pf.to_hf(model, tmp_path / "hf")
        pf.Transformer(tiny("decoder")).save_pretrained(tmp_path / "tiny")
        write_text_atomic(tmp_path / "notes.txt", "text")
        plt = pyplot()
        save_png(plt.figure(), tmp_path / "figure.png")
    finally:
        os.umask(previous)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"model.safetensors", "config.json", "notes.txt", "figure.png"}
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {oct(0o666 & ~mask)}, modes
