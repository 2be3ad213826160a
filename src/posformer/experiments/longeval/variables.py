"""Variable tracking (RULER's vt, Hsieh et al. 2024): chains of assignments hidden in noise; which variables hold
the value asked?

    ... VAR QX = 41825. ... VAR MB = 60317. ... VAR RT = QX. ... VAR KD = MB. ... VAR PL = RT. ...
    The VARs equal to 41825 are| QX RT PL

`chains` chains, each a value and `hops` reassignments, every statement at a uniform random depth with the order
within a chain kept (a variable is assigned before it is copied); the first chain is asked, the others are
distractors. The answer lists the chain's variables in the order they are assigned. RULER asks one chain of four
hops with five-letter names; two chains of two hops with two-letter names fit 128 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import perm

import torch
from torch import Tensor

from posformer.experiments.longeval import haystacks
from posformer.experiments.longeval.draws import shuffled, uniform
from posformer.experiments.longeval.items import Encode, check_split, draw, max_tokens
from posformer.experiments.longeval.prompt import (
    SuitePrompt,
    check_depth,
    finish,
    insert,
    listing,
    listing_text,
    pieces,
    room_for,
)

STATEMENT = (" VAR", " =", ".")  # " VAR" NAME " =" (VALUE or NAME) "."
QUESTION = (" The VARs equal to", " are")  # " The VARs equal to" VALUE " are" | NAME NAME ...


@dataclass(frozen=True)
class VariableTracking:
    name: str = "vt"
    summary: str = "2 chains of 2 hops in noise; the asked chain's variables, in order"
    chains: int = 2
    hops: int = 2
    haystack: str = "noise"
    uses_depth: bool = False

    def minimum_length(self, encode: Encode) -> int:
        """Every statement with the longest name and value; the question and the answer too."""
        name, value = max_tokens("name", encode), max_tokens("number", encode)
        statement = len(pieces(encode, *STATEMENT)) + name
        statements = self.chains * (statement + value + self.hops * (statement + name))
        return statements + len(pieces(encode, *QUESTION)) + value + (self.hops + 1) * name

    def prompt(
        self,
        encode: Encode,
        length: int,
        depth: float | None,
        rng: torch.Generator,
        split: str = "eval",
        haystack_ids: Tensor | None = None,
    ) -> SuitePrompt:
        """A prompt of exactly `length` tokens (see the module docstring); depth must be None."""
        check_depth(self.name, depth, self.uses_depth)
        check_split(split)
        names = draw("name", split, self.chains * (self.hops + 1), rng)
        values = draw("number", split, self.chains, rng)
        chains = [names[c * (self.hops + 1) : (c + 1) * (self.hops + 1)] for c in range(self.chains)]
        statements = []
        for chain, value in zip(chains, values):
            sources = [value] + chain[:-1]
            statements.append(
                [
                    pieces(encode, STATEMENT[0], " " + name, STATEMENT[1], " " + source, STATEMENT[2])
                    for name, source in zip(chain, sources)
                ]
            )
        interleaved = shuffled(rng, [c for c in range(self.chains) for _ in range(self.hops + 1)])
        depths = sorted(uniform(rng) for _ in interleaved)
        next_of = [0] * self.chains
        inserts = []
        for where, c in zip(depths, interleaved):
            inserts.append((where, statements[c][next_of[c]]))
            next_of[c] += 1
        question = pieces(encode, QUESTION[0], " " + values[0], QUESTION[1])
        answer = listing(encode, chains[0])
        room = room_for(self.name, length, *(len(ids) for _, ids in inserts), len(question), len(answer))
        body, _ = insert(haystacks.noise(encode, room), inserts)
        return finish(body, question, answer, listing_text(chains[0]), perm(len(names), self.hops + 1), length)
