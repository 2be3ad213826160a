"""LongRoPE's search (Ding et al. 2024, "LongRoPE", section 3.2): one rescale factor per rotated pair.

RoPE pair i rotates with theta_i / lambda_i past the trained length. The factors are found by an evolutionary
search that minimises the perplexity of the model at the target length on training text:
  - the first generation holds the factors of PI (lambda_i = s), NTK and YaRN (lambda_i = theta_i / theta'_i of
    those methods), and mutations of them;
  - each generation keeps the `parents` best candidates, and fills the population with their mutations (each
    factor times exp(sigma * N(0, 1)) with probability 0.3) and crossovers (each factor from either parent);
  - every candidate is kept in the search space of the paper: 1 <= lambda_i <= 1.25 s, non-decreasing in i
    (a lower frequency is interpolated at least as much as a higher one), which the running maximum enforces.
The paper also keeps the first n^ pairs unscaled and searches them; here the mutations may reach 1 by themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from posformer.experiments.extension.methods import extended_params, longrope_scaling, with_params
from posformer.experiments.extrapolation.evaluation import perplexity
from posformer.model import Transformer
from posformer.positions import rope_inv_freq

MUTATION_RATE = 0.3


@dataclass
class SearchResult:
    """The best factors (r/2,), their perplexity, the best perplexity after each generation, and the perplexity of
    each seed (in the order given)."""

    factors: list[float]
    ppl: float
    history: list[float] = field(default_factory=list)
    evaluated: int = 0
    seed_ppl: list[float] = field(default_factory=list)


def _legal(factors: Tensor, scale: float) -> Tensor:
    """Clamp into [1, 1.25 s] and make non-decreasing along the last dim: (..., r/2) -> (..., r/2)."""
    return factors.clamp(1.0, 1.25 * scale).cummax(dim=-1).values


def seed_factors(model: Transformer, target_len: int, trained_len: int) -> list[Tensor]:
    """The factors lambda_i = theta_i / theta'_i of PI, NTK and YaRN: the search's first candidates, (r/2,) each."""
    position = model.decoder.position
    base, _ = rope_inv_freq(position.rotary_dim, position.theta)
    seeds = []
    for method in ("pi", "ntk", "yarn"):
        scaling = extended_params(model, method, target_len, trained_len)["scaling"]
        scaled, _ = rope_inv_freq(position.rotary_dim, position.theta, scaling)
        seeds.append(_legal((base / scaled).double(), target_len / trained_len))
    return seeds


def _evolve(
    fitness: Callable[[Tensor], float],
    seeds: list[Tensor],
    scale: float,
    population: int,
    generations: int,
    parents: int,
    sigma: float,
    seed: int,
    progress,
) -> SearchResult:
    """The evolutionary search from `seeds` (r/2,) each, in the space [1, 1.25 scale], non-decreasing."""
    if population < 2 or parents < 1 or parents > population or generations < 1:
        raise ValueError(
            f"extend: LongRoPE search population={population}, parents={parents}, "
            f"generations={generations}: expected population >= 2, 1 <= parents <= population, "
            "generations >= 1"
        )
    g = torch.Generator().manual_seed(seed)
    scores: dict[tuple[float, ...], float] = {}

    def score(factors: Tensor) -> float:
        key = tuple(round(float(v), 6) for v in factors)
        if key not in scores:
            ppl = fitness(torch.tensor(key, dtype=torch.float64))
            scores[key] = ppl if ppl is not None and math.isfinite(ppl) else math.inf
        return scores[key]

    def mutate(factors: Tensor) -> Tensor:
        hit = torch.rand(factors.shape, generator=g, dtype=torch.float64) < MUTATION_RATE
        noise = torch.randn(factors.shape, generator=g, dtype=torch.float64) * sigma
        return _legal(factors * torch.where(hit, noise.exp(), torch.ones_like(noise)), scale)

    def crossover(a: Tensor, b: Tensor) -> Tensor:
        return _legal(torch.where(torch.rand(a.shape, generator=g) < 0.5, a, b), scale)

    candidates = [_legal(f.double(), scale) for f in seeds]
    while len(candidates) < population:
        candidates.append(mutate(candidates[len(candidates) % len(seeds)]))
    seed_ppl = [score(c) for c in candidates[: len(seeds)]]
    history: list[float] = []
    for generation in range(generations):
        ranked = sorted(candidates, key=score)
        history.append(score(ranked[0]))
        if progress is not None:
            progress(generation, history[-1])
        best = ranked[:parents]
        candidates = list(best)
        while generation + 1 < generations and len(candidates) < population:
            i, j = torch.randint(0, len(best), (2,), generator=g).tolist()
            child = crossover(best[i], best[j]) if i != j and torch.rand(1, generator=g) < 0.5 else best[i]
            candidates.append(mutate(child))
    return SearchResult([float(v) for v in candidates[0]], history[-1], history, len(scores), seed_ppl)


def _check_text(ids: Tensor, length: int) -> None:
    if ids.numel() < length:
        raise ValueError(f"extend: the LongRoPE search needs {length} tokens of text, got {ids.numel()}")


def search_long_factors(
    model: Transformer,
    ids: Tensor,
    target_len: int,
    trained_len: int,
    population: int = 8,
    generations: int = 4,
    parents: int = 3,
    sigma: float = 0.1,
    seed: int = 0,
    batch_tokens: int = 8192,
    progress=None,
    extra_seeds: Sequence[Sequence[float]] = (),
) -> SearchResult:
    """Search the long factors of `model` (RoPE; any scaling it has is replaced) for target_len on the token stream
    ids (N,): the non-overlapping perplexity at target_len is the fitness. Seeds: PI, NTK and YaRN, then
    `extra_seeds` (the factors of an earlier stage, times the ratio of the lengths: the progressive extension).

    progress: an optional callable(generation, best ppl) after each generation.
    """
    _check_text(ids, target_len)
    scale = target_len / trained_len
    base = {k: v for k, v in model.cfg.position_params.items() if k != "scaling"}

    def fitness(factors: Tensor) -> float | None:
        params = {**base, "scaling": longrope_scaling(factors.tolist(), target_len, trained_len)}
        return perplexity(
            with_params(model, params, target_len), {"search": ids}, target_len, batch_tokens=batch_tokens
        )

    seeds = seed_factors(model, target_len, trained_len) + [torch.tensor(f, dtype=torch.float64) for f in extra_seeds]
    return _evolve(fitness, seeds, scale, population, generations, parents, sigma, seed, progress)


def search_short_factors(
    model: Transformer,
    ids: Tensor,
    population: int = 8,
    generations: int = 4,
    parents: int = 3,
    sigma: float = 0.1,
    seed: int = 0,
    batch_tokens: int = 8192,
    progress=None,
) -> SearchResult:
    """LongRoPE's readjustment (section 3.3): a model fine-tuned with long factors reads short texts (up to its
    original length, where the short factors apply) worse than before; search the short factors that minimise
    the perplexity at the original length on ids (N,). `model` has a longrope scaling (its long factors are kept).
    Seeds: 1 (RoPE as trained), the long factors, and their square root; the same space as the long factors."""
    scaling = model.cfg.position_params["scaling"]
    trained_len, long_factor = scaling["original_max_position_embeddings"], scaling["long_factor"]
    _check_text(ids, trained_len)

    def fitness(factors: Tensor) -> float | None:
        params = {**model.cfg.position_params, "scaling": {**scaling, "short_factor": factors.tolist()}}
        return perplexity(
            with_params(model, params, trained_len), {"search": ids}, trained_len, batch_tokens=batch_tokens
        )

    long = torch.tensor(long_factor, dtype=torch.float64)
    return _evolve(
        fitness,
        [torch.ones_like(long), long, long.sqrt()],
        scaling["factor"],
        population,
        generations,
        parents,
        sigma,
        seed,
        progress,
    )
