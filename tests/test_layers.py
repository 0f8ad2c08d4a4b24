"""The package's import graph, derived from the code: no cycles, no upward imports, no private names.

Every import counts: at module level, inside functions and under ``TYPE_CHECKING``, because each
of them is a dependency a change can break at run time. ``python tests/test_layers.py`` prints
the graph and the findings.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "neardup"

#: Layers, bottom first: a module may import its own layer's modules and lower layers' only.
#: A module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("neardup.fingerprint",),
    ("neardup.access_rules", "neardup.config", "neardup.logs", "neardup.upstream",
     "neardup.tfidf_config", "neardup.corpora", "neardup.compare", "neardup.prometheus"),
    ("neardup.indexer", "neardup.proxy.transport"),
    ("neardup.proxy.grouping",),
    ("neardup.proxy.handlers",),
    ("neardup.proxy.app",),
    ("neardup.proxy.server",),
    ("neardup.cli", "neardup.__main__"),
)
#: Prefixes that share a layer but never import each other.
APART = (("neardup.indexer", "neardup.proxy"),)
#: The pure core does no I/O and no concurrency: none of these may be imported there.
IO_MODULES = frozenset({
    "aiohttp", "asyncio", "elastic_transport", "elasticsearch", "http", "opensearchpy", "os",
    "pathlib", "selectors", "shutil", "socket", "ssl", "subprocess", "tempfile", "urllib",
})


def modules() -> dict[str, Path]:
    """Every module of the package (the sub-packages are links into the repository's folders)."""
    found = {}
    paths = [Path(folder, name) for folder, _, names in os.walk(PACKAGE, followlinks=True)
             for name in names if name.endswith(".py")]
    for path in sorted(paths):
        parts = ("neardup", *path.relative_to(PACKAGE).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@dataclass(frozen=True)
class Import:
    source: str
    target: str        # a module of the package, or the top-level name of an outside one
    line: int


@dataclass(frozen=True)
class PrivateUse:
    source: str
    target: str
    name: str
    line: int


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def scan(source: str, path: Path, known: dict[str, Path]) -> tuple[list[Import], list[PrivateUse]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    imports: list[Import] = []
    private: list[PrivateUse] = []
    aliases: dict[str, str] = {}      # local name -> module of the package it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name if alias.name in known else alias.name.split(".")[0]
                imports.append(Import(source, target, node.lineno))
                if alias.asname and alias.name in known:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(source, path.name == "__init__.py", node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    imports.append(Import(source, full, node.lineno))
                    aliases[alias.asname or alias.name] = full
                else:
                    target = base if base in known else base.split(".")[0]
                    imports.append(Import(source, target, node.lineno))
                    if target in known and target != source and _private(alias.name):
                        private.append(PrivateUse(source, target, alias.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != source:
            private.append(PrivateUse(source, aliases[node.value.id], node.attr, node.lineno))
    return imports, private


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def graph(known: dict[str, Path] | None = None) -> tuple[list[Import], list[PrivateUse]]:
    known = modules() if known is None else known
    imports: list[Import] = []
    private: list[PrivateUse] = []
    for source, path in known.items():
        found, uses = scan(source, path, known)
        imports += found
        private += uses
    return imports, private


def _prefix(module: str) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for rank, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    return best


def upward(imports: list[Import]) -> Iterator[str]:
    known = modules()
    for edge in imports:
        if edge.target not in known or edge.target == "neardup":
            continue
        here, there = _prefix(edge.source), _prefix(edge.target)
        if here is None or there is None:
            missing = edge.source if here is None else edge.target
            yield f"{missing} is in no layer of tests/test_layers.py"
            continue
        if there[0] > here[0]:
            yield f"{edge.source}:{edge.line} imports {edge.target}, a higher layer"
        for left, right in APART:
            sides = {name for name in (left, right)
                     if edge.source == name or edge.source.startswith(name + ".")}
            targets = {name for name in (left, right)
                       if edge.target == name or edge.target.startswith(name + ".")}
            if sides and targets and sides != targets:
                yield f"{edge.source}:{edge.line} imports {edge.target}: {left} and {right} stay apart"


def cycles(imports: list[Import], known: dict[str, Path] | None = None) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    known = modules() if known is None else known
    edges: dict[str, set[str]] = {name: set() for name in known}
    for edge in imports:
        if edge.target in known and edge.target != "neardup" and edge.target != edge.source:
            edges[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(known) + 100))
    try:
        for name in sorted(known):
            if name not in index:
                visit(name)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_the_package_is_found_through_its_links():
    known = modules()
    for sub in ("neardup.fingerprint", "neardup.indexer", "neardup.proxy"):
        assert sub in known, sub
    assert len(known) > 80


def test_no_import_cycles():
    imports, _ = graph()
    assert cycles(imports) == []


def test_imports_point_down_the_layers():
    imports, _ = graph()
    assert list(upward(imports)) == []


def test_no_module_uses_another_modules_private_names():
    _, private = graph()
    assert [f"{u.source}:{u.line} uses {u.target}.{u.name}" for u in private] == []


def test_the_pure_core_does_no_io():
    imports, _ = graph()
    core = [f"{edge.source}:{edge.line} imports {edge.target}" for edge in imports
            if edge.source.startswith("neardup.fingerprint") and edge.target in IO_MODULES]
    assert core == []


def test_the_checks_can_fail(tmp_path):
    """The scanner sees a cycle hidden in a function, an upward import and a private name."""
    known = {"neardup.fingerprint.a": tmp_path / "a.py", "neardup.fingerprint.b": tmp_path / "b.py",
             "neardup.proxy.app": tmp_path / "app.py"}
    known["neardup.fingerprint.a"].write_text("from neardup.fingerprint import b\n", encoding="utf-8")
    known["neardup.fingerprint.b"].write_text(
        "def f():\n    from neardup.fingerprint import a\n    return a._hidden\n"
        "import neardup.proxy.app as app\n", encoding="utf-8")
    known["neardup.proxy.app"].write_text("", encoding="utf-8")
    imports, private = graph(known)
    assert [(u.source, u.target, u.name) for u in private] == [
        ("neardup.fingerprint.b", "neardup.fingerprint.a", "_hidden")]
    assert ("neardup.fingerprint.b", "neardup.proxy.app") in {(e.source, e.target) for e in imports}
    assert cycles(imports, known) == [["neardup.fingerprint.a", "neardup.fingerprint.b"]]
    assert _prefix("neardup.proxy.app")[0] > _prefix("neardup.fingerprint.b")[0]  # type: ignore[index]


if __name__ == "__main__":
    imports, private = graph()
    for source in sorted(modules()):
        targets = sorted({e.target for e in imports if e.source == source and e.target.startswith("neardup.")})
        print(f"{source} -> {' '.join(targets)}")
    print(f"cycles: {cycles(imports) or 'none'}")
    print(f"upward or crossing imports: {list(upward(imports)) or 'none'}")
    print(f"private names used across modules: {[(u.source, u.target, u.name) for u in private] or 'none'}")
