//! `{root.path}` templates: split, resolved against the declared names, and compiled into
//! the plan's segments with the encoding of where they land.
//!
//! Everything a template can name is known when packing (settings, parameters, agent
//! metadata, `auth.github()`, the event payload), so a typo is a pack error with a line,
//! never a hole the interpreter fills with nothing at run time.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use declarative_plan::{Body, Encoding, Ref, Root, Segment, Template};
use serde_json::Value;

use super::error::Problems;
use super::yaml::{Kind, Node};

/// One piece of a template's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text as is (braces already unescaped).
    Lit(String),
    /// The expression between `{` and `}`, trimmed.
    Hole(String),
    /// A tool argument named directly (an OpenAPI path parameter), not written as text:
    /// in a URL path it is one segment ([`Encoding::Segment`]).
    Arg(String),
}

/// Splits `text` into literal text and holes. `{{` and `}}` are literal braces.
pub(crate) fn split(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                lit.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                lit.push('}');
            }
            '}' => {
                return Err(
                    "a lone `}`: write `}}` for a literal brace, or open the reference with `{`"
                        .into(),
                )
            }
            '{' => {
                let mut hole = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') => {
                            return Err(format!(
                                "a `{{` inside the reference `{{{hole}`: close it with `}}` first, \
                                 or write `{{{{` for a literal brace"
                            ))
                        }
                        Some(c) => hole.push(c),
                        None => {
                            return Err(format!(
                                "the reference `{{{hole}` is not closed: add `}}`, or write `{{{{` \
                                 for a literal brace"
                            ))
                        }
                    }
                }
                let hole = hole.trim();
                if hole.is_empty() {
                    return Err(
                        "an empty reference `{}`: name a value like `{parameters.x}`, or write \
                         `{{}}` for literal braces"
                            .into(),
                    );
                }
                if !lit.is_empty() {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(Piece::Hole(hole.to_string()));
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        pieces.push(Piece::Lit(lit));
    }
    Ok(pieces)
}

/// A setting, as far as templates and hosts care.
#[derive(Debug, Clone, Default)]
pub(crate) struct SettingInfo {
    /// Its `default`.
    pub default: Option<Value>,
    /// Its `enum` values.
    pub enum_values: Vec<Value>,
}

/// What templates used, for the config schema (GitHub) and warnings (unused settings).
#[derive(Debug, Default)]
pub(crate) struct Usage {
    pub github: Cell<bool>,
    pub settings: RefCell<BTreeSet<String>>,
}

/// The names a template may refer to.
pub(crate) struct Names<'a> {
    /// Declared settings.
    pub settings: &'a BTreeMap<String, SettingInfo>,
    /// Tool arguments of the tool being compiled.
    pub arguments: BTreeSet<String>,
    /// Binding parameters (`require_binding`, event parameters).
    pub config_params: &'a BTreeSet<String>,
    /// What was used.
    pub usage: &'a Usage,
}

/// Where a template lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A request URL.
    Url,
    /// A request header value.
    Header,
    /// A request body.
    Body,
    /// An event's message.
    Message,
}

/// A resolved hole.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    Ref(Ref),
    Github,
}

/// The longest declared name that is a dotted prefix of `parts`, and the rest.
fn longest<'p>(
    parts: &'p [&'p str],
    declared: impl Fn(&str) -> bool,
) -> Option<(String, &'p [&'p str])> {
    (1..=parts.len()).rev().find_map(|n| {
        let name = parts[..n].join(".");
        declared(&name).then_some((name, &parts[n..]))
    })
}

fn list<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    let names: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    if names.is_empty() {
        "none are declared".into()
    } else {
        format!("declared: {}", names.join(", "))
    }
}

