"""The extrapolation benchmark's report: markdown tables (perplexity and ppl(kL)/ppl(L)); its figure: `figure`."""

from __future__ import annotations

from posformer.experiments.extrapolation import retrieval_report
from posformer.experiments.extrapolation.bootstrap import ppl_interval, ratio_interval
from posformer.experiments.tables import markdown_table


def _cell(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _header(lengths: list[int], train_len: int) -> list[str]:
    return ["row"] + [f"{n} ({n / train_len:g}L)" for n in lengths]


def ppl_table(results: dict, eval_set: str) -> str:
    """Rows = encodings (and RoPE scalings), columns = eval lengths: perplexity on `eval_set`."""
    cfg = results["config"]
    lengths = cfg["eval_lens"]
    body = [
        [row] + [_cell(r["ppl"][eval_set].get(str(n))) for n in lengths]
        for row, r in results["rows"].items()
        if eval_set in r["ppl"]
    ]
    return markdown_table(_header(lengths, cfg["train_len"]), body)


def _blocks(record: dict, eval_set: str, length: int) -> tuple[list[float], list[int]] | None:
    found = record.get("blocks", {}).get(eval_set, {}).get(str(length))
    return None if found is None or len(found["nll"]) < 2 else (found["nll"], found["count"])


def ratio_interval_of(record: dict, eval_set: str, length: int, train_len: int) -> tuple[float, float] | None:
    """The 95% paired-bootstrap interval of ppl(length) / ppl(train_len), or None without per-block losses."""
    a, b = _blocks(record, eval_set, length), _blocks(record, eval_set, train_len)
    return None if a is None or b is None else ratio_interval(a, b)


def ppl_interval_of(record: dict, eval_set: str, length: int) -> tuple[float, float] | None:
    """The 95% bootstrap interval of the perplexity at `length`, or None without per-block losses."""
    found = _blocks(record, eval_set, length)
    return None if found is None else ppl_interval(*found)


def ratio_table(results: dict, eval_set: str) -> str:
    """ppl(eval_len) / ppl(train_len) [95% interval]: 1.00 = no degradation past the training length."""
    cfg = results["config"]
    lengths, train_len = cfg["eval_lens"], cfg["train_len"]
    body = []
    for row, r in results["rows"].items():
        ppl = r["ppl"].get(eval_set)
        if ppl is None:
            continue
        base = ppl.get(str(train_len))
        cells = [row]
        for n in lengths:
            if base is None or ppl.get(str(n)) is None:
                cells.append(_cell(None))
                continue
            interval = ratio_interval_of(r, eval_set, n, train_len) if n != train_len else None
            cells.append(
                _cell(ppl[str(n)] / base) + ("" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]")
            )
        body.append(cells)
    return markdown_table(_header(lengths, train_len), body)


def eval_sets(results: dict) -> list[str]:
    seen: list[str] = []
    for r in results["rows"].values():
        seen += [s for s in r["ppl"] if s not in seen]
    return seen


def markdown(results: dict) -> str:
    """The whole results.md: setup line, then per evaluation set its perplexity and ratio tables, then retrieval
    (rows scored on it: `retrieval_report`)."""
    cfg = results["config"]
    stride = f", stride {cfg['stride'] or cfg['train_len'] // 2}" if cfg["protocol"] == "sliding" else ""
    parts = [
        f"# Length extrapolation: train at L={cfg['train_len']}, evaluate up to {max(cfg['eval_lens'])}\n",
        f"Model: decoder, d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads, "
        f"vocab {cfg['vocab_size']}; {cfg['steps']} steps of {cfg['batch_size']} x {cfg['train_len']} tokens. "
        f"Protocol: {cfg['protocol']}{stride}. Corpus: {cfg['corpus']}"
        + (f" (held out: {', '.join(results['data']['held_out'])})" if results["data"].get("held_out") else "")
        + ". `n/a`: the encoding cannot represent that length.\n",
    ]
    for name in eval_sets(results):
        tokens = results["data"]["eval_sets"].get(name, {}).get("tokens")
        parts.append(f"## {name}: perplexity ({tokens:,} tokens per length)\n" if tokens else f"## {name}\n")
        parts.append(ppl_table(results, name) + "\n")
        unigram = results["data"].get("unigram_ppl", {}).get(name)
        if unigram is not None:
            parts.append(f"A unigram model (training-set token frequencies, no context) reads {unigram:.2f}.\n")
        parts.append(
            f"### {name}: ppl(kL) / ppl(L) [95% paired bootstrap interval over blocks of "
            f"{max(cfg['eval_lens'])} tokens]\n"
        )
        parts.append(ratio_table(results, name) + "\n")
    return "\n".join(parts + retrieval_report.markdown(results))
