"""The model FLOPs behind MFU equal what PyTorch's own FlopCounterMode counts in the matrix products of a forward
and of a training step (eager attention, whose score and value products are plain batched matmuls)."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import posformer as pf
from posformer.bench.flops import forward_flops_per_token, matmul_params, train_flops_per_token
from posformer.bench.speed import bench_config


@pytest.mark.parametrize("tied, kv_heads", [(False, 4), (True, 4), (False, 2)])
def test_palm_count_equals_torchs_flop_counter(tied: bool, kv_heads: int) -> None:
    cfg = bench_config(d_model=64, layers=2, heads=4, vocab=100, d_ff=96, length=16).replace(
        attn_impl="eager", tie_embeddings=tied, n_kv_heads=kv_heads
    )
    torch.manual_seed(0)
    model = pf.Transformer(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    with FlopCounterMode(display=False) as forward:
        with torch.no_grad():
            model(input_ids=ids)
    assert forward.get_total_flops() == forward_flops_per_token(cfg, model, 16) * ids.numel()
    with FlopCounterMode(display=False) as step:
        model(input_ids=ids, labels=ids).loss.backward()
    assert step.get_total_flops() == train_flops_per_token(cfg, model, 16) * ids.numel()


def test_the_input_embedding_is_a_lookup_unless_it_is_the_output_projection() -> None:
    cfg = bench_config(d_model=32, layers=1, heads=4, vocab=50, d_ff=48, length=8)
    untied, tied = pf.Transformer(cfg), pf.Transformer(cfg.replace(tie_embeddings=True))
    assert matmul_params(cfg, untied) == matmul_params(cfg.replace(tie_embeddings=True), tied)
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 50 * 32
