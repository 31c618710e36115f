//! A YAML document as a tree whose every node knows where it was written.
//!
//! Manifest problems are reported as `file:line:column`, so the tree keeps the position of
//! every value and every mapping key. Scalars are resolved with YAML 1.2's core schema
//! (`true`, `null`, `12`, `1.5` are typed; quoted scalars are always strings), anchors and
//! aliases are expanded, and what a manifest never needs is refused rather than guessed:
//! several documents, non-scalar keys, duplicate keys, custom tags.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, Tag};
use serde_json::Value;

/// Where something was written: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

impl Pos {
    fn of(span: &Span) -> Pos {
        Pos {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// One value of the document.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the value starts.
    pub pos: Pos,
    /// Whether it is a block scalar (`|` or `>`): its text starts on the next line.
    pub block_scalar: bool,
    /// The value.
    pub kind: Kind,
}

/// What a [`Node`] holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `null`, `~`, or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<Entry>),
}

/// One `key: value` of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key as written (scalar keys only).
    pub key: String,
    /// Where the key is.
    pub key_pos: Pos,
    /// The value.
    pub value: Node,
}

impl Node {
    /// The entries, when this is a mapping.
    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items, when this is a sequence.
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// The text, when this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value of `key`, when this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|e| e.key == key)
            .map(|e| &e.value)
    }

    /// What kind of value this is, for messages (`a string`, `a mapping`).
    pub fn describe(&self) -> &'static str {
        match self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }

    /// The value as JSON. Numbers that JSON cannot hold (`.inf`, `.nan`) become null.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::from(*i),
            Kind::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect(),
            ),
        }
    }
}

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Where.
    pub pos: Pos,
    /// What.
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.pos.line, self.pos.column, self.message)
    }
}

/// Deeper nesting than this is refused (no manifest needs it; it bounds the recursion).
const MAX_DEPTH: usize = 128;
/// More nodes than this (aliases included) are refused: an alias bomb stays small.
const MAX_NODES: usize = 1_000_000;

/// Parses one YAML document. An empty file is an error.
pub fn parse(text: &str) -> Result<Node, YamlError> {
    let mut reader = Reader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        nodes: 0,
        last: Pos { line: 1, column: 1 },
    };
    reader.expect_start()?;
    let (event, span) = reader.next()?;
    if matches!(event, Event::StreamEnd) {
        return Err(YamlError {
            pos: Pos::of(&span),
            message: "the document is empty".into(),
        });
    }
    let root = reader.node(event, span, 0)?;
    match reader.next()? {
        (Event::DocumentEnd, _) => {}
        (_, span) => {
            return Err(YamlError {
                pos: Pos::of(&span),
                message: "unexpected content after the document".into(),
            })
        }
    }
    match reader.next()? {
        (Event::StreamEnd, _) => Ok(root),
        (_, span) => Err(YamlError {
            pos: Pos::of(&span),
            message: "the file holds several YAML documents (`---`); a manifest is one document"
                .into(),
        }),
    }
}

