"""Reading Hugging Face checkpoints: file formats, sharding, safety and the errors users see."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

import posformer as pf
from hf_oracle import assert_same_outputs, padded_batch
from posformer.cli import main
from posformer.hf import CheckpointError, UnsupportedCheckpoint, WeightMapError

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.2,
)


@pytest.fixture
def hf_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**SIZES, attn_implementation="eager")).eval()


def test_sharded_safetensors(tmp_path, hf_llama):
    hf_llama.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    assert_same_outputs(pf.from_hf(tmp_path), hf_llama, padded_batch(97))


def test_pytorch_bin_is_read_with_weights_only(tmp_path, hf_llama):
    hf_llama.config.save_pretrained(tmp_path)  # the weights as transformers 4 saved them (5 writes no .bin)
    torch.save(hf_llama.state_dict(), tmp_path / "pytorch_model.bin")
    assert_same_outputs(pf.from_hf(tmp_path), hf_llama, padded_batch(97))


class _Payload:
    """Unpickling this would create a file: the proof that an arbitrary object was unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_malicious_bin_is_refused_and_never_executed(tmp_path, hf_llama):
    hf_llama.config.save_pretrained(tmp_path)
    marker = tmp_path / "pwned"
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"model.embed_tokens.weight": _Payload(str(marker))}, f)
    with pytest.raises(CheckpointError, match="weights_only"):
        pf.from_hf(tmp_path)
    assert not marker.exists()


def test_truncated_safetensors(tmp_path, hf_llama):
    hf_llama.save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        pf.from_hf(tmp_path)


def test_corrupt_safetensors_header(tmp_path, hf_llama):
    hf_llama.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        pf.from_hf(tmp_path)


def test_unsupported_model_type_names_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gptj"}))
    with pytest.raises(UnsupportedCheckpoint, match="'gptj' is not supported.*llama.*qwen2"):
        pf.from_hf(tmp_path)


def test_unsupported_feature_is_named(tmp_path, hf_llama):
    hf_llama.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    mrope = {"rope_type": "mrope", "mrope_section": [1, 1, 2]}
    if "rope_parameters" in config:  # what transformers 5 writes instead of rope_scaling
        config["rope_parameters"] = {**config["rope_parameters"], **mrope}
    else:
        config["rope_scaling"] = mrope
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedCheckpoint, match=r"(rope scaling type|rope_parameters of rope_type) 'mrope'"):
        pf.from_hf(tmp_path)


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        pf.from_hf(tmp_path / "nowhere" / "deeper" / "still")
    with pytest.raises(CheckpointError, match="config.json does not exist"):
        pf.from_hf(tmp_path)
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        pf.from_hf(tmp_path)


def test_hub_id_offline_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="could not be downloaded from the Hugging Face Hub"):
        pf.from_hf("posformer-tests/no-such-model")


def _rewrite(tmp_path, change) -> None:
    path = tmp_path / "model.safetensors"
    from safetensors.torch import load_file

    state = load_file(str(path))
    change(state)
    save_file(state, str(path), metadata={"format": "pt"})


def test_weight_errors_list_missing_unknown_and_misshaped_keys(tmp_path, hf_llama):
    hf_llama.save_pretrained(tmp_path)

    def damage(state):
        del state["model.layers.1.mlp.down_proj.weight"]
        state["model.layers.0.self_attn.extra.weight"] = torch.zeros(3, 4)
        state["model.norm.weight"] = torch.ones(31)

    _rewrite(tmp_path, damage)
    with pytest.raises(WeightMapError) as err:
        pf.from_hf(tmp_path)
    message = str(err.value)
    assert "missing from the checkpoint (1)" in message and "model.layers.1.mlp.down_proj.weight" in message
    assert "model.layers.0.self_attn.extra.weight (3, 4)" in message
    assert "model.norm.weight (31,)" in message and "expects (32,)" in message


def test_dtype_and_to_hf_infers_the_family_or_names_why_none_fits(tmp_path, hf_llama):
    hf_llama.save_pretrained(tmp_path)
    model = pf.from_hf(tmp_path, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    native = pf.Transformer(pf.Config(vocab_size=50, d_model=16, n_layers=1, n_heads=2))  # sinusoidal positions
    with pytest.raises(UnsupportedCheckpoint, match=r"no Hugging Face family writes this model .*gpt2: .*'learned'"):
        pf.to_hf(native, tmp_path / "out")
    llama_shaped = pf.Config.preset("llama", vocab_size=97, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    assert llama_shaped.hf_model_type is None
    ours = pf.Transformer(llama_shaped).eval()
    pf.to_hf(ours, tmp_path / "inferred")
    assert json.loads((tmp_path / "inferred" / "config.json").read_text())["model_type"] == "llama"
    theirs = LlamaForCausalLM.from_pretrained(tmp_path / "inferred", attn_implementation="eager").eval()
    assert_same_outputs(ours, theirs, padded_batch(97))
    with pytest.raises(UnsupportedCheckpoint, match=r"hf_model_type 'gpt2' cannot write this model: .*'learned'"):
        pf.to_hf(ours, tmp_path / "as-gpt2", hf_model_type="gpt2")


def test_cli_convert_both_ways_and_generate(tmp_path, hf_llama, capsys):
    hf_dir, ours, back = tmp_path / "hf", tmp_path / "ours", tmp_path / "back"
    hf_llama.save_pretrained(hf_dir)
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(ours)]) == 0
    assert "posformer" in json.loads((ours / "config.json").read_text())
    assert main(["convert", "--to-hf", str(ours), "--out", str(back)]) == 0
    assert not [p for p in back.iterdir() if p.name.startswith(".")]
    reloaded = LlamaForCausalLM.from_pretrained(back, attn_implementation="eager").eval()
    assert_same_outputs(pf.from_hf(hf_dir), reloaded, padded_batch(97))
    assert main(["convert", "--out", str(back)]) == 2
    assert "exactly one of --from-hf" in capsys.readouterr().err


def _tiny_tokenizer(directory):
    """A byte-level BPE tokenizer trained on a few sentences, saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=60, special_tokens=["<pad>", "<s>", "</s>"])
    tokenizer.train_from_iterator(["the cat sat on the mat", "a dog ran in the park"] * 5, trainer)
    from tokenizers import decoders

    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    assert len(fast) <= SIZES["vocab_size"]
    return fast


def test_cli_generate_greedy_matches_hf(tmp_path, hf_llama, capsys):
    tokenizer = _tiny_tokenizer(tmp_path)
    hf_llama.save_pretrained(tmp_path)
    prompt = "the cat"
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    expected = hf_llama.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert (
        main(["generate", "--model", str(tmp_path), "--prompt", prompt, "--temperature", "0", "--max-new-tokens", "6"])
        == 0
    )
    assert capsys.readouterr().out.rstrip("\n") == tokenizer.decode(expected[0], skip_special_tokens=True)


def test_cli_generate_beam_search_matches_hf(tmp_path, hf_llama, capsys):
    tokenizer = _tiny_tokenizer(tmp_path)
    hf_llama.save_pretrained(tmp_path)
    prompt = "a dog"
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    expected = hf_llama.generate(ids, max_new_tokens=5, do_sample=False, num_beams=3, eos_token_id=None, pad_token_id=0)
    assert (
        main(["generate", "--model", str(tmp_path), "--prompt", prompt, "--num-beams", "3", "--max-new-tokens", "5"])
        == 0
    )
    assert capsys.readouterr().out.rstrip("\n") == tokenizer.decode(expected[0], skip_special_tokens=True)
