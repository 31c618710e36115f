//! Filling a plan's templates with the values of one call.
//!
//! Everything a template can refer to was resolved by `pack` into a [`Ref`] with a root;
//! here a [`Scope`] holds the values of those roots for one call (arguments, binding
//! config, agent, event payload) and every reference is looked up, turned into text and
//! escaped for where it lands. Escaping is what keeps a model's argument inside its hole:
//! a `path` of `../../user` cannot climb out of the URL path the manifest wrote, and a
//! header value cannot smuggle a second header.

use std::cell::RefCell;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use declarative_plan::{Body, Encoding, QueryParam, Ref, Root, Segment, Template};
use serde_json::{Map, Value};

/// Why a template could not be filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// A referenced value is absent (and has no default): its name and its root.
    Missing(String, Root),
    /// A value is present but cannot go where the template puts it.
    Invalid(String),
    /// The host refused a GitHub installation token.
    Token(String),
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::Missing(name, _) => write!(f, "no value for `{name}`"),
            RenderError::Invalid(why) => f.write_str(why),
            RenderError::Token(why) => write!(f, "no GitHub installation token: {why}"),
        }
    }
}

/// The values one call's templates can refer to.
pub struct Scope<'a> {
    /// Tool arguments, defaults applied.
    pub arguments: &'a Map<String, Value>,
    /// The binding's config, defaults applied.
    pub config: &'a Map<String, Value>,
    /// The calling agent's id, when an agent calls.
    pub agent: Option<&'a str>,
    /// The unit of the binding.
    pub unit: Option<&'a str>,
    /// The event payload (messages only).
    pub event_payload: Option<&'a Value>,
    /// Mints the GitHub installation token (at most once per scope).
    pub github_token: &'a dyn Fn() -> Result<String, String>,
    /// The token once minted, so the call can also redact it.
    pub minted: RefCell<Option<String>>,
}

impl<'a> Scope<'a> {
    /// A scope with the given arguments and config and nothing else.
    pub fn new(arguments: &'a Map<String, Value>, config: &'a Map<String, Value>) -> Self {
        Scope {
            arguments,
            config,
            agent: None,
            unit: None,
            event_payload: None,
            github_token: &|| Err("this operation has no binding to mint a token for".into()),
            minted: RefCell::new(None),
        }
    }

    /// The value `r` refers to; `None` when absent or `null`.
    pub fn lookup(&self, r: &Ref) -> Option<&'a Value> {
        let base: Option<&'a Value> = match r.root {
            Root::Argument => self.arguments.get(&r.key),
            Root::Config => self.config.get(&r.key),
            Root::EventPayload => self.event_payload.and_then(|p| {
                if r.key.is_empty() {
                    Some(p)
                } else {
                    p.get(&r.key)
                }
            }),
            Root::Agent => None,
        };
        let mut value = base?;
        for member in &r.path {
            value = match value {
                Value::Object(map) => map.get(member)?,
                Value::Array(items) => items.get(member.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        (!value.is_null()).then_some(value)
    }

    /// The text of `r`: strings as they are, other JSON as JSON.
    fn text_of(&self, r: &Ref) -> Result<String, RenderError> {
        if r.root == Root::Agent {
            let value = match r.key.as_str() {
                "name" => self.agent,
                "namespace" => self.unit,
                _ => None,
            };
            return value
                .map(str::to_owned)
                .ok_or_else(|| RenderError::Missing(ref_name(r), r.root));
        }
        let value = self
            .lookup(r)
            .ok_or_else(|| RenderError::Missing(ref_name(r), r.root))?;
        Ok(value_text(value))
    }

    fn token(&self) -> Result<String, RenderError> {
        if let Some(token) = self.minted.borrow().as_ref() {
            return Ok(token.clone());
        }
        let token = (self.github_token)().map_err(RenderError::Token)?;
        *self.minted.borrow_mut() = Some(token.clone());
        Ok(token)
    }

    /// Fills `template`.
    pub fn render(&self, template: &Template) -> Result<String, RenderError> {
        let mut out = String::new();
        for segment in template {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::GithubToken => out.push_str(&self.token()?),
                Segment::Ref { value, encoding } => {
                    let text = self.text_of(value)?;
                    encode_into(&mut out, &text, *encoding)?;
                }
            }
        }
        Ok(out)
    }

    /// Fills a message template: an absent payload member renders as nothing.
    pub fn render_lenient(&self, template: &Template) -> String {
        let mut out = String::new();
        for segment in template {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::GithubToken => {}
                Segment::Ref { value, encoding } => {
                    if let Ok(text) = self.text_of(value) {
                        // Raw encoding cannot fail; the others only refuse dot segments.
                        let _ = encode_into(&mut out, &text, *encoding);
                    }
                }
            }
        }
        out
    }

    /// The URL of `url` with the present `query` parameters appended.
    pub fn render_url(&self, url: &Template, query: &[QueryParam]) -> Result<String, RenderError> {
        let mut out = self.render(url)?;
        let mut separator = if out.contains('?') { '&' } else { '?' };
        for param in query {
            let Some(value) = self.lookup(&param.value) else {
                continue;
            };
            let values: Vec<&Value> = match value {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            for value in values {
                out.push(separator);
                separator = '&';
                encode_into(&mut out, &param.name, Encoding::Query)?;
                out.push('=');
                encode_into(&mut out, &value_text(value), Encoding::Query)?;
            }
        }
        Ok(out)
    }

    /// The headers whose values are all present, checked for control characters.
    pub fn render_headers(
        &self,
        headers: &[(String, Template)],
    ) -> Result<Vec<(String, String)>, RenderError> {
        let mut out = Vec::with_capacity(headers.len());
        for (name, template) in headers {
            let value = match self.render(template) {
                Ok(value) => value,
                Err(RenderError::Missing(..)) => continue,
                Err(e) => return Err(e),
            };
            if value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(RenderError::Invalid(format!(
                    "the value of header `{name}` contains a control character"
                )));
            }
            out.push((name.clone(), value));
        }
        Ok(out)
    }

    /// Fills a JSON body; `None` when it is a single absent value.
    pub fn render_body(&self, body: &Body) -> Result<Option<Value>, RenderError> {
        Ok(match body {
            Body::Literal(value) => Some(value.clone()),
            Body::Text(template) => Some(Value::String(self.render(template)?)),
            // Agent values are strings of the call, not JSON of a root.
            Body::Value(r) if r.root == Root::Agent => self.text_of(r).ok().map(Value::String),
            Body::Value(r) => self.lookup(r).cloned(),
            Body::Object(members) => {
                let mut map = Map::with_capacity(members.len());
                for (key, member) in members {
                    if let Some(value) = self.render_body(member)? {
                        map.insert(key.clone(), value);
                    }
                }
                Some(Value::Object(map))
            }
            Body::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(self.render_body(item)?.unwrap_or(Value::Null));
                }
                Some(Value::Array(out))
            }
        })
    }
}

