//! The arXiv API's Atom feeds, parsed into compact entries.
//!
//! A pull parser ([`quick_xml::NsReader`]) walks the feed and keeps only what the tools
//! return; elements are matched by namespace (Atom, arXiv, OpenSearch) and local name, so
//! a feed using other prefixes parses the same.

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::NsReader;
use serde::Serialize;

use crate::id;

const ATOM: &[u8] = b"http://www.w3.org/2005/Atom";
const ARXIV: &[u8] = b"http://arxiv.org/schemas/atom";
const OPENSEARCH: &[u8] = b"http://a9.com/-/spec/opensearch/1.1/";

/// A parsed feed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feed {
    /// `opensearch:totalResults`, when present.
    pub total: Option<u64>,
    /// The entries, in feed order.
    pub entries: Vec<Entry>,
}

/// One paper, as the tools return it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The versioned id (`2101.00001v2`, `hep-th/9901001v1`).
    pub id: String,
    /// The title, whitespace collapsed.
    pub title: String,
    /// Author names, in order.
    pub authors: Vec<String>,
    /// The abstract, whitespace collapsed.
    pub summary: String,
    /// Whether [`summary`](Entry::summary) was cut.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub summary_truncated: bool,
    /// When version 1 was submitted (RFC 3339).
    pub published: String,
    /// When this version was submitted (RFC 3339).
    pub updated: String,
    /// The primary category (`cs.LG`).
    pub primary_category: Option<String>,
    /// Every category, primary first as arXiv lists them.
    pub categories: Vec<String>,
    /// The PDF.
    pub pdf_url: Option<String>,
    /// The abstract page.
    pub abs_url: Option<String>,
}

impl Entry {
    /// Whether this is the pseudo-entry arXiv answers for an id it does not know or a
    /// query it cannot run (title `Error`, id under `http://arxiv.org/api/errors`), or an
    /// entry with nothing in it.
    pub fn is_error(&self) -> bool {
        self.title == "Error"
            || self.id.contains("arxiv.org/api/errors")
            || (self.id.is_empty() && self.title.is_empty())
    }

    /// Cuts the summary to about `max` characters (at a word boundary when one is near),
    /// ending it with `…`.
    pub fn truncate_summary(&mut self, max: usize) {
        let Some((cut, _)) = self.summary.char_indices().nth(max) else {
            return;
        };
        let head = &self.summary[..cut];
        let end = match head.rfind(' ') {
            Some(space) if cut - space < 80 => space,
            _ => cut,
        };
        self.summary.truncate(end);
        self.summary.push('…');
        self.summary_truncated = true;
    }
}

/// Collapses every run of whitespace into one space and trims the ends.
pub fn collapse_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Where text inside the current element goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Total,
    Id,
    Title,
    Summary,
    Published,
    Updated,
    AuthorName,
}

/// The element kinds the walk distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Feed,
    Entry,
    Author,
    Text(Field),
    Other,
}

fn ns_is(ns: &ResolveResult<'_>, uri: &[u8]) -> bool {
    matches!(ns, ResolveResult::Bound(Namespace(n)) if *n == uri)
}

fn attr(e: &BytesStart<'_>, name: &str) -> Result<Option<String>, String> {
    match e.try_get_attribute(name) {
        Ok(Some(a)) => a
            .unescape_value()
            .map(|v| Some(v.into_owned()))
            .map_err(|err| format!("bad `{name}` attribute: {err}")),
        Ok(None) => Ok(None),
        Err(err) => Err(format!("bad attributes: {err}")),
    }
}

