"""Cold start: a fresh instance serves tools/list, promote, a call of a promoted tool and demote
without loading what only find_tool, publishing or the console need (numpy, the tokenizers,
the all-MiniLM and wordllama weights, jinja2) or mcp_types' pydantic wire models; find_tool and
a console page do load theirs, so the checks can fail. The instance is a fresh process
(bench/cold_start.py's cold_instance over its own in-process moto); timings belong to the
bench, not here."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp_types import jsonrpc, version

from bench.cold_start import HEAVY, SMALL_TOOLBOX, run_cold_instance
from chalicelib.net import protocol

PLAIN_REQUESTS = ["tools/list", "promote", "promoted call", "demote"]


@pytest.fixture(scope="module")
def cold() -> dict[str, dict[str, Any]]:
    """One cold instance's report, by step (and "import app")."""
    report = run_cold_instance(SMALL_TOOLBOX, "list sales orders")
    steps = {step["step"]: step for step in report["steps"]}
    return {"import app": {"heavy": report["import_heavy"], "weights": [], "result": "ok"}, **steps}


@pytest.mark.parametrize("step", ["import app", *PLAIN_REQUESTS])
def test_plain_requests_on_a_cold_instance_load_nothing_heavy(cold: dict[str, dict[str, Any]], step: str) -> None:
    # GIVEN a fresh process that imported app and served the steps before this one
    # WHEN it serves this one
    served = cold[step]
    # THEN it answered, and none of the heavy packages is in sys.modules yet, no weights read
    assert served["result"] == "ok"
    assert served["heavy"] == []
    assert served["weights"] == []


def test_find_tool_loads_the_models(cold: dict[str, dict[str, Any]]) -> None:
    # GIVEN the same instance, after the plain requests
    # WHEN it serves its first find_tool
    served = cold["find_tool"]
    # THEN numpy and the tokenizers are imported then, and both models' weights read
    assert served["result"] == "ok"
    assert {"numpy", "tokenizers"} <= set(served["heavy"])
    assert served["weights"] == ["all-MiniLM-L6-v2 weights", "wordllama weights"]


def test_a_console_page_loads_jinja2(cold: dict[str, dict[str, Any]]) -> None:
    # GIVEN the same instance WHEN it renders its first console page THEN jinja2 comes with it
    served = cold["console page"]
    assert served["result"] == "ok"
    assert served["heavy"] == ["jinja2"]


def test_the_watch_covers_every_heavy_package(cold: dict[str, dict[str, Any]]) -> None:
    # wordllama is never imported (its files are read) and mcp_types should never load at all
    loaded = {name for served in cold.values() for name in served["heavy"]}
    assert loaded == set(HEAVY) - {"wordllama", "mcp_types"}


@pytest.mark.parametrize(("ours", "theirs"), [
    (protocol.PARSE_ERROR, jsonrpc.PARSE_ERROR),
    (protocol.INVALID_REQUEST, jsonrpc.INVALID_REQUEST),
    (protocol.METHOD_NOT_FOUND, jsonrpc.METHOD_NOT_FOUND),
    (protocol.INVALID_PARAMS, jsonrpc.INVALID_PARAMS),
    (protocol.INTERNAL_ERROR, jsonrpc.INTERNAL_ERROR),
    (protocol.HEADER_MISMATCH, jsonrpc.HEADER_MISMATCH),
    (protocol.UNSUPPORTED_PROTOCOL_VERSION, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION),
    (protocol.HANDSHAKE_PROTOCOL_VERSIONS, version.HANDSHAKE_PROTOCOL_VERSIONS),
    (protocol.MODERN_PROTOCOL_VERSIONS, version.MODERN_PROTOCOL_VERSIONS),
    (protocol.LEGACY, version.LATEST_HANDSHAKE_VERSION),
    (protocol.MODERN, version.LATEST_MODERN_VERSION),
    (protocol.VERSION_META, mcp_types.PROTOCOL_VERSION_META_KEY),
    (protocol.CAPABILITIES_META, mcp_types.CLIENT_CAPABILITIES_META_KEY),
    (protocol.SERVER_INFO_META, mcp_types.SERVER_INFO_META_KEY),
])
def test_protocol_constants_equal_mcp_types(ours: Any, theirs: Any) -> None:
    # chalicelib/net/protocol.py writes them out so the endpoint need not import mcp_types
    assert ours == theirs


def _modules() -> list[str]:
    import pkgutil

    import chalicelib

    return sorted(info.name for info in pkgutil.walk_packages(chalicelib.__path__, "chalicelib."))


def _outside_imports(root: Path) -> list[str]:
    """What the modules under `root` import from outside the project (as written: `botocore.exceptions`
    for `from botocore.exceptions import ...`), the standard library left out."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    ours = {path.stem for path in ROOT.iterdir()}
    return sorted(n for n in names if n.split(".")[0] not in sys.stdlib_module_names | ours)


# One interpreter imports what the modules import from outside (never a module of ours), then
# forks a child per module: each child imports its module first, as a fresh process would, and
# exits 1 (its traceback on stderr) when that fails. argv: the modules, what to import beforehand,
# the prefix none of which may be loaded before the forks.
FIRST_IMPORTS = """
import importlib, json, os, sys, traceback
modules, outside, ours = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
for name in outside:
    importlib.import_module(name)
loaded = [m for m in sys.modules if m == ours or m.startswith(ours + ".")]
assert not loaded, f"imported before the forks: {loaded}"
failed = []
for module in modules:
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        try:
            importlib.import_module(module)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) != 0:
        failed.append(module)
print(json.dumps(failed))
"""


def _first_imports(modules: list[str], outside: list[str], ours: str, cwd: Path) -> tuple[list[str], str]:
    """The modules that fail to import when each is the first of its package imported (FIRST_IMPORTS),
    and the children's stderr."""
    environment = {**os.environ, "WORKSET_STAGE": "test", "AWS_DEFAULT_REGION": "us-east-1",
                   "OPENBLAS_NUM_THREADS": "1"}
    answer = subprocess.run([sys.executable, "-c", FIRST_IMPORTS, json.dumps(modules), json.dumps(outside), ours],
                            capture_output=True, text=True, env=environment, cwd=cwd, check=True)
    return json.loads(answer.stdout.splitlines()[-1]), answer.stderr


ROOT = Path(__file__).resolve().parent.parent


def test_every_module_imports_first_on_its_own() -> None:
    """An entry point may import any module first (a circular import shows only then)."""
    failed, stderr = _first_imports(_modules(), _outside_imports(ROOT / "chalicelib"), "chalicelib", ROOT)
    assert failed == [], stderr[-4000:]


def test_a_module_that_fails_only_when_imported_first_is_found(tmp_path: Path) -> None:
    # GIVEN a package whose two modules import each other: `b` imported first works, `a` imported
    # first fails (a circular import), and a third that imports numpy, then `a` first
    package = tmp_path / "circle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circle import b\nVALUE = 1\n")
    (package / "b.py").write_text("from circle.a import VALUE\n")
    (package / "c.py").write_text("import numpy\nfrom circle import a\n")
    modules = ["circle", "circle.a", "circle.b", "circle.c"]
    # WHEN each is imported first on its own, numpy imported beforehand
    failed, stderr = _first_imports(modules, ["numpy"], "circle", tmp_path)
    # THEN exactly the ones that fail first are named, each in a child of its own
    assert failed == ["circle.a", "circle.c"], stderr
    assert "circular import" in stderr