/// How a reference is named in errors: as the manifest wrote it.
pub fn ref_name(r: &Ref) -> String {
    let root = match r.root {
        Root::Argument => "parameters",
        Root::Config => "config",
        Root::Agent => "agent",
        Root::EventPayload => "event.payload",
    };
    let mut name = format!("{root}.{}", r.key);
    for member in &r.path {
        name.push('.');
        name.push_str(member);
    }
    name
}

/// Strings as they are, everything else as compact JSON.
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Appends `text` to `out`, escaped for `encoding`.
fn encode_into(out: &mut String, text: &str, encoding: Encoding) -> Result<(), RenderError> {
    match encoding {
        Encoding::Raw => out.push_str(text),
        Encoding::Query => percent_encode(out, text, false),
        Encoding::Segment => {
            let dots = text
                .split(['/', '\\'])
                .any(|part| part == "." || part == "..");
            if text.is_empty() || dots {
                return Err(RenderError::Invalid(format!(
                    "`{text}` cannot be a URL path segment: give a non-empty value without `.` or `..` parts"
                )));
            }
            percent_encode(out, text, true);
            // `/` is not kept by `percent_encode`, so the value stays one segment.
        }
        Encoding::Path => {
            // `\` too: some servers take it (or `%5C`) for a separator.
            if let Some(part) = text
                .split(['/', '\\'])
                .find(|part| *part == "." || *part == "..")
            {
                return Err(RenderError::Invalid(format!(
                    "`{text}` has a `{part}` segment, which would leave the path the tool may reach"
                )));
            }
            for (i, segment) in text.split('/').enumerate() {
                if i > 0 {
                    out.push('/');
                }
                percent_encode(out, segment, true);
            }
        }
    }
    Ok(())
}

/// Everything but RFC 3986's unreserved characters is escaped in a query component.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path segment may also hold the sub-delimiters and `:`/`@` as they are.
const PATH_SEGMENT: &AsciiSet = &QUERY
    .remove(b'!')
    .remove(b'$')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b',')
    .remove(b';')
    .remove(b':')
    .remove(b'@');

