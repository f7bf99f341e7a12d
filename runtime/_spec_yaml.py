"""The YAML side of :mod:`runtime._spec_parse`, imported when a YAML spec is read (so
``import runtime`` does not load PyYAML): a ``yaml.SafeLoader`` with the parser's limits."""

from __future__ import annotations

from typing import Any

import yaml

from ._spec_parse import MAX_INT_DIGITS, MAX_SPEC_DEPTH, _mark, _Refused

__all__ = ["parse_yaml"]


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing deep nesting, duplicate keys and huge integers."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_SPEC_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(f"nested deeper than {MAX_SPEC_DEPTH} levels", _mark(mark))
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
                    raise _Refused(f"duplicate key {key!r}", _mark(key_node.start_mark))
        return super().construct_mapping(node, deep=deep)


def _yaml_int(loader: _Loader, node: Any) -> Any:
    digits = sum(ch.isdigit() for ch in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise _Refused(
            f"integer of {digits} digits (at most {MAX_INT_DIGITS})", _mark(node.start_mark)
        )
    return loader.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _yaml_int)


def parse_yaml(text: str) -> Any:
    """YAML text to builtins; _Refused for text the hooks refuse or PyYAML cannot read."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise _Refused(str(problem), _mark(mark)) from exc
