#!/usr/bin/env node
// spring-connector-build ENTRY.ts [-o OUT.wasm] [--wit connector.wit]
//
// Builds a TypeScript (or JavaScript) connector into a `spring:connector@0.3.0` component:
// esbuild bundles the entry module, this SDK and zod into one ES module (componentize-js
// takes a single module), then componentize-js embeds it in its SpiderMonkey engine and
// pre-initialises it (the module's top level, where tools and their JSON Schemas are
// declared, runs at build time, not on every call).
//
// The packages come from the usual node_modules resolution; SPRING_CONNECTOR_NODE_MODULES
// names a node_modules directory to take them from instead (how the repository's tests
// and CI use one installation for every connector).
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const sdkDir = dirname(dirname(fileURLToPath(import.meta.url)));
const modulesDir = process.env.SPRING_CONNECTOR_NODE_MODULES;

function usage(message) {
  console.error(`error: ${message}\nusage: spring-connector-build ENTRY.ts [-o OUT.wasm] [--wit connector.wit]`);
  process.exit(2);
}

const args = process.argv.slice(2);
let entry, out, wit;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "-o" || a === "--out") out = args[++i];
  else if (a === "--wit") wit = args[++i];
  else if (a.startsWith("-")) usage(`unknown option ${a}`);
  else if (entry === undefined) entry = a;
  else usage(`unexpected argument ${a}`);
}
if (!entry) usage("no entry module given");
entry = resolve(entry);
if (!existsSync(entry)) usage(`${entry} does not exist`);
out = resolve(out ?? basename(entry).replace(/\.[cm]?[jt]s$/, "") + ".wasm");

// The world: --wit, else the copy shipped in the package, else the repository's.
wit =
  wit ??
  [join(sdkDir, "wit", "connector.wit"), join(sdkDir, "..", "..", "wit", "connector.wit")].find((p) => existsSync(p));
if (!wit || !existsSync(wit)) usage("cannot find connector.wit: pass --wit PATH");

/** The URL of package `name`'s entry module: resolved normally, or in SPRING_CONNECTOR_NODE_MODULES. */
function locate(name) {
  if (modulesDir) {
    const dir = join(modulesDir, name);
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    const exp = pkg.exports?.["."] ?? pkg.exports;
    const file =
      (typeof exp === "string" ? exp : exp?.import?.default ?? exp?.import ?? exp?.default ?? exp?.require) ??
      pkg.module ??
      pkg.main;
    return pathToFileURL(join(dir, typeof file === "string" ? file : pkg.main)).href;
  }
  return import.meta.resolve(name);
}

const esbuild = await import(locate("esbuild"));
const componentizeUrl = locate("@bytecodealliance/componentize-js");
const { componentize } = await import(componentizeUrl);

/**
 * Makes the engine create every built-in class of the global it runs in (Promise, String,
 * the typed arrays, TextDecoder, URL ...). The engine creates each the first time it is
 * used, and every call runs in a fresh instance of the snapshot componentize-js takes at
 * build time: a class first used by a call was created again in each call. Run before
 * the snapshot (in the module's top level), this creates them once, at build time. A
 * global whose getter throws at build time is left alone.
 */
const RESOLVE_BUILT_INS = `for (const name of Object.getOwnPropertyNames(globalThis)) {
  try { void globalThis[name]; } catch {}
}`;

/**
 * What runs, before the snapshot, at the end of the bindings componentize-js generates
 * (the code that lifts and lowers every export's arguments and results). They run in a
 * global of their own, not the connector's, so they need {@link RESOLVE_BUILT_INS} too;
 * and each export there is an async function, whose first run creates more still.
 */
const BINDINGS_WARM_UP = `
;(() => {
${RESOLVE_BUILT_INS}
(async () => { await null; })();
})();
`;

/**
 * Appends {@link BINDINGS_WARM_UP} to the bindings: componentize-js has no option for it,
 * so this wraps the `spliceBindings` of its splicer (the module componentize-js 0.23
 * imports from `../lib/`). Without that module the build goes on, only slower to call.
 */
async function warmBindings() {
  const splicerUrl = new URL("../lib/spidermonkey-embedding-splicer.js", componentizeUrl).href;
  const splicer = await import(splicerUrl).then((m) => m.splicer).catch(() => undefined);
  const splice = splicer?.spliceBindings;
  if (typeof splice !== "function") {
    console.error(`warning: no splicer at ${splicerUrl}: the bindings are not warmed up (calls are slower)`);
    return;
  }
  splicer.spliceBindings = (...args) => {
    const spliced = splice.apply(splicer, args);
    spliced.jsBindings += BINDINGS_WARM_UP;
    return spliced;
  };
}
await warmBindings();

const work = mkdtempSync(join(tmpdir(), "spring-connector-"));
try {
  const stub = join(work, "entry.js");
  const names = ["describeConnector", "validateBinding", "callTool", "translateWebhook", "acceptsMessage", "runtimeContext"];
  writeFileSync(
    stub,
    [
      `import connector from ${JSON.stringify(entry)};`,
      `import { exportsOf } from ${JSON.stringify(join(sdkDir, "src", "world.ts"))};`,
      `if (!connector || !connector.spec) throw new Error(${JSON.stringify(
        `${entry} must \`export default connector({...})\``,
      )});`,
      `const world = exportsOf(connector);`,
      RESOLVE_BUILT_INS,
      ...names.map((n) => `export function ${n}(...args) { return world.${n}(...args); }`),
    ].join("\n"),
  );
  const bundle = join(work, "bundle.js");
  await esbuild.build({
    entryPoints: [stub],
    bundle: true,
    outfile: bundle,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    mainFields: ["module", "main"],
    external: ["spring:connector/*", "wasi:*"],
    alias: { "@spring/connector": join(sdkDir, "src", "index.ts") },
    nodePaths: modulesDir ? [modulesDir] : [],
    logLevel: "warning",
  });
  const started = Date.now();
  const { component } = await componentize({ sourcePath: bundle, witPath: wit, worldName: "connector" });
  writeFileSync(out, component);
  console.error(`built ${out} (${(component.length / 1048576).toFixed(1)} MiB) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