impl Names<'_> {
    /// Resolves one hole, or says why it cannot be.
    pub(crate) fn resolve(&self, hole: &str, place: Place) -> Result<Resolved, String> {
        if let Some(rest) = hole.strip_prefix("auth.") {
            return match rest.strip_suffix("()") {
                Some("github") if place == Place::Message => Err(
                    "`auth.github()` cannot be used in a message: a message is text for a model"
                        .into(),
                ),
                Some("github") if place == Place::Url => Err(
                    "`auth.github()` cannot be used in a URL (it would end up in logs); send it in \
                     a header: `Authorization: \"Bearer {auth.github()}\"`"
                        .into(),
                ),
                Some("github") => {
                    self.usage.github.set(true);
                    Ok(Resolved::Github)
                }
                Some(other) => Err(format!(
                    "unknown auth provider `auth.{other}()`: this host only mints GitHub App \
                     installation tokens (`auth.github()`); for other APIs put the token in a \
                     setting and use `{{settings.<key>}}`"
                )),
                None => Err(format!(
                    "`auth.{rest}` is a function: write `{{auth.{rest}()}}`"
                )),
            };
        }
        let parts: Vec<&str> = hole.split('.').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || p.contains(char::is_whitespace))
        {
            return Err(format!(
                "`{{{hole}}}` is not a reference: write `root.name` with no spaces or empty parts, \
                 like `{{parameters.path}}`"
            ));
        }
        let root = parts[0];
        if place == Place::Message && root != "event" {
            return Err(format!(
                "a message can only use `{{event.payload.…}}`: it is rendered when the webhook \
                 arrives, before it is routed to any binding (found `{{{hole}}}`)"
            ));
        }
        let rest = &parts[1..];
        match root {
            "parameters" => {
                let found = longest(rest, |n| self.arguments.contains(n))
                    .map(|(k, p)| (Root::Argument, k, p))
                    .or_else(|| {
                        longest(rest, |n| self.config_params.contains(n))
                            .map(|(k, p)| (Root::Config, k, p))
                    });
                match found {
                    Some((root, key, path)) => Ok(Resolved::Ref(Ref {
                        root,
                        key,
                        path: path.iter().map(|s| s.to_string()).collect(),
                    })),
                    None => Err(format!(
                        "unknown parameter `{}` in `{{{hole}}}` ({}); declare it under \
                         `parameters.properties` (of the tool or of this action)",
                        rest.join("."),
                        list(self.arguments.iter().chain(self.config_params.iter()))
                    )),
                }
            }
            "settings" => match longest(rest, |n| self.settings.contains_key(n)) {
                Some((key, path)) => {
                    self.usage.settings.borrow_mut().insert(key.clone());
                    Ok(Resolved::Ref(Ref {
                        root: Root::Config,
                        key,
                        path: path.iter().map(|s| s.to_string()).collect(),
                    }))
                }
                None => Err(format!(
                    "unknown setting `{}` in `{{{hole}}}` ({}); declare it under \
                     `settings.properties`",
                    rest.join("."),
                    list(self.settings.keys())
                )),
            },
            "agent" => match rest {
                [key @ ("name" | "namespace")] => Ok(Resolved::Ref(Ref {
                    root: Root::Agent,
                    key: key.to_string(),
                    path: Vec::new(),
                })),
                _ => Err(format!(
                    "unknown agent value `{{{hole}}}`: use `{{agent.name}}` (the agent id) or \
                     `{{agent.namespace}}` (the unit of the binding)"
                )),
            },
            "event" => match rest {
                _ if place != Place::Message => Err(format!(
                    "`{{{hole}}}` can only be used in an event's `message`"
                )),
                ["payload", key, path @ ..] => Ok(Resolved::Ref(Ref {
                    root: Root::EventPayload,
                    key: key.to_string(),
                    path: path.iter().map(|s| s.to_string()).collect(),
                })),
                // The whole payload, as JSON text.
                ["payload"] => Ok(Resolved::Ref(Ref {
                    root: Root::EventPayload,
                    key: String::new(),
                    path: Vec::new(),
                })),
                _ => Err(format!(
                    "`{{{hole}}}`: name a member of the payload, like `{{event.payload.action}}`"
                )),
            },
            "session" => Err(format!(
                "`{{{hole}}}`: `session` values do not exist on this host (it runs no \
                 `stateful_session` backend)"
            )),
            "runtime" => Err(format!(
                "`{{{hole}}}`: `runtime` values are not available on this host; put the value in \
                 a setting"
            )),
            "mount" => Err(format!(
                "`{{{hole}}}`: agent mounts do not exist on this host"
            )),
            other => Err(format!(
                "unknown interpolation root `{other}` in `{{{hole}}}`: use `parameters`, \
                 `settings`, `agent`, `auth.github()`, or `event.payload` in a message"
            )),
        }
    }

    /// Compiles text where values land as is (headers, messages). Every problem found.
    pub(crate) fn text(&self, text: &str, place: Place) -> Result<Template, Vec<String>> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for piece in split(text).map_err(|e| vec![e])? {
            match piece {
                Piece::Lit(s) => {
                    if place == Place::Header && s.chars().any(char::is_control) {
                        errors.push(
                            "a header value cannot contain line breaks or other control \
                             characters; write it on one line"
                                .into(),
                        );
                    }
                    push_lit(&mut out, &s);
                }
                Piece::Arg(name) => out.push(Segment::Ref {
                    value: Ref {
                        root: Root::Argument,
                        key: name,
                        path: Vec::new(),
                    },
                    encoding: Encoding::Raw,
                }),
                Piece::Hole(h) => match self.resolve(&h, place) {
                    Ok(Resolved::Ref(value)) => out.push(Segment::Ref {
                        value,
                        encoding: Encoding::Raw,
                    }),
                    Ok(Resolved::Github) => out.push(Segment::GithubToken),
                    Err(e) => errors.push(e),
                },
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }
}

