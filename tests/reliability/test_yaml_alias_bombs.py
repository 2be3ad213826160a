"""A YAML alias bomb ("billion laughs") is refused before its value is built, naming the flag or file, wherever
posformer reads YAML (`--set` values, run configs, Config files); and an error quotes a short excerpt of a value,
never the whole of a huge one."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_fixtures import cli

from posformer.utils.user_files import MAX_ALIAS_NODES, parse_yaml
from posformer.utils.validation import EXCERPT_CHARS, excerpt, fail


def bomb(levels: int, width: int = 9) -> str:
    """A flow mapping whose entry `a{levels-1}` stands for `width ** levels` strings."""
    parts = [f"a0: &a0 [{','.join(['x'] * width)}]"]
    parts += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "{" + ", ".join(parts) + "}"


def block_bomb(levels: int, width: int = 9) -> str:
    """The same bomb as block mappings, with merge keys (`<<: *a`) at the top."""
    lines = ["a0: &a0 {" + ", ".join(f"k{j}: x" for j in range(width)) + "}"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nall: {{<<: *a0, deep: *a{levels - 1}}}\n"


@pytest.mark.parametrize("text", [bomb(6), bomb(10), bomb(40, width=2), block_bomb(6), block_bomb(12)])
def test_a_bomb_is_refused_by_name_before_it_is_built(text: str) -> None:
    with pytest.raises(ValueError, match=r"^--set X is refused: its aliases \(\*name\) repeat [\d,]+ values, more"):
        parse_yaml(text, "--set X")


@pytest.mark.parametrize("text", ["&a [*a]", "a: &a {b: *a}", "a: &a [1, {c: [*a]}]"])
def test_an_alias_to_a_node_that_contains_it_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="refers to a node that contains it"):
        parse_yaml(text, "run config r.yaml")


@pytest.mark.parametrize("text", ["[" * 100_000, "- " * 100_000 + "x", "{a: " * 50_000])
def test_deep_nesting_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="^the value is refused: it is nested too deeply"):
        parse_yaml(text, "the value")


def test_ordinary_anchors_still_load() -> None:
    text = "betas: &b [0.9, 0.95]\nsame: *b\nbase: &base {lr: 1e-3, steps: 3}\nrun: {<<: *base, steps: 5}\n"
    assert parse_yaml(text) == {
        "betas": [0.9, 0.95],
        "same": [0.9, 0.95],
        "base": {"lr": 1e-3, "steps": 3},
        "run": {"lr": 1e-3, "steps": 5},
    }
    below = bomb(5)  # 9**5 = 59,049 strings: under the limit, so it loads (and is refused later, by its field)
    assert 9**5 < MAX_ALIAS_NODES and len(parse_yaml(below)["a4"]) == 9


def short_refusal(*argv: str) -> str:
    status, _, err = cli(*argv)
    assert status == 2 and "Traceback" not in err and len(err) < 1000, (status, len(err), err[:500])
    return err


@pytest.mark.parametrize("levels", [6, 10])
def test_the_cli_refuses_a_bomb_in_a_set_value(tmp_path: Path, levels: int) -> None:
    item = f"trainer.sample_prompt={bomb(levels)}"
    err = short_refusal("train", "--output-dir", str(tmp_path / "run"), "--set", item)
    assert "--set 'trainer.sample_prompt={a0: &a0" in err and "is refused: its aliases" in err
    err = short_refusal("extrapolate", "--output-dir", str(tmp_path / "x"), "--set", f"steps={bomb(levels)}")
    assert "--set 'steps={a0" in err and "alias bomb" in err


def test_the_cli_refuses_a_bomb_in_a_run_config_or_config_file(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("model: {preset: llama}\ntrainer:\n  sample_prompt: " + bomb(10) + "\n")
    err = short_refusal("train", "--config", str(run), "--output-dir", str(tmp_path / "run"))
    assert f"run config {run} is refused: its aliases" in err
    config = tmp_path / "config.yaml"
    config.write_text(block_bomb(10))
    assert f"config file {config} is refused: its aliases" in short_refusal("info", "--config", str(config))


def test_a_value_under_the_limit_gives_a_short_message(tmp_path: Path) -> None:
    err = short_refusal("train", "--output-dir", str(tmp_path / "run"), "--set", f"trainer.sample_prompt={bomb(5)}")
    assert "trainer.sample_prompt={'a0': ['x', 'x'," in err and "... is invalid: expected" in err
    long = "[" + ",".join(["x"] * 5000) + "]"
    err = short_refusal("train", "--output-dir", str(tmp_path / "run"), "--set", f"trainer.sample_prompt={long}")
    assert "trainer.sample_prompt=['x', 'x'," in err and "... is invalid: expected" in err


def test_fail_quotes_an_excerpt_of_a_huge_shared_value() -> None:
    value: list = ["x"] * 9
    for _ in range(12):  # 9**13 strings, shared: repr() would never end
        value = [value] * 9
    with pytest.raises(ValueError) as caught:
        fail("trainer.sample_prompt", value, "a string")
    message = str(caught.value)
    assert message.startswith("trainer.sample_prompt=[[[[") and message.endswith("... is invalid: expected a string")
    assert len(message) < EXCERPT_CHARS + 100


@pytest.mark.parametrize(
    "value", [1, -0.5, None, True, "text", "it's", (1,), (1, 2), [], {}, {"a": [1, (2,)], 3: None}, float("nan")]
)
def test_excerpt_is_the_repr_of_a_short_value(value) -> None:
    assert excerpt(value) == repr(value)


@pytest.mark.parametrize("value", ["y" * 1000, list(range(1000)), {i: "v" for i in range(1000)}, ("t",) * 500])
def test_excerpt_cuts_a_long_value_and_marks_the_cut(value) -> None:
    text = excerpt(value)
    assert len(text) == EXCERPT_CHARS + 3 and text.endswith("...") and repr(value).startswith(text[:-3])