/// Appends `text` percent-encoded for a query component, or for a path segment.
pub fn percent_encode(out: &mut String, text: &str, path_segment: bool) {
    let set = if path_segment { PATH_SEGMENT } else { QUERY };
    out.extend(utf8_percent_encode(text, set));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn arg(key: &str) -> Ref {
        Ref {
            root: Root::Argument,
            key: key.into(),
            path: vec![],
        }
    }

    fn hole(key: &str, encoding: Encoding) -> Segment {
        Segment::Ref {
            value: arg(key),
            encoding,
        }
    }

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn path_values_are_escaped_and_cannot_climb_out() {
        let args = map(
            json!({"p": "docs/a b?.md", "up": "../../user", "dot": "a/./b", "empty": "", "dotdot": "..", "back": "a\\..\\b"}),
        );
        let config = Map::new();
        let scope = Scope::new(&args, &config);
        let url = vec![
            Segment::Literal("https://x/contents/".into()),
            hole("p", Encoding::Path),
        ];
        assert_eq!(
            scope.render(&url).unwrap(),
            "https://x/contents/docs/a%20b%3F.md"
        );
        // One segment: `/` is encoded, and empty or dot values are refused.
        let one = |key: &str| {
            scope.render(&vec![
                Segment::Literal("https://x/users/".into()),
                hole(key, Encoding::Segment),
                Segment::Literal("/keys".into()),
            ])
        };
        assert_eq!(one("p").unwrap(), "https://x/users/docs%2Fa%20b%3F.md/keys");
        // A server that decodes `%2F` must not see `..` either.
        for key in ["empty", "dotdot", "up", "dot"] {
            assert!(matches!(one(key), Err(RenderError::Invalid(_))), "{key}");
        }
        for key in ["up", "dot", "back"] {
            let url = vec![
                Segment::Literal("https://x/".into()),
                hole(key, Encoding::Path),
            ];
            assert!(matches!(scope.render(&url), Err(RenderError::Invalid(_))));
        }
    }

    #[test]
    fn query_values_are_escaped_and_absent_ones_left_out() {
        let args = map(json!({"q": "a&b=c", "tags": ["x", "y z"]}));
        let config = Map::new();
        let scope = Scope::new(&args, &config);
        let query = [
            QueryParam {
                name: "q".into(),
                value: arg("q"),
            },
            QueryParam {
                name: "absent".into(),
                value: arg("absent"),
            },
            QueryParam {
                name: "tag".into(),
                value: arg("tags"),
            },
        ];
        let url = vec![Segment::Literal("https://x/s".into())];
        assert_eq!(
            scope.render_url(&url, &query).unwrap(),
            "https://x/s?q=a%26b%3Dc&tag=x&tag=y%20z"
        );
    }

    #[test]
    fn headers_with_absent_values_are_dropped_and_newlines_refused() {
        let args = map(json!({"evil": "x\r\nX-Admin: 1", "ok": "v"}));
        let config = Map::new();
        let scope = Scope::new(&args, &config);
        let headers = vec![
            ("A".to_owned(), vec![hole("ok", Encoding::Raw)]),
            ("B".to_owned(), vec![hole("absent", Encoding::Raw)]),
        ];
        assert_eq!(
            scope.render_headers(&headers).unwrap(),
            vec![("A".to_owned(), "v".to_owned())]
        );
        let evil = vec![("C".to_owned(), vec![hole("evil", Encoding::Raw)])];
        assert!(matches!(
            scope.render_headers(&evil),
            Err(RenderError::Invalid(_))
        ));
    }

    #[test]
    fn a_single_reference_keeps_its_type_and_absent_members_vanish() {
        let args = map(json!({"n": 3, "name": "x"}));
        let config = Map::new();
        let scope = Scope::new(&args, &config);
        let body = Body::Object(vec![
            ("n".into(), Body::Value(arg("n"))),
            ("gone".into(), Body::Value(arg("absent"))),
            (
                "msg".into(),
                Body::Text(vec![
                    Segment::Literal("hi ".into()),
                    hole("name", Encoding::Raw),
                ]),
            ),
            ("fixed".into(), Body::Literal(json!([1]))),
        ]);
        assert_eq!(
            scope.render_body(&body).unwrap(),
            Some(json!({"n": 3, "msg": "hi x", "fixed": [1]}))
        );
        let missing = Body::Text(vec![hole("absent", Encoding::Raw)]);
        assert_eq!(
            scope.render_body(&missing),
            Err(RenderError::Missing(
                "parameters.absent".into(),
                Root::Argument
            ))
        );
    }

    #[test]
    fn the_github_token_is_minted_once_and_agent_values_come_from_the_call() {
        let args = Map::new();
        let config = Map::new();
        let mints = std::cell::Cell::new(0);
        let mint = || {
            mints.set(mints.get() + 1);
            Ok::<_, String>("ghs_x".to_owned())
        };
        let mut scope = Scope::new(&args, &config);
        scope.github_token = &mint;
        scope.agent = Some("ada");
        scope.unit = Some("eng");
        let t = vec![
            Segment::GithubToken,
            Segment::Literal(" ".into()),
            Segment::GithubToken,
            Segment::Ref {
                value: Ref {
                    root: Root::Agent,
                    key: "name".into(),
                    path: vec![],
                },
                encoding: Encoding::Raw,
            },
        ];
        assert_eq!(scope.render(&t).unwrap(), "ghs_x ghs_xada");
        let agent = |key: &str| Ref {
            root: Root::Agent,
            key: key.into(),
            path: vec![],
        };
        let body = Body::Object(vec![
            ("by".into(), Body::Value(agent("name"))),
            ("unit".into(), Body::Value(agent("namespace"))),
        ]);
        assert_eq!(
            scope.render_body(&body).unwrap(),
            Some(json!({"by": "ada", "unit": "eng"}))
        );
        assert_eq!(mints.get(), 1);
        assert_eq!(scope.minted.borrow().as_deref(), Some("ghs_x"));
    }
}
