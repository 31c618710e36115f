//! How an endpoint names tools (CONTRACT.md §5): canonical ids (`acme.echo`), flat names
//! for model APIs (`?toolNames=flat`: `acme__echo`), and one namespace's tools by bare
//! name (`/mcp/agents/{id}/namespaces/acme`: `echo`), or both (`namespaces/acme` with
//! flat names turns `acme.issues.list` into `issues__list`).
//!
//! # Why a mapping at the edge
//!
//! Tool ids keep their dots everywhere inside the host (grants, provenance, audit): the
//! dot is what makes a namespace. The function-name rules of the model APIs agents are
//! wired to (`^[a-zA-Z0-9_-]{1,64}$` at OpenAI and Anthropic) refuse it, and the agent
//! frameworks pass MCP tool names through unchanged, so the endpoint can present other
//! names. A presented name is mapped back by looking it up among the agent's effective
//! tools as presented (never by undoing the rewrite blindly), so a name two tools share
//! reaches neither: both are left out of the listing (and logged), and a call by that
//! name is refused. A name that no effective tool presents is turned back into the id it
//! would come from, so the host still tells "not granted" from "unknown".
//!
//! The canonical naming costs nothing: no name is computed or compared.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use connector_core::grants::{EffectiveTool, ResolvedTools};

/// What the flat style puts where the id has a dot.
pub const FLAT_SEPARATOR: &str = "__";
/// The longest name the model APIs accept; longer flat names are left out.
pub const MAX_FLAT_NAME: usize = 64;

/// How one endpoint names tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Naming {
    /// Only this namespace's tools, named without it.
    pub namespace: Option<Arc<str>>,
    /// Each `.` written as [`FLAT_SEPARATOR`].
    pub flat: bool,
}

/// What a presented name reaches.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// This canonical id.
    Tool(String),
    /// Several effective tools present this name: none of them is reached.
    Ambiguous(Vec<String>),
}

/// The tools of one listing under a naming: each tool once, with the name shown.
pub struct Listing<'a> {
    /// Each tool with the name it is shown under.
    pub tools: Vec<(Cow<'a, str>, EffectiveTool<'a>)>,
    /// Names several tools would share (each with the ids), left out.
    pub collisions: Vec<(String, Vec<String>)>,
    /// Ids whose flat name would be longer than [`MAX_FLAT_NAME`], left out.
    pub too_long: Vec<String>,
}

/// A `toolNames` the endpoint does not know (cut to 40 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown toolNames `{0}`: use `flat` (acme__echo) or `canonical` (acme.echo)")]
pub struct UnknownToolNames(String);

impl Naming {
    /// Parses `toolNames` of the endpoint's query: `flat` or `canonical` (the default).
    pub fn style(value: Option<&str>) -> Result<bool, UnknownToolNames> {
        match value {
            None | Some("canonical") | Some("") => Ok(false),
            Some("flat") => Ok(true),
            Some(other) => Err(UnknownToolNames(connector_model::ids::truncate(other, 40))),
        }
    }

    /// Canonical ids, every namespace: nothing to map.
    pub fn is_canonical(&self) -> bool {
        self.namespace.is_none() && !self.flat
    }

