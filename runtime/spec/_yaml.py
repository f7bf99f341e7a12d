"""The YAML side of :mod:`runtime.spec._parse`, imported when YAML is read (so
``import runtime`` does not load PyYAML): a ``yaml.SafeLoader`` within the limits of
:mod:`runtime.spec._limits` it is given, reading numbers in exponent form (``1e-9``, ``2.5E3``) as
numbers, as YAML 1.2 and JSON do (PyYAML follows YAML 1.1, which reads them as strings
unless they have a dot and a signed exponent)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from ._limits import Limits, Refused, mark_text

__all__ = ["compose_yaml", "parse_yaml"]


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing deep nesting, duplicate keys and huge integers."""

    _depth = 0
    max_depth = 0  # set by parse_yaml, with max_int_digits
    max_int_digits = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise Refused(f"nested deeper than {self.max_depth} levels", mark_text(mark))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<" merges may override by design
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor reports it
                if duplicate:
                    raise Refused(f"duplicate key {key!r}", mark_text(key_node.start_mark))
        return super().construct_mapping(node, deep=deep)


def _yaml_int(loader: _Loader, node: Any) -> Any:
    digits = sum(ch.isdigit() for ch in str(node.value))
    if digits > loader.max_int_digits:
        raise Refused(
            f"integer of {digits} digits (at most {loader.max_int_digits})",
            mark_text(node.start_mark),
        )
    return loader.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _yaml_int)
# Tried after YAML 1.1's own float and int resolvers (which it adds to): only what they
# leave a string, a decimal with an exponent, becomes a float. Quoted, it stays a string.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str, limits: Limits) -> Any:
    """YAML text to builtins within ``limits``; Refused for text the hooks refuse or PyYAML
    cannot read."""
    try:
        loader = _Loader(text)  # a SafeLoader subclass, used as yaml.load uses one
        loader.max_depth = limits.max_depth
        loader.max_int_digits = limits.max_int_digits
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:  # the text's characters are checked as the loader is made
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())  # on one line
        context, began = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and began is not None and mark is not None and began.line != mark.line:
            # Where the construct that went wrong began: a missing ':' shows at the next line.
            problem = f"{context} ({mark_text(began)}): {problem}"
        where = f" ({mark_text(mark)})" if mark is not None else ""
        raise Refused(f"{problem}{where}{_quote_hint(text, mark)}") from exc


_VALUE_LINE = re.compile(r"^\s*(?:-\s+)?(?P<key>[A-Za-z_][\w-]*):\s+(?P<value>\S.*?)\s*$")


def _quote_hint(text: str, mark: Any) -> str:
    """What to write when a problem is inside a plain ``key: value`` line's value: a value
    holding ``: `` or starting with a quote it does not end with is read as YAML syntax
    (``expression: 'a' == x``), so quoting all of it is what was meant."""
    if mark is None:
        return ""
    lines = text.split("\n")
    match = _VALUE_LINE.match(lines[mark.line]) if mark.line < len(lines) else None
    if match is None or mark.column < match.start("value") or match["value"][0] in "[{|>&*!":
        return ""  # (a flow list or mapping, a block scalar, an alias or tag: YAML meant)
    value = match["value"]
    if '"' not in value:
        quoted = '"' + value.replace("\\", "\\\\") + '"'
    else:
        quoted = "'" + value.replace("'", "''") + "'"
    return f"; if that is one value, quote the whole value: {match['key']}: {quoted}"


def compose_yaml(text: str, limits: Limits) -> Any:
    """The node tree of YAML ``text`` (positions kept, nothing constructed), within the
    nesting bound of ``limits``; PyYAML's errors as they are."""
    loader = _Loader(text)
    loader.max_depth = limits.max_depth
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()
