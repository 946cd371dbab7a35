// The TypeScript MCP SDK's client (2025-11-25) declaring URL-mode elicitation: calls one tool of a
// Workset endpoint and prints, as one JSON line, the elicitations it was asked and the call's
// result. Usage: node elicit_client.mjs <mcp url> <agent key> <tool name> <arguments json>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, key, name, args] = process.argv.slice(2);
const asked = [];
const client = new Client({ name: "workset-ts-test", version: "1.0.0" },
                          { capabilities: { elicitation: { url: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params);
  return { action: "accept" };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
await client.connect(transport);
const result = await client.callTool({ name, arguments: JSON.parse(args) }, undefined, { timeout: 60000 });
await new Promise((resolve) => setTimeout(resolve, 200));
console.log(JSON.stringify({ asked, result }));
await client.close();
