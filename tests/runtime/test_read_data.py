"""``runtime.spec.read_data``: data (a run's input, a model script) read by the rules graph
files are read by (no key twice, no NaN, YAML 1.2 numbers, UTF-8), without a graph
file's own bounds, which graph files keep."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import SpecError, parse_graph
from runtime.spec import read_data

BIG = "123456789012345678901234567890"  # 30 digits: past 64 bits and a spec's 20 digits


@pytest.mark.parametrize(
    ("text", "format", "said"),
    [
        ('{"a": 1,\n "a": 2}', "json", "duplicate key 'a' (line 2, column 2)"),
        # The first key held twice in the text's order, in whichever object holds it.
        (
            '{"a": 1, "b": {"c": 1,\n  "c": 2}, "a": 3}',
            "json",
            "duplicate key 'c' (line 2, column 3)",
        ),
        ('{"\\u00e9": 1, "é": 2}', "json", "duplicate key 'é' (line 1, column 15)"),
        ("a: 1\nb:\n  c: 1\n  c: 2\n", "yaml", "duplicate key 'c' (line 4, column 3)"),
        ("a = 1\na = 2\n", "toml", "duplicate key 'a'"),
    ],
)
def test_a_key_twice_is_refused_naming_it_and_its_line(text: str, format: Any, said: str) -> None:
    with pytest.raises(ValueError, match=r"^in\.data is not valid: ") as caught:
        read_data(text, format, source="in.data")
    assert said in str(caught.value)


def test_a_graph_file_names_the_line_of_a_key_twice_in_json_too() -> None:
    with pytest.raises(SpecError, match=r"duplicate key 'id' \(line 2, column 2\)"):
        parse_graph('{"id": "g",\n "id": "h", "entry_node": "a"}', "json", source="g.json")


def test_yaml_numbers_are_yaml_1_2_numbers() -> None:
    text = "small: 1e-9\nbig: 2.5E3\nquoted: '1e-9'\nplain: 3\n"
    data = read_data(text, "yaml")
    assert data == {"small": 1e-9, "big": 2500.0, "quoted": "1e-9", "plain": 3}
    assert type(data["small"]) is float and type(data["quoted"]) is str


@pytest.mark.parametrize(
    ("text", "format", "said"),
    [
        ('{"x": NaN}', "json", "NaN is not a finite number"),
        ('{"x": [1, -Infinity]}', "json", "-Infinity is not a finite number"),
        ("x: .nan\n", "yaml", "x: nan is not a finite number"),
        ("x: {y: [1, -.inf]}\n", "yaml", "x.y[1]: -inf is not a finite number"),
        ("x = nan\n", "toml", "x: nan is not a finite number"),
        ("x: 1e999\n", "yaml", "x: inf is not a finite number"),
    ],
)
def test_nan_and_infinity_are_refused(text: str, format: Any, said: str) -> None:
    with pytest.raises(ValueError, match=r"^input\.x is not valid: ") as caught:
        read_data(text, format, source="input.x")
    assert said in str(caught.value)


def test_text_that_is_not_utf8_is_refused_naming_the_source() -> None:
    with pytest.raises(ValueError, match=r"^script\.yaml is not valid: not UTF-8 text"):
        read_data(b"turns: ['\xff']\n", "yaml", source="script.yaml")
    assert read_data("x: 'é'\n".encode(), "yaml") == {"x": "é"}


def test_a_graph_file_s_bounds_do_not_apply_to_data() -> None:
    pad = "x" * 1_100_000  # past the 1 MiB a graph file may hold
    assert read_data(f'{{"big": {BIG}, "pad": "{pad}"}}', "json") == {"big": int(BIG), "pad": pad}
    assert read_data(f"big: {BIG}\n", "yaml") == {"big": int(BIG)}
    assert read_data(f"big = {BIG}\n", "toml") == {"big": int(BIG)}
    deep = "[" * 100 + "]" * 100  # past a graph spec's 64 levels
    assert (
        read_data(f'{{"deep": {deep}}}', "json")["deep"]
        == read_data(f"deep: {deep}", "yaml")["deep"]
    )
    # Aliases made bigger than a spec's million values, as a run's input may be.
    aliases = "a: &a [" + ", ".join(["x"] * 1000) + "]\nb: &b [" + ", ".join(["*a"] * 1001) + "]\n"
    assert len(read_data(aliases, "yaml")["b"]) == 1001


def test_graph_files_keep_their_bounds() -> None:
    graph = "id: g\nentry_node: a\nnodes: [{id: a, function: f}]\n"
    with pytest.raises(SpecError, match=r"integer of 30 digits \(at most 20\) \(line 4"):
        parse_graph(graph + f"max_steps: {BIG}\n", "yaml")
    with pytest.raises(SpecError, match="more than a spec may hold"):
        parse_graph(graph + "#" * 1_100_000, "yaml")
    with pytest.raises(SpecError, match=r"nested deeper than 64 levels \(line 1"):
        parse_graph('{"x": ' + "[" * 100 + "]" * 100 + "}", "json")


@pytest.mark.parametrize(
    ("text", "format", "said"),
    [
        (
            '{"x":\n ' + "9" * 5000 + "}",
            "json",
            r"integer of 5000 digits \(at most 4299\) \(line 2",
        ),
        ("x: " + "9" * 5000 + "\n", "yaml", r"integer of 5000 digits \(at most 4299\) \(line 1"),
        ('{"x":\n ' + "[" * 1000 + "]" * 1000 + "}", "json", r"deeper than 128 levels \(line 2"),
        ("x: " + "[" * 1000 + "]" * 1000 + "\n", "yaml", r"deeper than 128 levels \(line 1"),
    ],
)
def test_data_has_the_bounds_of_what_a_run_s_log_holds(text: str, format: Any, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        read_data(text, format)


@pytest.mark.parametrize(
    ("text", "format"), [("a: \x00\n", "yaml"), ("text:\n\t- hi\n", "yaml"), ("{\n", "json")]
)
def test_each_refusal_is_one_line(text: str, format: Any) -> None:
    with pytest.raises(ValueError) as caught:
        read_data(text, format, source="f")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("f is not valid: ")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown data format 'xml'"):
        read_data("<a/>", "xml")  # type: ignore[arg-type]
