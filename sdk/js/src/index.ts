/**
 * Write connectors for connector-host in TypeScript.
 *
 * A connector is a WebAssembly component implementing the `spring:connector@0.3.0` world
 * (`wit/connector.wit`). This package hides the world: describe the connector with
 * {@link connector}, its tools with {@link tool} (arguments and results as zod schemas,
 * from which the JSON Schemas the host checks are generated, as the official TypeScript
 * MCP SDK does), and `export default` the result. `spring-connector-build` (bin/build.mjs)
 * bundles the module with esbuild and turns it into a component with componentize-js.
 *
 * The host runs every operation in a fresh instance: nothing survives between calls.
 * Outbound HTTP is the standard `fetch`, which componentize-js maps to `wasi:http`, so the
 * host's outbound policy (the hosts the manifest declares, narrowed by the operator)
 * applies to every request. Secrets and GitHub installation tokens come from the host
 * ({@link secret}, {@link githubInstallationToken}), only for what the call's binding
 * names.
 */
import { z } from "zod";
import * as host from "spring:connector/host@0.3.0";

export { z };

/** Behaviour hints of a tool (MCP's ToolAnnotations). */
export interface ToolHints {
  /** The tool changes nothing outside itself. */
  readOnly?: boolean;
  /** The tool may destroy or overwrite data. */
  destructive?: boolean;
  /** Calling it twice with the same arguments has no further effect. */
  idempotent?: boolean;
  /** It reaches an open world (the internet, a third-party API). */
  openWorld?: boolean;
}

/** The binding a call came through: its unit and its (schema-valid) configuration. */
export interface Binding<Config = unknown> {
  unit: string;
  config: Config;
}

/** Who is calling, through which binding. */
export interface CallContext<Config = unknown> {
  binding: Binding<Config>;
  /** The calling agent, when there is one. */
  agent?: string;
  /** Unique per call: for logs and idempotency keys. */
  callId: string;
}

/** One message a webhook becomes. */
export interface Message {
  /** The routing key (a binding receives the messages whose route its `bind` returned). */
  route: string;
  /** What happened, for example `issues.opened`. */
  kind: string;
  /** Groups messages about the same thing. */
  threadKey?: string;
  /** A compact JSON payload a model can read. */
  payload: unknown;
}

/** A webhook the host has already authenticated. */
export interface Webhook {
  /** Header names lower-cased, in arrival order. */
  headers: [string, string][];
  /** The raw body, exactly as signed. */
  body: Uint8Array;
  /** The first value of header `name` (case-insensitive). */
  header(name: string): string | undefined;
  /** The body as UTF-8 text. */
  text(): string;
  /** The body parsed as JSON (throws on malformed JSON). */
  json(): unknown;
}

/** What an agent's container gets from one binding. */
export interface AgentContext {
  /** Names must start with `SPRING_CONNECTOR_<SLUG>_`. */
  env?: Record<string, string>;
  /** Paths must lie under `.spring/connectors/<slug>/`. */
  files?: Record<string, string>;
}

/** One content block of a tool's result (MCP's content blocks). */
export type ContentBlock =
  | { type: "text"; text: string }
  | { type: "image"; data: Uint8Array; mimeType: string }
  | { type: "audio"; data: Uint8Array; mimeType: string }
  | {
      type: "resource_link";
      uri: string;
      name: string;
      title?: string;
      description?: string;
      mimeType?: string;
      size?: number;
    }
  | { type: "resource"; uri: string; mimeType?: string; text?: string; blob?: Uint8Array };

/** Content block constructors. */
export const content = {
  text: (text: string): ContentBlock => ({ type: "text", text }),
  image: (data: Uint8Array, mimeType: string): ContentBlock => ({ type: "image", data, mimeType }),
  audio: (data: Uint8Array, mimeType: string): ContentBlock => ({ type: "audio", data, mimeType }),
  resourceLink: (link: Omit<Extract<ContentBlock, { type: "resource_link" }>, "type">): ContentBlock => ({
    type: "resource_link",
    ...link,
  }),
  /** An embedded resource: exactly one of `text` and `blob`. */
  resource: (resource: { uri: string; mimeType?: string; text?: string; blob?: Uint8Array }): ContentBlock => ({
    type: "resource",
    ...resource,
  }),
};