fn push_lit(out: &mut Template, s: &str) {
    if s.is_empty() {
        return;
    }
    if let Some(Segment::Literal(last)) = out.last_mut() {
        last.push_str(s);
    } else {
        out.push(Segment::Literal(s.to_string()));
    }
}

/// One piece of a URL's scheme and authority: what its hosts are derived from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthorityPiece {
    Lit(String),
    Setting(String),
}

/// A compiled URL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CompiledUrl {
    pub template: Template,
    /// The scheme and authority (everything before the path).
    pub authority: Vec<AuthorityPiece>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum UrlPart {
    Scheme,
    Authority,
    Path,
    Query,
}

impl Names<'_> {
    /// Compiles a URL template: refs in the path are [`Encoding::Path`] (a
    /// [`Piece::Arg`], an OpenAPI path parameter, [`Encoding::Segment`]), in the query
    /// [`Encoding::Query`]; the scheme and authority may only hold literals and settings.
    pub(crate) fn url(&self, pieces: &[Piece]) -> Result<CompiledUrl, Vec<String>> {
        let mut errors = Vec::new();
        let mut template = Vec::new();
        let mut authority = Vec::new();
        let mut part = UrlPart::Scheme;
        let mut scheme = String::new();
        let mut after_hole = false;
        for piece in pieces {
            match piece {
                Piece::Lit(s) => {
                    let mut rest = s.as_str();
                    if part == UrlPart::Scheme && after_hole {
                        // A setting gave the start: `{settings.scheme}://host` or
                        // `{settings.base_url}/path`.
                        part = UrlPart::Authority;
                        if let Some(r) = rest.strip_prefix("://") {
                            authority.push(AuthorityPiece::Lit("://".into()));
                            rest = r;
                        }
                    }
                    let mut auth_text = String::new();
                    for c in rest.chars() {
                        if c == '#' {
                            errors.push(
                                "a URL fragment (`#…`) is never sent to the server; remove it"
                                    .into(),
                            );
                            break;
                        }
                        match part {
                            UrlPart::Scheme => {
                                scheme.push(c);
                                auth_text.push(c);
                                if scheme.ends_with("://") {
                                    part = UrlPart::Authority;
                                }
                            }
                            UrlPart::Authority if c == '/' => part = UrlPart::Path,
                            UrlPart::Authority if c == '?' => part = UrlPart::Query,
                            UrlPart::Authority => auth_text.push(c),
                            UrlPart::Path if c == '?' => part = UrlPart::Query,
                            UrlPart::Path | UrlPart::Query => {}
                        }
                    }
                    if !auth_text.is_empty() {
                        authority.push(AuthorityPiece::Lit(auth_text));
                    }
                    push_lit(&mut template, s);
                    after_hole = false;
                }
                Piece::Arg(name) => {
                    // An OpenAPI path parameter: exactly one segment (its `simple`
                    // style encodes `/` too).
                    let encoding = match part {
                        UrlPart::Path => Encoding::Segment,
                        UrlPart::Query => Encoding::Query,
                        UrlPart::Scheme | UrlPart::Authority => {
                            errors.push(format!(
                                "the argument `{name}` would be in the URL's host; a parameter \
                                 there would let the caller pick the host"
                            ));
                            continue;
                        }
                    };
                    template.push(Segment::Ref {
                        value: Ref {
                            root: Root::Argument,
                            key: name.clone(),
                            path: Vec::new(),
                        },
                        encoding,
                    });
                    after_hole = false;
                }
                Piece::Hole(h) => {
                    let value = match self.resolve(h, Place::Url) {
                        Ok(Resolved::Ref(value)) => value,
                        Ok(Resolved::Github) => {
                            errors.push("`auth.github()` cannot be used in a URL".into());
                            continue;
                        }
                        Err(e) => {
                            errors.push(e);
                            continue;
                        }
                    };
                    let encoding = match part {
                        UrlPart::Scheme | UrlPart::Authority => {
                            let setting = value.root == Root::Config
                                && value.path.is_empty()
                                && self.settings.contains_key(&value.key)
                                && h.starts_with("settings.");
                            if !setting {
                                errors.push(format!(
                                    "`{{{h}}}` is in the URL's scheme or host, where only literal \
                                     text and settings may go: a parameter there would let the \
                                     caller pick the host. Use a setting (`{{settings.base_url}}`) \
                                     or a literal host"
                                ));
                                continue;
                            }
                            authority.push(AuthorityPiece::Setting(value.key.clone()));
                            after_hole = part == UrlPart::Scheme;
                            Encoding::Raw
                        }
                        UrlPart::Path => Encoding::Path,
                        UrlPart::Query => Encoding::Query,
                    };
                    template.push(Segment::Ref { value, encoding });
                }
            }
        }
        if part == UrlPart::Scheme && !after_hole {
            errors.push(
                "not an absolute URL: start it with `https://` (or a setting holding the base URL)"
                    .into(),
            );
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(CompiledUrl {
            template,
            authority,
        })
    }

    /// Compiles a request body (any JSON). A string that is exactly one reference keeps
    /// the value's JSON type; parts without references are literals.
    pub(crate) fn body(&self, node: &Node, field: &str, problems: &mut Problems) -> Body {
        match &node.kind {
            Kind::Str(s) => {
                let pieces = match split(s) {
                    Ok(p) => p,
                    Err(e) => {
                        problems.at(node.pos, field, e);
                        return Body::Literal(Value::Null);
                    }
                };
                match pieces.as_slice() {
                    [] => Body::Literal(Value::String(String::new())),
                    [Piece::Lit(s)] => Body::Literal(Value::String(s.clone())),
                    [Piece::Hole(h)] => match self.resolve(h, Place::Body) {
                        Ok(Resolved::Ref(r)) => Body::Value(r),
                        Ok(Resolved::Github) => Body::Text(vec![Segment::GithubToken]),
                        Err(e) => {
                            problems.at(node.pos, field, e);
                            Body::Literal(Value::Null)
                        }
                    },
                    _ => match self.text(s, Place::Body) {
                        Ok(t) => Body::Text(t),
                        Err(errors) => {
                            for e in errors {
                                problems.at(node.pos, field, e);
                            }
                            Body::Literal(Value::Null)
                        }
                    },
                }
            }
            Kind::Seq(items) => {
                let items: Vec<Body> = items
                    .iter()
                    .enumerate()
                    .map(|(i, n)| self.body(n, &format!("{field}[{i}]"), problems))
                    .collect();
                if items.iter().all(|b| matches!(b, Body::Literal(_))) {
                    Body::Literal(Value::Array(
                        items
                            .into_iter()
                            .map(|b| match b {
                                Body::Literal(v) => v,
                                _ => Value::Null,
                            })
                            .collect(),
                    ))
                } else {
                    Body::Array(items)
                }
            }
            Kind::Map(entries) => {
                let members: Vec<(String, Body)> = entries
                    .iter()
                    .map(|e| {
                        (
                            e.key.clone(),
                            self.body(&e.value, &format!("{field}.{}", e.key), problems),
                        )
                    })
                    .collect();
                if members.iter().all(|(_, b)| matches!(b, Body::Literal(_))) {
                    Body::Literal(Value::Object(
                        members
                            .into_iter()
                            .map(|(k, b)| match b {
                                Body::Literal(v) => (k, v),
                                _ => (k, Value::Null),
                            })
                            .collect(),
                    ))
                } else {
                    Body::Object(members)
                }
            }
            _ => Body::Literal(node.to_json()),
        }
    }
}

