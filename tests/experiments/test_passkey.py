"""Passkey retrieval (`posformer.experiments.passkey`): exact prompts, the grid, and the training mix."""

from __future__ import annotations

import re

import pytest
import torch

import posformer as pf
from posformer.experiments.passkey import PasskeyMix, passkey_grid, passkey_prompt, random_keys
from posformer.train.batches import WindowBatches


def _bytes(text: str) -> list[int]:
    return list(text.encode())


@pytest.mark.parametrize("length", [45, 64, 300])
def test_passkey_prompt_has_the_length_the_key_at_its_depth_and_the_answer_last(length):
    for depth in (0.0, 0.5, 1.0):
        prompt = passkey_prompt(_bytes, length, depth, "71432")
        text = bytes(prompt.ids.tolist()).decode()
        assert len(prompt.ids) == length and text.endswith(" The pass key is 71432")
        assert bytes(prompt.ids[prompt.answer_start :].tolist()).decode() == " 71432"
        where = text.index(" The pass key is 71432.")
        room = length - 45
        assert where == round(depth * room)
    assert passkey_prompt(_bytes, 44, 0.5, "71432") is None


def test_passkey_grid_marks_prompts_that_do_not_fit():
    model = pf.Transformer(
        pf.Config(arch="decoder", vocab_size=256, d_model=16, n_layers=1, n_heads=2, position="rope")
    )
    grid = passkey_grid(model, _bytes, [32, 64], [0.0, 1.0], trials=3)
    assert grid["32"] == {"0.0": None, "1.0": None}
    for cell in grid["64"].values():
        assert 0 <= cell["exact"] <= cell["digits"] <= 1


def test_passkey_mix_replaces_the_asked_fraction_and_resumes_identically():
    ids = torch.randint(0, 256, (10_000,), generator=torch.Generator().manual_seed(0))
    plain = WindowBatches(ids, 64, seed=3).next_batch(8)["input_ids"]
    all_keys = PasskeyMix(WindowBatches(ids, 64, seed=3), _bytes, 64, 1.0, seed=3).next_batch(8)["input_ids"]
    for row in all_keys:
        key = re.fullmatch(r".* The pass key is (\d{5})", bytes(row.tolist()).decode()).group(1)
        assert f" The pass key is {key}." in bytes(row.tolist()).decode()
    assert not torch.equal(plain, all_keys)
    none = PasskeyMix(WindowBatches(ids, 64, seed=3), _bytes, 64, 0.0, seed=3).next_batch(8)["input_ids"]
    assert torch.equal(plain, none)
    first = PasskeyMix(WindowBatches(ids, 64, seed=3), _bytes, 64, 0.5, seed=3)
    first.next_batch(8)
    resumed = PasskeyMix(WindowBatches(ids, 64, seed=3), _bytes, 64, 0.5, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert torch.equal(first.next_batch(8)["input_ids"], resumed.next_batch(8)["input_ids"])
    with pytest.raises(ValueError, match="passkey_fraction"):
        PasskeyMix(WindowBatches(ids, 32, seed=3), _bytes, 32, 0.5, seed=3)


def test_retrieval_reads_only_the_answer_logits_and_batches_by_tokens():
    torch.manual_seed(0)
    model = pf.Transformer(
        pf.Config(arch="decoder", vocab_size=256, d_model=16, n_layers=1, n_heads=2, position="rope")
    ).eval()
    prompts = [passkey_prompt(_bytes, 80, 0.5, key) for key in random_keys(3, 0)]
    with torch.no_grad():  # the whole logits of each prompt alone
        agree = [
            model(p.ids[None, :-1]).logits[0, p.answer_start - 1 :].argmax(-1) == p.ids[p.answer_start :]
            for p in prompts
        ]
    counted = []
    grid = passkey_grid(model, _bytes, [80], [0.5], trials=3, batch_tokens=160, advance=counted.append)
    assert counted == [160, 80]  # batches of 160 // 80 = 2 prompts
    assert grid["80"]["0.5"]["exact"] == pytest.approx(sum(float(a.all()) for a in agree) / 3)
    assert grid["80"]["0.5"]["digits"] == pytest.approx(sum(float(a.float().mean()) for a in agree) / 3)
    assert grid["80"]["0.5"]["hits"] == [int(a.all()) for a in agree]  # key by key, in the keys' order