/** A rich result: content blocks, with or beside a structured result. */
export class ToolResult<Out = unknown> {
  constructor(
    readonly structured: Out | undefined,
    readonly content: ContentBlock[],
  ) {}
}

/** A result of content blocks, and optionally a structured one. */
export function result<Out>(parts: { structured?: Out; content?: ContentBlock[] }): ToolResult<Out> {
  return new ToolResult(parts.structured, parts.content ?? []);
}

type ToolErrorKind = "invalid-arguments" | "failed" | "unauthorized";

/**
 * Why a tool did not produce a result. Throw one from a tool; anything else a tool throws
 * (a refused `fetch`, a bug) becomes `failed` with its message.
 */
export class ToolError extends Error {
  constructor(
    readonly kind: ToolErrorKind,
    message: string,
  ) {
    super(message);
  }
  /** The arguments passed the schema but are still unusable. */
  static invalidArguments(message: string): ToolError {
    return new ToolError("invalid-arguments", message);
  }
  /** The tool ran and failed; the text reaches the caller as is. */
  static failed(message: string): ToolError {
    return new ToolError("failed", message);
  }
  /** The external system refused the binding's credentials. */
  static unauthorized(message: string): ToolError {
    return new ToolError("unauthorized", message);
  }
}

type Awaitable<T> = T | Promise<T>;
type AnyObject = z.ZodObject<z.ZodRawShape>;

/** One tool: its name within the namespace, its schemas and its handler. */
export interface ToolSpec<In extends AnyObject, Out extends AnyObject | undefined, Config> {
  /** The name within the connector's namespace: `[a-z][a-z0-9_]*` (e.g. `echo`). */
  name: string;
  /** What the tool does, written for a model deciding whether to call it. */
  description: string;
  /** The arguments: a zod object schema (its JSON Schema is what the host checks). */
  input: In;
  /** The structured result's schema, when the tool declares one (the host enforces it). */
  output?: Out;
  hints?: ToolHints;
  /** Runs the tool; returns a JSON value, or a {@link ToolResult} for content blocks. */
  run(
    args: z.output<In>,
    ctx: CallContext<Config>,
  ): Awaitable<(Out extends AnyObject ? z.input<Out> : unknown) | ToolResult<Out extends AnyObject ? z.input<Out> : unknown>>;
}

/** A declared tool (see {@link tool}). */
export interface Tool<Config = unknown> {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  readonly outputSchema?: Record<string, unknown>;
  readonly hints: Required<ToolHints>;
  /**
   * Checks `args` against the input schema and runs the tool: synchronously when its
   * handler returns a plain value, else through the handler's promise (in a fresh
   * instance, each promise costs a captured stack and a turn of the event loop).
   */
  call(args: unknown, ctx: CallContext<Config>): Awaitable<ToolResult>;
}

/** The JSON Schema of `schema` as the host takes it (no `$schema`). */
export function jsonSchema(schema: z.ZodType, io: "input" | "output"): Record<string, unknown> {
  const generated = z.toJSONSchema(schema, { io, unrepresentable: "any" }) as Record<string, unknown>;
  delete generated.$schema;
  return generated;
}

/**
 * Runs `schema`'s parser once (on `{}`, whatever the outcome). Called while the module's
 * top level runs, which is at build time: componentize-js snapshots the engine after it,
 * so what a first parse does once (zod compiles an object schema's parser on its first
 * use, the engine compiles a function's bytecode on its first call) is in the snapshot
 * every call's fresh instance starts from, instead of being redone in each of them.
 */
export function warmParser(schema: z.ZodType): void {
  const parsed = schema.safeParse({});
  if (!parsed.success) z.prettifyError(parsed.error);
}

function toolResult(answer: unknown): ToolResult {
  return answer instanceof ToolResult ? answer : new ToolResult(answer, []);
}

/** Whether `value` is a promise (or another thenable, which `await` would also wait for). */
export function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === "function";
}

