"""The retrieval scoring of `posformer extrapolate --preset retrieval`: where a passkey's line lies for a reader of
the last L tokens (checked on positions found in the prompt's text, and on a reader that sees only its last L
tokens), the gate of a row that does not retrieve at L, the tables of one seed and of several, and every row of
the preset scored."""

from __future__ import annotations

import types

import pytest
import torch

from posformer.experiments.extrapolation import retrieval_report, retrieval_seed_report
from posformer.experiments.extrapolation.retrieval import RetrievalScorer
from posformer.experiments.extrapolation.retrieval_knobs import RetrievalKnobs
from posformer.experiments.extrapolation.settings import ExtrapolationSettings, model_config
from posformer.experiments.passkey import key_reach, passkey_prompt
from posformer.experiments.rows import seeded_model

KEY = "71432"
LINE = f" The pass key is {KEY}."
ANSWER = f" {KEY}"


def _bytes(text: str) -> list[int]:
    return list(text.encode())


@pytest.mark.parametrize("window", [48, 64, 100])
@pytest.mark.parametrize("length", [64, 128, 256, 512])
def test_the_reach_of_a_key_follows_its_line_found_in_the_text(length, window):
    """near: the line lies wholly within the prompt's last `window` bytes; far: it ends before the `window` bytes
    that end at the last byte of the question (the first query that predicts the answer); else straddles."""
    seen = set()
    for step in range(41):
        depth = step / 40
        prompt = passkey_prompt(_bytes, length, depth, KEY)
        text = bytes(prompt.ids.tolist()).decode()
        start = text.index(LINE)
        end = start + len(LINE)
        first_query = len(text) - len(ANSWER) - 1
        if start >= length - window:
            expected = "near"
        elif end - 1 < first_query - window + 1:
            expected = "far"
        else:
            expected = "straddles"
        assert (prompt.key_start, prompt.key_end) == (start, end)
        assert key_reach(prompt, window) == expected
        seen.add(expected)
    assert ("far" in seen) == (length - len(LINE) - len(ANSWER) >= window)  # at depth 0 the line can be far
    assert length > window or seen == {"near"}  # a prompt within the window: every key near


class LastTokensReader(torch.nn.Module):
    """A reader of its last `window` tokens that copies by content: at each position p it finds the latest j < p
    whose 8 tokens ending at j equal the 8 ending at p, all within positions p - window + 1 .. p, and predicts the
    token after j (token 0 when there is none). Every key it can see it finds; none it cannot."""

    CONTEXT = 8

    def __init__(self, window: int, vocab: int = 256) -> None:
        super().__init__()
        self.window, self.vocab = window, vocab
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # what `passkey.retrieval` asks for its device

    def _next(self, ids: torch.Tensor, p: int) -> int:
        k = self.CONTEXT
        low = max(0, p - self.window + 1)
        if p - low + 1 < k:
            return 0
        grams = ids[low : p + 1].unfold(0, k, 1)  # (p - low - k + 2, k): the 8-grams ending at low + k - 1 .. p
        same = (grams[:-1] == ids[p - k + 1 : p + 1]).all(-1).nonzero()
        return 0 if same.numel() == 0 else int(ids[low + k - 1 + int(same[-1]) + 1])

    def forward(self, ids: torch.Tensor, logits_to_keep: int = 0) -> types.SimpleNamespace:
        keep = logits_to_keep or ids.shape[1]
        logits = torch.zeros(ids.shape[0], keep, self.vocab)
        for b in range(ids.shape[0]):
            for i, p in enumerate(range(ids.shape[1] - keep, ids.shape[1])):
                logits[b, i, self._next(ids[b], p)] = 1.0
        return types.SimpleNamespace(logits=logits)


def _score(window: int, train_len: int = 64) -> dict:
    knobs = RetrievalKnobs(retrieval_trials=6, retrieval_tasks=[])
    lengths = [train_len, 2 * train_len, 4 * train_len, 8 * train_len]
    scorer = RetrievalScorer(knobs, _bytes, None, train_len, lengths, seed=0, batch_tokens=4096, progress=False)
    return scorer.score(lambda n: LastTokensReader(window), "reader")


def test_a_reader_of_its_last_l_tokens_finds_the_keys_within_them_and_none_further_back():
    exact = retrieval_report.passkey_exact
    within_l, unbounded = _score(window=64)["passkey"], _score(window=10**6)["passkey"]
    assert exact(within_l["64"]) == 1.0 and exact(within_l["64"], "far") is None  # at L every key is within L
    for n in ("128", "256", "512"):
        assert exact(within_l[n], "near") == 1.0 and exact(within_l[n], "far") == 0.0
        assert exact(unbounded[n], "near") == 1.0 and exact(unbounded[n], "far") == 1.0
    reach = {d: set(cell["reach"]) for d, cell in within_l["512"].items()}
    assert reach["0.0"] == {"far"} and reach["1.0"] == {"near"}


def _cell(hits: list[int], reach: list[str]) -> dict:
    return {"exact": sum(hits) / len(hits), "digits": 0.0, "hits": hits, "reach": reach}


