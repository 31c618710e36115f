/**
 * The six exports of `spring:connector@0.3.0`, built from a {@link Connector}: the
 * entry module `spring-connector-build` generates re-exports these under the names
 * componentize-js expects (the WIT names in camelCase).
 *
 * WIT values as componentize-js presents them: records are objects with camelCase
 * fields, variants `{ tag, val }`, options `undefined`, `u64` a `bigint`, `list<u8>` a
 * `Uint8Array`. An export returning `result<T, E>` returns `T`, and answers `err(e)` when
 * it throws an object whose own `payload` is `e`.
 */
import { ToolError, ToolResult, isThenable, jsonSchema, log, reason, warmParser } from "./index.ts";
import type { AgentContext, Binding, CallContext, Connector, ContentBlock, Message, Webhook } from "./index.ts";

type WitBinding = { unit: string; config: string };
type WitMessage = { route: string; kind: string; threadKey?: string; payload: string };
type WitContent =
  | { tag: "text"; val: string }
  | { tag: "image" | "audio"; val: { data: Uint8Array; mimeType: string } }
  | {
      tag: "resource-link";
      val: { uri: string; name: string; title?: string; description?: string; mimeType?: string; size?: bigint };
    }
  | { tag: "resource"; val: { uri: string; mimeType?: string; contents: { tag: "text"; val: string } | { tag: "blob"; val: Uint8Array } } };

/**
 * Whether `e` is the engine running out of memory (SpiderMonkey throws the string
 * "out of memory" when the host refuses to grow the instance's memory past its limit).
 * It is rethrown, so the instance traps and the host reports the memory limit, as for a
 * connector in any language, instead of a tool error.
 */
function outOfMemory(e: unknown): boolean {
  const text = typeof e === "string" ? e : e instanceof Error ? e.message : "";
  return /^out of memory$/i.test(text);
}

/** Makes an export answer `err(value)`. */
function err(value: unknown): never {
  throw { payload: value };
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    return err(`${what} is not valid JSON: ${reason(e)}`);
  }
}

function binding(b: WitBinding): Binding {
  return { unit: b.unit, config: JSON.parse(b.config) };
}

function messageIn(m: WitMessage): Message {
  return { route: m.route, kind: m.kind, threadKey: m.threadKey, payload: JSON.parse(m.payload) };
}

function messageOut(m: Message): WitMessage {
  return {
    route: m.route,
    kind: m.kind,
    threadKey: m.threadKey ?? undefined,
    payload: JSON.stringify(m.payload ?? null),
  };
}

function block(b: ContentBlock): WitContent {
  switch (b.type) {
    case "text":
      return { tag: "text", val: b.text };
    case "image":
    case "audio":
      return { tag: b.type, val: { data: b.data, mimeType: b.mimeType } };
    case "resource_link":
      return {
        tag: "resource-link",
        val: {
          uri: b.uri,
          name: b.name,
          title: b.title,
          description: b.description,
          mimeType: b.mimeType,
          size: b.size === undefined ? undefined : BigInt(b.size),
        },
      };
    case "resource":
      if ((b.text === undefined) === (b.blob === undefined)) {
        throw ToolError.failed(`the embedded resource ${b.uri} needs exactly one of text and blob`);
      }
      return {
        tag: "resource",
        val: {
          uri: b.uri,
          mimeType: b.mimeType,
          contents: b.text !== undefined ? { tag: "text", val: b.text } : { tag: "blob", val: b.blob as Uint8Array },
        },
      };
  }
}

/** A tool's result as the world's `tool-output`. */
function toolOutput(answer: ToolResult) {
  return {
    structured: answer.structured === undefined ? undefined : JSON.stringify(answer.structured),
    content: answer.content.map(block),
  };
}

/** What a tool threw, as the world's `tool-error` (an engine out of memory is rethrown). */
function toolFailure(e: unknown): never {
  if (outOfMemory(e)) throw e;
  const kind = e instanceof ToolError ? e.kind : "failed";
  return err({ tag: kind, val: reason(e) });
}

function webhook(hook: { headers: [string, string][]; body: Uint8Array }): Webhook {
  return {
    headers: hook.headers,
    body: hook.body,
    header(name) {
      const lower = name.toLowerCase();
      return hook.headers.find(([n]) => n === lower)?.[1];
    },
    text() {
      return new TextDecoder().decode(hook.body);
    },
    json() {
      return JSON.parse(new TextDecoder().decode(hook.body));
    },
  };
}

/** The world's exports for `connector`. */
export function exportsOf(connector: Connector) {
  const spec = connector.spec;
  const namespace = spec.namespace ?? spec.slug;
  const tools = new Map(spec.tools.map((t) => [`${namespace}.${t.name}`, t]));
  if (spec.config) warmParser(spec.config);
  const configOf = (text: string) => {
    const raw = parseJson(text, "the configuration");
    if (!spec.config) return raw;
    const parsed = spec.config.safeParse(raw);
    return parsed.success ? parsed.data : err(`the configuration does not match its schema: ${parsed.error.message}`);
  };

  return {
    describeConnector() {
      return {
        slug: spec.slug,
        toolNamespace: spec.namespace,
        displayName: spec.displayName ?? spec.slug,
        description: spec.description ?? "",
        version: spec.version ?? "0.1.0",
        configSchema: JSON.stringify(spec.config ? jsonSchema(spec.config, "input") : { type: "object" }),
        tools: [...tools].map(([name, t]) => ({
          name,
          description: t.description,
          inputSchema: JSON.stringify(t.inputSchema),
          annotations: t.hints,
          outputSchema: t.outputSchema === undefined ? undefined : JSON.stringify(t.outputSchema),
        })),
        webhook: spec.webhook,
        allowedHosts: spec.allowedHosts ?? [],
      };
    },

    async validateBinding(config: string) {
      const parsed = configOf(config);
      try {
        return spec.bind ? await spec.bind(parsed) : [];
      } catch (e) {
        return err(reason(e));
      }
    },

    // Not `async`: a tool whose handler returns a plain value is answered without a
    // promise (see `Tool.call`).
    callTool(ctx: { binding: WitBinding; agent?: string; callId: string }, name: string, args: string) {
      const found = tools.get(name);
      if (!found) return err({ tag: "invalid-arguments", val: `no tool ${name} in connector ${spec.slug}` });
      const context: CallContext = { binding: binding(ctx.binding), agent: ctx.agent, callId: ctx.callId };
      try {
        const answer = found.call(JSON.parse(args), context);
        return isThenable(answer) ? Promise.resolve(answer).then(toolOutput).catch(toolFailure) : toolOutput(answer);
      } catch (e) {
        return toolFailure(e);
      }
    },

    async translateWebhook(hook: { headers: [string, string][]; body: Uint8Array }) {
      if (!spec.translateWebhook) return [];
      try {
        return (await spec.translateWebhook(webhook(hook))).map(messageOut);
      } catch (e) {
        return err(reason(e));
      }
    },

    async acceptsMessage(b: WitBinding, m: WitMessage) {
      if (!spec.accept) return true;
      try {
        return Boolean(await spec.accept(binding(b), messageIn(m)));
      } catch (e) {
        log("warn", `accept failed, so the message is dropped: ${reason(e)}`);
        return false;
      }
    },

    async runtimeContext(b: WitBinding) {
      if (!spec.runtimeContext) return { env: [], files: [] };
      let context: AgentContext;
      try {
        context = await spec.runtimeContext(binding(b));
      } catch (e) {
        return err(reason(e));
      }
      return { env: Object.entries(context.env ?? {}), files: Object.entries(context.files ?? {}) };
    },
  };
}
