// Preloaded into the MCP conformance suite (node --import) when the server
// under test requires a bearer token: the suite has no option for one, so
// every request it sends gets Authorization: Bearer
// $TOOLGATE_CONFORMANCE_TOKEN — through undici's global dispatcher (the
// SDK client's fetch and the suite's undici requests share it) and through
// node:http (the suite's raw requests, for header values undici refuses to
// send). A request that sets its own Authorization keeps it. Nothing else
// changes.
import http from 'node:http';
import { syncBuiltinESMExports } from 'node:module';

const dir = process.env.TOOLGATE_HTTP_NPM_DIR;
const token = process.env.TOOLGATE_CONFORMANCE_TOKEN;
const { Agent, setGlobalDispatcher } = await import(`${dir}/node_modules/undici/index.js`);

function withToken(headers) {
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === 'authorization') return headers;
    }
    return [...headers, 'authorization', `Bearer ${token}`];
  }
  const h = { ...(headers || {}) };
  if (!Object.keys(h).some((k) => k.toLowerCase() === 'authorization')) h.authorization = `Bearer ${token}`;
  return h;
}

setGlobalDispatcher(
  new Agent().compose((dispatch) => (opts, handler) => dispatch({ ...opts, headers: withToken(opts.headers) }, handler)),
);

const request = http.request;
http.request = function (...args) {
  const req = request.apply(this, args);
  if (!req.hasHeader('authorization')) req.setHeader('authorization', `Bearer ${token}`);
  return req;
};
syncBuiltinESMExports();