def _row(at_l: list[int], near: list[int], far: list[int], ppl: dict[str, float], suite: float) -> dict:
    """A row's record at L = 64 and 128: at 128 depth 1.0 holds the near keys and depth 0.0 the far ones."""
    passkey = {
        "64": {"0.0": _cell(at_l, ["near"] * len(at_l)), "1.0": _cell(at_l, ["near"] * len(at_l))},
        "128": {"0.0": _cell(far, ["far"] * len(far)), "1.0": _cell(near, ["near"] * len(near))},
    }
    noise = {n: {"0.0": {"exact": suite, "tokens": 0.0, "chance": 0.0}} for n in ("64", "128")}
    return {"ppl": {"books": ppl}, "retrieval": {"passkey": passkey, "suite": {"single_noise": noise}}}


CONFIG = {"train_len": 64, "eval_lens": [64, 128], "retrieval_tasks": ["single_noise"], "retrieval_gate": 0.9,
          "retrieval_trials": 4, "retrieval_suite_trials": 1, "retrieval_depths": [0.0, 1.0]}  # fmt: skip


def _run(far_a: list[int], far_c: list[int]) -> dict:
    rows = {
        "a": _row([1, 1, 1, 1], [1, 1, 1, 0], far_a, {"64": 10.0, "128": 11.0}, 0.5),
        "b": _row([1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], {"64": 12.0, "128": 30.0}, 0.25),
        "c": _row([1, 1, 1, 1], [1, 1, 1, 1], far_c, {"64": 9.0, "128": 9.5}, 0.0),
    }
    return {"config": CONFIG, "data": {"retrieval_haystack": {"eval_set": "books"}}, "rows": rows}


def test_one_seed_table_puts_the_measures_side_by_side_and_gates_rows_that_do_not_retrieve_at_l():
    text = "\n".join(retrieval_report.markdown(_run([1, 0, 0, 0], [0, 0, 0, 0])))
    assert (
        "| row | length | passkey: every depth | within the last 64 | further back | single_noise | ppl (books) |"
        in text
    )
    assert "| a | 64 | 1.00 | 1.00 | - | 0.50 | 10.00 |" in text
    assert "| a | 128 | 0.50 | 0.75 | 0.25 | 0.50 | 11.00 |" in text
    assert "| b | 64 | 0.50 | 0.50 | - | 0.25 | 12.00 |" in text  # at L: shown as it is
    assert "| b | 128 | (0.62) | (0.25) | (1.00) | (0.25) | 30.00 |" in text  # past L: does not count
    assert (
        "Retrieves at L = 64 (passkey exact match at least 0.9 over every depth): a 1.00, c 1.00. Does not: b 0.50"
        in text
    )
    assert "| 128 | 0.25 f | 0.75 n |" in text  # a's depth grid, where each depth's keys lie


def test_over_seeds_a_row_counts_only_if_it_retrieves_at_l_in_every_seed_and_pairs_compare_the_far_keys():
    runs = [_run([1, 1, 1, 0], [0, 0, 0, 0]), _run([1, 1, 1, 1], [1, 1, 0, 0]), _run([1, 1, 1, 0], [0, 0, 0, 0])]
    runs[2]["rows"]["c"]["retrieval"]["passkey"]["64"]["0.0"] = _cell([1, 0, 0, 0], ["near"] * 4)  # c fails in seed 2
    record = {"config": CONFIG, "per_seed": {str(s): run for s, run in enumerate(runs)}}
    text = "\n".join(retrieval_seed_report.markdown(record))
    assert "a in 3 of 3 (at L: 1.00)" in text and "b in 0 of 3" in text and "c in 2 of 3" in text
    assert "| c | 128 | (" in text and "| a | 128 | 0.79 [" in text  # c's cells past L do not count, a's do
    assert retrieval_seed_report.pair_table(record, 128) is None  # one row counts: nothing to pair
    runs[2]["rows"]["c"]["retrieval"]["passkey"]["64"]["0.0"] = _cell([1, 1, 1, 1], ["near"] * 4)
    pairs = retrieval_seed_report.pair_table(record, 128)
    assert [line.split(" | ")[0] for line in pairs.splitlines()[2:]] == ["| a - c"]  # b does not count
    far_a, far_c = [0.75, 1.0, 0.75], [0.0, 0.5, 0.0]
    difference = sum(x - y for x, y in zip(far_a, far_c)) / 3
    assert f"| a - c | +{difference:.2f} [" in pairs and "a better, in 3 of 3 seeds" in pairs


@pytest.mark.parametrize("position", ExtrapolationSettings.preset("retrieval").positions)
def test_every_row_of_the_preset_is_scored_at_every_length_and_depth(position):
    settings = ExtrapolationSettings.preset("retrieval", positions=[position], d_model=16, layers=1, heads=2)
    model = seeded_model(model_config(settings, position, 256), 0)
    knobs = RetrievalKnobs(retrieval_trials=2, retrieval_suite_trials=1, retrieval_tasks=["single_noise"])
    scorer = RetrievalScorer(knobs, _bytes, None, 64, [64, 128, 256], seed=0, batch_tokens=4096, progress=False)
    scored = scorer.score(lambda n: model, position)
    for n in ("64", "128", "256"):
        assert set(scored["passkey"][n]) == {"0.0", "0.25", "0.5", "0.75", "1.0"}
        assert all(len(cell["hits"]) == len(cell["reach"]) == 2 for cell in scored["passkey"][n].values())
        assert set(scored["suite"]["single_noise"][n]) == set(scored["passkey"][n])
