//! `connector-host new SLUG --lang typescript|python`: scaffolds a connector project for
//! the TypeScript SDK (`sdk/js`) or the Python SDK (`sdk/python`) that builds as is and
//! passes `inspect`, with one typed tool `<namespace>.hello`; then builds it once.
//!
//! Both SDKs are used from the checkout this binary was built from (as the Rust scaffold
//! uses `sdk/`). The build runs the SDK's own builder: `node sdk/js/bin/build.mjs` (Node
//! from `$NODE`, else `node`; its packages from the usual resolution or
//! `$SPRING_CONNECTOR_NODE_MODULES`) or `python -m spring_connector.build` (Python from
//! `$PYTHON`, else `python3`, with componentize-py and pydantic installed).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::new::NewArgs;
use super::CliError;

/// The language of a new connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Typescript,
    Python,
}

/// The `sdk/` folder of the checkout this binary was built from.
const SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

/// Runs `new` for TypeScript or Python.
pub fn run(args: NewArgs, namespace: String, dir: PathBuf) -> Result<(), CliError> {
    let sdk = std::fs::canonicalize(SDK_DIR).map_err(|e| {
        CliError::failed(format!(
            "the SDKs of this checkout ({SDK_DIR}) cannot be found ({e}): build connector-host from a checkout to scaffold {} connectors",
            args.lang_name()
        ))
    })?;
    let files = match args.lang {
        Lang::Typescript => typescript(&args.slug, &namespace, &sdk.join("js")),
        Lang::Python => python(&args.slug, &namespace, &sdk.join("python")),
        Lang::Rust => unreachable!("the Rust scaffold is new.rs"),
    };
    super::new::write_files(&dir, &files)?;
    let shown = dir.display();
    super::print_out(&format!(
        "Created {} connector `{}` (tool namespace `{namespace}`) in {shown}\n",
        args.lang_name(),
        args.slug
    ));
    let wasm = dir.join(format!("{}.wasm", args.slug));
    let build = build_command(args.lang, &sdk, &args.slug);
    if !args.no_build {
        let started = std::time::Instant::now();
        super::print_err(&format!("Building {shown} ({build})..."));
        let status = command(args.lang, &sdk, &args.slug)
            .current_dir(&dir)
            .status()
            .map_err(|e| {
                CliError::failed(format!(
                    "could not run the {} build ({build}): {e}\n{}",
                    args.lang_name(),
                    requirements(args.lang)
                ))
            })?;
        if !status.success() {
            return Err(CliError::failed(format!(
                "the build failed ({status}); its messages are above.\n{}\nThe project is written; build it with:\n  cd {shown} && {build}",
                requirements(args.lang)
            )));
        }
        super::print_err(&format!(
            "Built {} in {:.1} s",
            wasm.display(),
            started.elapsed().as_secs_f64()
        ));
    }
    let wasm = wasm.display();
    super::print_out(&format!(
        "\nNext steps:\n  \
         {build_step}connector-host dev {wasm} --live --call hello '{{\"name\": \"Ada\"}}'\n  \
         \x20   # with a host running (connector-host serve): installs, binds on unit `dev`,\n  \
         \x20   # calls as agent `dev`; again on every rebuild\n\
         {build_after}\
         \n\
         Also:\n  \
           connector-host inspect {wasm}\n  \
           connector-host call {wasm} hello '{{\"name\": \"Ada\"}}'   # a local call, no host needed\n\
         \n\
         The guide: docs/writing-a-connector.md in the connector-host repository.\n",
        // The build command is printed once: first when nothing is built yet, else as
        // what to run after each edit.
        build_step = if args.no_build {
            format!("(cd {shown} && {build})   # build it; again after each edit\n  ")
        } else {
            String::new()
        },
        build_after = if args.no_build {
            String::new()
        } else {
            format!("  (cd {shown} && {build})   # in another terminal, after each edit\n")
        },
    ));
    Ok(())
}

impl NewArgs {
    fn lang_name(&self) -> &'static str {
        match self.lang {
            Lang::Rust => "Rust",
            Lang::Typescript => "TypeScript",
            Lang::Python => "Python",
        }
    }
}

fn requirements(lang: Lang) -> &'static str {
    match lang {
        Lang::Typescript => "It needs Node 22+ ($NODE, else `node`) and the SDK's packages: `npm install` in sdk/js of the checkout, or SPRING_CONNECTOR_NODE_MODULES naming a node_modules with @bytecodealliance/componentize-js, esbuild and zod.",
        Lang::Python => "It needs Python 3.11+ ($PYTHON, else `python3`) with componentize-py==0.25.1 and pydantic==2.12.5 installed (pip install them, for example in a venv).",
        Lang::Rust => "",
    }
}

fn command(lang: Lang, sdk: &Path, slug: &str) -> Command {
    match lang {
        Lang::Typescript => {
            let mut c = Command::new(std::env::var_os("NODE").unwrap_or_else(|| "node".into()));
            c.arg(sdk.join("js/bin/build.mjs")).args([
                "src/index.ts",
                "-o",
                &format!("{slug}.wasm"),
            ]);
            c
        }
        _ => {
            let mut c =
                Command::new(std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into()));
            let mut path = std::ffi::OsString::from(sdk.join("python"));
            if let Some(old) = std::env::var_os("PYTHONPATH") {
                path.push(":");
                path.push(old);
            }
            c.env("PYTHONPATH", path).args([
                "-m",
                "spring_connector.build",
                "app.py",
                "-o",
                &format!("{slug}.wasm"),
            ]);
            c
        }
    }
}

