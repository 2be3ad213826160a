"""Copying by content, with and without smeared keys: the probe behind docs/longeval.md's Learnability table.

Each row is `length` random tokens in which a segment of `--segment` tokens (uniform length) reappears at a
random later offset. Only a model that finds the earlier occurrence by content (an induction head) predicts the
repeat; a fixed offset cannot. Prints, every 50 steps, the training loss and the accuracy on the repeated tokens
after the first of each repeat, on 64 fresh rows. With --span S each row instead packs copies of S tokens back to
back (segments of 4 to S / 4, `packed_copy_row`), and a second accuracy is printed on single-copy rows of the full
length.

    python examples/copy_by_content.py --key-smear --steps 1500
    python examples/copy_by_content.py --steps 1500             # the same model without smeared keys
    python examples/copy_by_content.py --key-smear --layers 4 --lr 5e-3 --span 48 --steps 900
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import Tensor

import posformer as pf
from posformer.experiments.copy_rows import packed_copy_row, repeated_segment_row


def rows(
    count: int, length: int, vocab: int, shortest: int, longest: int, g: torch.Generator, span: int | None = None
) -> tuple[Tensor, Tensor]:
    """(ids (count, length), repeated (count, length) bool): `repeated_segment_row`s stacked, or with `span`
    `packed_copy_row`s."""
    if span is not None:
        ids, repeated = zip(*(packed_copy_row(length, span, vocab, g) for _ in range(count)))
    else:
        ids, repeated = zip(*(repeated_segment_row(length, vocab, shortest, longest, g) for _ in range(count)))
    return torch.stack(ids), torch.stack(repeated)


def copy_accuracy(model: pf.Transformer, ids: Tensor, repeated: Tensor) -> float:
    """The accuracy of the argmax on the tokens `repeated` marks, ids and repeated (n, length)."""
    with torch.no_grad():
        predicted = model.eval()(ids).logits[:, :-1].argmax(-1)
    model.train()
    return (predicted == ids[:, 1:])[repeated[:, 1:]].float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key-smear", action="store_true", help="Config.key_smear: each key mixed with the one before")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--segment", default="8,32", help="shortest,longest repeated segment")
    parser.add_argument("--span", type=int, help="pack copies of this many tokens in each row (at least 16)")
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
    if args.span is not None and not 16 <= args.span <= args.length:
        parser.error(f"--span {args.span}: expected 16 <= span <= --length")
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
    test_rows = rows(64, args.length, args.vocab_size, shortest, longest, held, args.span)
    long_rows = rows(64, args.length, args.vocab_size, 4, args.length // 4, held) if args.span else None
    start = time.time()
    for step in range(1, args.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, step / 50)
        ids, _ = rows(args.batch_size, args.length, args.vocab_size, shortest, longest, train, args.span)
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0:
            accuracy = copy_accuracy(model, *test_rows)
            line = f"step {step} {time.time() - start:.0f}s loss {loss.item():.3f} copy {accuracy:.2f}"
            if long_rows is not None:
                line += f" long {copy_accuracy(model, *long_rows):.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