/** Declares a tool; its argument and result types follow from the zod schemas. */
export function tool<In extends AnyObject, Out extends AnyObject | undefined = undefined, Config = unknown>(
  spec: ToolSpec<In, Out, Config>,
): Tool<Config> {
  const hints = {
    readOnly: spec.hints?.readOnly ?? false,
    destructive: spec.hints?.destructive ?? false,
    idempotent: spec.hints?.idempotent ?? false,
    openWorld: spec.hints?.openWorld ?? false,
  };
  warmParser(spec.input);
  return {
    name: spec.name,
    description: spec.description,
    inputSchema: jsonSchema(spec.input, "input"),
    outputSchema: spec.output ? jsonSchema(spec.output, "output") : undefined,
    hints,
    call(args, ctx) {
      const parsed = spec.input.safeParse(args);
      if (!parsed.success) {
        throw ToolError.invalidArguments(z.prettifyError(parsed.error));
      }
      const answer = spec.run(parsed.data, ctx);
      return isThenable(answer) ? Promise.resolve(answer).then(toolResult) : toolResult(answer);
    },
  };
}

/** The connector: identity, configuration, tools and the optional hooks. */
export interface ConnectorSpec<ConfigSchema extends AnyObject> {
  /** `^[a-z][a-z0-9_-]{0,62}$`. */
  slug: string;
  /** The tools' namespace; the slug when absent. */
  namespace?: string;
  displayName?: string;
  description?: string;
  version?: string;
  /** A binding's configuration. Mark secret fields `.meta({ writeOnly: true })`. */
  config?: ConfigSchema;
  tools: Tool<z.output<ConfigSchema>>[];
  /** Host names outbound `fetch` may reach (the operator can only narrow this). */
  allowedHosts?: string[];
  /** How the host authenticates this connector's webhooks; none when absent. */
  webhook?: "github-hmac-sha256" | "standard-webhooks";
  /** Checks a binding's configuration beyond its schema; returns its routing keys. */
  bind?(config: z.output<ConfigSchema>): Awaitable<string[]>;
  /** Turns an authenticated webhook into messages (none: ignored). */
  translateWebhook?(hook: Webhook): Awaitable<Message[]>;
  /** Whether `message` should reach the unit of `binding` (default: yes). */
  accept?(binding: Binding<z.output<ConfigSchema>>, message: Message): Awaitable<boolean>;
  /** The env vars and files an agent under the bound unit starts with. */
  runtimeContext?(binding: Binding<z.output<ConfigSchema>>): Awaitable<AgentContext>;
}

/** A connector ready to `export default`. */
export interface Connector {
  readonly spec: ConnectorSpec<AnyObject>;
}

/** Declares the connector. `export default connector({...})` from the entry module. */
export function connector<ConfigSchema extends AnyObject = z.ZodObject<{}>>(
  spec: ConnectorSpec<ConfigSchema>,
): Connector {
  return { spec: spec as unknown as ConnectorSpec<AnyObject> };
}

/**
 * A configuration field holding a GitHub App installation id: the host mints
 * installation tokens only for ids in fields so marked (`"x-github-installation": true`).
 */
export function githubInstallationId() {
  return z.number().int().positive().meta({ "x-github-installation": true });
}

/** Writes one line to the host's log, tagged with the connector and the call. */
export function log(level: host.LogLevel, message: string): void {
  host.log(level, message);
}

/**
 * The operator-configured secret `name` of this connector, or `undefined`: the host
 * answers only when the call's binding names the secret (a string value of its
 * configuration equals `name`).
 */
export function secret(name: string): string | undefined {
  return host.secret(name) ?? undefined;
}

/**
 * A GitHub App installation token, minted by the host for an installation the call's
 * binding names (and never for another). Throws a `failed` {@link ToolError} with the
 * host's reason otherwise.
 */
export function githubInstallationToken(installationId: number | bigint): { token: string; expiresAt: string } {
  try {
    return host.githubInstallationToken(BigInt(installationId));
  } catch (e) {
    throw ToolError.failed(`no installation token: ${reason(e)}`);
  }
}

/** The text of whatever was thrown (componentize-js puts a host `err` in `payload`). */
export function reason(e: unknown): string {
  if (e && typeof e === "object") {
    const payload = (e as { payload?: unknown }).payload;
    if (typeof payload === "string") return payload;
    if (e instanceof Error) return e.message;
  }
  return String(e);
}