    /// The name `id` is shown as, or `None` when it is outside this naming's namespace.
    pub fn present<'a>(&self, id: &'a str) -> Option<Cow<'a, str>> {
        let bare = match &self.namespace {
            None => id,
            Some(ns) => id.strip_prefix(&**ns)?.strip_prefix('.')?,
        };
        Some(if self.flat && bare.contains('.') {
            Cow::Owned(bare.replace('.', FLAT_SEPARATOR))
        } else {
            Cow::Borrowed(bare)
        })
    }

    /// Whether `id` is shown as `name` ([`Naming::present`] without building the name:
    /// a call compares it with each of the agent's tools).
    pub fn presents(&self, id: &str, name: &str) -> bool {
        let bare = match &self.namespace {
            None => id,
            Some(ns) => match id.strip_prefix(&**ns).and_then(|r| r.strip_prefix('.')) {
                Some(bare) => bare,
                None => return false,
            },
        };
        if !self.flat {
            return bare == name;
        }
        let mut rest = name;
        for (i, segment) in bare.split('.').enumerate() {
            if i > 0 {
                match rest.strip_prefix(FLAT_SEPARATOR) {
                    Some(r) => rest = r,
                    None => return false,
                }
            }
            match rest.strip_prefix(segment) {
                Some(r) => rest = r,
                None => return false,
            }
        }
        rest.is_empty()
    }

    /// The id a presented name would come from when no effective tool presents it
    /// (so the host can answer "not granted" or "unknown" for it).
    pub fn guess(&self, name: &str) -> String {
        let bare = if self.flat {
            Cow::Owned(name.replace(FLAT_SEPARATOR, "."))
        } else {
            Cow::Borrowed(name)
        };
        match &self.namespace {
            None => bare.into_owned(),
            Some(ns) => format!("{ns}.{bare}"),
        }
    }

    /// The id a call by `name` reaches among `tools`.
    pub fn resolve(&self, tools: &ResolvedTools, name: &str) -> Resolved {
        if self.is_canonical() {
            return Resolved::Tool(name.to_string());
        }
        let mut found: Vec<String> = Vec::new();
        for tool in tools.iter() {
            if self.presents(tool.name(), name) {
                found.push(tool.name().to_string());
            }
        }
        match found.len() {
            0 => Resolved::Tool(self.guess(name)),
            1 => Resolved::Tool(found.remove(0)),
            _ => Resolved::Ambiguous(found),
        }
    }

    /// Whether `tools` holds any tool of this naming's namespace (always, without one).
    pub fn has_tools(&self, tools: &ResolvedTools) -> bool {
        self.namespace.is_none() || tools.iter().any(|t| self.present(t.name()).is_some())
    }

    /// The tools shown under this naming, without the names that collide or are too
    /// long for a model API.
    pub fn listing<'a>(&self, tools: &'a ResolvedTools) -> Listing<'a> {
        let mut shown: Vec<(Cow<'a, str>, EffectiveTool<'a>)> = Vec::new();
        let mut too_long = Vec::new();
        for tool in tools.iter() {
            let Some(name) = self.present(tool.name()) else {
                continue;
            };
            if self.flat && name.len() > MAX_FLAT_NAME {
                too_long.push(tool.name().to_string());
                continue;
            }
            shown.push((name, tool));
        }
        let mut count: HashMap<&str, Vec<String>> = HashMap::new();
        for (name, tool) in &shown {
            count
                .entry(name.as_ref())
                .or_default()
                .push(tool.name().to_string());
        }
        let mut collisions: Vec<(String, Vec<String>)> = count
            .into_iter()
            .filter(|(_, ids)| ids.len() > 1)
            .map(|(name, ids)| (name.to_string(), ids))
            .collect();
        collisions.sort();
        if !collisions.is_empty() {
            shown.retain(|(name, _)| !collisions.iter().any(|(c, _)| c == name));
        }
        Listing {
            tools: shown,
            collisions,
            too_long,
        }
    }

    /// Rewrites the ids a host error message quotes (`` `acme.echo` ``) as this naming
    /// shows them, so a client is told of the names it used.
    pub fn message(&self, message: String, id: &str, shown: &str) -> String {
        if self.is_canonical() || id == shown {
            return message;
        }
        message.replace(&format!("`{id}`"), &format!("`{shown}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naming(namespace: Option<&str>, flat: bool) -> Naming {
        Naming {
            namespace: namespace.map(Into::into),
            flat,
        }
    }

    #[test]
    fn names_are_presented_and_guessed_back() {
        let flat = naming(None, true);
        assert_eq!(flat.present("acme.echo").as_deref(), Some("acme__echo"));
        assert_eq!(flat.guess("acme__echo"), "acme.echo");
        assert_eq!(
            flat.present("gh.issues.list").as_deref(),
            Some("gh__issues__list")
        );
        let ns = naming(Some("acme"), false);
        assert_eq!(ns.present("acme.echo").as_deref(), Some("echo"));
        assert_eq!(ns.present("acme_two.echo"), None);
        assert_eq!(ns.present("acmeecho"), None);
        assert_eq!(ns.present("other.echo"), None);
        assert_eq!(ns.guess("echo"), "acme.echo");
        // A dotted name on a namespace endpoint never leaves the namespace.
        assert_eq!(ns.guess("other.echo"), "acme.other.echo");
        let both = naming(Some("gh"), true);
        assert_eq!(
            both.present("gh.issues.list").as_deref(),
            Some("issues__list")
        );
        assert_eq!(both.guess("issues__list"), "gh.issues.list");
        assert!(Naming::default().is_canonical());
        assert_eq!(Naming::style(Some("flat")), Ok(true));
        assert_eq!(Naming::style(None), Ok(false));
        assert_eq!(
            Naming::style(Some("dots")).map_err(|e| e.to_string()),
            Err(
                "unknown toolNames `dots`: use `flat` (acme__echo) or `canonical` (acme.echo)"
                    .into()
            )
        );
    }

    #[test]
    fn presents_agrees_with_the_presented_name() {
        let ids = [
            "acme.echo",
            "a.b__c",
            "a.b.c",
            "a__b.c",
            "gh.issues.list",
            "acme_two.echo",
            "acme",
            "acme.",
            ".echo",
        ];
        let mut names: Vec<String> = ["echo", "acme__echo_x", "acme__", "", "__echo", "a__b__c"]
            .into_iter()
            .map(String::from)
            .collect();
        for naming in [
            naming(None, true),
            naming(None, false),
            naming(Some("acme"), true),
            naming(Some("acme"), false),
            naming(Some("a"), true),
            naming(Some("gh"), true),
        ] {
            names.extend(
                ids.iter()
                    .filter_map(|id| naming.present(id).map(Cow::into_owned)),
            );
            for id in ids {
                for name in &names {
                    assert_eq!(
                        naming.presents(id, name),
                        naming.present(id).is_some_and(|p| p == name.as_str()),
                        "{naming:?} {id} {name}"
                    );
                }
            }
        }
    }

    #[test]
    fn error_messages_quote_the_presented_name() {
        let flat = naming(None, true);
        assert_eq!(
            flat.message(
                "tool `acme.echo` is not granted".into(),
                "acme.echo",
                "acme__echo"
            ),
            "tool `acme__echo` is not granted"
        );
    }
}