struct Reader<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    anchors: HashMap<usize, Node>,
    nodes: usize,
    last: Pos,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), YamlError> {
        match self.parser.next_event() {
            Some(Ok((event, span))) => {
                self.last = Pos::of(&span);
                Ok((event, span))
            }
            Some(Err(e)) => Err(YamlError {
                pos: Pos {
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                },
                message: e.info().to_string(),
            }),
            None => Err(YamlError {
                pos: self.last,
                message: "unexpected end of the document".into(),
            }),
        }
    }

    /// Consumes `StreamStart` and `DocumentStart` (when there is a document).
    fn expect_start(&mut self) -> Result<(), YamlError> {
        loop {
            match self.parser.peek() {
                Some(Ok((Event::StreamStart | Event::DocumentStart(_), _))) => {
                    self.next()?;
                }
                Some(Err(_)) => {
                    self.next()?;
                }
                _ => return Ok(()),
            }
        }
    }

    fn count(&mut self, pos: Pos, n: usize) -> Result<(), YamlError> {
        self.nodes += n;
        if self.nodes > MAX_NODES {
            return Err(YamlError {
                pos,
                message: format!("the document has more than {MAX_NODES} values (aliases counted)"),
            });
        }
        Ok(())
    }

    fn node(&mut self, event: Event<'a>, span: Span, depth: usize) -> Result<Node, YamlError> {
        let pos = Pos::of(&span);
        if depth > MAX_DEPTH {
            return Err(YamlError {
                pos,
                message: format!("nested deeper than {MAX_DEPTH} levels"),
            });
        }
        self.count(pos, 1)?;
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => (scalar(&text, style, tag, pos)?, anchor),
            Event::Alias(id) => {
                let node = self.anchors.get(&id).cloned().ok_or_else(|| YamlError {
                    pos,
                    message: "an alias of an unknown anchor".into(),
                })?;
                let size = size(&node);
                self.count(pos, size)?;
                return Ok(Node { pos, ..node });
            }
            Event::SequenceStart(anchor, tag) => {
                refuse_tag(tag.as_deref(), pos)?;
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(event, span, depth + 1)?);
                }
                (
                    Node {
                        pos,
                        block_scalar: false,
                        kind: Kind::Seq(items),
                    },
                    anchor,
                )
            }
            Event::MappingStart(anchor, tag) => {
                refuse_tag(tag.as_deref(), pos)?;
                let mut entries: Vec<Entry> = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::MappingEnd) {
                        break;
                    }
                    let key_pos = Pos::of(&span);
                    let key =
                        match event {
                            Event::Scalar(text, ..) => text.into_owned(),
                            Event::Alias(id) => match self.anchors.get(&id).map(|n| &n.kind) {
                                Some(Kind::Str(s)) => s.clone(),
                                _ => {
                                    return Err(YamlError {
                                        pos: key_pos,
                                        message: "a mapping key must be a plain string".into(),
                                    })
                                }
                            },
                            _ => return Err(YamlError {
                                pos: key_pos,
                                message:
                                    "a mapping key must be a plain string, not a list or a mapping"
                                        .into(),
                            }),
                        };
                    if let Some(first) = entries.iter().find(|e| e.key == key) {
                        return Err(YamlError {
                            pos: key_pos,
                            message: format!(
                                "duplicate key `{key}` (first at line {}); remove one",
                                first.key_pos.line
                            ),
                        });
                    }
                    let (event, span) = self.next()?;
                    let value = self.node(event, span, depth + 1)?;
                    entries.push(Entry {
                        key,
                        key_pos,
                        value,
                    });
                }
                (
                    Node {
                        pos,
                        block_scalar: false,
                        kind: Kind::Map(entries),
                    },
                    anchor,
                )
            }
            other => {
                return Err(YamlError {
                    pos,
                    message: format!("unexpected YAML event {other:?}"),
                })
            }
        };
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(node)
    }
}

fn size(node: &Node) -> usize {
    1 + match &node.kind {
        Kind::Seq(items) => items.iter().map(size).sum(),
        Kind::Map(entries) => entries.iter().map(|e| size(&e.value)).sum(),
        _ => 0,
    }
}

fn refuse_tag(tag: Option<&Tag>, pos: Pos) -> Result<(), YamlError> {
    match tag {
        None => Ok(()),
        Some(t) if t.is_yaml_core_schema() && matches!(t.suffix.as_str(), "map" | "seq") => Ok(()),
        Some(t) => Err(YamlError {
            pos,
            message: format!("the YAML tag `{t}` is not supported here; remove it"),
        }),
    }
}

/// Resolves a scalar with the core schema (YAML 1.2), honouring the core tags.
fn scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<Cow<'_, Tag>>,
    pos: Pos,
) -> Result<Node, YamlError> {
    let block_scalar = matches!(style, ScalarStyle::Literal | ScalarStyle::Folded);
    let node = |kind| Node {
        pos,
        block_scalar,
        kind,
    };
    if let Some(tag) = tag {
        let tag: &Tag = &tag;
        if tag.handle == "!" && tag.suffix.is_empty() {
            return Ok(node(Kind::Str(text.to_string())));
        }
        if !tag.is_yaml_core_schema() {
            return Err(YamlError {
                pos,
                message: format!("the YAML tag `{tag}` is not supported; remove it"),
            });
        }
        let wrong = |what: &str| YamlError {
            pos,
            message: format!("`{text}` is not {what}"),
        };
        return Ok(node(match tag.suffix.as_str() {
            "str" => Kind::Str(text.to_string()),
            "null" => match plain(text) {
                Kind::Null => Kind::Null,
                _ => return Err(wrong("null")),
            },
            "bool" => match plain(text) {
                Kind::Bool(b) => Kind::Bool(b),
                _ => return Err(wrong("a boolean")),
            },
            "int" => match plain(text) {
                Kind::Int(i) => Kind::Int(i),
                _ => return Err(wrong("an integer")),
            },
            "float" => match plain(text) {
                Kind::Int(i) => Kind::Float(i as f64),
                Kind::Float(f) => Kind::Float(f),
                _ => return Err(wrong("a number")),
            },
            _ => {
                return Err(YamlError {
                    pos,
                    message: format!("the YAML tag `{tag}` is not supported; remove it"),
                })
            }
        }));
    }
    Ok(node(match style {
        ScalarStyle::Plain => plain(text),
        _ => Kind::Str(text.to_string()),
    }))
}

