// Runs @modelcontextprotocol/server-everything (npm) with some of its
// tools' definitions changed, as a new version of the package would change
// them: argv[2] is the npm directory, argv[3] a JSON file mapping a tool
// name to the keys of its definition to replace, read at each start.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const [npm, changes] = process.argv.slice(2, 4);
const { McpServer } = await import(pathToFileURL(npm + "/node_modules/@modelcontextprotocol/sdk/dist/esm/server/mcp.js"));
const extra = JSON.parse(readFileSync(changes, "utf8"));
const register = McpServer.prototype.registerTool;
McpServer.prototype.registerTool = function (name, config, cb) {
  return register.call(this, name, extra[name] ? { ...config, ...extra[name] } : config, cb);
};
process.argv.splice(2, 2, "stdio");
await import(pathToFileURL(npm + "/node_modules/@modelcontextprotocol/server-everything/dist/index.js"));
