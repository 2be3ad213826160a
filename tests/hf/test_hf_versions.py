"""A config.json read by what the transformers that wrote it meant, and an export written for one version.

transformers 5 ties every T5 and mT5 LM head (it unties one stored with other values than the shared embedding),
says in `scale_decoder_outputs` whether a T5 head is scaled, and never scales an mT5 one; transformers 4 scales
every tied head. Where the installed transformers is the other major version, its own round trips (test_hf_t5.py)
cover the rest.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import posformer as pf
from hf_oracle import TRANSFORMERS_5, assert_same_outputs, padded_batch
from posformer.hf.family import UnsupportedCheckpoint
from posformer.hf.versions import export_version, writer_major

VOCAB = 61


def t5_model(**changes) -> pf.Transformer:
    torch.manual_seed(0)
    fields = dict(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, d_ff=24, decoder_start_token_id=0)
    return pf.Transformer(pf.Config.preset("t5", **{**fields, **changes})).eval()


def decoder_inputs() -> dict[str, torch.Tensor]:
    batch = padded_batch(VOCAB, length=5, seed=1)
    return {"decoder_input_ids": batch["input_ids"], "decoder_attention_mask": batch["attention_mask"]}


def edit_config(directory, **changes) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def test_the_writers_major_version_is_read_and_a_newer_one_refused() -> None:
    assert writer_major({"transformers_version": "4.57.6"}) == 4
    assert writer_major({"transformers_version": "5.24.0"}) == 5
    assert writer_major({"transformers_version": "3.4.0"}) == 4  # 3.x meant what 4.x means
    assert writer_major({}) is None
    with pytest.raises(ValueError, match=r"config.json: transformers_version='6.0.0': posformer reads configs"):
        writer_major({"transformers_version": "6.0.0"})
    with pytest.raises(ValueError, match=r"config.json: transformers_version='latest' is invalid"):
        writer_major({"transformers_version": "latest"})


def test_an_export_is_for_the_installed_transformers_unless_asked() -> None:
    assert export_version(None) == transformers.__version__
    assert export_version("4.57.6") == "4.57.6"
    with pytest.raises(ValueError, match=r"to_hf: transformers_version='3.4.0' is invalid: expected a transformers"):
        export_version("3.4.0")


def test_a_tied_unscaled_t5_head_is_written_for_transformers_5_and_refused_for_4(tmp_path) -> None:
    model = t5_model(scale_tied_head=False)
    with pytest.raises(UnsupportedCheckpoint, match=r"without scale_tied_head for transformers 4.*'5'"):
        pf.to_hf(model, tmp_path / "v4", transformers_version="4.57.6")
    out = pf.to_hf(model, tmp_path / "v5", transformers_version="5.24.0")
    config = json.loads((out / "config.json").read_text())
    assert (config["transformers_version"], config["scale_decoder_outputs"], config["tie_word_embeddings"]) == (
        "5.24.0",
        False,
        True,
    )
    reloaded = pf.from_hf(out)
    assert reloaded.cfg.tie_embeddings and not reloaded.cfg.scale_tied_head
    extra = decoder_inputs()
    assert_same_outputs(reloaded, model, padded_batch(VOCAB), **extra)
    if TRANSFORMERS_5:
        hf = transformers.T5ForConditionalGeneration.from_pretrained(out, attn_implementation="eager").eval()
        assert_same_outputs(model, hf, padded_batch(VOCAB), **extra)


def test_a_tied_config_over_an_untied_stored_head_loads_untied_as_transformers_5_does(tmp_path) -> None:
    """transformers 5 re-saves a v1.1 checkpoint (its own head stored) with tie_word_embeddings=true."""
    model = t5_model(activation="geglu_tanh", tie_embeddings=False)
    out = pf.to_hf(model, tmp_path / "v11", transformers_version="4.57.6")
    edit_config(out, tie_word_embeddings=True, scale_decoder_outputs=False, transformers_version="5.24.0")
    reloaded = pf.from_hf(out)
    assert not reloaded.cfg.tie_embeddings
    assert_same_outputs(reloaded, model, padded_batch(VOCAB), **decoder_inputs())


def test_a_tied_mt5_head_is_scaled_as_its_writer_meant_and_refused_without_a_version(tmp_path) -> None:
    model = t5_model(hf_model_type="mt5")  # tied and scaled, as transformers 4 builds a tied mT5
    with pytest.raises(UnsupportedCheckpoint, match=r"mt5 .*scaled by d_model\*\*-0.5 for transformers 5"):
        pf.to_hf(model, tmp_path / "v5", transformers_version="5.24.0")
    out = pf.to_hf(model, tmp_path / "v4", transformers_version="4.57.6")
    assert pf.from_hf(out).cfg.scale_tied_head
    edit_config(out, transformers_version="5.24.0")
    assert not pf.from_hf(out).cfg.scale_tied_head  # transformers 5 never scales an mT5 head
    edit_config(out, transformers_version=None)
    with pytest.raises(UnsupportedCheckpoint, match=r"mt5 checkpoint uses tie_word_embeddings=true without trans"):
        pf.from_hf(out)


def test_the_convert_command_writes_for_the_version_asked(tmp_path, capsys) -> None:
    from posformer.checkpoints.native import save_pretrained
    from posformer.cli import main

    save_pretrained(t5_model(scale_tied_head=False), tmp_path / "ours")
    command = ["convert", "--to-hf", str(tmp_path / "ours"), "--out", str(tmp_path / "v5")]
    assert main([*command, "--transformers-version", "5.24.0"]) == 0
    written = json.loads((tmp_path / "v5" / "config.json").read_text())
    assert (written["transformers_version"], written["scale_decoder_outputs"]) == ("5.24.0", False)
    capsys.readouterr()
    wrong = ["convert", "--from-hf", str(tmp_path / "v5"), "--out", str(tmp_path / "x"), "--transformers-version", "5"]
    assert main(wrong) == 2
    assert "--transformers-version applies to --to-hf only" in capsys.readouterr().err
