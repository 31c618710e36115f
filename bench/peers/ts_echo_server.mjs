// `acme.echo` on the official MCP TypeScript SDK 1.x (npm `@modelcontextprotocol/sdk`), in
// its documented stateless shape: a new `McpServer` and `StreamableHTTPServerTransport`
// (`sessionIdGenerator: undefined`, `enableJsonResponse: true`) for every request, closed
// when the answer is sent. Served by `node:http` directly (no Express in front), so the
// figure is the SDK's. A peer `bench/table.py` measures this host's MCP endpoint against.
//
//   NODE_PATH=target/mcp-node/node_modules target/node/bin/node \
//     bench/peers/ts_echo_server.mjs --port 8792            # POST /mcp
//
// The SDK is found through NODE_PATH (where `bench/peers/setup.sh` installs it).

import { readFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
  },
});
if (!a.port) {
  console.error('usage: ts_echo_server.mjs --port PORT [--host 127.0.0.1]');
  process.exit(2);
}

// ES modules ignore NODE_PATH: resolve the SDK through it explicitly.
const modules = path.resolve(process.env.NODE_PATH ?? 'node_modules');
const require = createRequire(path.join(modules, 'noop.js'));
const load = async (name) => import(require.resolve(name));
const { McpServer } = await load('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = await load('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { z } = await load('zod');
const sdkVersion = JSON.parse(
  readFileSync(path.join(modules, '@modelcontextprotocol/sdk/package.json'), 'utf8'),
).version;

function echoServer() {
  const server = new McpServer({ name: 'ts-echo', version: '0.1.0' });
  server.registerTool(
    'acme.echo',
    {
      description: 'Echo the arguments back unchanged.',
      inputSchema: { message: z.string().describe('Text to echo back.') },
      outputSchema: { message: z.string() },
    },
    async ({ message }) => ({
      content: [{ type: 'text', text: JSON.stringify({ message }) }],
      structuredContent: { message },
    }),
  );
  return server;
}

const httpServer = http.createServer(async (req, res) => {
  if (req.method !== 'POST' || req.url !== '/mcp') {
    res.writeHead(404).end();
    return;
  }
  const server = echoServer();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  res.on('close', () => {
    transport.close();
    server.close();
  });
  try {
    await server.connect(transport);
    await transport.handleRequest(req, res);
  } catch (error) {
    console.error('ts-echo: request failed:', error);
    if (!res.headersSent) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'internal error' }, id: null }));
    }
  }
});
httpServer.keepAliveTimeout = 60_000;
httpServer.listen(Number(a.port), a.host, () => {
  console.error(`ts-echo: @modelcontextprotocol/sdk ${sdkVersion} stateless on http://${a.host}:${a.port}/mcp`);
});
