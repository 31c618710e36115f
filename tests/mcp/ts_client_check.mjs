// Drives connector-host's MCP surface with the official MCP TypeScript SDK
// (npm `@modelcontextprotocol/client`), in each of its version-negotiation modes
// (`legacy`, `auto`, the `2026-07-28` pin) over Streamable HTTP and over the stdio bridge;
// with `--package @modelcontextprotocol/sdk`, the 1.x SDK instead (it has no negotiation
// modes: session revisions only, the `legacy` leg).
//
// A client nobody on this project wrote: whatever it does against the host must work
// (CONTRACT.md §5). Run by `tests/all/mcp_stateless.rs`; by hand (Node >= 22, the SDK
// installed under target/mcp-node by `.ci/run`):
//
//   NODE_PATH=target/mcp-node/node_modules node tests/mcp/ts_client_check.mjs \
//     --url http://127.0.0.1:8787 --agent ada --token AGENT_TOKEN \
//     --operator-token OP --unit team --binary target/debug/connector-host
//
// The agent must have `acme` and the `rich` test connector bound, and the `hostile` test
// connector installed but not bound to --unit. Each leg: the revision it lands on, list,
// call, invalid arguments (a result with isError), a tool of an unbound connector
// (-32002), rich results (image, audio, resource link, embedded and mixed content,
// structured output with an output schema), then a bind through the REST API and the
// change notification (through `listen` at 2026-07-28, the session's stream before), the
// new tool listed and callable, and the unbind. Prints one line per check; exits non-zero
// on failure.

import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    url: { type: 'string' },
    agent: { type: 'string' },
    token: { type: 'string' },
    'operator-token': { type: 'string' },
    unit: { type: 'string' },
    binary: { type: 'string' },
    // The SDK package: `@modelcontextprotocol/client` (2.x) or `@modelcontextprotocol/sdk` (1.x).
    package: { type: 'string', default: process.env.MCP_TS_PACKAGE ?? '@modelcontextprotocol/client' },
  },
});
const sdk1 = a.package === '@modelcontextprotocol/sdk';
const require = createRequire(path.join(process.env.NODE_PATH ?? process.cwd(), 'x.js'));
// 1.x: one module per piece, and notification handlers keyed by their schema.
const esm1 = (p) => import(path.join(process.env.NODE_PATH ?? '', '@modelcontextprotocol/sdk/dist/esm', p));
const { Client, StreamableHTTPClientTransport } = sdk1
  ? { ...(await esm1('client/index.js')), ...(await esm1('client/streamableHttp.js')) }
  : await import(require.resolve('@modelcontextprotocol/client'));
const { StdioClientTransport } = sdk1
  ? await esm1('client/stdio.js')
  : await import(require.resolve('@modelcontextprotocol/client/stdio'));
const LIST_CHANGED = sdk1 ? (await esm1('types.js')).ToolListChangedNotificationSchema : 'notifications/tools/list_changed';

const NOTIFY_TIMEOUT_MS = 10_000;
// tests/guests/rich's 1x1 PNG and WAV header, base64.
const PNG_B64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC';
const WAV_B64 = 'UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=';
const base = a.url.replace(/\/$/, '');
const endpoint = `${base}/mcp/agents/${a.agent}`;
const log = (m) => console.log(`[ts_client_check] ${m}`);
const check = (ok, what) => {
  if (!ok) throw new Error(what);
};

