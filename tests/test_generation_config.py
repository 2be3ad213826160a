"""A model's GenerationConfig, as transformers keeps one: generation_config.json read by `from_hf` and `load`, written
by `save_pretrained` and `to_hf`, its values `generate`'s defaults and an argument winning; the tokens equal those of
transformers' `generate` with the same file (4.57.6 and 5.x). Bad files name themselves; settings posformer does not
implement are named and kept. `posformer generate` is greedy unless the model's file says otherwise, and
help(model.generate) shows the real parameters.
"""

from __future__ import annotations

import inspect
import json
import logging
import pydoc

import pytest
import torch
import transformers

import posformer as pf
from posformer.cli import main
from posformer.generation import GenerationConfig
from test_generation_hf import NEW, PAD, _batch, _hf_model
from test_generation_options_hf import byte_level_tokenizer

SETTINGS = dict(  # a generation_config.json that changes every kind of default
    num_beams=3,
    num_return_sequences=2,
    length_penalty=0.5,
    repetition_penalty=1.3,
    no_repeat_ngram_size=3,
    max_new_tokens=7,
    pad_token_id=PAD,
)


def _eos(hf, batch) -> int:
    with torch.no_grad():
        free = hf.generate(**batch, max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    return int(free[0, -NEW + 2])


@pytest.fixture(scope="module", params=["llama", "t5"])
def saved(request, tmp_path_factory):
    """(HF model whose generation_config sets SETTINGS and an eos id, its directory, posformer's model, batch)."""
    family = request.param
    hf = _hf_model(family).eval()
    batch = _batch(family)
    hf.generation_config.update(**SETTINGS, eos_token_id=[_eos(hf, batch)])
    directory = tmp_path_factory.mktemp(family)
    hf.save_pretrained(directory, safe_serialization=True)
    return hf, directory, pf.from_hf(directory), batch


def test_the_file_gives_generates_defaults_as_in_transformers(saved):
    hf, directory, ours, batch = saved
    assert json.loads((directory / "generation_config.json").read_text())["num_beams"] == 3
    assert (ours.generation_config.num_beams, ours.generation_config.repetition_penalty) == (3, 1.3)
    with torch.no_grad():
        theirs = hf.generate(**batch)
    assert theirs.shape[0] == 3 * 2 and theirs.shape[1] <= _prefix(hf, batch) + 7  # two sequences, 7 tokens at most
    assert torch.equal(ours.generate(**batch), theirs), f"\n{ours.generate(**batch)}\n{theirs}"


def _prefix(hf, batch) -> int:
    return 1 if hf.config.is_encoder_decoder else batch["input_ids"].shape[1]


def test_an_argument_wins_over_the_file(saved):
    hf, _, ours, batch = saved
    options = dict(num_beams=1, num_return_sequences=1, repetition_penalty=1.0, max_new_tokens=5)
    with torch.no_grad():
        theirs = hf.generate(**batch, **options)
    assert torch.equal(ours.generate(**batch, **options), theirs)
    assert theirs.shape[0] == 3 and theirs.shape[1] <= _prefix(hf, batch) + 5


def test_a_generation_config_argument_equals_transformers(saved):
    """A full GenerationConfig given to `generate` replaces the model's, in both libraries."""
    hf, _, ours, batch = saved
    settings = dict(num_beams=2, max_new_tokens=6, eos_token_id=[], pad_token_id=PAD, no_repeat_ngram_size=2)
    with torch.no_grad():
        theirs = hf.generate(**batch, generation_config=transformers.GenerationConfig(**settings))
    assert torch.equal(ours.generate(**batch, generation_config=GenerationConfig(**settings)), theirs)


def test_save_pretrained_and_to_hf_write_the_file_back(saved, tmp_path):
    hf, _, ours, batch = saved
    ours.save_pretrained(tmp_path / "ours")
    reloaded = pf.load(tmp_path / "ours")
    assert reloaded.generation_config == ours.generation_config
    assert torch.equal(reloaded.generate(**batch), ours.generate(**batch))
    pf.to_hf(ours, tmp_path / "hf")
    back = type(hf).from_pretrained(tmp_path / "hf").eval()
    for name, value in SETTINGS.items():
        assert getattr(back.generation_config, name) == value, name
    with torch.no_grad():
        assert torch.equal(back.generate(**batch), ours.generate(**batch))


def _llama_dir(tmp_path, generation: dict | None):
    hf = _hf_model("llama").eval()
    hf.save_pretrained(tmp_path)
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return hf


@pytest.mark.parametrize(
    "generation,message",
    [
        ({"num_beams": "3"}, "generation_config.json: num_beams='3' is invalid"),
        ({"eos_token_id": [2, "x"]}, "generation_config.json: eos_token_id=.* is invalid"),
        ({"early_stopping": "sometimes"}, "generation_config.json: early_stopping='sometimes' is invalid"),
        ([1, 2], "generation_config.json must hold a JSON object"),
    ],
)
def test_a_bad_file_is_refused_naming_it(tmp_path, generation, message):
    _llama_dir(tmp_path / "hf", None)
    (tmp_path / "hf" / "generation_config.json").write_text(json.dumps(generation))
    with pytest.raises(ValueError, match=message):
        pf.from_hf(tmp_path / "hf")
    _llama_dir(tmp_path / "hf2", None)
    pf.from_hf(tmp_path / "hf2").save_pretrained(tmp_path / "ours")
    (tmp_path / "ours" / "generation_config.json").write_text(json.dumps(generation))
    with pytest.raises(ValueError, match=message):
        pf.load(tmp_path / "ours")


def test_a_value_used_badly_is_named_where_it_came_from(tmp_path):
    """A temperature of 0 loads (transformers' files carry such values); sampling with it is refused by name."""
    _llama_dir(tmp_path, {"do_sample": True, "temperature": 0})
    model = pf.from_hf(tmp_path)
    with pytest.raises(ValueError, match="model.generation_config.temperature=0 is invalid: expected a number > 0"):
        model.generate(torch.tensor([[5, 6]]), max_new_tokens=2)
    assert model.generate(torch.tensor([[5, 6]]), max_new_tokens=2, do_sample=False).shape == (1, 4)


def test_unimplemented_settings_are_named_and_kept(tmp_path, caplog):
    unused = {"bad_words_ids": [[5]], "forced_eos_token_id": 2}
    harmless = {"num_beam_groups": 1, "diversity_penalty": 0.0, "bos_token_id": 1, "use_cache": True}
    _llama_dir(tmp_path / "hf", {**unused, **harmless})
    with caplog.at_level(logging.WARNING):
        model = pf.from_hf(tmp_path / "hf")
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "bad_words_ids=[[5]]" in warned and "forced_eos_token_id=2" in warned
    assert not any(name in warned for name in harmless)
    model.save_pretrained(tmp_path / "ours")
    assert json.loads((tmp_path / "ours" / "generation_config.json").read_text()) == {**unused, **harmless}


def test_help_shows_generates_parameters():
    model = pf.Transformer(pf.Config(arch="decoder", vocab_size=50, d_model=16, n_layers=1, n_heads=2))
    parameters = inspect.signature(model.generate).parameters
    expected = set(GenerationConfig.names()) | {"input_ids", "streamer", "tokenizer", "generation_config"}
    assert expected <= set(parameters), expected - set(parameters)
    text = pydoc.render_doc(model.generate)
    assert "repetition_penalty" in text and "stop_strings" in text and "return_dict_in_generate" in text


def test_cli_generate_is_greedy_unless_the_file_says_otherwise(tmp_path, capsys):
    hf = _llama_dir(tmp_path, None)
    tokenizer = byte_level_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    prompt = "the quick"
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    with torch.no_grad():
        greedy = tokenizer.decode(hf.generate(ids, max_new_tokens=6, do_sample=False)[0], skip_special_tokens=True)
    command = ["generate", "--model", str(tmp_path), "--prompt", prompt, "--max-new-tokens", "6"]
    capsys.readouterr()  # what saving printed (transformers 5's progress bars)
    assert main(command) == 0
    out = capsys.readouterr()
    assert out.out.rstrip("\n") == greedy and "sampling" not in out.err
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "top_k": 5}))
    assert main(command) == 0
    assert "sampling, as" in capsys.readouterr().err
    assert main([*command, "--temperature", "0"]) == 0
    out = capsys.readouterr()
    assert out.out.rstrip("\n") == greedy and "sampling" not in out.err


def test_a_file_linked_outside_the_model_dir_is_refused(tmp_path):
    _llama_dir(tmp_path / "hf", None)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"num_beams": 2}))
    (tmp_path / "hf" / "generation_config.json").unlink()
    (tmp_path / "hf" / "generation_config.json").symlink_to(outside)
    with pytest.raises(ValueError, match="generation_config.json is refused: it is a symlink"):
        pf.from_hf(tmp_path / "hf")
