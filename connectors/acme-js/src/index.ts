// The sample connector `acme` in TypeScript: the same tools, configuration and runtime
// context as the Rust one (connectors/acme), tested the same way (tests/all/languages.rs).
import { connector, tool, z } from "@spring/connector";

const config = z
  .object({
    greeting: z.string().optional().describe("A greeting handed to agents as SPRING_CONNECTOR_ACME_GREETING."),
  })
  .strict();

/** `YYYY-MM-DDTHH:MM:SSZ`, as the Rust acme formats it. */
export function rfc3339(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

export default connector({
  slug: "acme",
  displayName: "Acme",
  description: "Sample connector: echoes arguments and tells the time.",
  version: "0.1.0",
  config,
  tools: [
    tool({
      name: "echo",
      description: "Echo the arguments back unchanged.",
      // Extra fields are allowed and echoed too.
      input: z.object({ message: z.string().describe("Text to echo back.") }).loose(),
      hints: { readOnly: true, idempotent: true },
      run: (args) => args,
    }),
    tool({
      name: "timestamp",
      description: "The current time (RFC 3339, UTC).",
      input: z.object({}),
      hints: { readOnly: true },
      run: () => ({ timestamp: rfc3339(new Date()) }),
    }),
  ],
  runtimeContext: (binding) =>
    binding.config.greeting === undefined ? {} : { env: { SPRING_CONNECTOR_ACME_GREETING: binding.config.greeting } },
});