async function rest(method, p, body) {
  const r = await fetch(base + p, {
    method,
    headers: { authorization: `Bearer ${a['operator-token']}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  check(r.ok, `${method} ${p}: HTTP ${r.status}`);
}

function transport(kind) {
  if (kind === 'http') {
    return new StreamableHTTPClientTransport(new URL(endpoint), {
      requestInit: { headers: { authorization: `Bearer ${a.token}` } },
    });
  }
  return new StdioClientTransport({
    command: a.binary,
    args: ['mcp', '--agent', a.agent, '--url', base, '--token', a.token],
    env: { RUST_LOG: 'warn', PATH: process.env.PATH ?? '' },
    stderr: 'inherit',
  });
}

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${NOTIFY_TIMEOUT_MS} ms`)), NOTIFY_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// The `rich` connector's content blocks and structured output, as this SDK parses them.
async function richChecks(name, client) {
  const weather = (await client.listTools()).tools.find((t) => t.name === 'rich.weather');
  check(weather?.outputSchema?.type === 'object' && weather.outputSchema.properties?.celsius, `${name}: weather ${JSON.stringify(weather)}`);
  const first = async (tool) => (await client.callTool({ name: tool, arguments: {} })).content;
  const [image] = await first('rich.image');
  check(image.type === 'image' && image.data === PNG_B64 && image.mimeType === 'image/png', `${name}: image ${JSON.stringify(image)}`);
  const [audio] = await first('rich.audio');
  check(audio.type === 'audio' && audio.data === WAV_B64 && audio.mimeType === 'audio/wav', `${name}: audio ${JSON.stringify(audio)}`);
  const [link] = await first('rich.resource_link');
  check(link.type === 'resource_link' && link.uri === 'https://example.com/report.pdf' && link.name === 'report' && link.mimeType === 'application/pdf', `${name}: link ${JSON.stringify(link)}`);
  const [embedded] = await first('rich.embedded_resource');
  check(embedded.type === 'resource' && embedded.resource.uri === 'test://embedded-resource' && embedded.resource.text === 'This is an embedded resource content.', `${name}: embedded ${JSON.stringify(embedded)}`);
  const mixed = await first('rich.mixed');
  check(mixed.map((b) => b.type).join() === 'text,image,resource' && mixed[2].resource.blob === 'AAEC/w==', `${name}: mixed ${JSON.stringify(mixed)}`);
  const result = await client.callTool({ name: 'rich.weather', arguments: { city: 'Oslo' } });
  check(!result.isError && result.structuredContent?.city === 'Oslo' && result.structuredContent?.celsius === 21.5, `${name}: weather ${JSON.stringify(result)}`);
  check(result.content[0].text === 'Oslo: 21.5 °C', `${name}: weather text ${JSON.stringify(result.content)}`);
  const broken = await client.callTool({ name: 'rich.broken_output', arguments: {} });
  check(broken.isError && broken.content[0].text.includes('output schema'), `${name}: broken ${JSON.stringify(broken)}`);
  log(`${name}: rich results (image, audio, resource link, embedded and mixed content, structured output) as sent`);
}

async function leg(kind, mode) {
  const name = `${kind}/${typeof mode === 'string' ? mode : mode.pin}`;
  const client = new Client({ name: 'ts_client_check', version: '0' }, { versionNegotiation: { mode } });
  let changed;
  let announce;
  const reset = () => {
    changed = new Promise((resolve) => {
      announce = resolve;
    });
  };
  reset();
  client.setNotificationHandler(LIST_CHANGED, () => announce());
  const connection = transport(kind);
  await client.connect(connection);
  try {
    // 1.x reports the revision only on its HTTP transport.
    const version = sdk1 ? connection.protocolVersion : client.getNegotiatedProtocolVersion();
    const expected = mode === 'legacy' ? '2025-11-25' : '2026-07-28';
    check(version === expected || (sdk1 && kind === 'stdio' && version === undefined), `${name}: landed on ${version}, expected ${expected}`);
    const server = client.getServerVersion();
    check(!server || server.name === 'connector-host', `${name}: server ${JSON.stringify(server)}`);

    const names = (await client.listTools()).tools.map((t) => t.name);
    check(names.includes('acme.echo') && !names.includes('hostile.counter'), `${name}: tools ${names}`);
    const echo = await client.callTool({ name: 'acme.echo', arguments: { message: name } });
    check(!echo.isError && echo.structuredContent?.message === name, `${name}: echo ${JSON.stringify(echo)}`);
    const bad = await client.callTool({ name: 'acme.echo', arguments: { message: 5 } });
    check(bad.isError && bad.content[0].text.includes('/message'), `${name}: invalid ${JSON.stringify(bad)}`);
    let refused;
    let refusedData;
    try {
      await client.callTool({ name: 'hostile.counter', arguments: {} });
    } catch (e) {
      refused = e.code;
      refusedData = e.data;
    }
    // 2026-07-28 retired -32002: invalid params, with data.code saying why.
    if (expected === '2026-07-28') {
      check(refused === -32602 && refusedData?.code === 'tool_not_granted', `${name}: an unbound connector's tool gave ${refused} ${JSON.stringify(refusedData)}`);
    } else {
      check(refused === -32002, `${name}: an unbound connector's tool gave ${refused}`);
    }
    log(`${name}: revision ${version ?? '(not reported by this SDK over stdio)'}; list, call, invalid arguments and the not-granted error as expected`);
    await richChecks(name, client);

    const subscription = version === '2026-07-28' ? await client.listen({ toolsListChanged: true }) : undefined;
    if (subscription) check(subscription.honoredFilter.toolsListChanged === true, `${name}: honoured ${JSON.stringify(subscription.honoredFilter)}`);
    reset();
    const started = performance.now();
    await rest('PUT', `/api/v1/units/${a.unit}/connectors/hostile`, { config: {} });
    await within(changed, `${name}: list_changed after the bind`);
    log(`${name}: list_changed ${Math.round(performance.now() - started)} ms after the bind${subscription ? ' (listen)' : ''}`);
    const after = (await client.listTools()).tools.map((t) => t.name);
    check(after.includes('hostile.counter'), `${name}: after the bind ${after}`);
    const counter = await client.callTool({ name: 'hostile.counter', arguments: {} });
    check(counter.structuredContent?.result === 1, `${name}: counter ${JSON.stringify(counter)}`);
    await subscription?.close();
    await rest('DELETE', `/api/v1/units/${a.unit}/connectors/hostile`);
    log(`${name}: the bound tool listed and callable`);
  } finally {
    await client.close();
  }
}

const manifest = path.join(process.env.NODE_PATH ?? '', a.package, 'package.json');
const sdk = JSON.parse(await readFile(manifest, 'utf8').catch(() => '{}')).version ?? '?';
log(`MCP TypeScript SDK (${a.package}) ${sdk}, Node ${process.version}`);
for (const kind of ['http', 'stdio']) {
  for (const mode of sdk1 ? ['legacy'] : ['legacy', 'auto', { pin: '2026-07-28' }]) {
    await leg(kind, mode);
  }
}
log('all checks passed');
