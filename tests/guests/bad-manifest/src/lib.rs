//! Test guest: one manifest per cargo feature, each breaking exactly one rule of
//! CONTRACT.md §1 (except `empty-tools`, which is valid and has no tools).
//!
//! It goes through the SDK's test-only escape hatch `Manifest::unchecked()`: tool names
//! are taken verbatim as ids and `describe` skips the SDK's own validation, so the host
//! is the one that must reject these components.
//!
//! | feature             | slug       | namespace | tool ids                |
//! |---------------------|------------|-----------|-------------------------|
//! | `outside-namespace` | `bad`      | `bad`     | `other.echo`            |
//! | `sv-namespace`      | `bad`      | `sv`      | `sv.echo`               |
//! | `duplicate-ids`     | `bad`      | `bad`     | `bad.echo`, `bad.echo`  |
//! | `uppercase-id`      | `bad`      | `bad`     | `Acme.Echo`             |
//! | `slash-id`          | `bad`      | `bad`     | `acme/echo`             |
//! | `no-namespace-id`   | `bad`      | `bad`     | `acme_echo`             |
//! | `bad-slug`          | `Bad Slug` | `bad`     | `bad.echo`              |
//! | `empty-tools`, none | `empty`    | `empty`   | (none; valid)           |

use connector_sdk::{CallContext, Connector, Manifest, Tool, ToolError};

fn echo_schema() -> connector_sdk::serde_json::Value {
    connector_sdk::serde_json::json!({"type": "object"})
}

fn echo(_: &CallContext, args: &str) -> Result<String, ToolError> {
    Ok(args.to_owned())
}

fn tool(id: &'static str) -> Tool {
    Tool::raw(id, "Echo", echo_schema, echo)
}

fn bad(ids: &[&'static str]) -> Manifest {
    Manifest::new("bad")
        .version(env!("CARGO_PKG_VERSION"))
        .unchecked()
        .tools(ids.iter().map(|id| tool(id)))
}

/// The connector.
pub struct BadManifest;

impl Connector for BadManifest {
    fn manifest() -> Manifest {
        if cfg!(feature = "outside-namespace") {
            bad(&["other.echo"])
        } else if cfg!(feature = "sv-namespace") {
            bad(&["sv.echo"]).namespace("sv")
        } else if cfg!(feature = "duplicate-ids") {
            bad(&["bad.echo", "bad.echo"])
        } else if cfg!(feature = "uppercase-id") {
            bad(&["Acme.Echo"])
        } else if cfg!(feature = "slash-id") {
            bad(&["acme/echo"])
        } else if cfg!(feature = "no-namespace-id") {
            bad(&["acme_echo"])
        } else if cfg!(feature = "bad-slug") {
            Manifest::new("Bad Slug")
                .namespace("bad")
                .unchecked()
                .tool(tool("bad.echo"))
        } else {
            // `empty-tools` (and no feature): valid, through the normal checked path.
            Manifest::new("empty").version(env!("CARGO_PKG_VERSION"))
        }
    }
}

connector_sdk::export!(BadManifest);
