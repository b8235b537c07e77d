// Preloaded into the MCP conformance suite (node --import) when the server
// under test requires a bearer token: the suite has no option for one, so
// every request it sends (the SDK client's fetch and its own undici
// requests share undici's global dispatcher) gets
// Authorization: Bearer $TOOLGATE_CONFORMANCE_TOKEN. Nothing else changes.
const dir = process.env.TOOLGATE_HTTP_NPM_DIR;
const token = process.env.TOOLGATE_CONFORMANCE_TOKEN;
const { Agent, setGlobalDispatcher } = await import(`${dir}/node_modules/undici/index.js`);

function withToken(headers) {
  if (Array.isArray(headers)) {
    return [...headers, 'authorization', `Bearer ${token}`];
  }
  return { ...(headers || {}), authorization: `Bearer ${token}` };
}

setGlobalDispatcher(
  new Agent().compose((dispatch) => (opts, handler) => dispatch({ ...opts, headers: withToken(opts.headers) }, handler)),
);
