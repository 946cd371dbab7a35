"""Cold start: a fresh instance serves tools/list, promote, a call of a promoted tool and demote
without loading what only find_tool, publishing or the console need (numpy, the tokenizers,
the all-MiniLM and wordllama weights, jinja2) or mcp_types' pydantic wire models; find_tool and
a console page do load theirs, so the checks can fail. The instance is a fresh process
(bench/cold_start.py's cold_instance over its own in-process moto); timings belong to the
bench, not here."""

from __future__ import annotations

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


ROOT = Path(__file__).resolve().parent.parent


def test_every_module_imports_first_on_its_own() -> None:
    """An entry point may import any module first (a circular import shows only then)."""
    script = (
        "import subprocess, sys\n"
        f"failed = [m for m in {_modules()!r} if subprocess.run([sys.executable, '-c', 'import ' + m],"
        " capture_output=True).returncode]\n"
        "print(failed)\n"
    )
    environment = {**os.environ, "WORKSET_STAGE": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    answer = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                            cwd=ROOT, check=True)
    assert answer.stdout.strip() == "[]", answer.stdout
