"""Training and evaluation prompts of the long-context suite share nothing they could be learnt from: no key,
value, variable name or listed word, and no book; and `SuiteMix` mixes training prompts into LM batches
deterministically, resumably."""

from __future__ import annotations

import re

import pytest
import torch

from longeval_text import book_bytes, decode, encode
from posformer.data.shared import default_data_dir
from posformer.experiments.corpus import HELD_OUT_BOOKS
from posformer.experiments.longeval.grid import trial_generator
from posformer.experiments.longeval.haystacks import book_files, book_ids
from posformer.experiments.longeval.items import WORDS, pool
from posformer.experiments.longeval.mix import SuiteMix
from posformer.experiments.longeval.needles import MANY, NEEDLE
from posformer.experiments.longeval.tasks import TASKS
from posformer.experiments.longeval.variables import QUESTION, STATEMENT
from posformer.experiments.longeval.word_lists import COMMON_QUESTION, FREQUENT_QUESTION, HEADER
from posformer.experiments.passkey import FILLER
from posformer.train.batches import WindowBatches

BOOK = book_bytes()
FAMILIES = {"needles": " The key", "vt": " VAR ", "cwe": " The common words are", "fwe": " The top words by count are"}
ITEMS = [
    r" The key of ([a-z]+) is ([0-9a-z-]+)\.",  # needles: key and value
    r" The keys? of ([a-z]+(?: and [a-z]+)*) (?:is|are)$",  # the keys asked
    r" VAR ([A-Z]{2}) = ([A-Z]{2}|\d{5})\.",  # statements: variable and value
    r" The VARs equal to (\d{5}) are$",
]


def items_of(prompt) -> set[str]:
    """The keys, values, variables and listed words of a prompt, read from its text, answer included."""
    text = decode(prompt.ids)
    question = decode(prompt.ids[: prompt.answer_start])
    found = set(prompt.answer.replace(",", " ").split())
    for pattern in ITEMS:
        for match in re.finditer(pattern, question):
            found |= {item for group in match.groups() for item in group.split(" and ")}
    if " Words:" in text:
        found |= set(question[question.index(" Words:") + 7 :].split()) - {"The", "common", "top", "by", "count"}
        found -= {"words", "are"}
    return found


@pytest.mark.parametrize("task", list(TASKS))
def test_train_and_eval_prompts_share_no_item(task):
    """Many prompts of each split at L=128-like lengths: their items are disjoint, so are the prompts."""
    length = max(TASKS[task].minimum_length(encode), 300)
    made = {split: [] for split in ("train", "eval")}
    for split in made:
        for trial in range(60):
            depth = 0.5 if TASKS[task].uses_depth else None
            made[split].append(TASKS[task].prompt(encode, length, depth, trial_generator(0, task, trial), split, BOOK))
    train_items = set().union(*map(items_of, made["train"]))
    eval_items = set().union(*map(items_of, made["eval"]))
    assert train_items and eval_items and not train_items & eval_items
    assert not {decode(p.ids) for p in made["train"]} & {decode(p.ids) for p in made["eval"]}


def test_the_item_pools_split_every_kind_and_keep_a_quarter_for_evaluation():
    for kind in ("word", "number", "name"):
        train, held = set(pool(kind, "train")), set(pool(kind, "eval"))
        assert not train & held and 0.15 < len(held) / len(train | held) < 0.35
    numbers = pool("number", "eval")
    assert {n[0] for n in numbers} == set("123456789") and {n[-1] for n in numbers} == set("0123456789")


def test_no_word_of_the_pools_is_a_word_of_the_filler_or_of_a_template():
    fixed = " ".join([FILLER, *NEEDLE, *MANY, *STATEMENT, *QUESTION, HEADER, COMMON_QUESTION, FREQUENT_QUESTION])
    assert not set(WORDS) & set(re.findall(r"[a-z]+", fixed.lower()))


