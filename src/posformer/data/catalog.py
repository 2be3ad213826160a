"""The datasets of the shared data folder that `posformer data fetch` gets, by name: each file's source, size and
sha256, as the SOURCE.md of the shared copy (../shared/data/NAME/SOURCE.md) records them."""

from __future__ import annotations

from posformer.data.gutenberg_books import BOOKS
from posformer.data.sources import Dataset, Derived, Download
from posformer.data.squad_rebuild import reconstructed_dev
from posformer.utils.validation import fail

PYTORCH_EXAMPLES = "pytorch/examples"
PYTORCH_EXAMPLES_COMMIT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"
WIKITEXT = "word_language_model/data/wikitext-2"
SQUAD_SITE = "https://rajpurkar.github.io/SQuAD-explorer/dataset"

GUTENBERG = Dataset(
    name="gutenberg",
    title="Project Gutenberg English books (a small PG-19-like corpus)",
    summary="25 complete public-domain books as plain text, about 6 M words, each a byte-for-byte copy of a git blob "
    "from a GitHub repository that commits Project Gutenberg's own .txt release.",
    license="public domain in the USA; each file keeps the Project Gutenberg header and footer, whose license covers "
    "the Project Gutenberg trademark and redistribution with them",
    read_by="`posformer extrapolate --preset cpu|bytes|gpu` and `posformer extend` (training and held-out books), "
    "`posformer longeval` (the book haystacks)",
    downloads=BOOKS,
)
WIKITEXT_2 = Dataset(
    name="wikitext-2",
    title="WikiText-2 (tokenized, wikitext-2-v1): validation and test",
    summary="The tokenized WikiText-2 validation and test splits (`<unk>`, split punctuation, `@-@`), as "
    "pytorch/examples commits them.",
    license='CC BY-SA 3.0 (Merity, Xiong, Bradbury & Socher 2016, "Pointer Sentinel Mixture Models")',
    read_by="`posformer extrapolate --preset cpu|bytes|gpu` and `posformer extend` (test.txt, a second evaluation set)",
    downloads=(
        Download.from_github(
            "valid.txt",
            PYTORCH_EXAMPLES,
            PYTORCH_EXAMPLES_COMMIT,
            f"{WIKITEXT}/valid.txt",
            1_121_681,
            "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
        ),
        Download.from_github(
            "test.txt",
            PYTORCH_EXAMPLES,
            PYTORCH_EXAMPLES_COMMIT,
            f"{WIKITEXT}/test.txt",
            1_256_449,
            "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        ),
    ),
    notes=("train.txt (10.8 MB) is not fetched: the shared copy lacks it too, and no preset reads it.",),
)
SQUAD_V2 = Dataset(
    name="squad_v2",
    title="SQuAD 2.0 dev set",
    summary="The SQuAD 2.0 dev set: 35 articles, 11,873 questions (5,928 answerable, 5,945 unanswerable). The "
    "official dev-v2.0.json is downloaded and dev-v2.0.reconstructed.json, the copy the project reads, is made "
    "from it.",
    license='CC BY-SA 4.0 (Rajpurkar, Jia & Liang 2018, "Know What You Don\'t Know: Unanswerable Questions for SQuAD")',
    read_by="`posformer bench --qa` (its default --data; the shipped sample when it is missing) and the "
    "`posformer qa` runs of docs/qa.md (--train-file, --eval-file)",
    downloads=(
        Download(
            "dev-v2.0.json",
            f"{SQUAD_SITE}/dev-v2.0.json",
            4_370_528,
            "80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8",
            "the official SQuAD 2.0 site (github.com/rajpurkar/SQuAD-explorer `dataset/dev-v2.0.json`)",
        ),
    ),
    derived=(
        Derived(
            "dev-v2.0.reconstructed.json",
            "dev-v2.0.json",
            reconstructed_dev,
            3_885_000,
            "89fddee988d1cb62a85d08f21c3e23117d5de8d43025f3445f33635d5adb3150",
            "no plausible_answers, and answer_start the first occurrence of the answer text in 19 of the 35 "
            "articles (posformer.data.squad_rebuild)",
        ),
    ),
    notes=(
        "The shared dev-v2.0.reconstructed.json was rebuilt from the SQuAD explorer pages and a CS224n copy, because "
        "the official file could not be reached; that rebuild is not repeated. The file is made from the official "
        "one by the same rules and checked against the shared copy's sha256: should they differ, the fetch stops "
        "with an error and leaves the official dev-v2.0.json, which `posformer qa` and `bench --qa` read as well.",
        "train-v2.0.json (42 MB) is not fetched: no preset reads it.",
    ),
)
TINYSHAKESPEARE = Dataset(
    name="tinyshakespeare",
    title="Tiny Shakespeare (char-rnn)",
    summary="A subset of the works of Shakespeare: 40,000 lines of ASCII text, from karpathy/char-rnn.",
    license="public domain text; char-rnn states no separate data license",
    read_by="no preset: `posformer train` and `posformer extrapolate --preset quick` read its first 300,000 bytes, "
    "shipped with the package",
    downloads=(
        Download.from_github(
            "input.txt",
            "karpathy/char-rnn",
            "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e",
            "data/tinyshakespeare/input.txt",
            1_115_394,
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        ),
    ),
)
DATASETS: dict[str, Dataset] = {d.name: d for d in (GUTENBERG, WIKITEXT_2, SQUAD_V2, TINYSHAKESPEARE)}


def dataset(name: str) -> Dataset:
    """The dataset called `name`; a ValueError listing the names otherwise."""
    if name not in DATASETS:
        fail("dataset", name, f"one of {', '.join(DATASETS)}")
    return DATASETS[name]