fn build_command(lang: Lang, sdk: &Path, slug: &str) -> String {
    match lang {
        Lang::Typescript => format!(
            "node {} src/index.ts -o {slug}.wasm",
            sdk.join("js/bin/build.mjs").display()
        ),
        _ => format!(
            "PYTHONPATH={} python3 -m spring_connector.build app.py -o {slug}.wasm",
            sdk.join("python").display()
        ),
    }
}

fn title(slug: &str) -> String {
    slug.split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The files of a TypeScript connector project.
pub fn typescript(slug: &str, namespace: &str, sdk_js: &Path) -> Vec<(&'static str, String)> {
    let name = title(slug);
    let ns_line = if namespace == slug {
        String::new()
    } else {
        format!("\n  namespace: \"{namespace}\",")
    };
    vec![
        (
            "package.json",
            format!(
                r#"{{
  "name": "{slug}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "scripts": {{
    "build": "spring-connector-build src/index.ts -o {slug}.wasm"
  }},
  "dependencies": {{
    "@spring/connector": "file:{sdk}"
  }}
}}
"#,
                sdk = sdk_js.display()
            ),
        ),
        (
            "src/index.ts",
            format!(
                r#"// The connector `{slug}`: one tool, `{namespace}.hello`. Build: `npm run build` (or
// connector-host's printed command), then `connector-host inspect {slug}.wasm`.
import {{ connector, tool, z }} from "@spring/connector";

export default connector({{
  slug: "{slug}",{ns_line}
  displayName: "{name}",
  description: "Says hello.",
  version: "0.1.0",
  tools: [
    tool({{
      name: "hello",
      description: "Greets someone by name.",
      input: z.object({{ name: z.string().describe("Who to greet.") }}),
      output: z.object({{ greeting: z.string() }}),
      hints: {{ readOnly: true, idempotent: true }},
      run: ({{ name }}) => ({{ greeting: `Hello, ${{name}}!` }}),
    }}),
  ],
}});
"#
            ),
        ),
        (".gitignore", "node_modules/\n*.wasm\n".to_string()),
        (
            "README.md",
            format!(
                "# {name}\n\nA connector for connector-host, in TypeScript (`@spring/connector`, \
                 built with componentize-js).\n\n```sh\nnpm install && npm run build   # writes {slug}.wasm\n\
                 connector-host inspect {slug}.wasm\nconnector-host call {slug}.wasm hello '{{\"name\": \"Ada\"}}'\n```\n"
            ),
        ),
    ]
}

/// The files of a Python connector project.
pub fn python(slug: &str, namespace: &str, sdk_py: &Path) -> Vec<(&'static str, String)> {
    let name = title(slug);
    let ns_arg = if namespace == slug {
        String::new()
    } else {
        format!("\n    namespace=\"{namespace}\",")
    };
    vec![
        (
            "app.py",
            format!(
                r#""""The connector `{slug}`: one tool, `{namespace}.hello`. Build:
`python -m spring_connector.build app.py -o {slug}.wasm`, then
`connector-host inspect {slug}.wasm`."""

from typing import Annotated, TypedDict

from spring_connector import Connector

connector = Connector(
    "{slug}",{ns_arg}
    display_name="{name}",
    description="Says hello.",
    version="0.1.0",
)


class Greeting(TypedDict):
    greeting: str


@connector.tool(read_only=True, idempotent=True)
def hello(name: Annotated[str, "Who to greet."]) -> Greeting:
    """Greets someone by name."""
    return {{"greeting": f"Hello, {{name}}!"}}
"#
            ),
        ),
        (
            "pyproject.toml",
            format!(
                "[project]\nname = \"{slug}\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\
                 dependencies = [\"spring-connector @ file://{sdk}\"]\n",
                sdk = sdk_py.display()
            ),
        ),
        (".gitignore", "__pycache__/\n.venv/\n*.wasm\n".to_string()),
        (
            "README.md",
            format!(
                "# {name}\n\nA connector for connector-host, in Python (`spring_connector`, built \
                 with componentize-py).\n\n```sh\npython3 -m venv .venv && .venv/bin/pip install -e .\n\
                 .venv/bin/python -m spring_connector.build app.py -o {slug}.wasm\n\
                 connector-host inspect {slug}.wasm\nconnector-host call {slug}.wasm hello '{{\"name\": \"Ada\"}}'\n```\n"
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaffolds_name_the_slug_namespace_and_sdk() {
        let ts = typescript("acme-crm", "acme_crm", Path::new("/sdk/js"));
        let index = &ts.iter().find(|(n, _)| *n == "src/index.ts").unwrap().1;
        assert!(index.contains("slug: \"acme-crm\",\n  namespace: \"acme_crm\","));
        assert!(index.contains("displayName: \"Acme Crm\""));
        let package = &ts.iter().find(|(n, _)| *n == "package.json").unwrap().1;
        assert!(package.contains("\"@spring/connector\": \"file:/sdk/js\""));
        let py = python("weather", "weather", Path::new("/sdk/python"));
        let app = &py.iter().find(|(n, _)| *n == "app.py").unwrap().1;
        assert!(app.contains("Connector(\n    \"weather\",\n    display_name"));
        assert!(app.contains("def hello(name: Annotated[str, \"Who to greet.\"]) -> Greeting:"));
    }
}