/// The hosts a URL's authority can name: every combination of the literal text and the
/// `default`/`enum` values of the settings in it. `Err(key)`: setting `key` has none.
pub(crate) fn authority_hosts(
    authority: &[AuthorityPiece],
    settings: &BTreeMap<String, SettingInfo>,
) -> Result<Vec<Result<String, String>>, String> {
    let mut renderings = vec![String::new()];
    for piece in authority {
        match piece {
            AuthorityPiece::Lit(s) => renderings.iter_mut().for_each(|r| r.push_str(s)),
            AuthorityPiece::Setting(key) => {
                let info = settings.get(key).cloned().unwrap_or_default();
                let values: Vec<String> = info
                    .default
                    .iter()
                    .chain(info.enum_values.iter())
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect();
                if values.is_empty() {
                    return Err(key.clone());
                }
                renderings = renderings
                    .iter()
                    .flat_map(|r| values.iter().map(move |v| format!("{r}{v}")))
                    .take(64)
                    .collect();
            }
        }
    }
    Ok(renderings.iter().map(|r| host_of(r)).collect())
}

/// The host of an absolute http(s) URL (no port, no brackets, lower case).
pub(crate) fn host_of(url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "`{url}`: only http and https URLs can be reached (found `{}`)",
            parsed.scheme()
        ));
    }
    match parsed.host_str() {
        Some(h) if !h.is_empty() => Ok(h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase()),
        _ => Err(format!("`{url}` has no host")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_handles_escapes_and_refuses_stray_braces() {
        assert_eq!(
            split("a {{b}} {parameters.x} c").expect("ok"),
            vec![
                Piece::Lit("a {b} ".into()),
                Piece::Hole("parameters.x".into()),
                Piece::Lit(" c".into())
            ]
        );
        assert_eq!(split("{ x }").expect("ok"), vec![Piece::Hole("x".into())]);
        assert!(split("a } b").is_err());
        assert!(split("a { b").is_err());
        assert!(split("{}").is_err());
        assert!(split("{a{b}}").is_err());
    }

    #[test]
    fn hosts_come_from_literals_and_setting_values() {
        let mut settings = BTreeMap::new();
        settings.insert(
            "base".to_string(),
            SettingInfo {
                default: Some("https://api.example.com/v1".into()),
                enum_values: vec!["https://EU.example.com".into()],
            },
        );
        settings.insert("bare".to_string(), SettingInfo::default());
        let hosts = authority_hosts(&[AuthorityPiece::Setting("base".into())], &settings)
            .expect("has values");
        assert_eq!(
            hosts,
            vec![
                Ok("api.example.com".to_string()),
                Ok("eu.example.com".to_string())
            ]
        );
        assert_eq!(
            authority_hosts(&[AuthorityPiece::Setting("bare".into())], &settings),
            Err("bare".to_string())
        );
        assert_eq!(host_of("http://[::1]:8080"), Ok("::1".to_string()));
        assert!(host_of("ftp://x").is_err());
    }
}
