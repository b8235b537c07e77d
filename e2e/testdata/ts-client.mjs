// The official TypeScript SDK's streamable HTTP client against toolgate:
//   node ts-client.mjs URL TOKEN TOOL...
// connects (initialize, a 2025-11-25 session), lists the tools, calls each
// TOOL with no arguments, ends the session (DELETE) and prints one JSON
// object: the session id, the negotiated protocol version, the tool names
// and each call's result. The SDK comes from $TOOLGATE_HTTP_NPM_DIR
// (scripts/http-deps.sh).
const sdk = `${process.env.TOOLGATE_HTTP_NPM_DIR}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/client/streamableHttp.js`);

const [url, token, ...tools] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: 'toolgate-e2e-ts', version: '1.0.0' });
await client.connect(transport);
const out = {
  sessionId: transport.sessionId,
  protocolVersion: transport.protocolVersion,
  tools: (await client.listTools()).tools.map((t) => t.name),
  calls: {},
};
for (const name of tools) {
  out.calls[name] = await client.callTool({ name, arguments: {} });
}
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));
