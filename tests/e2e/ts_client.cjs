// The TypeScript SDK's client (@modelcontextprotocol/sdk, 2025-11-25) against Workset's /mcp:
// connect with an agent key, print what it learnt as one JSON line (tests/e2e/test_revision_client.py).
const path = require("node:path");
const sdk = path.join(__dirname, "..", "upstreams", "node_modules", "@modelcontextprotocol", "sdk", "dist", "cjs");
const { Client } = require(path.join(sdk, "client", "index.js"));
const { StreamableHTTPClientTransport } = require(path.join(sdk, "client", "streamableHttp.js"));

async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_KEY}` } },
  });
  const client = new Client({ name: "workset-e2e", version: "1.0.0" });
  await client.connect(transport);
  const tools = await client.listTools();
  const found = await client.callTool({ name: "find_tool", arguments: { query: "orders" } });
  console.log(JSON.stringify({
    protocolVersion: transport.protocolVersion,
    capabilities: client.getServerCapabilities(),
    tools: tools.tools.map((tool) => tool.name),
    isError: found.isError === true,
  }));
  await client.close();
}

main().catch((error) => {
  console.error(String(error && error.stack || error));
  process.exit(1);
});
