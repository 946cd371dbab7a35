"""The layering, read from imports alone: data flows edge (mcp/, api/, console/) -> domain ->
store, so no edge module imports `chalicelib.store` except its record types
(`chalicelib.store.records`), and the MCP edge shapes a tool call's answer through
`chalicelib.base.outcomes`, never through the vendor module. Every import counts, a function's own
included.

The packages stand in one order (ORDER, top first): a module imports only from its own package
and the packages below it, so no import runs back up and no two packages import each other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EDGES = ("mcp", "api", "console")
RECORDS = "chalicelib.store.records"
# Top first. The edges: the console shows what the MCP edge says (mcp/ below it), and all of them
# use Workset's own OAuth server. The domain: the rule over agents' working sets runs calls' ends;
# a call reads the catalog, the vendor's credentials and the caller; the catalog imports OpenAPI
# documents into tool definitions and keeps their search index. Below the domain: the outside
# (requests, the MCP client, webhooks, which keep their outbox in the store), the store, the base.
ORDER = (
    "console", "api", "mcp", "oauth",
    "agents", "calls", "catalog", "access", "identity", "openapi", "tools", "search",
    "net", "store", "base",
)
_DYNAMIC = ("import_module", "__import__")


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


def _package_of(path: Path) -> str:
    """The package a module of chalicelib/ belongs to (the folder right under chalicelib/)."""
    return path.relative_to(ROOT / "chalicelib").parts[0]


def _reached(source: str, package: str) -> list[tuple[int, str]]:
    """Every package of chalicelib/ that `source` (a module of `package`) imports from, with its
    line: absolute and relative imports, `from chalicelib import x`, at any depth (a function's,
    a TYPE_CHECKING block's), and importlib.import_module / __import__ of a constant name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the module's own package, chalicelib.<package>
                parents = ["chalicelib", package][: max(0, 2 - (node.level - 1))]
                base = ".".join([*parents, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in _DYNAMIC and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        for name in names:
            parts = name.split(".")
            if parts[0] == "chalicelib" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def _upward(source: str, package: str) -> list[str]:
    """The imports of a module of `package` that reach a package above it (or one not in ORDER)."""
    rank = ORDER.index(package)
    return [f"line {line}: chalicelib.{reached}" for line, reached in _reached(source, package)
            if reached not in ORDER or ORDER.index(reached) < rank]


def _modules() -> list[Path]:
    return sorted(path for path in (ROOT / "chalicelib").rglob("*.py") if path.parent != ROOT / "chalicelib")


def test_every_package_has_its_place_in_the_order() -> None:
    # GIVEN chalicelib/'s folders and top-level files
    folders = {path.name for path in (ROOT / "chalicelib").iterdir() if path.is_dir() and path.name != "__pycache__"}
    loose = sorted(path.name for path in (ROOT / "chalicelib").glob("*.py") if path.name != "__init__.py")
    # THEN every folder is a package in ORDER, and no module sits beside them
    assert folders == set(ORDER)
    assert loose == []


@pytest.mark.parametrize("path", _modules(), ids=_module_name)
def test_a_module_imports_only_its_own_package_and_those_below(path: Path) -> None:
    # GIVEN a module of chalicelib/ WHEN its imports are read, a function's own included
    upward = _upward(path.read_text(encoding="utf-8"), _package_of(path))
    # THEN none reaches a package above its own
    assert upward == [], f"{_module_name(path)} imports upward: move what it needs down"


# The packages issue 29 made out of chalicelib/'s top level: each only says what it is (the edges,
# openapi/, search/ and store/ keep their own __init__s, some of which build what they export).
GROUPED = ("agents", "calls", "catalog", "access", "identity", "tools", "net", "base")


@pytest.mark.parametrize("path", [ROOT / "chalicelib" / name / "__init__.py" for name in GROUPED], ids=_module_name)
def test_a_grouped_package_says_what_it_is_and_imports_nothing_of_chalicelib(path: Path) -> None:
    # GIVEN a grouped package's __init__ WHEN it is read
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # THEN it opens with a docstring, and importing the package loads no other module of chalicelib
    assert ast.get_docstring(tree)
    assert _reached(path.read_text(encoding="utf-8"), _package_of(path)) == []


@pytest.mark.parametrize("source", [
    "from chalicelib.calls import runs",
    "from chalicelib.calls.runs import start",
    "import chalicelib.calls.runs",
    "import chalicelib.calls.runs as runs",
    "import os, chalicelib.calls",
    "from chalicelib import calls",
    "from chalicelib import errors, calls",
    "from ..calls import runs",
    "from .. import calls",
    "def f():\n    from chalicelib.calls import runs\n",
    "class C:\n    def m(self):\n        import chalicelib.calls.runs\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from chalicelib.calls.runs import Run\n",
    "try:\n    from chalicelib.calls import runs\nexcept ImportError:\n    runs = None\n",
    "import importlib\nrunner = importlib.import_module('chalicelib.calls.runs')\n",
    "from importlib import import_module\nrunner = import_module('chalicelib.calls')\n",
    "runs = __import__('chalicelib.calls.runs')",
    "from chalicelib.nowhere import thing",
])
def test_the_check_sees_an_upward_import_however_it_is_written(source: str) -> None:
    # GIVEN a store module importing the call path (or a package the order does not know)
    # WHEN it is checked THEN it is reported
    assert _upward(source, "store") != []


@pytest.mark.parametrize("source", [
    "from chalicelib.store import agents",
    "from chalicelib.store.records import AgentState",
    "from chalicelib.base import errors",
    "from chalicelib.base.config import settings",
    "import chalicelib.base.log",
    "from . import records",
    "from .records import AgentState",
    "def f():\n    from chalicelib.base import clock\n",
    "import json, re",
])
def test_the_check_lets_a_module_import_its_own_package_and_those_below(source: str) -> None:
    assert _upward(source, "store") == []


def test_the_order_is_the_readme_layout_order() -> None:
    # GIVEN the README's Layout block WHEN the packages it lists are read THEN they are ORDER's, in order
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("```", 2)[1]
    listed = re.findall(r"^\s+(\w+)/", layout, re.MULTILINE)
    assert [name for name in listed if name in ORDER] == list(ORDER)