/// Parses an arXiv API Atom feed. Errors describe malformed XML; a feed with no entries
/// is not an error.
pub fn parse_feed(xml: &str) -> Result<Feed, String> {
    let mut reader = NsReader::from_str(xml);
    let mut feed = Feed::default();
    let mut stack: Vec<Node> = Vec::new();
    let mut entry: Option<Entry> = None;
    let mut text = String::new();

    loop {
        let position = reader.buffer_position();
        let (ns, event) = reader
            .read_resolved_event()
            .map_err(|e| format!("malformed XML after byte {position}: {e}"))?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                let local = e.local_name();
                let local = local.as_ref();
                let parent = stack.last().copied();
                let node = match parent {
                    None if ns_is(&ns, ATOM) && local == b"feed" => Node::Feed,
                    Some(Node::Feed) if ns_is(&ns, ATOM) && local == b"entry" => {
                        entry = Some(Entry::default());
                        Node::Entry
                    }
                    Some(Node::Feed) if ns_is(&ns, OPENSEARCH) && local == b"totalResults" => {
                        Node::Text(Field::Total)
                    }
                    Some(Node::Entry) if ns_is(&ns, ATOM) => match local {
                        b"id" => Node::Text(Field::Id),
                        b"title" => Node::Text(Field::Title),
                        b"summary" => Node::Text(Field::Summary),
                        b"published" => Node::Text(Field::Published),
                        b"updated" => Node::Text(Field::Updated),
                        b"author" => Node::Author,
                        b"category" => {
                            if let (Some(en), Some(term)) = (entry.as_mut(), attr(e, "term")?) {
                                en.categories.push(term);
                            }
                            Node::Other
                        }
                        b"link" => {
                            if let Some(en) = entry.as_mut() {
                                let href = attr(e, "href")?;
                                let title = attr(e, "title")?;
                                let rel = attr(e, "rel")?;
                                if title.as_deref() == Some("pdf") {
                                    en.pdf_url = href;
                                } else if rel.as_deref().is_none_or(|r| r == "alternate") {
                                    en.abs_url = href;
                                }
                            }
                            Node::Other
                        }
                        _ => Node::Other,
                    },
                    Some(Node::Entry) if ns_is(&ns, ARXIV) && local == b"primary_category" => {
                        if let Some(en) = entry.as_mut() {
                            en.primary_category = attr(e, "term")?;
                        }
                        Node::Other
                    }
                    Some(Node::Author) if ns_is(&ns, ATOM) && local == b"name" => {
                        Node::Text(Field::AuthorName)
                    }
                    None => return Err("the document is not an Atom feed".to_owned()),
                    _ => Node::Other,
                };
                if empty {
                    finish(node, &mut String::new(), &mut feed, &mut entry)?;
                } else {
                    if let Node::Text(_) = node {
                        text.clear();
                    }
                    stack.push(node);
                }
            }
            Event::End(_) => {
                if let Some(node) = stack.pop() {
                    finish(node, &mut text, &mut feed, &mut entry)?;
                }
            }
            Event::Text(t) => {
                if matches!(stack.last(), Some(Node::Text(_))) {
                    let t = t.decode().map_err(|e| format!("bad text: {e}"))?;
                    text.push_str(&t);
                }
            }
            Event::CData(t) => {
                if matches!(stack.last(), Some(Node::Text(_))) {
                    let t = t.decode().map_err(|e| format!("bad CDATA: {e}"))?;
                    text.push_str(&t);
                }
            }
            Event::GeneralRef(r) => {
                if matches!(stack.last(), Some(Node::Text(_))) {
                    if let Some(c) = r.resolve_char_ref().map_err(|e| e.to_string())? {
                        text.push(c);
                    } else {
                        let name = r.decode().map_err(|e| format!("bad reference: {e}"))?;
                        match quick_xml::escape::resolve_predefined_entity(&name) {
                            Some(s) => text.push_str(s),
                            None => {
                                return Err(format!("unknown entity `&{name};`"));
                            }
                        }
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !stack.is_empty() {
        return Err("the feed ends early".to_owned());
    }
    Ok(feed)
}

/// Stores what an element that just ended carried.
fn finish(
    node: Node,
    text: &mut String,
    feed: &mut Feed,
    entry: &mut Option<Entry>,
) -> Result<(), String> {
    let value = std::mem::take(text);
    match node {
        Node::Entry => {
            if let Some(en) = entry.take() {
                feed.entries.push(en);
            }
        }
        Node::Text(Field::Total) => {
            let v = value.trim();
            feed.total = Some(
                v.parse()
                    .map_err(|_| format!("totalResults `{v}` is not a number"))?,
            );
        }
        Node::Text(field) => {
            if let Some(en) = entry.as_mut() {
                let v = collapse_whitespace(&value);
                match field {
                    Field::Id => en.id = id::from_entry_url(&v).to_owned(),
                    Field::Title => en.title = v,
                    Field::Summary => en.summary = v,
                    Field::Published => en.published = v,
                    Field::Updated => en.updated = v,
                    Field::AuthorName => en.authors.push(v),
                    Field::Total => {}
                }
            }
        }
        Node::Feed | Node::Author | Node::Other => {}
    }
    Ok(())
}
