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

/// Why a template's braces do not pair up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BraceError {
    #[error("a lone `}}`: write `}}}}` for a literal brace, or open the reference with `{{`")]
    LoneClose,
    /// A `{` inside a reference (what the reference held so far).
    #[error(
        "a `{{` inside the reference `{{{0}`: close it with `}}` first, or write `{{{{` for a \
         literal brace"
    )]
    Nested(String),
    /// A reference the text ends in (what it held).
    #[error("the reference `{{{0}` is not closed: add `}}`, or write `{{{{` for a literal brace")]
    Unclosed(String),
    #[error(
        "an empty reference `{{}}`: name a value like `{{parameters.x}}`, or write `{{{{}}}}` \
         for literal braces"
    )]
    Empty,
}

/// Splits `text` into literal text and holes. `{{` and `}}` are literal braces.
pub(crate) fn split(text: &str) -> Result<Vec<Piece>, BraceError> {
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
            '}' => return Err(BraceError::LoneClose),
            '{' => {
                let mut hole = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') => return Err(BraceError::Nested(hole)),
                        Some(c) => hole.push(c),
                        None => return Err(BraceError::Unclosed(hole)),
                    }
                }
                let hole = hole.trim();
                if hole.is_empty() {
                    return Err(BraceError::Empty);
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

/// Why a reference (`{…}` in a template) names nothing usable where it stands; the
/// `String`s are the reference's own text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReferenceError {
    #[error("`auth.github()` cannot be used in a message: a message is text for a model")]
    GithubInMessage,
    #[error(
        "`auth.github()` cannot be used in a URL (it would end up in logs); send it in a \
         header: `Authorization: \"Bearer {{auth.github()}}\"`"
    )]
    GithubInUrl,
    #[error(
        "unknown auth provider `auth.{0}()`: this host only mints GitHub App installation \
         tokens (`auth.github()`); for other APIs put the token in a setting and use \
         `{{settings.<key>}}`"
    )]
    AuthProvider(String),
    #[error("`auth.{0}` is a function: write `{{auth.{0}()}}`")]
    AuthNotCalled(String),
    #[error(
        "`{{{0}}}` is not a reference: write `root.name` with no spaces or empty parts, like \
         `{{parameters.path}}`"
    )]
    Malformed(String),
    #[error(
        "a message can only use `{{event.payload.…}}`: it is rendered when the webhook \
         arrives, before it is routed to any binding (found `{{{0}}}`)"
    )]
    NotEventInMessage(String),
    #[error(
        "unknown parameter `{name}` in `{{{hole}}}` ({declared}); declare it under \
         `parameters.properties` (of the tool or of this action)"
    )]
    UnknownParameter {
        name: String,
        hole: String,
        declared: String,
    },
    #[error(
        "unknown setting `{name}` in `{{{hole}}}` ({declared}); declare it under \
         `settings.properties`"
    )]
    UnknownSetting {
        name: String,
        hole: String,
        declared: String,
    },
    #[error(
        "unknown agent value `{{{0}}}`: use `{{agent.name}}` (the agent id) or \
         `{{agent.namespace}}` (the unit of the binding)"
    )]
    UnknownAgentValue(String),
    #[error("`{{{0}}}` can only be used in an event's `message`")]
    EventOutsideMessage(String),
    #[error("`{{{0}}}`: name a member of the payload, like `{{event.payload.action}}`")]
    NotInPayload(String),
    #[error(
        "`{{{0}}}`: `session` values do not exist on this host (it runs no \
         `stateful_session` backend)"
    )]
    Session(String),
    #[error(
        "`{{{0}}}`: `runtime` values are not available on this host; put the value in a setting"
    )]
    Runtime(String),
    #[error("`{{{0}}}`: agent mounts do not exist on this host")]
    Mount(String),
    #[error(
        "unknown interpolation root `{root}` in `{{{hole}}}`: use `parameters`, `settings`, \
         `agent`, `auth.github()`, or `event.payload` in a message"
    )]
    UnknownRoot { root: String, hole: String },
}

