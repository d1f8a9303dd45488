"""The shape of the code, checked: who may import whom, and where SQL and stream fields live.

runtime is plumbing at the bottom; domain (shared rules) and streams (the stream contract) sit on
it; the services sit on those and never import each other. Read from the source with `ast`, so
an import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.streams import entries
from tests.helpers import ROOT

SERVICES = ROOT / "services"
# What each package of services/ may import (besides itself and third-party code).
ALLOWED: dict[str, set[str]] = {
    "runtime": set(),
    # Every Redis key's spelling, declared: it depends on nothing.
    "keyspace": set(),
    "domain": {"runtime"},
    "streams": {"runtime", "keyspace"},
    "ingest": {"runtime", "domain", "streams", "keyspace"},
    # timeline follows the live feeds (their layout and reader are part of the stream contract).
    "timeline": {"runtime", "domain", "streams", "keyspace", "search"},
    "likes": {"runtime", "domain", "streams", "keyspace"},
    "flusher": {"runtime", "domain", "streams", "keyspace", "search"},
    "gateway": {"runtime", "domain", "keyspace"},
    # Search is hosted by two services (its indexer by the flusher, its RPCs by timeline): a
    # package of its own that both import, itself a consumer of the feeds' contract.
    "search": {"runtime", "domain", "streams", "keyspace"},
    "migrate": {"runtime"},
}
# A statement that reads or changes rows (session plumbing such as ROLLBACK is not SQL text).
_SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.I | re.S
)
FIELD_NAMES = {
    value
    for name, value in vars(entries).items()
    if name.startswith("FIELD_") and isinstance(value, bytes)
}
# Field names that are also ordinary words in JSON bodies and logs: only their bytes form (how
# stream fields are read and written) is reserved to the contract.
_COMMON_WORDS = {"e", "n", "error"}


def modules(root: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(path: Path, module: str) -> set[str]:
    """Every services.* module `path` imports, wherever the import statement is."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("services.")}


def graph() -> dict[str, set[str]]:
    known = dict(modules(SERVICES))
    return {
        module: {name for name in imports(path, module) if name in known and name != module}
        for module, path in known.items()
    }


def constants(path: Path) -> Iterator[tuple[int, str | bytes]]:
    """String and bytes literals of a file, docstrings excluded."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (str, bytes))
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def package_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


def test_each_package_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in graph().items():
        own = package_of(module)
        if own not in ALLOWED:  # services/__main__.py: dispatches by name at run time
            continue
        for target in targets:
            other = package_of(target)
            if other != own and other not in ALLOWED[own]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_there_are_no_import_cycles() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    assert cycles == []


def test_runtime_holds_no_sql() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for _, path in modules(SERVICES / "runtime")
        for line, value in constants(path)
        if isinstance(value, str) and _SQL.search(value)
    ]
    assert found == []


def test_the_sql_check_recognises_sql() -> None:
    assert _SQL.search("SELECT id FROM posts WHERE id = $1")
    assert _SQL.search("delete from zalo_messages where id in (%s)")
    assert not _SQL.search("ROLLBACK")
    assert not _SQL.search("SET time_zone = '+00:00'")


@pytest.mark.parametrize("tree", ["services", "tools", "bench"])
def test_no_stream_field_is_spelled_outside_the_contract(tree: str) -> None:
    contract = SERVICES / "streams"
    found = []
    for _, path in modules(ROOT / tree):
        if path.is_relative_to(contract):
            continue
        for line, value in constants(path):
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            spelled = (
                (value in FIELD_NAMES)
                if isinstance(value, bytes)
                else (text.encode() in FIELD_NAMES and text not in _COMMON_WORDS)
            )
            # A producer script appends through the contract's append_entry, never by itself.
            if spelled or "'XADD'" in text:
                found.append(f"{path.relative_to(ROOT)}:{line}: {text[:40]!r}")
    assert found == []


def test_the_field_check_knows_every_field() -> None:
    assert {b"e", b"n", b"traceparent", b"tracestate", b"source_stream", b"error"} <= FIELD_NAMES
