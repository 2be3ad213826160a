"""A pointer-generator output layer (See, Liu & Manning 2017): an encoder-decoder that can copy source tokens.

Each decoder position t writes from a mixture of the LM head's vocabulary distribution and a copy
distribution over the source tokens:

    p(w | t) = g_t * softmax(vocab_logits_t)[w] + (1 - g_t) * sum_{j: source_j = w} a_tj

a_t is one attention of the decoder's last hidden state h_t over the encoder's output m, softmax_j(q(h_t) . k(m_j)),
padding excluded, without a 1/sqrt(d) (the start below makes it a linear score of m_j, which needs the full
scale); the gate g_t = sigmoid(w . [h_t; c_t] + b) reads h_t and the copied context c_t = sum_j a_tj m_j.
The copy scores also gain a learned weight times the *follow* indicator f_tj = [source_{j-1} = y_{t-1}]: the source
position just after an occurrence of the token written last. It is the location that CopyNet's selective read
(Gu, Lu, Li & Li 2016) feeds back to the decoder, given to the copy scores as a feature, so that a copied span
goes on from where it is without a position having to be learned; it needs no state beyond the decoder's input
ids, so it works the same under teacher forcing and step by step over a KV cache. The decoder's start token
has no predecessor in the source: its row has no follow indicator.

The output is log p (B, T, V), float32: log-probabilities are logits (softmax gives p back), so the losses,
greedy and beam search and the null score of the QA job read it unchanged.

The start (`reset_parameters`) is chosen so that copying learns as fast as a span head: the query projection
starts at zero and the key projection at the identity, so the first steps train the query's bias, a linear score
of the encoder's states (a span head's start logits), instead of a product of two small random matrices whose
gradients both start near zero; the follow weight starts at `FOLLOW_START`, so that a copied span goes on by
default (Adam moves a single scalar by about the learning rate per step, too slowly to find it in a short run);
the gate starts as the "normal" scheme draws a linear layer, an even mixture.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posformer.ops.linear import Linear

FOLLOW_START = 8.0
"""The follow weight's start: after a token that occurs once in a 384-token window, the next position takes
e^8 / (e^8 + 383), 89%, of the copy attention, all else equal."""


class PointerGenerator(nn.Module):
    """The copy attention, the follow weight and the gate of a pointer-generator over `d_model`-wide states."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.query = Linear(d_model, d_model)
        self.key = Linear(d_model, d_model)
        self.gate = Linear(2 * d_model, 1)
        self.follow = nn.Parameter(torch.zeros(()))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, std: float = 0.02) -> None:
        """The start described in the module doc; `std` draws the gate's weights."""
        nn.init.zeros_(self.query.weight)
        nn.init.zeros_(self.query.bias)
        self.key.weight.copy_(torch.eye(self.key.in_features))
        nn.init.zeros_(self.key.bias)
        nn.init.normal_(self.gate.weight, std=std)
        nn.init.zeros_(self.gate.bias)
        self.follow.fill_(FOLLOW_START)

    def forward(
        self,
        hidden: Tensor,
        vocab_logits: Tensor,
        memory: Tensor,
        source_ids: Tensor,
        source_keep: Tensor | None,
        decoder_ids: Tensor,
        start_token_id: int | None,
    ) -> Tensor:
        """The log-probabilities of the mixture, (B, T, V) float32.

        hidden: (B, T, d) the decoder's last hidden states; vocab_logits: (B, T, V) the LM head's logits;
        memory: (B, S, d) the encoder's output; source_ids: (B, S) its input ids; source_keep: (B, S) bool,
        False at padding (None: none); decoder_ids: (B, T) the decoder's input ids, whose rows equal to
        `start_token_id` have no follow indicator.
        """
        scores = self.query(hidden) @ self.key(memory).transpose(1, 2)
        follows = F.pad(source_ids[:, :-1], (1, 0), value=-1)[:, None, :] == decoder_ids[:, :, None]  # (B, T, S)
        if start_token_id is not None:
            follows = follows & (decoder_ids != start_token_id)[:, :, None]
        scores = scores.float() + self.follow.float() * follows
        if source_keep is not None:
            scores = scores.masked_fill(~source_keep[:, None, :], float("-inf"))
        attention = torch.softmax(scores, dim=-1)  # (B, T, S)
        context = attention.to(memory.dtype) @ memory
        gate = self.gate(torch.cat((hidden, context), dim=-1)).float()  # (B, T, 1)
        batch, length, vocab = vocab_logits.shape
        copied = attention.new_zeros(batch, length, vocab)
        copied.scatter_add_(-1, source_ids[:, None, :].expand(-1, length, -1), attention)
        generated = F.logsigmoid(gate) + torch.log_softmax(vocab_logits.float(), dim=-1)
        copied = copied.clamp_min(torch.finfo(copied.dtype).tiny).log()  # log 0 would make the gradient NaN
        return torch.logaddexp(generated, F.logsigmoid(-gate) + copied)