impl Names<'_> {
    /// Resolves one hole, or says why it cannot be.
    pub(crate) fn resolve(&self, hole: &str, place: Place) -> Result<Resolved, ReferenceError> {
        let quoted = || hole.to_string();
        if let Some(rest) = hole.strip_prefix("auth.") {
            return match rest.strip_suffix("()") {
                Some("github") if place == Place::Message => Err(ReferenceError::GithubInMessage),
                Some("github") if place == Place::Url => Err(ReferenceError::GithubInUrl),
                Some("github") => {
                    self.usage.github.set(true);
                    Ok(Resolved::Github)
                }
                Some(other) => Err(ReferenceError::AuthProvider(other.to_string())),
                None => Err(ReferenceError::AuthNotCalled(rest.to_string())),
            };
        }
        let parts: Vec<&str> = hole.split('.').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || p.contains(char::is_whitespace))
        {
            return Err(ReferenceError::Malformed(quoted()));
        }
        let root = parts[0];
        if place == Place::Message && root != "event" {
            return Err(ReferenceError::NotEventInMessage(quoted()));
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
                    None => Err(ReferenceError::UnknownParameter {
                        name: rest.join("."),
                        hole: quoted(),
                        declared: list(self.arguments.iter().chain(self.config_params.iter())),
                    }),
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
                None => Err(ReferenceError::UnknownSetting {
                    name: rest.join("."),
                    hole: quoted(),
                    declared: list(self.settings.keys()),
                }),
            },
            "agent" => match rest {
                [key @ ("name" | "namespace")] => Ok(Resolved::Ref(Ref {
                    root: Root::Agent,
                    key: key.to_string(),
                    path: Vec::new(),
                })),
                _ => Err(ReferenceError::UnknownAgentValue(quoted())),
            },
            "event" => match rest {
                _ if place != Place::Message => Err(ReferenceError::EventOutsideMessage(quoted())),
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
                _ => Err(ReferenceError::NotInPayload(quoted())),
            },
            "session" => Err(ReferenceError::Session(quoted())),
            "runtime" => Err(ReferenceError::Runtime(quoted())),
            "mount" => Err(ReferenceError::Mount(quoted())),
            other => Err(ReferenceError::UnknownRoot {
                root: other.to_string(),
                hole: quoted(),
            }),
        }
    }

    /// Compiles text where values land as is (headers, messages). Every problem found.
    pub(crate) fn text(&self, text: &str, place: Place) -> Result<Template, Vec<String>> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for piece in split(text).map_err(|e| vec![e.to_string()])? {
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
                    Err(e) => errors.push(e.to_string()),
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
                            errors.push(e.to_string());
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
                        problems.at(node.pos, field, e.to_string());
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
                            problems.at(node.pos, field, e.to_string());
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

/// A setting in a URL's host with neither a `default` nor `enum` values: the hosts it
/// may name are not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoKnownValues {
    /// The setting's key.
    pub setting: String,
}

/// The hosts a URL's authority can name: every combination of the literal text and the
/// `default`/`enum` values of the settings in it.
pub(crate) fn authority_hosts(
    authority: &[AuthorityPiece],
    settings: &BTreeMap<String, SettingInfo>,
) -> Result<Vec<Result<String, UnreachableUrl>>, NoKnownValues> {
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
                    return Err(NoKnownValues {
                        setting: key.clone(),
                    });
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

/// Why a URL names no host a tool could reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnreachableUrl {
    #[error("`{url}` is not a URL: {reason}")]
    NotAUrl {
        url: String,
        reason: url::ParseError,
    },
    #[error("`{url}`: only http and https URLs can be reached (found `{scheme}`)")]
    Scheme { url: String, scheme: String },
    #[error("`{0}` has no host")]
    NoHost(String),
}

/// The host of an absolute http(s) URL (no port, no brackets, lower case).
pub(crate) fn host_of(url: &str) -> Result<String, UnreachableUrl> {
    let parsed = reqwest::Url::parse(url).map_err(|reason| UnreachableUrl::NotAUrl {
        url: url.to_string(),
        reason,
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(UnreachableUrl::Scheme {
            url: url.to_string(),
            scheme: parsed.scheme().to_string(),
        });
    }
    match parsed.host_str() {
        Some(h) if !h.is_empty() => Ok(h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase()),
        _ => Err(UnreachableUrl::NoHost(url.to_string())),
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
            Err(NoKnownValues {
                setting: "bare".to_string()
            })
        );
        assert_eq!(host_of("http://[::1]:8080"), Ok("::1".to_string()));
        assert_eq!(
            host_of("ftp://x").map_err(|e| e.to_string()),
            Err("`ftp://x`: only http and https URLs can be reached (found `ftp`)".to_string())
        );
    }
}
