"""dev-v2.0.reconstructed.json, the project's copy of the SQuAD 2.0 dev set, made again from the official
dev-v2.0.json.

The shared copy was rebuilt from the SQuAD explorer pages, which are generated from the official file: the
official `answer_start` for 16 articles and the first occurrence of the answer text in its context for the other
19 (the pages do not carry it), and no `plausible_answers` (squad_v2/SOURCE.md tells the whole story). The same
rules applied to the official file: its titles, contexts, ids, questions, answer texts and `is_impossible` flags
in the official key order, `answer_start` replaced by the first occurrence in the articles of `FIRST_OCCURRENCE`,
written by `json.dumps` with its default separators and the text unescaped (UTF-8).
"""

from __future__ import annotations

import json
from typing import Any

# the 19 articles whose `answer_start` is the first occurrence of the answer text in the rebuilt file
FIRST_OCCURRENCE = frozenset(
    {
        "Southern_California",
        "Sky_(United_Kingdom)",
        "Victoria_(Australia)",
        "Oxygen",
        "Amazon_rainforest",
        "Ctenophora",
        "Fresno,_California",
        "Black_Death",
        "Geology",
        "Pharmacy",
        "Civil_disobedience",
        "Construction",
        "Private_school",
        "Jacksonville,_Florida",
        "Economic_inequality",
        "University_of_Chicago",
        "Intergovernmental_Panel_on_Climate_Change",
        "Prime_number",
        "Rhine",
    }
)


def reconstructed_dev(official: bytes) -> bytes:
    """The bytes of dev-v2.0.reconstructed.json made from the bytes of the official dev-v2.0.json."""
    data = json.loads(official)
    articles = [
        {"title": a["title"], "paragraphs": [_paragraph(p, a["title"] in FIRST_OCCURRENCE) for p in a["paragraphs"]]}
        for a in data["data"]
    ]
    return json.dumps({"version": data["version"], "data": articles}, ensure_ascii=False).encode("utf-8")


def _paragraph(paragraph: dict[str, Any], first_occurrence: bool) -> dict[str, Any]:
    context = paragraph["context"]

    def answer(found: dict[str, Any]) -> dict[str, Any]:
        start = context.find(found["text"]) if first_occurrence else found["answer_start"]
        return {"text": found["text"], "answer_start": start}

    qas = [
        {
            "question": q["question"],
            "id": q["id"],
            "answers": [answer(a) for a in q["answers"]],
            "is_impossible": q["is_impossible"],
        }
        for q in paragraph["qas"]
    ]
    return {"qas": qas, "context": context}
