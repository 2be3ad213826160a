"""The papers' retrieval claims in `posformer extend`'s report: the passkey exact match of one row minus another's,
pooled over the depths at each passkey length, with a paired 95% bootstrap interval over the keys (every row reads
the same keys at the same cells, `passkey.passkey_grid`). Pooled over every depth, or over the depths whose key
lies more than train_len tokens before the question (depth d of a prompt of n tokens: about (1 - d) n back), where
a method must retrieve beyond the distances the source was trained on."""

from __future__ import annotations

from posformer.experiments.extrapolation.bootstrap import difference_interval
from posformer.experiments.tables import markdown_table

RETRIEVAL_COMPARISONS = [  # (what the difference tests, row a, row b): above 0 = a retrieves more often
    ("training-free, Self-Extend vs unchanged RoPE (Self-Extend paper: retrieves beyond L)", "self_extend", "source"),
    ("training-free, ReRoPE vs unchanged RoPE", "rerope", "source"),
    ("training-free, dual chunk attention vs unchanged RoPE (its paper: retrieves beyond L)", "dual_chunk", "source"),
    ("eval-time dynamic YaRN vs unchanged RoPE", "dynyarn", "source"),
    ("YaRN fine-tuned vs unchanged RoPE (YaRN paper: retrieves at the extended length)", "yarn+ft", "source"),
    ("after fine-tuning, YaRN vs PI", "yarn+ft", "pi+ft"),
    ("training-free, Self-Extend vs YaRN fine-tuned", "self_extend", "yarn+ft"),
    ("StreamingLLM vs unchanged RoPE (its paper: no retrieval past the window)", "streaming", "source"),
    ("DroPE vs unchanged RoPE (DroPE paper: retrieves past L without training past L)", "drope+ft", "source"),
    ("DroPE vs YaRN fine-tuned at the target length", "drope+ft", "yarn+ft"),
]


def hits_by_key(grid: dict, length: int, farther_than: int | None = None) -> list[list[int]] | None:
    """(keys, depths) 0/1 of one length of a passkey grid, over every depth or the depths d with (1 - d) length >
    farther_than; None where no such depth fits or the grid has no hits."""
    far = {d for d in grid[str(length)] if farther_than is None or (1 - float(d)) * length > farther_than}
    cells = [cell for depth, cell in grid[str(length)].items() if cell is not None and depth in far]
    if not cells or any("hits" not in cell for cell in cells):
        return None
    return [list(per_key) for per_key in zip(*(cell["hits"] for cell in cells))]


def difference_cell(a: list[list[int]] | None, b: list[list[int]] | None) -> str:
    """mean(a) - mean(b) [95% paired interval]; "n/a" without both, the difference alone for a single key."""
    if a is None or b is None:
        return "n/a"
    difference = sum(map(sum, a)) / sum(map(len, a)) - sum(map(sum, b)) / sum(map(len, b))
    if len(a) < 2:
        return f"{difference:+.2f}"
    low, high = difference_interval(a, b)
    return f"{difference:+.2f} [{low:+.2f}, {high:+.2f}]"


def retrieval_claims_table(results: dict, beyond_train_len: bool = False) -> str | None:
    """Claims x passkey lengths: passkey exact match of a minus b, over every depth or (beyond_train_len) over the
    depths whose key lies more than train_len tokens back; None when no claim has both rows."""
    rows = {name: r for name, r in results["rows"].items() if "passkey" in r}
    lengths = results["config"]["passkey_lengths"]
    farther = results["config"]["train_len"] if beyond_train_len else None

    def cell(a: str, b: str, n: int) -> str:
        return difference_cell(hits_by_key(rows[a]["passkey"], n, farther), hits_by_key(rows[b]["passkey"], n, farther))

    body = [[claim, f"{a} - {b}"] + [cell(a, b, n) for n in lengths] for claim, a, b in RETRIEVAL_COMPARISONS
            if a in rows and b in rows]  # fmt: skip
    return markdown_table(["claim", "difference"] + [str(n) for n in lengths], body) if body else None
