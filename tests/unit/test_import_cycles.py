"""The package's modules import each other one way only: no import cycles.

An import inside a function still counts (it is a dependency all the same, only a
late one); imports under ``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pyweft

SRC = Path(pyweft.__file__).resolve().parent.parent
ENGINE_PARTS = (
    "replay",
    "steps",
    "tasks",
    "messages",
    "composition",
    "control",
    "visibility",
    "ownership",
    "schedules",
    "state",
)


def _modules(src: Path, package: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in (src / package).rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.Module) -> Iterable[ast.Import | ast.ImportFrom]:
    def walk(nodes: list[ast.stmt]) -> Iterable[ast.Import | ast.ImportFrom]:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from walk(node.orelse)
                continue
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from walk(inner)
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    yield from walk(handler.body)

    return walk(tree.body)


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package modules it imports (at any depth, TYPE_CHECKING aside)."""
    modules = _modules(src, package)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in modules else resolve(base))
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_a_cycle_made_by_an_import_inside_a_function(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "demo/__init__.py": "",
            "demo/a.py": "from demo import b\n",
            "demo/sub/__init__.py": "",
            "demo/sub/b.py": "def f():\n    from demo.a import x\n",
            "demo/b.py": "def g():\n    from demo.sub import b\n",
        },
    )
    assert cycles(import_graph(tmp_path, "demo")) == [["demo.a", "demo.b", "demo.sub.b"]]


def test_the_checker_ignores_imports_made_only_for_type_checking(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "demo/__init__.py": "",
            "demo/a.py": "from demo import b\n",
            "demo/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from demo.a import x\n"
            ),
        },
    )
    assert cycles(import_graph(tmp_path, "demo")) == []


def test_no_two_pyweft_modules_import_each_other_even_indirectly() -> None:
    graph = import_graph(SRC, "pyweft")
    assert "pyweft.engine.replay.run" in graph  # the walk did find the engine's modules
    assert cycles(graph) == []


def test_the_engine_sub_packages_depend_on_each_other_one_way() -> None:
    graph = import_graph(SRC, "pyweft")
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        names = module.split(".")
        if len(names) < 4 or names[1] != "engine" or names[2] not in ENGINE_PARTS:
            continue
        for target in targets:
            tnames = target.split(".")
            if len(tnames) >= 3 and tnames[1] == "engine" and tnames[2] != names[2]:
                parts.setdefault(names[2], set()).add(
                    tnames[2] if tnames[2] in ENGINE_PARTS else "engine." + tnames[2]
                )
    assert cycles(parts) == []
    # The replay core is the bottom layer: the run imports no step, message or control code.
    assert parts.get("replay", set()) == set()
