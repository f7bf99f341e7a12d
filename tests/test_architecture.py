"""The floor plan holds: the fronts import only public faces, and no package imports in a
cycle. Both are read from the source with ``ast``, so they hold for code not yet run."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("actors", "eventstore", "runtime")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports (absolute names; ``from X import name`` also names
    ``X.name``, which is a module when ``name`` is a submodule)."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(target)
            found += [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def _sources() -> dict[str, Path]:
    return {_module(p): p for name in PACKAGES for p in (ROOT / name).rglob("*.py")}


@pytest.mark.parametrize("front", ["runtime.cli", "runtime.server"])
def test_the_fronts_import_only_public_faces(front: str) -> None:
    sources = _sources()
    private: list[str] = []
    for module, path in sources.items():
        if module != front and not module.startswith(front + "."):
            continue
        for target in _imports(path):
            if target not in sources or target == front or target.startswith(front + "."):
                continue  # a library outside ours, a name, or the front's own modules
            if any(part.startswith("_") for part in target.split(".")):
                private.append(f"{module} imports {target}")
    assert private == []


def test_no_module_imports_in_a_cycle() -> None:
    sources = _sources()
    # Faces (__init__) import their own modules by design; a cycle among the modules
    # themselves is what makes import order matter.
    modules = {m for m, p in sources.items() if p.name != "__init__.py"}
    edges = {m: {t for t in _imports(sources[m]) if t in modules and t != m} for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    assert cycles == []


def test_no_module_is_past_the_size_of_one_concept() -> None:
    # CONVENTIONS: past ~450 lines, look for the second concept hiding inside.
    long = {
        m: n
        for m, p in _sources().items()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 460
    }
    assert long == {}


def _builtin_error(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def test_no_class_is_a_mixin() -> None:
    # CONVENTIONS: a part of a class with its own state is a collaborator with its own
    # name, not a partial class the host inherits from (two bases) that redeclares the
    # host's attributes behind TYPE_CHECKING stubs. An error may add a builtin branch.
    mixins = []
    for module, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            stubs = any(
                isinstance(s, ast.If) and "TYPE_CHECKING" in ast.unparse(s.test) for s in node.body
            )
            bases = [b for b in node.bases if not _builtin_error(ast.unparse(b))]
            if stubs or len(bases) > 1:
                mixins.append(f"{module}.{node.name}")
    assert mixins == []
