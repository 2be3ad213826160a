"""Every kind of batches the project trains on leaves checkpoints that load and resume exactly.

Each kind saves its own data state (windows: seed, epoch, index; a passkey mix: the windows' state and its draw
count; a synthetic task: seed and index), and the trainer-state check must accept each of them: a run whose
checkpoints it refused could neither be resumed nor loaded by `posformer extend` or `generate`.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

import posformer as pf
from posformer.experiments.copy_rows import CopyMix
from posformer.experiments.passkey import PasskeyMix
from posformer.experiments.synthetic.dataset import TaskBatches
from posformer.loading import load_model
from posformer.train.batches import WindowBatches
from posformer.train.settings import TrainerSettings
from posformer.train.trainer import Trainer

SEQ_LEN = 64


def _bytes(text: str) -> list[int]:
    return list(text.encode())


def _text_ids() -> torch.Tensor:
    return torch.randint(0, 256, (4_000,), generator=torch.Generator().manual_seed(0))


KINDS = {
    "windows": lambda: WindowBatches(_text_ids(), SEQ_LEN, seed=1),
    "passkey mix": lambda: PasskeyMix(WindowBatches(_text_ids(), SEQ_LEN, seed=1), _bytes, SEQ_LEN, 0.5, seed=1),
    "copy mix": lambda: CopyMix(WindowBatches(_text_ids(), SEQ_LEN, seed=1), SEQ_LEN, 0.5, seed=1, vocab_size=256),
    "task": lambda: TaskBatches("copy", 6, 1),
}


def _train(run_dir, kind: str, resume: bool) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(
        pf.Config(
            arch="decoder", vocab_size=256, d_model=16, n_layers=1, n_heads=2, position="rope", max_positions=SEQ_LEN
        )
    )
    settings = TrainerSettings(
        steps=4,
        batch_size=4,
        lr=1e-2,
        warmup=1,
        eval_every=2,
        save_every=2,
        keep_last=3,
        sample_prompt=None,
        sample_tokens=0,
        device="cpu",
    )
    Trainer(model, KINDS[kind](), settings, run_dir, log=lambda _: None, progress=False).fit(resume=resume)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_checkpoint_of_every_batches_kind_loads_and_resumes_exactly(tmp_path, kind: str) -> None:
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    _train(whole, kind, resume=False)
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step-00000004")
    _train(resumed, kind, resume=True)
    for name, tensor in load_file(str(whole / "checkpoints" / "step-00000004" / "model.safetensors")).items():
        assert torch.equal(load_model(resumed).state_dict()[name], tensor), name


def test_resuming_with_another_kind_of_batches_names_the_missing_field(tmp_path) -> None:
    _train(tmp_path, "task", resume=False)
    shutil.rmtree(tmp_path / "checkpoints" / "step-00000004")
    with pytest.raises(ValueError, match=r"step-00000002/trainer_state.pt has no data field 'epoch'.*another kind"):
        _train(tmp_path, "windows", resume=True)
