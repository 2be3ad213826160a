"""Needles in a haystack (RULER's NIAH family, Hsieh et al. 2024): key-value lines hidden in noise or book text.

    ... text ... The key of lake is 41825. ... text ... The key of lake is| 41825

A needle is " The key of KEY is VALUE."; keys are words, values numbers, words or uuid-like codes (`items`). One
task class covers RULER's variants:
  keys      needles with distinct keys; one is asked, the others are distractors (multikey)
  values    values per key, every one asked in the order they appear (multivalue):
            " The keys of lake are| 41825, 60317, 22958"
  queries   keys asked at once, their values in the order asked (multiquery):
            " The keys of lake and fire are| 41825, 60317"
With one value and one query the asked needle sits at `depth`: after the haystack boundary (`haystacks`) nearest
to round(depth * room) haystack tokens. Every other needle, and every needle of a multi-value or multi-query
prompt, sits at a uniform random depth. RULER's instruction preamble and its "special magic" phrasing are left
out so that a prompt fits 128 tokens.

Chance: a uniform guess among the needles' values, in order (`perm(needles, answer slots)`); a single needle's
value is the only one in its prompt, so its guess is among every value of its kind (`items.value_space`): what a
model that never finds the needle gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import perm

import torch
from torch import Tensor

from posformer.experiments.longeval import haystacks
from posformer.experiments.longeval.draws import shuffled, uniform
from posformer.experiments.longeval.items import Encode, check_split, draw, max_tokens, value_space
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

NEEDLE = (" The key of", " is", ".")  # " The key of" KEY " is" VALUE "."
ONE = (" The key of", " is")  # " The key of" KEY " is" | VALUE
MANY = (" The keys of", " and", " are")  # " The keys of" KEY (" and" KEY)* " are" | VALUE (", " VALUE)*
SEPARATOR = ","


@dataclass(frozen=True)
class NeedleTask:
    """RULER's needle-in-a-haystack tasks: `keys` needles (`values` each), `queries` of the keys asked."""

    name: str
    value_kind: str
    haystack: str
    summary: str
    keys: int = 1
    values: int = 1
    queries: int = 1

    @property
    def uses_depth(self) -> bool:
        return self.values == 1 and self.queries == 1

    def _many(self) -> bool:
        return self.values * self.queries > 1

    def _needle(self, encode: Encode, key: str, value: str) -> list[int]:
        return pieces(encode, NEEDLE[0], " " + key, NEEDLE[1], " " + value, NEEDLE[2])

    def _question(self, encode: Encode, asked: list[str]) -> list[int]:
        if not self._many():
            return pieces(encode, ONE[0], " " + asked[0], ONE[1])
        ids = encode(MANY[0])
        for n, key in enumerate(asked):
            ids += (encode(MANY[1]) if n else []) + encode(" " + key)
        return ids + encode(MANY[2])

    def minimum_length(self, encode: Encode) -> int:
        """The longest prompt without haystack: every key and value the longest of its kind."""
        key, value = max_tokens("word", encode), max_tokens(self.value_kind, encode)
        needle = len(pieces(encode, *NEEDLE)) + key + value
        if self._many():
            question = len(pieces(encode, MANY[0], MANY[2])) + self.queries * key
            question += (self.queries - 1) * len(encode(MANY[1]))
            slots = self.values * self.queries
            answer = slots * value + (slots - 1) * len(encode(SEPARATOR))
        else:
            question, answer = len(pieces(encode, *ONE)) + key, value
        return self.keys * self.values * needle + question + answer

    def prompt(
        self,
        encode: Encode,
        length: int,
        depth: float | None,
        rng: torch.Generator,
        split: str = "eval",
        haystack_ids: Tensor | None = None,
    ) -> SuitePrompt:
        """A prompt of exactly `length` tokens (see the module docstring); depth: the asked needle's, in [0, 1] (None:
        uniform), for a task with one value and one query."""
        check_depth(self.name, depth, self.uses_depth)
        check_split(split)
        keys = draw("word", split, self.keys, rng)
        values = draw(self.value_kind, split, self.keys * self.values, rng)
        lines = [(k, values[k * self.values + v]) for k in range(self.keys) for v in range(self.values)]
        asked = shuffled(rng, range(self.keys))[: self.queries]
        depths = [uniform(rng) for _ in lines]
        if depth is not None:
            depths[asked[0] * self.values] = depth
        needles = [self._needle(encode, keys[k], value) for k, value in lines]
        question = self._question(encode, [keys[k] for k in asked])
        slots = [value for k in asked for owner, value in lines if owner == k]
        answer = listing(encode, slots, SEPARATOR)
        room = room_for(self.name, length, *map(len, needles), len(question), len(answer))
        if self.haystack == "noise":
            text = haystacks.noise(encode, room)
        else:
            text = haystacks.book(haystack_ids, room, rng, self.name, encode)
        body, order = insert(text, list(zip(depths, needles)))
        if self.values > 1:  # every value of the one key, in the order they appear
            slots = [lines[i][1] for i in order]
            answer = listing(encode, slots, SEPARATOR)
        candidates = perm(len(lines), len(slots)) if len(lines) > 1 else value_space(self.value_kind)
        return finish(body, question, answer, listing_text(slots, SEPARATOR), candidates, length)
