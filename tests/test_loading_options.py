"""The loading options as `from_pretrained` users type them: dtype / torch_dtype (a dtype, its name, "auto": the
dtype the weights were saved in) and device / device_map (one device, "auto"), for posformer's checkpoints and
Hugging Face's; bad values refused by name before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import posformer as pf

TINY = dict(arch="decoder", vocab_size=61, d_model=32, n_layers=1, n_heads=2, d_ff=48, max_positions=32)


def dtypes(model: torch.nn.Module) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A posformer model dir saved in float32 and one saved in bfloat16, and a Hugging Face llama in bfloat16."""
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    model = pf.Transformer(pf.Config(**TINY))
    model.save_pretrained(root / "fp32")
    model.to(torch.bfloat16).save_pretrained(root / "bf16")
    hf = LlamaForCausalLM(
        LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2)
    )
    hf.to(torch.bfloat16).save_pretrained(root / "hf_bf16")
    return {"fp32": root / "fp32", "bf16": root / "bf16", "hf_bf16": root / "hf_bf16"}


@pytest.mark.parametrize("option", ["dtype", "torch_dtype"])
@pytest.mark.parametrize("value", [torch.bfloat16, "bfloat16", "bf16", "torch.bfloat16"])
def test_a_dtype_by_either_name_and_any_spelling_loads_in_it(saved, option: str, value) -> None:
    assert dtypes(pf.load(saved["fp32"], **{option: value})) == {torch.bfloat16}
    assert dtypes(pf.Transformer.from_pretrained(saved["fp32"], **{option: value})) == {torch.bfloat16}


@pytest.mark.parametrize(
    "kind,expected", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("hf_bf16", torch.bfloat16)]
)
def test_auto_loads_the_dtype_the_weights_were_saved_in(saved, kind: str, expected: torch.dtype) -> None:
    model = pf.load(saved[kind], torch_dtype="auto")
    assert dtypes(model) == {expected}
    ids = torch.randint(0, 61, (1, 7))
    torch.testing.assert_close(model(ids).logits, pf.load(saved[kind], dtype=expected)(ids).logits, rtol=0, atol=0)


def test_the_default_stays_float32(saved) -> None:
    assert dtypes(pf.load(saved["bf16"])) == {torch.float32}


@pytest.mark.parametrize("kwargs", [{"device_map": "cpu"}, {"device_map": "auto"}, {"device": "cpu"}])
def test_one_device_by_either_name(saved, kwargs: dict) -> None:
    expected = "cuda" if kwargs.get("device_map") == "auto" and torch.cuda.is_available() else "cpu"
    model = pf.Transformer.from_pretrained(saved["fp32"], **kwargs)
    assert {p.device.type for p in model.parameters()} == {expected}


@pytest.mark.parametrize(
    "kwargs,said",
    [
        ({"dtype": torch.int64}, r"dtype=torch.int64 is invalid: expected a floating torch dtype"),
        ({"torch_dtype": "float8"}, r"dtype='float8' is invalid: expected a floating torch dtype, one of float32"),
        ({"dtype": "bfloat16", "torch_dtype": "float16"}, r"give dtype or torch_dtype \(its other name\), not both"),
        ({"device_map": {"": 0}}, r"device_map=\{'': 0\} is invalid: posformer places a model on one device"),
        ({"device": "tpu"}, r"device='tpu' is invalid: expected 'cpu', 'cuda', 'cuda:N' or 'auto'"),
        ({"device": "cpu", "device_map": "cuda"}, r"give device or device_map \(its other name\), not both"),
    ],
)
def test_bad_loading_options_are_refused_by_name_before_anything_is_read(tmp_path: Path, kwargs: dict, said: str):
    with pytest.raises(ValueError, match=said):
        pf.load(tmp_path / "does-not-matter", **kwargs)
