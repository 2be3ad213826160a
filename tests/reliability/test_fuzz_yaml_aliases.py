"""Fuzzing YAML anchors and aliases: any web of anchors loads as its plain expansion when the aliases add at most
`MAX_ALIAS_NODES` values, and is refused by name (before its value is built) when they add more; whatever a
setting is given, its error quotes an excerpt of the value, as `repr` begins, cut at `EXCERPT_CHARS`."""

from __future__ import annotations

from fuzz_profiles import fuzz
from hypothesis import given
from hypothesis import strategies as st

from posformer.train.settings import load_run_settings
from posformer.utils.user_files import MAX_ALIAS_NODES, parse_yaml
from posformer.utils.validation import EXCERPT_CHARS, excerpt

# an anchor: ("seq" | "map", items); an item: a scalar ("s", text) or an alias ("a", index of an earlier anchor)
Anchor = tuple[str, list[tuple[str, object]]]


@st.composite
def anchor_webs(draw) -> list[Anchor]:
    anchors: list[Anchor] = []
    for i in range(draw(st.integers(1, 14))):
        item = st.tuples(st.just("s"), st.sampled_from(["x", "1", "2.5", "''", "null"]))
        if i:  # mostly the anchor just before: chains of those are what multiply
            item = st.one_of(st.just(("a", i - 1)), item, st.tuples(st.just("a"), st.integers(0, i - 1)))
        anchors.append((draw(st.sampled_from(["seq", "map"])), draw(st.lists(item, min_size=1, max_size=12))))
    return anchors


def as_yaml(anchors: list[Anchor], flow: bool) -> str:
    """The web as a YAML mapping `{n0: &n0 ..., n1: &n1 ...}`, in flow or block style."""

    def item(kind: str, value: object) -> str:
        return f"*n{value}" if kind == "a" else str(value)

    def node(shape: str, items: list) -> str:
        if shape == "seq":
            return "[" + ", ".join(item(*it) for it in items) + "]"
        return "{" + ", ".join(f"k{j}: {item(*it)}" for j, it in enumerate(items)) + "}"

    entries = [f"n{i}: &n{i} {node(*anchor)}" for i, anchor in enumerate(anchors)]
    return "{" + ", ".join(entries) + "}" if flow else "\n".join(entries) + "\n"


def expanded(anchors: list[Anchor]) -> tuple[list, list[int]]:
    """(each anchor's value with its aliases expanded, or None when too big to build; each one's size in nodes)."""
    values: list = []
    sizes: list[int] = []
    for shape, items in anchors:
        parts = [(parse_yaml(v), 1) if kind == "s" else (values[v], sizes[v]) for kind, v in items]  # type: ignore
        sizes.append(1 + sum(size for _, size in parts) + (len(items) if shape == "map" else 0))
        if sizes[-1] > 10_000 or any(value is None for value, _ in parts):
            values.append(None)
        elif shape == "seq":
            values.append([value for value, _ in parts])
        else:
            values.append({f"k{j}": value for j, (value, _) in enumerate(parts)})
    return values, sizes


def added_by_aliases(anchors: list[Anchor], sizes: list[int]) -> int:
    return sum(sizes[v] for _, items in anchors for kind, v in items if kind == "a")  # type: ignore[index]


@fuzz(150)
@given(anchors=anchor_webs(), flow=st.booleans())
def test_an_anchor_web_loads_as_its_expansion_or_is_refused_by_name(anchors: list[Anchor], flow: bool) -> None:
    values, sizes = expanded(anchors)
    added = added_by_aliases(anchors, sizes)
    try:
        loaded = parse_yaml(as_yaml(anchors, flow), "run config r.yaml")
    except ValueError as err:
        assert added > MAX_ALIAS_NODES, f"refused with only {added} values added: {err}"
        assert str(err).startswith("run config r.yaml is refused: its aliases (*name) repeat")
        return
    assert added <= MAX_ALIAS_NODES
    for i, value in enumerate(values):
        if value is not None:
            assert loaded[f"n{i}"] == value


@fuzz(60)
@given(anchors=anchor_webs(), key=st.sampled_from(["trainer.sample_prompt", "trainer.lr", "data.seq_len"]))
def test_a_setting_given_an_anchor_web_fails_with_a_short_message(anchors: list[Anchor], key: str) -> None:
    try:
        load_run_settings(None, [f"{key}={as_yaml(anchors, flow=True)}"])
    except ValueError as err:
        assert len(str(err)) < 3 * EXCERPT_CHARS + 200, str(err)[:500]
        assert key.split(".")[1] in str(err) or str(err).startswith("--set")


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=40)
        | st.tuples(inner)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=20) | st.integers(), inner, max_size=20)
    ),
    max_leaves=200,
)


@fuzz(300)
@given(values)
def test_excerpt_is_repr_or_its_beginning_marked_as_cut(value) -> None:
    text, full = excerpt(value), repr(value)
    if len(full) <= EXCERPT_CHARS:
        assert text == full
    else:
        assert len(text) == EXCERPT_CHARS + 3 and text.endswith("...") and full.startswith(text[:-3])
