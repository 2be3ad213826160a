"""Copying by content, with and without smeared keys: the probe behind docs/longeval.md's Learnability table.

Each row is `length` random tokens in which a segment of `--segment` tokens (uniform length) reappears at a
random later offset. Only a model that finds the earlier occurrence by content (an induction head) predicts the
repeat; a fixed offset cannot. Prints, every 50 steps, the training loss and the accuracy on the repeated tokens
after the first of each repeat, on 64 fresh rows.

    python examples/copy_by_content.py --key-smear --steps 1500
    python examples/copy_by_content.py --steps 1500             # the same model without smeared keys
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import Tensor

import posformer as pf
from posformer.experiments.copy_rows import repeated_segment_row


def rows(count: int, length: int, vocab: int, shortest: int, longest: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """(ids (count, length), repeated (count, length) bool): `repeated_segment_row`s stacked."""
    ids, repeated = zip(*(repeated_segment_row(length, vocab, shortest, longest, g) for _ in range(count)))
    return torch.stack(ids), torch.stack(repeated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key-smear", action="store_true", help="Config.key_smear: each key mixed with the one before")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--segment", default="8,32", help="shortest,longest repeated segment")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    shortest, longest = (int(n) for n in args.segment.split(","))
    if not 1 <= shortest <= longest or 2 * longest > args.length:
        parser.error(f"--segment {args.segment}: expected 1 <= shortest <= longest <= --length / 2")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    # the extrapolate benchmark's decoder (RMSNorm, SwiGLU, RoPE, tied and scaled embeddings), 128 wide
    cfg = pf.Config(
        arch="decoder", vocab_size=args.vocab_size, d_model=128, n_layers=args.layers, n_heads=4, d_ff=320,
        position="rope", max_positions=args.length, norm="rmsnorm", activation="swiglu", qkv_bias=False,
        attn_out_bias=False, ffn_bias=False, tie_embeddings=True, scale_embeddings=True, key_smear=args.key_smear,
    )  # fmt: skip
    model = pf.Transformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    train, held = torch.Generator().manual_seed(args.seed), torch.Generator().manual_seed(args.seed + 1)
    test_ids, test_repeated = rows(64, args.length, args.vocab_size, shortest, longest, held)
    start = time.time()
    for step in range(1, args.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, step / 50)
        ids, _ = rows(args.batch_size, args.length, args.vocab_size, shortest, longest, train)
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0:
            with torch.no_grad():
                predicted = model.eval()(test_ids).logits[:, :-1].argmax(-1)
                model.train()
            accuracy = (predicted == test_ids[:, 1:])[test_repeated[:, 1:]].float().mean().item()
            print(f"step {step} {time.time() - start:.0f}s loss {loss.item():.3f} copy {accuracy:.2f}", flush=True)


if __name__ == "__main__":
    main()
