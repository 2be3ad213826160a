"""Aggregation over a list of words (RULER's cwe and fwe, Hsieh et al. 2024): which words occur most often?

    cwe:  The grass is green. ... Words: lake fire owl lake mill ... The common words are| owl lake fire
    fwe:  ... Words: owl lake owl owl fire ... The top words by count are| owl lake fire

cwe: 3 common words and as many rare ones as the length holds, added in rounds (each round: every common word
3 times, then each rare word once, until the next word no longer fits), then shuffled: a common word occurs 3r
times, a rare one r or fewer. The answer lists the common words in the order they first appear. RULER asks
10 common words (30 against 3 occurrences); 3 fit 128 tokens.

fwe: words ranked at random, the word of rank k occurring floor(M / k^2) times (Zipf's law with RULER's exponent
2) for the largest M whose list fits, then shuffled. M >= 18 makes the top three counts strictly decreasing and
above every other count. The answer lists the top three, most frequent first. RULER codes its words as random
letter strings; ours are the split's nouns.

Both pad the tokens a whole word cannot fill with the noise filler before " Words:".
"""

from __future__ import annotations

from dataclasses import dataclass
from math import perm

import torch
from torch import Tensor

from posformer.experiments.longeval import haystacks
from posformer.experiments.longeval.draws import shuffled
from posformer.experiments.longeval.items import Encode, check_split, max_tokens, pool
from posformer.experiments.longeval.prompt import (
    SuitePrompt,
    check_depth,
    finish,
    listing,
    listing_text,
    room_for,
    too_short,
)

HEADER = " Words:"
COMMON_QUESTION = " The common words are"
FREQUENT_QUESTION = " The top words by count are"
ANSWERED = 3  # words in the answer of either task


def _finish(
    encode: Encode,
    items: list[str],
    room: int,
    used: int,
    question: str,
    answer_words: list[str],
    candidates: int,
    length: int,
) -> SuitePrompt:
    """The noise pad of room - used tokens, the header, the listed `items`, the question and the answer."""
    body = haystacks.noise(encode, room - used).ids + encode(HEADER) + listing(encode, items)
    answer = listing(encode, answer_words)
    return finish(body, encode(question), answer, listing_text(answer_words), candidates, length)


@dataclass(frozen=True)
class CommonWords:
    name: str = "cwe"
    summary: str = "3 common words (3r occurrences) among rare ones (r at most), in order of first appearance"
    repeats: int = 3
    rare_minimum: int = 3
    haystack: str = "none"
    uses_depth: bool = False

    def minimum_length(self, encode: Encode) -> int:
        """The header, question and answer, and the first round's common words and `rare_minimum` rare words, every
        word the longest."""
        word = max_tokens("word", encode)
        fixed = len(encode(HEADER)) + len(encode(COMMON_QUESTION)) + ANSWERED * word
        return fixed + (ANSWERED * self.repeats + self.rare_minimum) * word

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
        words = shuffled(rng, pool("word", split))
        common, rare = words[:ANSWERED], words[ANSWERED:]
        tokens = {w: len(encode(" " + w)) for w in words}
        fixed = (len(encode(HEADER)), len(encode(COMMON_QUESTION)), sum(tokens[w] for w in common))
        room = room_for(self.name, length, *fixed)
        round_cost = self.repeats * sum(tokens[w] for w in common)
        items: list[str] = []
        used = placed = 0
        while True:
            if placed % len(rare) == 0:  # a round starts with the common words
                if used + round_cost > room:
                    break
                items += common * self.repeats
                used += round_cost
            word = rare[placed % len(rare)]
            if used + tokens[word] > room:
                break
            items.append(word)
            used, placed = used + tokens[word], placed + 1
        if placed < self.rare_minimum:
            raise too_short(self.name, length, self.minimum_length(encode))
        items = shuffled(rng, items)
        in_order = sorted(common, key=items.index)
        distinct = ANSWERED + min(placed, len(rare))
        return _finish(encode, items, room, used, COMMON_QUESTION, in_order, perm(distinct, ANSWERED), length)


def zipf_counts(scale: int, words: int, exponent: int = 2) -> list[int]:
    """The occurrences of the words of rank 1 .. `words`: floor(scale / k^exponent), zeros dropped."""
    counts = [scale // k**exponent for k in range(1, words + 1)]
    return [c for c in counts if c > 0]


@dataclass(frozen=True)
class FrequentWords:
    name: str = "fwe"
    summary: str = "words occurring floor(M / rank^2) times; the top 3, most frequent first"
    exponent: int = 2
    min_scale: int = 18  # the smallest M whose top counts are strictly decreasing: 18, 4, 2, 1
    haystack: str = "none"
    uses_depth: bool = False

    def minimum_length(self, encode: Encode) -> int:
        """The header, question and answer, and the list at the smallest M, every word the longest."""
        word = max_tokens("word", encode)
        fixed = len(encode(HEADER)) + len(encode(FREQUENT_QUESTION)) + ANSWERED * word
        return fixed + sum(zipf_counts(self.min_scale, len(pool("word", "eval")), self.exponent)) * word

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
        words = shuffled(rng, pool("word", split))
        tokens = [len(encode(" " + w)) for w in words]
        room = room_for(self.name, length, len(encode(HEADER)), len(encode(FREQUENT_QUESTION)), sum(tokens[:ANSWERED]))

        def cost(scale: int) -> int:
            return sum(c * t for c, t in zip(zipf_counts(scale, len(words), self.exponent), tokens))

        if cost(self.min_scale) > room:
            raise too_short(self.name, length, length - room + cost(self.min_scale))
        low, high = self.min_scale, max(self.min_scale, room)  # cost(low) fits; find the largest scale that does
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if cost(mid) <= room else (low, mid - 1)
        counts = zipf_counts(low, len(words), self.exponent)
        items = shuffled(rng, [w for w, c in zip(words, counts) for _ in range(c)])
        candidates = perm(len(counts), ANSWERED)
        return _finish(encode, items, room, cost(low), FREQUENT_QUESTION, words[:ANSWERED], candidates, length)
