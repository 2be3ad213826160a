"""The package's layers, read from its import graph: every import of every module, those inside functions
included (only imports under `if TYPE_CHECKING:`, which never run, and the one call-time import named in
`CALL_TIME_UPWARD` are left out).

Lowest first; a module may import its own layer and those below it, never one above:
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import posformer

SRC = Path(posformer.__file__).resolve().parent.parent

LAYERS = (
    "utils",  # checks, user files, figure plumbing
    "ops",  # compute kernels and the masks they take
    "positions",  # the contract, the registry, one file per encoding family
    "config",  # config/ (Config, the checks of its per-layer, expert and latent fields, its model card), presets.py
    "modules",  # the parts a model is built from
    "generation",  # decoding over the KV cache
    "model",  # model.py (the Transformer), pretrained.py, sentence_embeddings.py, summary.py
    "checkpoints",  # the native format, the manifest, the model-directory boundary, atomic writes
    "hf",  # one file per Hugging Face family, both directions
    "data",  # corpora, tokenizers, SQuAD reading
    "train",  # the Trainer
    "api",  # posformer/__init__.py and loading.py (opens any checkpoint, above hf/ and train/)
    "tasks",  # what a model is trained to do: causal LM, QA
    "experiments",  # research workflows
    "plots",  # the figures, some of them of experiments' results
    "bench",  # speed and memory benchmarks
    "cli",  # the `posformer` command
)
ROOT_MODULES = {
    "config": "config",
    "presets": "config",
    "model": "model",
    "pretrained": "model",
    "familiar_names": "model",
    "sentence_embeddings": "model",
    "summary": "model",
    "loading": "api",
    "loading_options": "api",
}
NEVER_BELOW_THE_WORKFLOWS = ("modules", "ops", "positions", "checkpoints")  # the explicit rule
WORKFLOWS = ("hf", "train", "tasks", "experiments", "bench", "plots", "cli")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in (SRC / "posformer").rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    return ROOT_MODULES.get(parts[1], parts[1])


def imported(path: Path) -> Iterator[str]:
    """The posformer modules `path` imports, anywhere in it but under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for statement in branch.body
        for node in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "posformer")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "posformer":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in MODULES else node.module


# The one upward edge, imported inside the function that uses it (a call-time import, never at import time):
# `Transformer.from_pretrained` is `posformer.load`, the loader above the model (no class patching, no import order).
CALL_TIME_UPWARD = {("posformer.pretrained", "posformer.loading")}
GRAPH = {
    name: sorted({m for m in imported(path) if m in MODULES and m != name and (name, m) not in CALL_TIME_UPWARD})
    for name, path in MODULES.items()
}


def test_the_call_time_upward_imports_are_inside_functions() -> None:
    for name, dep in CALL_TIME_UPWARD:
        tree = ast.parse(MODULES[name].read_text())
        top = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
        top |= {alias.name for n in tree.body if isinstance(n, ast.Import) for alias in n.names}
        assert dep not in top, f"{name} imports {dep} when it is imported, not when it is called"
        assert dep in set(imported(MODULES[name])), f"{name} no longer imports {dep}: drop it from CALL_TIME_UPWARD"


def test_every_module_has_a_layer() -> None:
    assert sorted(name for name in MODULES if layer(name) not in LAYERS) == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{name} ({layer(name)}) imports {dep} ({layer(dep)})"
        for name, deps in GRAPH.items()
        for dep in deps
        if LAYERS.index(layer(dep)) > LAYERS.index(layer(name))
    ]
    assert upward == []


def test_model_parts_never_import_the_workflows() -> None:
    leaks = [
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        if layer(name) in NEVER_BELOW_THE_WORKFLOWS
        for dep in deps
        if layer(dep) in WORKFLOWS
    ]
    assert leaks == []


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            child = next((e for e in edges if e not in index or e in stack), None)
            if child is not None and child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(graph[child])))
                continue
            if child is not None:
                low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e2"], "e2": ["e"]}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["e", "e2"]]


def test_no_import_cycle_between_modules() -> None:
    assert cycles(GRAPH) == []


def package(module: str) -> str:
    """The package a module belongs to (`posformer.experiments.longeval.tasks` -> `posformer.experiments.longeval`);
    a module at the root of posformer stands alone, since each root module has a layer of its own."""
    if MODULES[module].name == "__init__.py" or module.count(".") == 1:
        return module
    return module.rpartition(".")[0]


PACKAGE_GRAPH = {
    unit: sorted({package(dep) for name in GRAPH if package(name) == unit for dep in GRAPH[name]} - {unit})
    for unit in {package(name) for name in GRAPH}
}


def test_a_module_counts_as_its_package() -> None:
    assert package("posformer.experiments.longeval.tasks") == "posformer.experiments.longeval"
    assert package("posformer.experiments.longeval") == "posformer.experiments.longeval"
    assert package("posformer.experiments.tables") == "posformer.experiments"
    assert package("posformer.model") == "posformer.model" and package("posformer") == "posformer"


def test_no_import_cycle_between_subpackages() -> None:
    """Packages import each other in one direction only: `experiments.extension` may import
    `experiments.longeval`, never the other way too (a cycle the module-level test does not see)."""
    assert cycles(PACKAGE_GRAPH) == []


POSITION_CONTRACT = ("posformer.positions", "posformer.positions.contract")  # the package's names and the contract


def test_nothing_outside_positions_imports_an_encodings_own_module() -> None:
    """The model and the workflows reach an encoding through the registry, the package's public names and the
    contract module (hooks, declarations, capabilities), never through the encoding's own file."""
    reached = [
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        if layer(name) != "positions"
        for dep in deps
        if layer(dep) == "positions" and dep not in POSITION_CONTRACT
    ]
    assert reached == []
