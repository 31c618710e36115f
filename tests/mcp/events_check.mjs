// Drives connector-host's events as MCP resources (CONTRACT.md §5) with the official MCP
// TypeScript SDK (npm `@modelcontextprotocol/client`): a signed webhook routed to the
// agent's unit reaches the client as `notifications/resources/updated`, in a session
// (`legacy` negotiation, 2025-11-25: `subscribeResource`) and at 2026-07-28
// (`listen({resourceSubscriptions})`); `readResource` with `?after=<next>` hands each
// message over exactly once, also from a new connection; another unit's inbox is refused
// (-32602).
//
// Run by tests/all/mcp_events.rs; by hand (Node >= 22, the SDK under target/mcp-node):
//
//   NODE_PATH=target/mcp-node/node_modules node tests/mcp/events_check.mjs \
//     --url http://127.0.0.1:8787 --agent ada --token AGENT_TOKEN --connector hostile \
//     --secret whsec_... --route r1 --unit u1 --foreign-unit u2
//
// Prints one line per check; exits non-zero on failure.

import { createHmac, randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    url: { type: 'string' },
    agent: { type: 'string' },
    token: { type: 'string' },
    connector: { type: 'string' },
    secret: { type: 'string' },
    route: { type: 'string' },
    unit: { type: 'string' },
    'foreign-unit': { type: 'string' },
  },
});
const require = createRequire(path.join(process.env.NODE_PATH ?? process.cwd(), 'x.js'));
const { Client, StreamableHTTPClientTransport } = await import(require.resolve('@modelcontextprotocol/client'));

const NOTIFY_TIMEOUT_MS = 10_000;
const base = a.url.replace(/\/$/, '');
const endpoint = `${base}/mcp/agents/${a.agent}`;
const uri = `spring://units/${a.unit}/messages`;
const foreign = `spring://units/${a['foreign-unit']}/messages`;
const log = (m) => console.log(`[events_check.mjs] ${m}`);
const check = (ok, what) => {
  if (!ok) throw new Error(what);
};

// One signed Standard Webhooks delivery with a message for the route: [id, when its 202 came].
async function deliver() {
  const id = `ts-${randomUUID().slice(0, 12)}`;
  const body = JSON.stringify({ messages: [{ route: a.route, kind: 'issue.opened', threadKey: id, payload: { delivery: id } }] });
  const timestamp = Math.floor(Date.now() / 1000).toString();
  const key = Buffer.from(a.secret.replace(/^whsec_/, ''), 'base64');
  const signature = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64');
  const r = await fetch(`${base}/api/v1/webhooks/${a.connector}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` },
    body,
  });
  check(r.status === 202, `webhook: HTTP ${r.status}`);
  return [id, performance.now()];
}

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${NOTIFY_TIMEOUT_MS} ms`)), NOTIFY_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function readIds(client, at) {
  const result = await client.readResource({ uri: at });
  const [contents] = result.contents;
  check(contents.mimeType === 'application/json', `read: ${JSON.stringify(contents)}`);
  const page = JSON.parse(contents.text);
  return [page.messages.map((m) => m.deliveryId), page.next];
}

async function connect(mode, onUpdated) {
  const client = new Client({ name: 'events_check', version: '0' }, { versionNegotiation: { mode } });
  if (onUpdated) client.setNotificationHandler('notifications/resources/updated', (n) => onUpdated(n.params.uri));
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint), {
    requestInit: { headers: { authorization: `Bearer ${a.token}` } },
  }));
  return client;
}

async function leg(mode, cursor) {
  const name = typeof mode === 'string' ? mode : mode.pin;
  let announce;
  let updated = new Promise((resolve) => {
    announce = resolve;
  });
  const client = await connect(mode, (u) => announce(u));
  try {
    const version = client.getNegotiatedProtocolVersion();
    const listed = (await client.listResources()).resources.map((r) => r.uri);
    check(listed.length === 1 && listed[0] === uri, `${name}: resources ${JSON.stringify(listed)}`);
    let refused;
    try {
      await client.readResource({ uri: foreign });
    } catch (e) {
      refused = e.code;
    }
    check(refused === -32602, `${name}: reading another unit's inbox gave ${refused}`);
    let subscription;
    if (version === '2026-07-28') {
      subscription = await client.listen({ resourceSubscriptions: [uri] });
      check(subscription.honoredFilter.resourceSubscriptions?.[0] === uri, `${name}: honored ${JSON.stringify(subscription.honoredFilter)}`);
    } else {
      await client.subscribeResource({ uri });
      // The session's GET stream opens after initialize: let it connect.
      await new Promise((r) => setTimeout(r, 300));
    }
    const [delivery, sent] = await deliver();
    const got = await within(updated, `${name}: resources/updated`);
    log(`${name} (${version}): resources/updated ${(performance.now() - sent).toFixed(1)} ms after the webhook's 202`);
    check(got === uri, `${name}: updated ${got}`);
    let [ids, next] = await readIds(client, `${uri}?after=${cursor}`);
    check(ids.length === 1 && ids[0] === delivery, `${name}: read ${JSON.stringify(ids)}`);
    [ids] = await readIds(client, `${uri}?after=${next}`);
    check(ids.length === 0, `${name}: read again ${JSON.stringify(ids)}`);
    await subscription?.close();
    return next;
  } finally {
    await client.close();
  }
}

let [, cursor] = await (async () => {
  const client = await connect('legacy');
  try {
    return await readIds(client, uri);
  } finally {
    await client.close();
  }
})();
cursor = await leg('legacy', cursor);
cursor = await leg({ pin: '2026-07-28' }, cursor);
// A reconnect: a new client with the cursor sees only what came since.
const client = await connect({ pin: '2026-07-28' });
try {
  let [ids] = await readIds(client, `${uri}?after=${cursor}`);
  check(ids.length === 0, `reconnect: ${JSON.stringify(ids)}`);
  const [delivery] = await deliver();
  [ids] = await readIds(client, `${uri}?after=${cursor}`);
  check(ids.length === 1 && ids[0] === delivery, `reconnect: ${JSON.stringify(ids)}`);
  log('each message read once across reconnects');
} finally {
  await client.close();
}
log('all checks passed');
