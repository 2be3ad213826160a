"""The share of padding when whole documents are packed into rows (`posformer.data.packing`, best-fit
decreasing), on the shared corpora's documents with bytes as tokens: WikiText-2's validation articles and
Tiny Shakespeare's speeches (blank-line separated).

    python examples/packing_padding.py
"""

import re

from posformer.data import shared
from posformer.data.packing import pack_documents

root = shared.default_data_dir()
wiki = (root / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
articles = [a for a in re.split(r"\n(?= = [^=].* = \n)", wiki) if a.strip()]
speeches = [s for s in (root / "tinyshakespeare" / "input.txt").read_text().split("\n\n") if s.strip()]
for name, docs in (("wikitext-2 valid articles", articles), ("tinyshakespeare speeches", speeches)):
    ids = [list(d.encode()) for d in docs]
    lengths = sorted(len(d) for d in ids)
    for seq_len in (128, 512, 2048):
        rows = pack_documents(ids, seq_len)
        print(
            f"{name}: {len(ids)} documents (median {lengths[len(lengths) // 2]} bytes), seq_len {seq_len}: "
            f"{len(rows.input_ids)} rows, padding {100 * rows.padding_share:.3f}%"
        )
