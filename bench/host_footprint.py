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
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path("/work/shared/bench/livemcpbench/tools.json")
DEFERRAL_TOKENS = 20_000
BYTES_PER_TOKEN = 4
CAPS = (20, 50, 100, 500)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from chalicelib.definitions import Tool, ToolSpec
    from chalicelib.mcp.metatools import META_TOOLS, tool_definition
    from chalicelib.store.records import ToolVersion

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


if __name__ == "__main__":
    main()