/// The core schema's resolution of a plain scalar.
fn plain(text: &str) -> Kind {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Kind::Null,
        "true" | "True" | "TRUE" => return Kind::Bool(true),
        "false" | "False" | "FALSE" => return Kind::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Kind::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Kind::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Kind::Float(f64::NAN),
        _ => {}
    }
    if let Some(hex) = text.strip_prefix("0x") {
        if !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            if let Ok(i) = i64::from_str_radix(hex, 16) {
                return Kind::Int(i);
            }
        }
    }
    if let Some(oct) = text.strip_prefix("0o") {
        if !oct.is_empty() && oct.chars().all(|c| ('0'..='7').contains(&c)) {
            if let Ok(i) = i64::from_str_radix(oct, 8) {
                return Kind::Int(i);
            }
        }
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        return match text.parse::<i64>() {
            Ok(i) => Kind::Int(i),
            Err(_) => text
                .parse::<f64>()
                .map_or_else(|_| Kind::Str(text.to_string()), Kind::Float),
        };
    }
    if is_float(digits) {
        if let Ok(f) = text.parse::<f64>() {
            return Kind::Float(f);
        }
    }
    Kind::Str(text.to_string())
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?` (the sign already removed).
fn is_float(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (!int.is_empty() || !frac.is_empty())
                && int.chars().all(|c| c.is_ascii_digit())
                && frac.chars().all(|c| c.is_ascii_digit())
        }
        None => !mantissa.is_empty() && mantissa.chars().all(|c| c.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_types_and_order() {
        let doc = parse("a: 1\nb:\n  - x\n  - 'true'\n  - true\nc: |\n  text\nd: ~\ne: 1.5\n")
            .expect("parses");
        let entries = doc.as_map().expect("map");
        let keys: Vec<_> = entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e"]);
        assert_eq!(entries[1].key_pos, Pos { line: 2, column: 1 });
        let b = doc.get("b").expect("b").as_seq().expect("seq");
        assert_eq!(b[0].pos, Pos { line: 3, column: 5 });
        assert_eq!(b[1].kind, Kind::Str("true".into()));
        assert_eq!(b[2].kind, Kind::Bool(true));
        assert_eq!(doc.get("a").expect("a").kind, Kind::Int(1));
        assert!(doc.get("c").expect("c").block_scalar);
        assert_eq!(doc.get("d").expect("d").kind, Kind::Null);
        assert_eq!(doc.get("e").expect("e").kind, Kind::Float(1.5));
        assert_eq!(
            doc.to_json(),
            serde_json::json!({"a": 1, "b": ["x", "true", true], "c": "text\n", "d": null, "e": 1.5})
        );
    }

    #[test]
    fn refusals_have_positions() {
        let e = parse("a: 1\na: 2\n").expect_err("duplicate");
        assert_eq!(e.pos.line, 2);
        assert!(e.message.contains("duplicate key `a`"), "{e}");
        assert!(parse("").is_err());
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
        let e = parse("a: [1, 2\n").expect_err("unclosed");
        assert!(e.pos.line >= 1, "{e}");
        assert!(parse("? [a]\n: 1\n").is_err());
        assert!(parse("a: !custom x\n").is_err());
    }

    #[test]
    fn anchors_expand_and_core_tags_apply() {
        let doc = parse("base: &b {x: 1}\nother: *b\nn: !!str 12\n").expect("parses");
        assert_eq!(
            doc.to_json(),
            serde_json::json!({"base": {"x": 1}, "other": {"x": 1}, "n": "12"})
        );
        assert_eq!(plain("0x1f"), Kind::Int(31));
        assert_eq!(plain("-3"), Kind::Int(-3));
        assert_eq!(plain("1e3"), Kind::Float(1000.0));
        assert_eq!(plain("1.2.3"), Kind::Str("1.2.3".into()));
        assert_eq!(plain("."), Kind::Str(".".into()));
    }
}
