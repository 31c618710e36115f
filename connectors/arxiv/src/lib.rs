//! The arXiv connector, bundled with the host (slug and namespace `arxiv`).
//!
//! - **Tools**: `arxiv.search` (the arXiv API's query, up to 50 compact results) and
//!   `arxiv.fetch_abstract` (one paper by new- or old-style id, with the full abstract).
//! - **Outbound**: `export.arxiv.org` only. A binding's `baseUrl` may point elsewhere (a
//!   mirror, a test server), but the host's outbound policy still decides what is
//!   reachable: the effective list is the declared hosts narrowed by the operator.
//! - No webhooks, no credentials, no runtime context.
//!
//! The Atom feeds are parsed with `quick-xml` (see [`atom`]).

use connector_sdk::{Connector, Manifest, Tool};
use serde_json::Value;

pub mod atom;
pub mod config;
pub mod id;
pub mod tools;

pub use config::ArxivConfig;

/// The only host the connector talks to.
pub const API_HOST: &str = "export.arxiv.org";

/// The connector.
pub struct Arxiv;

impl Connector for Arxiv {
    fn manifest() -> Manifest {
        Manifest::new("arxiv")
            .display_name("arXiv")
            .description(
                "Search arXiv preprints and fetch their abstracts through the public arXiv \
                 API.",
            )
            .version(env!("CARGO_PKG_VERSION"))
            .config::<ArxivConfig>()
            .allowed_host(API_HOST)
            .tool(
                Tool::new(
                    "search",
                    "Search arXiv papers. Returns the total match count and up to \
                     `max_results` papers (id, title, authors, abstract cut to ~1,500 \
                     characters, dates, categories, PDF and abstract-page links). Query \
                     syntax: plain words, or fields `ti:`, `au:`, `abs:`, `cat:`, `all:` \
                     combined with AND, OR, ANDNOT.",
                    tools::search,
                )
                .read_only()
                .idempotent()
                .open_world(),
            )
            .tool(
                Tool::new(
                    "fetch_abstract",
                    "Fetch one arXiv paper by id (new style `2101.00001`, `2101.00001v2`, \
                     `arXiv:2101.00001`; old style `hep-th/9901001`): title, authors, full \
                     abstract, dates, categories, PDF and abstract-page links.",
                    tools::fetch_abstract,
                )
                .read_only()
                .idempotent()
                .open_world(),
            )
    }

    fn bind(config: &Value) -> Result<Vec<String>, String> {
        ArxivConfig::from_value(config)?;
        Ok(Vec::new())
    }
}

connector_sdk::export!(Arxiv);

#[cfg(test)]
mod tests;
