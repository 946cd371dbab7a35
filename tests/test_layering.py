"""The layering, read from imports alone: data flows edge (mcp/, api/, console/) -> domain ->
store, so no edge module imports `chalicelib.store` except its record types
(`chalicelib.store.records`), and the MCP edge shapes a tool call's answer through
`chalicelib.base.outcomes`, never through the vendor module. Every import counts, a function's own
included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EDGES = ("mcp", "api", "console")
RECORDS = "chalicelib.store.records"


def _edge_modules() -> list[Path]:
    return sorted(path for edge in EDGES for path in (ROOT / "chalicelib" / edge).rglob("*.py"))


def _imported(source: str) -> list[tuple[int, str]]:
    """Every name an import statement binds, in full, with its line: `import a.b` names `a.b`,
    `from a.b import c` names `a.b.c` (c may be a module or a name in one)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _store_imports(source: str) -> list[str]:
    """The imports of `source` that reach the store for more than its record types."""
    return [f"line {line}: {name}" for line, name in _imported(source)
            if (name == "chalicelib.store" or name.startswith("chalicelib.store."))
            and not (name == RECORDS or name.startswith(RECORDS + "."))]


def _module_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", _edge_modules(), ids=_module_name)
def test_an_edge_module_reaches_the_store_only_for_record_types(path: Path) -> None:
    # GIVEN a module of the MCP, admin API or console edge
    # WHEN its imports are read
    reached = _store_imports(path.read_text(encoding="utf-8"))
    # THEN none of them is the store, bar the record types
    assert reached == [], f"{_module_name(path)} imports the store; go through a domain function"


@pytest.mark.parametrize("path", sorted((ROOT / "chalicelib" / "mcp").rglob("*.py")), ids=_module_name)
def test_the_mcp_edge_shapes_answers_without_the_vendor_module(path: Path) -> None:
    # GIVEN a module of the MCP edge WHEN its imports are read THEN none is chalicelib.calls.vendor
    names = [name for _, name in _imported(path.read_text(encoding="utf-8"))]
    assert "chalicelib.calls.vendor" not in names
    assert not any(name.startswith("chalicelib.calls.vendor.") for name in names)


@pytest.mark.parametrize("source", [
    "from chalicelib.store import outbox",
    "from chalicelib.store.sweep import agents_with_tool",
    "import chalicelib.store.history",
    "from chalicelib import store",
    "def f():\n    from chalicelib.store import history as history_store\n",
])
def test_the_check_sees_a_store_import_however_it_is_written(source: str) -> None:
    # GIVEN an import of the store beyond its records WHEN it is checked THEN it is reported
    assert _store_imports(source) != []


@pytest.mark.parametrize("source", [
    "from chalicelib.store.records import AgentState",
    "from chalicelib.store import records",
    "from chalicelib import runs, workingset",
])
def test_the_check_lets_record_types_and_the_domain_through(source: str) -> None:
    assert _store_imports(source) == []