def test_train_and_eval_haystacks_come_from_different_books():
    if not (default_data_dir() / "gutenberg").is_dir():
        pytest.skip(f"no Gutenberg books in {default_data_dir()}")
    train, held = book_files("train"), book_files("eval")
    assert sorted(p.name for p in held) == sorted(HELD_OUT_BOOKS)
    assert train and not {p.name for p in train} & {p.name for p in held}


def test_book_ids_read_the_split_books_between_their_markers(tmp_path):
    folder = tmp_path / "gutenberg"
    folder.mkdir()
    for name in [*HELD_OUT_BOOKS, "other.txt"]:
        body = f"Front matter of {name}. " * 6 + "\n\n" + (f"A sentence of {name}. " * 10 + "\n\n") * 5
        (folder / name).write_text(f"header\n*** START OF THE BOOK ***\n{body}\n*** END OF THE BOOK ***\nlicence\n")
    held = decode(book_ids(encode, "eval", tmp_path))
    assert all(f"of {name}." in held for name in HELD_OUT_BOOKS) and "other.txt" not in held
    assert "START" not in held and "licence" not in held and "Front matter" not in held
    assert "other.txt" in decode(book_ids(encode, "train", tmp_path, max_chars=200))
    with pytest.raises(FileNotFoundError, match="give --data-dir"):
        book_ids(encode, "eval", tmp_path / "nowhere")


def test_suite_mix_replaces_the_asked_fraction_with_training_prompts_and_resumes_identically():
    ids = torch.randint(0, 256, (20_000,), generator=torch.Generator().manual_seed(0))
    plain = WindowBatches(ids, 320, seed=3).next_batch(16)["input_ids"]
    mix = SuiteMix(WindowBatches(ids, 320, seed=3), encode, 320, 1.0, seed=3, haystack_ids=BOOK)
    rows = torch.cat([mix.next_batch(16)["input_ids"] for _ in range(3)])
    held = set(pool("word", "eval")) | set(pool("number", "eval")) | set(pool("name", "eval"))
    families = set()
    for row in rows:
        text = decode(row)
        families |= {family for family, mark in FAMILIES.items() if mark in text}
        assert not set(re.findall(r"[A-Za-z0-9]+", text)) & (held - set(decode(BOOK).split()))  # no eval item
    assert families == set(FAMILIES)  # 48 rows hold every family
    assert not torch.equal(plain, rows[:16])
    none = SuiteMix(WindowBatches(ids, 320, seed=3), encode, 320, 0.0, seed=3, tasks=["vt"]).next_batch(16)
    assert torch.equal(plain, none["input_ids"]) and torch.equal(none["labels"], none["input_ids"])
    first = SuiteMix(WindowBatches(ids, 320, seed=3), encode, 320, 0.5, seed=3, tasks=["vt", "cwe"])
    first.next_batch(8)
    resumed = SuiteMix(WindowBatches(ids, 320, seed=3), encode, 320, 0.5, seed=3, tasks=["vt", "cwe"])
    resumed.load_state_dict(first.state_dict())
    assert torch.equal(first.next_batch(8)["input_ids"], resumed.next_batch(8)["input_ids"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seq_len=64, tasks=["vt"]), "task 'vt' needs prompts of at least"),
        (dict(seq_len=320, tasks=["multikey"]), "task 'multikey' hides its needles in book text"),
        (dict(seq_len=320, tasks=["nope"]), "unknown task 'nope'"),
        (dict(seq_len=320, tasks=["vt"], fraction=1.5), "fraction=1.5 is invalid: expected a number in [0, 1]"),
    ],
)
def test_suite_mix_refuses_what_it_cannot_draw(kwargs, message):
    ids = torch.randint(0, 256, (5_000,), generator=torch.Generator().manual_seed(0))
    settings = {"fraction": 0.5, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        SuiteMix(WindowBatches(ids, settings["seq_len"], seed=0), encode, seed=0, **settings)
