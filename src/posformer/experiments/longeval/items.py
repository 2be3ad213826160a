"""The items prompts are made of, and the train / eval split that keeps evaluation prompts out of training.

| kind | example | pool |
|---|---|---|
| word | `lake` | `WORDS`, 391 concrete English nouns (keys, word values, the words of the word lists) |
| number | `41825` | the 5-digit numbers, 10000 .. 99999 |
| uuid | `3fa9-c2e1` | 8 hex digits in two groups of four (RULER's uuids are 32: too many tokens for our models) |
| name | `QX` | two capital letters (the variables of variable tracking) |

An item belongs to one split by a hash of its text: "eval" when crc32(item) % 4 == 0, else "train". Every
generator draws the items of a prompt from its split's pool alone, so no item of an evaluation prompt (no key,
value, variable or listed word) ever occurs in a training prompt; the hash spreads both splits over every digit
and letter, so neither split has a telltale first digit.
"""

from __future__ import annotations

import itertools
import string
import zlib
from collections.abc import Callable
from functools import lru_cache

import torch

from posformer.experiments.longeval.draws import distinct
from posformer.utils.validation import check_choice

Encode = Callable[[str], list[int]]
KINDS = ("word", "number", "uuid", "name")
SPLITS = ("train", "eval")
EVAL_SHARE = 4  # one item in EVAL_SHARE (by hash) is an evaluation item

WORDS = tuple(
    """
    apple arm army arrow aunt axe baby bag ball band bank barn basket bath beach bean bear beard bed bee beef
    bell belt bench berry bird blade blanket boat body bone book boot bottle bow bowl box boy brain branch bread
    brick bride bridge brother brush bucket bull butter button cabin cage cake camel camp candle cannon cap captain
    card carpet cart castle cat cattle cave chain chair chalk cheek cheese chest chicken child chin church circle
    city clerk cliff cloak clock cloth cloud coach coal coast coat coffee coin collar colonel corn cottage cotton
    county cousin cow crab crown cup curtain cushion dancer daughter deer desk diamond dinner doctor dog doll donkey
    door dragon drawer dress drum duck duke eagle ear earth egg elbow engine eye face farm feast feather fence field
    finger fire fish flag flame flour flower fly fog foot forest fork fountain fox frog fruit garden gate ghost
    giant gift girl glass glove goat gold goose gown grain grape guard guest gun hair hall hammer hand harbor hat
    hawk head heart hedge helmet hen hill horn horse hotel house hut ice inn iron island jacket jail jar jewel judge
    kettle king kitchen knee knife knight ladder lady lake lamb lamp lane lantern lawn lawyer leaf leg lemon letter
    library lily lion lip lock lord mare market mask meadow meat merchant milk mill mirror monk monkey moon mother
    mountain mouse mouth mule nail needle nest net nose nurse oak ocean officer orange oven owl ox palace pan paper
    parrot pearl pen pencil pepper piano picture pig pillow pin pipe pistol plate plum pocket poet pond potato
    priest prince prison pump queen rabbit rail rat raven ribbon rice ring river road robe rock roof room rope rose
    sailor salt sand school scissors sea seal servant sheep shelf shell ship shirt shoe shop shoulder silk silver
    singer sister skirt slipper snake soap soldier son soup spade spear spider spoon spring stable staff stair star
    steam stick stone stool storm stove straw stream street sugar suit swan sword table tail tailor tea teacher tent
    thread throne thumb tiger timber toe tomb tongue tooth torch tower town toy train tray tree trunk tub tulip
    turkey uncle valley vase veil village vine violin wagon waiter wall wallet wand watch water wheel whip widow wig
    window wine wing wire wolf wood wool worm yard
    """.split()
)


def split_of(item: str) -> str:
    """The split `item` belongs to: "eval" or "train"."""
    return "eval" if zlib.crc32(item.encode()) % EVAL_SHARE == 0 else "train"


def check_split(split: str) -> None:
    check_choice("longeval: split", split, SPLITS)


@lru_cache(maxsize=None)
def pool(kind: str, split: str) -> tuple[str, ...]:
    """Every item of `kind` in `split` (uuids have no enumerated pool: `draw` makes them)."""
    check_choice("longeval: item kind", kind, ("word", "number", "name"))
    check_split(split)
    if kind == "word":
        items = WORDS
    elif kind == "number":
        items = tuple(str(n) for n in range(10_000, 100_000))
    else:
        items = tuple("".join(pair) for pair in itertools.product(string.ascii_uppercase, repeat=2))
    return tuple(item for item in items if split_of(item) == split)


def _uuid(g: torch.Generator, split: str) -> str:
    while True:
        code = f"{int(torch.randint(2**32, (), generator=g)):08x}"
        item = f"{code[:4]}-{code[4:]}"
        if split_of(item) == split:
            return item


def draw(kind: str, split: str, count: int, g: torch.Generator) -> list[str]:
    """`count` distinct items of `kind` from `split`'s pool."""
    check_choice("longeval: item kind", kind, KINDS)
    check_split(split)
    if kind != "uuid":
        return distinct(g, pool(kind, split), count)
    found: dict[str, None] = {}
    while len(found) < count:
        found.setdefault(_uuid(g, split), None)
    return list(found)


def value_space(kind: str) -> int:
    """How many items of `kind` there are over both splits: a blind guess of one is right 1 time in this many."""
    check_choice("longeval: item kind", kind, KINDS)
    return 16**8 if kind == "uuid" else len(pool(kind, "train")) + len(pool(kind, "eval"))


def max_tokens(kind: str, encode: Encode) -> int:
    """The most tokens " ITEM" of `kind` takes under `encode`, over both splits: the exact maximum over the pools of
    words and names, and for numbers and uuids their length in bytes (ASCII text takes at most a token a byte under
    byte-level BPE, SentencePiece with its digits split, or characters)."""
    check_choice("longeval: item kind", kind, KINDS)
    if kind == "number":
        return len(" 99999")
    if kind == "uuid":
        return len(" 0000-0000")
    return max(len(encode(" " + item)) for split in SPLITS for item in pool(kind, split))
