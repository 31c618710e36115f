// A TypeScript connector that exercises every surface of the SDK for
// tests/all/languages.rs, including what a hostile connector would try: fetching any URL,
// reading any secret, minting a token for any installation, looping and hogging memory.
// tests/guests/probe-py is the same connector in Python.
import { connector, content, githubInstallationId, githubInstallationToken, result, secret, tool, ToolError, z } from "@spring/connector";

// A 1x1 PNG.
const PNG = Uint8Array.from(
  atob("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC"),
  (c) => c.charCodeAt(0),
);

// Counts this instance's calls of `counter`: every call has a fresh instance, so 1.
let calls = 0;

export default connector({
  slug: "probe-js",
  namespace: "probe",
  displayName: "Probe (TypeScript)",
  description: "Exercises the TypeScript SDK.",
  version: "0.1.0",
  config: z.object({
    routes: z.array(z.string()).optional(),
    installationId: githubInstallationId().optional(),
    secret: z.string().optional(),
    mute: z.array(z.string()).optional().describe("Message kinds this binding does not want."),
  }),
  allowedHosts: ["127.0.0.1"],
  webhook: "standard-webhooks",
  tools: [
    tool({
      name: "fetch",
      description: "GET a URL; answers its status and body.",
      input: z.object({ url: z.string() }),
      hints: { openWorld: true, readOnly: true },
      run: async ({ url }) => {
        const response = await fetch(url);
        return { status: response.status, body: await response.text() };
      },
    }),
    tool({
      name: "post",
      description: "POSTs a JSON body to a URL; answers its status and body.",
      input: z.object({ url: z.string(), body: z.string() }),
      hints: { openWorld: true },
      run: async ({ url, body }) => {
        const response = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
        });
        return { status: response.status, body: await response.text() };
      },
    }),
    tool({
      name: "secret_value",
      description: "Reads a secret by name.",
      input: z.object({ name: z.string() }),
      run: ({ name }) => ({ value: secret(name) ?? null }),
    }),
    tool({
      name: "token",
      description: "Mints a GitHub installation token for any installation.",
      input: z.object({ installation_id: z.number().int() }),
      run: ({ installation_id }) => ({ token: githubInstallationToken(installation_id).token }),
    }),
    tool({
      name: "weather",
      description: "Structured output checked against its schema, and content blocks.",
      input: z.object({ city: z.string() }),
      output: z.object({ city: z.string(), celsius: z.number() }),
      run: ({ city }) =>
        result({
          structured: { city, celsius: 21.5 },
          content: [content.text(`${city}: 21.5 C`), content.image(PNG, "image/png")],
        }),
    }),
    tool({
      name: "broken_output",
      description: "Returns a result its output schema refuses.",
      input: z.object({}),
      output: z.object({ celsius: z.number() }),
      run: () => ({ celsius: "warm" }) as unknown as { celsius: number },
    }),
    tool({
      name: "refuse",
      description: "Fails with invalid arguments.",
      input: z.object({}),
      run: () => {
        throw ToolError.invalidArguments("nothing is ever right");
      },
    }),
    tool({
      name: "counter",
      description: "Counts its calls in a module-level variable and answers the count.",
      input: z.object({}),
      run: () => ({ count: ++calls }),
    }),
    tool({
      name: "spin",
      description: "Never returns.",
      input: z.object({}),
      run: () => {
        for (;;) {}
      },
    }),
    tool({
      name: "hog",
      description: "Allocates memory until stopped.",
      input: z.object({}),
      run: () => {
        const kept: Uint8Array[] = [];
        for (;;) kept.push(new Uint8Array(1 << 20).fill(1));
      },
    }),
  ],
  bind: (config) => config.routes ?? [],
  translateWebhook: (hook) => {
    const event = hook.json() as { route: string; kind: string; thread?: string; data?: unknown };
    return [{ route: event.route, kind: event.kind, threadKey: event.thread, payload: event.data ?? null }];
  },
  accept: (binding, message) => !(binding.config.mute ?? []).includes(message.kind),
  runtimeContext: (binding) => ({ env: { SPRING_CONNECTOR_PROBE_JS_UNIT: binding.unit } }),
});
