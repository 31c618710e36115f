//! Keeping secret setting values out of everything a tool call returns.
//!
//! Settings marked secret (and the GitHub token minted for a call) are operator data a
//! model must never see, yet an API may echo them back: an error page quoting the
//! `Authorization` header, a debugging endpoint returning the request it got, a document
//! that holds the key and comes back base64-encoded. So every text and byte string a call
//! returns passes through [`Redactor`], which replaces each place a secret shows through
//! with `***`, in any of these forms:
//!
//! - as is;
//! - percent-encoded, however much of it an encoder escaped, in either hex case, with `+`
//!   for a space;
//! - JSON-escaped, however much of it (`\"`, `\/`, `\u00e9`, surrogate pairs);
//! - hex, in either (or mixed) case, also inside a longer hex string;
//! - base64, standard or URL-safe, padded or not, wrapped in lines or not, and at any of
//!   the three alignments it can have inside a longer encoded string: an HTTP `Basic`
//!   credential (`base64("user:" + secret)`) or a whole JSON document encoded at once;
//! - any of these inside the others once: the base64 or hex of the JSON-escaped or
//!   percent-encoded secret (an encoded document or URL), and base64 or hex that was
//!   then percent-encoded or JSON-escaped (a query parameter, a JSON string).
//!
//! Listing every encoding of a secret up front does not work: its base64 depends on where
//! it starts inside the encoded string, and encoders escape different characters. So the
//! redactor decodes the text instead and searches the decoded bytes:
//!
//! 1. views of the text: the text itself, and the text with its percent escapes (and `+`,
//!    when a secret has a space) or its JSON escapes decoded, when it has any;
//! 2. in each view, every base64-looking run decoded from each of its first four
//!    characters (one of them is the alignment of the encoded data), and every hex run
//!    decoded at both parities (in a decoded view, only the runs an escape changed);
//! 3. in all of those bytes, each secret and its JSON-escaped and percent-encoded forms,
//!    overlapping matches included: needle by needle while the answer is small, then by
//!    one Aho-Corasick automaton (`Needles`).
//!
//! Each match is traced back to the characters of the text it came from (for base64:
//! every character holding at least one bit of the match), and those ranges, merged,
//! become `***`. The rest of an encoded string stays as it was.
//!
//! The work is linear in the text: at most three views, each read once to find runs; each
//! run decoded six times at most (four base64 offsets, two hex parities), into bytes no
//! longer than the run; and each decoded byte searched once per needle, up to a bound, then
//! once in all. Runs too short to hold the shortest secret are not decoded at all, so
//! ordinary words cost one pass.
//!
//! What this cannot catch is listed in docs/writing-a-connector.md ("Secret settings in
//! answers"): values derived from a secret (a hash, a signature, an encryption), a secret
//! taken apart (split across strings or fields, cut short), other encodings (base32,
//! rot13, compression), and more layers of the encodings above.

use std::cell::{Cell, OnceCell};
use std::ops::Range;

use aho_corasick::AhoCorasick;
use connector_sdk::{Content, ResourceContents, ResourceLink, ToolError, ToolOutput};
use memchr::memmem;
use serde_json::{Map, Value};

use crate::call::Answer;
use crate::render::percent_encode;

/// What a secret is replaced by.
const MASK: &str = "***";

/// The shortest secret value `bind` accepts. Below this, a value cannot be told apart
/// from ordinary text (three bytes match by chance every few megabytes of decoded base64,
/// and every occurrence of a common short string would be masked), and it is no secret
/// anyway: it is guessed in a few million tries.
pub const MIN_SECRET_BYTES: usize = 4;

/// A number with fewer digits in a secret setting is not treated as a secret: it is a
/// count (a `max_tokens`) whose name looks secret, and masking it would blank every such
/// number in every answer. A numeric secret such as a PIN has at least this many digits.
const MIN_NUMBER_DIGITS: usize = 4;

/// At most this much of an error message reaches the caller.
pub const ERROR_EXCERPT_BYTES: usize = 2048;

/// The values of the secret settings `secret_keys` ([`declarative_plan::Plan::secret_keys`])
/// in `config`, with the setting each is in: every string (nested ones too) and every
/// number of at least [`MIN_NUMBER_DIGITS`] digits.
pub fn secret_values<'p>(
    secret_keys: &'p [String],
    config: &Map<String, Value>,
) -> Vec<(&'p str, String)> {
    fn collect<'p>(key: &'p str, value: &Value, out: &mut Vec<(&'p str, String)>) {
        match value {
            Value::String(s) => out.push((key, s.clone())),
            Value::Number(n) if n.to_string().len() >= MIN_NUMBER_DIGITS => {
                out.push((key, n.to_string()))
            }
            Value::Array(items) => items.iter().for_each(|v| collect(key, v, out)),
            Value::Object(map) => map.values().for_each(|v| collect(key, v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for key in secret_keys {
        if let Some(value) = config.get(key) {
            collect(key, value, &mut out);
        }
    }
    out
}

/// Replaces secret values, in every form listed in the module docs, in everything a call
/// returns.
#[derive(Debug, Default)]
pub struct Redactor {
    /// Each secret, JSON-escaped and percent-encoded: what is searched for in every
    /// decoded view.
    needles: Needles,
    /// Whether a secret holds a space, which a form encoding writes as `+`.
    space: bool,
}

impl Redactor {
    /// Redacts the values of the secret settings `secret_keys` in `config`
    /// ([`secret_values`]).
    pub fn new(secret_keys: &[String], config: &Map<String, Value>) -> Self {
        let mut redactor = Redactor::default();
        for (_, secret) in secret_values(secret_keys, config) {
            redactor.add(secret);
        }
        redactor
    }

    /// Also redacts `secret`.
    pub fn add(&mut self, secret: String) {
        if secret.is_empty() {
            return;
        }
        let mut forms = Vec::with_capacity(5);
        if let Ok(json) = serde_json::to_string(&secret) {
            if let Some(inner) = json.strip_prefix('"').and_then(|j| j.strip_suffix('"')) {
                forms.push(inner.to_owned());
            }
        }
        for path in [false, true] {
            let mut encoded = String::new();
            percent_encode(&mut encoded, &secret, path);
            forms.push(encoded);
        }
        forms.push(form_urlencoded::byte_serialize(secret.as_bytes()).collect());
        self.space |= secret.contains(' ');
        forms.push(secret);
        for form in forms {
            self.needles.add(form.as_bytes());
        }
    }

    /// `text` with every secret replaced.
    pub fn text(&self, text: &str) -> String {
        let ranges = self.ranges(text.as_bytes());
        if ranges.is_empty() {
            return text.to_owned();
        }
        masked(text, ranges)
    }

    /// [`text`](Self::text) for a string the caller gives up: kept as it is when it holds
    /// no secret.
    fn string(&self, text: String) -> String {
        let ranges = self.ranges(text.as_bytes());
        if ranges.is_empty() {
            return text;
        }
        masked(&text, ranges)
    }

    /// `bytes` with every secret replaced (an image or a blob that holds one is damaged:
    /// it is not ours to hand over).
    pub fn bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let ranges = self.ranges(bytes);
        if ranges.is_empty() {
            return bytes.to_vec();
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut kept = 0;
        for range in merge(ranges) {
            out.extend_from_slice(&bytes[kept..range.start]);
            out.extend_from_slice(MASK.as_bytes());
            kept = range.end;
        }
        out.extend_from_slice(&bytes[kept..]);
        out
    }

    /// `value` with every secret replaced in every string (keys included), and a number
    /// that shows one turned into the masked string.
    pub fn value(&self, value: Value) -> Value {
        if self.needles.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.string(s)),
            Value::Number(n) => {
                let digits = n.to_string();
                let clean = self.text(&digits);
                if clean == digits {
                    Value::Number(n)
                } else {
                    Value::String(clean)
                }
            }
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.string(k), self.value(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// The error with its text redacted, then cut to [`ERROR_EXCERPT_BYTES`] (in that
    /// order, so no part of a secret survives at the cut).
    pub fn error(&self, error: ToolError) -> ToolError {
        let clean = |m: &str| {
            let mut m = self.text(m);
            truncate(&mut m, ERROR_EXCERPT_BYTES);
            m
        };
        match error {
            ToolError::InvalidArguments(m) => ToolError::InvalidArguments(clean(&m)),
            ToolError::Failed(m) => ToolError::Failed(clean(&m)),
            ToolError::Unauthorized(m) => ToolError::Unauthorized(clean(&m)),
        }
    }

    /// The tool's output from `answer`, with every secret replaced: in the structured
    /// value, and in every text and every byte string each content block carries.
    pub fn answer(&self, answer: Answer) -> Result<ToolOutput, ToolError> {
        let mut out = ToolOutput::new();
        if let Some(value) = answer.structured {
            out = out.structured(&self.value(value))?;
        }
        for block in answer.content {
            out = out.push(self.block(block));
        }
        Ok(out)
    }

    /// `block` with every secret replaced in each text and byte string it carries.
    fn block(&self, block: Content) -> Content {
        let r = |t: String| self.string(t);
        let o = |t: Option<String>| t.map(r);
        match block {
            Content::Text(t) => Content::Text(r(t)),
            Content::Image { data, mime_type } => Content::Image {
                data: self.bytes(&data),
                mime_type: r(mime_type),
            },
            Content::Audio { data, mime_type } => Content::Audio {
                data: self.bytes(&data),
                mime_type: r(mime_type),
            },
            Content::ResourceLink(link) => {
                let mut clean = ResourceLink::new(r(link.uri), r(link.name));
                clean.title = o(link.title);
                clean.description = o(link.description);
                clean.mime_type = o(link.mime_type);
                clean.size = link.size;
                Content::ResourceLink(clean)
            }
            Content::Resource {
                uri,
                mime_type,
                contents,
            } => Content::Resource {
                uri: r(uri),
                mime_type: o(mime_type),
                contents: match contents {
                    ResourceContents::Text(t) => ResourceContents::Text(r(t)),
                    ResourceContents::Blob(b) => ResourceContents::Blob(self.bytes(&b)),
                },
            },
        }
    }

    /// The byte ranges of `text` through which a secret shows (unsorted, may overlap).
    fn ranges(&self, text: &[u8]) -> Vec<Range<usize>> {
        if self.needles.is_empty() {
            return Vec::new();
        }
        let mut found = Vec::new();
        self.scan(text, None, &mut found);
        for escapes in [Escapes::Percent, Escapes::Form, Escapes::Json] {
            if !escapes.present(text, self.space) {
                continue;
            }
            let view = escapes.decode(text);
            let mut in_view = Vec::new();
            self.scan(&view.bytes, Some(&view.escaped), &mut in_view);
            found.extend(escapes.locate(text, in_view));
        }
        found
    }

    /// Adds to `out` the ranges of `bytes` that show a needle: directly, or through a
    /// base64 or hex run. With `escaped` (`bytes` is a view), only runs holding a decoded
    /// escape are decoded: any other run is, with the same alignments, inside a run of the
    /// text itself, which was scanned already.
    fn scan(&self, bytes: &[u8], escaped: Option<&[(u32, u32)]>, out: &mut Vec<Range<usize>>) {
        self.needles.find(bytes, |m| out.push(m));
        let worth = |run: Range<usize>| {
            escaped.is_none_or(|escaped| {
                let next = escaped.partition_point(|&(_, end)| end as usize <= run.start);
                escaped
                    .get(next)
                    .is_some_and(|&(start, _)| (start as usize) < run.end)
            })
        };
        self.scan_base64(bytes, &worth, out);
        self.scan_hex(bytes, &worth, out);
    }

    /// Every base64 run of `bytes` (either alphabet, line breaks inside allowed, `=`
    /// ending it), decoded from each of its first four characters.
    fn scan_base64(
        &self,
        bytes: &[u8],
        worth: &dyn Fn(Range<usize>) -> bool,
        out: &mut Vec<Range<usize>>,
    ) {
        // The run's 6-bit values, and for each line break in it how many values precede it.
        let mut values = Vec::new();
        let mut breaks: Vec<usize> = Vec::new();
        let mut decoded = Vec::new();
        let min_chars = (self.needles.shortest() * 8).div_ceil(6);
        long_runs(bytes, &BASE64, min_chars, |run| {
            if !worth(run.clone()) {
                return;
            }
            values.clear();
            breaks.clear();
            for &c in &bytes[run.clone()] {
                match BASE64[usize::from(c)] {
                    LINE_BREAK => breaks.push(values.len()),
                    v => values.push(v),
                }
            }
            // Where the run's `k`th base64 character is in `bytes`.
            let at = |k: usize| run.start + k + breaks.partition_point(|&b| b <= k);
            for offset in 0..4.min(values.len()) {
                decode_base64(&values[offset..], &mut decoded);
                self.needles.find(&decoded, |m| {
                    // Decoded byte `b` is bits 8b..8b+8 of the characters from `offset`.
                    let first = offset + 8 * m.start / 6;
                    let last = offset + (8 * m.end - 1) / 6;
                    out.push(at(first)..at(last) + 1);
                });
            }
        });
    }

    /// Every hex run of `bytes`, decoded at both parities.
    fn scan_hex(
        &self,
        bytes: &[u8],
        worth: &dyn Fn(Range<usize>) -> bool,
        out: &mut Vec<Range<usize>>,
    ) {
        let mut decoded = Vec::new();
        long_runs(bytes, &HEX, self.needles.shortest() * 2, |run| {
            if !worth(run.clone()) {
                return;
            }
            for parity in 0..2 {
                decoded.clear();
                decoded.extend(
                    bytes[run.start + parity..run.end]
                        .chunks_exact(2)
                        .map(|pair| (HEX[usize::from(pair[0])] << 4) | HEX[usize::from(pair[1])]),
                );
                let at = run.start + parity;
                self.needles
                    .find(&decoded, |m| out.push(at + 2 * m.start..at + 2 * m.end));
            }
        });
    }
}

/// Bytes searched needle by needle (each needle's own pass counted) after which the
/// needles are searched with one Aho-Corasick automaton instead: about what building the
/// automaton costs in the guest.
const AUTOMATON_AFTER_BYTES: usize = 64 * 1024;

/// What a redactor searches for, and how it finds every occurrence, overlapping ones
/// included: one substring searcher per needle, which costs next to nothing to build,
/// until searching needle by needle has cost about as much as building one automaton
/// that finds them all in one pass would have; from then on, that automaton. A call's
/// answer is usually small and its needles few (one secret, in one to five forms), and
/// building the automaton for them was most of such a call's redaction (about 60 µs of a
/// 520 µs call in `cargo bench -p integration-tests --bench declarative`); a large answer
/// or many needles still get one pass over each text.
#[derive(Debug, Default)]
struct Needles {
    each: Vec<memmem::Finder<'static>>,
    /// Built once searching needle by needle has cost [`AUTOMATON_AFTER_BYTES`]; `None`
    /// when it could not be built (too many states), and the needles are searched one
    /// by one.
    automaton: OnceCell<Option<AhoCorasick>>,
    /// Bytes searched needle by needle so far, beyond one pass each.
    extra_passes: Cell<usize>,
}

impl Needles {
    /// Adds `needle` unless it is one already.
    fn add(&mut self, needle: &[u8]) {
        if !self.each.iter().any(|f| f.needle() == needle) {
            self.each.push(memmem::Finder::new(needle).into_owned());
            self.automaton = OnceCell::new();
        }
    }

    fn is_empty(&self) -> bool {
        self.each.is_empty()
    }

    /// The length of the shortest needle: runs too short to hold it are not decoded.
    fn shortest(&self) -> usize {
        self.each
            .iter()
            .map(|f| f.needle().len())
            .min()
            .unwrap_or(0)
    }

    /// Calls `found` with the range of every needle in `bytes`, overlapping ones included
    /// (in no particular order).
    fn find(&self, bytes: &[u8], mut found: impl FnMut(Range<usize>)) {
        if let Some(automaton) = self.automaton(bytes.len()) {
            automaton
                .find_overlapping_iter(bytes)
                .for_each(|m| found(m.start()..m.end()));
            return;
        }
        for finder in &self.each {
            let len = finder.needle().len();
            let mut from = 0;
            while let Some(at) = bytes.get(from..).and_then(|rest| finder.find(rest)) {
                found(from + at..from + at + len);
                from += at + 1;
            }
        }
    }

    /// The automaton, when searching `len` more bytes needle by needle would bring the
    /// bytes searched that way past [`AUTOMATON_AFTER_BYTES`].
    fn automaton(&self, len: usize) -> Option<&AhoCorasick> {
        if let Some(built) = self.automaton.get() {
            return built.as_ref();
        }
        let extra = self.extra_passes.get() + len * self.each.len().saturating_sub(1);
        self.extra_passes.set(extra);
        if extra < AUTOMATON_AFTER_BYTES {
            return None;
        }
        // The default (standard) match kind is the one that reports overlapping matches.
        self.automaton
            .get_or_init(|| AhoCorasick::new(self.each.iter().map(|f| f.needle())).ok())
            .as_ref()
    }
}

/// Calls `each` with every run of `bytes` holding at least `min` characters, as `class`
/// tells them: [`ENDS_RUN`] ends a run, [`LINE_BREAK`] belongs to a run without counting,
/// anything else counts. Runs come and go every few bytes of ordinary text, so the loop
/// keeps its count and the run's start without a branch per byte; only a run reaching
/// `min` (rare) branches off.
fn long_runs(bytes: &[u8], class: &[u8; 256], min: usize, mut each: impl FnMut(Range<usize>)) {
    let in_run = |c: u8| class[usize::from(c)] != ENDS_RUN;
    let (mut count, mut start, mut i) = (0, 0, 0);
    while i < bytes.len() {
        let c = class[usize::from(bytes[i])];
        let kept = usize::from(c != ENDS_RUN);
        count = (count + usize::from(c < LINE_BREAK)) * kept;
        start = if kept == 1 { start } else { i + 1 };
        i += 1;
        if count >= min {
            while bytes.get(i).is_some_and(|&c| in_run(c)) {
                i += 1;
            }
            each(start..i);
            count = 0;
        }
    }
}

/// `text` with each of `ranges` (found by [`Redactor::ranges`]) replaced by [`MASK`].
fn masked(text: &str, mut ranges: Vec<Range<usize>>) -> String {
    // A match found in decoded bytes always starts and ends between characters; this keeps
    // the cut valid UTF-8 whatever happens.
    for range in &mut ranges {
        range.start = text.floor_char_boundary(range.start);
        range.end = text.ceil_char_boundary(range.end);
    }
    let mut out = String::with_capacity(text.len());
    let mut kept = 0;
    for range in merge(ranges) {
        out.push_str(&text[kept..range.start]);
        out.push_str(MASK);
        kept = range.end;
    }
    out.push_str(&text[kept..]);
    out
}

/// `ranges` sorted, overlapping and touching ones joined.
fn merge(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

/// In [`BASE64`]: a line break, which a base64 run may hold.
const LINE_BREAK: u8 = 0xfe;
/// In [`BASE64`] and [`HEX`]: a byte that ends a run.
const ENDS_RUN: u8 = 0xff;

/// Each byte's 6-bit value in base64 (either alphabet), or [`LINE_BREAK`], or
/// [`ENDS_RUN`].
static BASE64: [u8; 256] = {
    let mut table = [ENDS_RUN; 256];
    let mut i = 0;
    while i < 26 {
        table[b'A' as usize + i] = i as u8;
        table[b'a' as usize + i] = 26 + i as u8;
        if i < 10 {
            table[b'0' as usize + i] = 52 + i as u8;
        }
        i += 1;
    }
    table[b'+' as usize] = 62;
    table[b'-' as usize] = 62;
    table[b'/' as usize] = 63;
    table[b'_' as usize] = 63;
    table[b'\n' as usize] = LINE_BREAK;
    table[b'\r' as usize] = LINE_BREAK;
    table
};

/// The whole bytes the 6-bit `values` encode, into `out`.
fn decode_base64(values: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut quads = values.chunks_exact(4);
    for quad in &mut quads {
        let n = (u32::from(quad[0]) << 18)
            | (u32::from(quad[1]) << 12)
            | (u32::from(quad[2]) << 6)
            | u32::from(quad[3]);
        out.extend_from_slice(&n.to_be_bytes()[1..]);
    }
    let rest = quads.remainder();
    let n = rest
        .iter()
        .enumerate()
        .fold(0u32, |n, (k, &v)| n | (u32::from(v) << (18 - 6 * k)));
    // 2 characters hold 1 whole byte, 3 hold 2.
    out.extend_from_slice(&n.to_be_bytes()[1..][..(rest.len() * 6) / 8]);
}

/// Each byte's value as a hex digit (either case), or [`ENDS_RUN`]: a [`long_runs`]
/// class, like [`BASE64`].
static HEX: [u8; 256] = {
    let mut table = [ENDS_RUN; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        table[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

fn hex_digit(c: Option<&u8>) -> Option<u8> {
    c.map(|&c| HEX[usize::from(c)]).filter(|&v| v < 16)
}

/// An escaping a text may carry, which a view decodes.
#[derive(Debug, Clone, Copy)]
enum Escapes {
    /// `%XX`.
    Percent,
    /// `%XX` and `+` for a space (HTML forms, `application/x-www-form-urlencoded`).
    Form,
    /// JSON string escapes.
    Json,
}

/// A text with its escapes decoded.
struct View {
    bytes: Vec<u8>,
    /// The ranges of `bytes` that came from escapes, in order, touching ones joined.
    escaped: Vec<(u32, u32)>,
}

/// One step of decoding: the text up to `next` became `bytes[..len]`.
struct Step {
    next: usize,
    bytes: [u8; 4],
    len: usize,
}

impl Escapes {
    /// Whether decoding `text` can change it (and a view is worth building).
    fn present(self, text: &[u8], space: bool) -> bool {
        match self {
            Escapes::Percent => text.contains(&b'%'),
            // Only differs from the percent view where a `+` is, and only matters for a
            // secret with a space.
            Escapes::Form => space && text.contains(&b'+'),
            Escapes::Json => text.contains(&b'\\'),
        }
    }

    fn step(self, text: &[u8], i: usize) -> Step {
        let one = |b: u8| Step {
            next: i + 1,
            bytes: [b, 0, 0, 0],
            len: 1,
        };
        match (self, text[i]) {
            (Escapes::Percent | Escapes::Form, b'%') => {
                match (hex_digit(text.get(i + 1)), hex_digit(text.get(i + 2))) {
                    (Some(high), Some(low)) => Step {
                        next: i + 3,
                        bytes: [(high << 4) | low, 0, 0, 0],
                        len: 1,
                    },
                    _ => one(b'%'),
                }
            }
            (Escapes::Form, b'+') => one(b' '),
            (Escapes::Json, b'\\') => json_escape(text, i).unwrap_or_else(|| one(b'\\')),
            (_, b) => one(b),
        }
    }

    /// `text` decoded.
    fn decode(self, text: &[u8]) -> View {
        let mut view = View {
            bytes: Vec::with_capacity(text.len()),
            escaped: Vec::new(),
        };
        let mut i = 0;
        while i < text.len() {
            let step = self.step(text, i);
            let start = view.bytes.len() as u32;
            view.bytes.extend_from_slice(&step.bytes[..step.len]);
            let end = view.bytes.len() as u32;
            if step.next != i + 1 || step.bytes[0] != text[i] {
                match view.escaped.last_mut() {
                    Some(last) if last.1 == start => last.1 = end,
                    _ => view.escaped.push((start, end)),
                }
            }
            i = step.next;
        }
        view
    }

    /// The ranges of `text` that decoded into `ranges` of its view: one more decoding pass,
    /// with the ranges' ends sorted, so tracing many matches stays linear.
    fn locate(self, text: &[u8], ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
        if ranges.is_empty() {
            return ranges;
        }
        // (decoded index, which range, whether it is the range's last byte)
        let mut ends: Vec<(usize, usize, bool)> = Vec::with_capacity(2 * ranges.len());
        for (n, range) in ranges.iter().enumerate() {
            ends.push((range.start, n, false));
            ends.push((range.end - 1, n, true));
        }
        ends.sort_unstable();
        let mut out = vec![0..text.len(); ranges.len()];
        let mut next_end = ends.iter().peekable();
        let (mut i, mut decoded) = (0, 0);
        while i < text.len() && next_end.peek().is_some() {
            let step = self.step(text, i);
            decoded += step.len;
            while let Some(&&(at, n, last)) = next_end.peek() {
                if at >= decoded {
                    break;
                }
                if last {
                    out[n].end = step.next;
                } else {
                    out[n].start = i;
                }
                next_end.next();
            }
            i = step.next;
        }
        out
    }
}

/// The JSON escape at `text[i]` (a backslash), or `None` when it is not one.
fn json_escape(text: &[u8], i: usize) -> Option<Step> {
    let simple = match text.get(i + 1)? {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'u' => return json_unicode(text, i),
        _ => return None,
    };
    Some(Step {
        next: i + 2,
        bytes: [simple, 0, 0, 0],
        len: 1,
    })
}

/// A `\uXXXX` escape (a surrogate pair: two of them) at `text[i]`, as UTF-8.
fn json_unicode(text: &[u8], i: usize) -> Option<Step> {
    let unit = |at: usize| -> Option<u32> {
        let digits = text.get(at..at + 4)?;
        digits.iter().try_fold(0u32, |n, d| {
            hex_digit(Some(d)).map(|v| (n << 4) | u32::from(v))
        })
    };
    let first = unit(i + 2)?;
    let (code, next) = if (0xD800..0xDC00).contains(&first) {
        if text.get(i + 6..i + 8) != Some(b"\\u") {
            return None;
        }
        let second = unit(i + 8)?;
        if !(0xDC00..0xE000).contains(&second) {
            return None;
        }
        (
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00),
            i + 12,
        )
    } else {
        (first, i + 6)
    };
    let c = char::from_u32(code)?;
    let mut bytes = [0; 4];
    let len = c.encode_utf8(&mut bytes).len();
    Some(Step { next, bytes, len })
}

fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        text.truncate(text.floor_char_boundary(max));
        text.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{
        GeneralPurpose, GeneralPurposeConfig, STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
    };
    use base64::engine::DecodePaddingMode;
    use base64::Engine as _;
    use declarative_plan::Plan;
    use serde_json::json;

    #[test]
    fn secrets_are_replaced_everywhere_a_result_can_carry_them() {
        let plan: Plan = serde_json::from_value(json!({
            "format": 1, "slug": "s", "namespace": "s", "display_name": "s", "description": "",
            "version": "1", "config_schema": {}, "allowed_hosts": [], "webhooks": false,
            "secret_keys": ["token"], "argument_defaults": {}, "config_defaults": {},
            "binding_parameters": [], "required_config": [], "github_installation_key": null, "tools": [], "events": []
        }))
        .unwrap();
        let config = json!({"token": "s3cr3t-token", "owner": "octo"});
        let mut redactor = Redactor::new(&plan.secret_keys, config.as_object().unwrap());
        redactor.add("ghs_minted".into());
        let answer = Answer {
            structured: Some(
                json!({"echo": "Bearer s3cr3t-token", "s3cr3t-token": ["ghs_minted"], "owner": "octo"}),
            ),
            content: vec![Content::Text("auth was s3cr3t-token".into())],
        };
        let out = redactor.answer(answer).unwrap();
        assert_eq!(
            out.structured_value(),
            Some(json!({"echo": "Bearer ***", "***": ["***"], "owner": "octo"}))
        );
        assert_eq!(out.content(), &[Content::Text("auth was ***".into())]);
        assert_eq!(
            redactor.error(ToolError::Failed("HTTP 401: s3cr3t-token".into())),
            ToolError::Failed("HTTP 401: ***".into())
        );
        // Encoded forms, links and resources, and a secret straddling the cut.
        redactor.add("p@ss w\"rd".into());
        assert_eq!(
            redactor.text("u=p%40ss%20w%22rd j=\"p@ss w\\\"rd\" path=p@ss%20w%22rd"),
            "u=*** j=\"***\" path=***"
        );
        let link = ResourceLink::new("https://x/?t=s3cr3t-token", "s3cr3t-token")
            .description("see s3cr3t-token");
        let answer = Answer {
            structured: None,
            content: vec![
                Content::ResourceLink(link),
                text_resource("https://x/s3cr3t-token", "s3cr3t-token"),
            ],
        };
        let shown = format!("{:?}", redactor.answer(answer).unwrap());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        let long = format!("{}s3cr3t-token", "x".repeat(ERROR_EXCERPT_BYTES - 4));
        let ToolError::Failed(cut) = redactor.error(ToolError::Failed(long)) else {
            panic!("stays a failure");
        };
        assert!(!cut.contains("s3cr"), "{cut}");
        // A numeric secret.
        let config = json!({"token": 918273});
        let numeric = Redactor::new(&plan.secret_keys, config.as_object().unwrap());
        assert_eq!(numeric.text("pin 918273"), "pin ***");
    }

    /// An API token: letters, digits, `-` and `_`.
    const TOKEN: &str = "s3cr3t-Tok3n_x9";
    /// A password with characters every encoding escapes.
    const TRICKY: &str = "p@ss w\"rd/é+~";

    fn redactor_of(secrets: &[&str]) -> Redactor {
        let mut redactor = Redactor::default();
        for secret in secrets {
            redactor.add((*secret).to_owned());
        }
        redactor
    }

    fn text_resource(uri: &str, text: &str) -> Content {
        Content::Resource {
            uri: uri.into(),
            mime_type: Some("text/plain".into()),
            contents: ResourceContents::Text(text.into()),
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Every way `secret` can still be read from `text` (empty when it cannot), found
    /// independently of the redactor: as is, percent-decoded (`+` as `+` and as a space)
    /// and JSON-decoded; in each of those, every hex run at both parities and every base64
    /// run (line breaks inside allowed, either alphabet) decoded from each of its first
    /// four characters.
    fn revealed(text: &str, secret: &str) -> Vec<String> {
        // Decoded bytes may hold the secret itself or, decoded once, its escaped forms
        // (the base64 of a JSON document or of a URL).
        let mut needles = vec![
            secret.to_owned(),
            serde_json::to_string(secret)
                .unwrap()
                .trim_matches('"')
                .to_owned(),
            form_urlencoded::byte_serialize(secret.as_bytes()).collect(),
        ];
        for path in [false, true] {
            let mut encoded = String::new();
            percent_encode(&mut encoded, secret, path);
            needles.push(encoded);
        }
        let contains = |hay: &[u8]| {
            needles
                .iter()
                .any(|n| hay.windows(n.len()).any(|w| w == n.as_bytes()))
        };
        let mut found = Vec::new();
        let percent = percent_encoding::percent_decode_str(text).collect::<Vec<u8>>();
        let form =
            percent_encoding::percent_decode_str(&text.replace('+', " ")).collect::<Vec<u8>>();
        // JSON: the strings of a JSON document, or the text read as one JSON string.
        fn strings(value: &Value, out: &mut String) {
            match value {
                Value::String(s) => out.push_str(&format!("{s} ")),
                Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
                Value::Object(map) => map.iter().for_each(|(k, v)| {
                    out.push_str(&format!("{k} "));
                    strings(v, out);
                }),
                _ => {}
            }
        }
        let mut json = String::new();
        match serde_json::from_str::<Value>(text) {
            Ok(value) => strings(&value, &mut json),
            Err(_) => json = serde_json::from_str(&format!("\"{text}\"")).unwrap_or_default(),
        }
        for (view, name) in [
            (text.as_bytes().to_vec(), "as is"),
            (percent, "percent-decoded"),
            (form, "form-decoded"),
            (json.into_bytes(), "JSON-decoded"),
        ] {
            if contains(&view) {
                found.push(format!("{name}: as is"));
            }
            let view = String::from_utf8_lossy(&view).into_owned();
            for run in view.split(|c: char| !c.is_ascii_hexdigit()) {
                for parity in 0..2 {
                    let Some(digits) = run.get(parity..) else {
                        continue;
                    };
                    let bytes: Vec<u8> = digits
                        .as_bytes()
                        .chunks_exact(2)
                        .filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
                        .collect();
                    if contains(&bytes) {
                        found.push(format!("{name}: hex {run}"));
                    }
                }
            }
            let lenient = GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                GeneralPurposeConfig::new()
                    .with_decode_allow_trailing_bits(true)
                    .with_decode_padding_mode(DecodePaddingMode::Indifferent),
            );
            let alphabet = |c: char| c.is_ascii_alphanumeric() || "+/-_\r\n".contains(c);
            for run in view.split(|c: char| !alphabet(c)) {
                let run: String = run
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .map(|c| match c {
                        '-' => '+',
                        '_' => '/',
                        c => c,
                    })
                    .collect();
                for offset in 0..4 {
                    let Some(chars) = run.get(offset..) else {
                        continue;
                    };
                    let usable = chars.len() - usize::from(chars.len() % 4 == 1);
                    if let Ok(bytes) = lenient.decode(&chars[..usable]) {
                        if contains(&bytes) {
                            found.push(format!("{name}: base64 {run} from {offset}"));
                        }
                    }
                }
            }
        }
        found
    }

    /// `text` with each of its characters `\u`-escaped as in JSON.
    fn json_every_char(text: &str) -> String {
        text.encode_utf16().map(|u| format!("\\u{u:04x}")).collect()
    }

    /// Every form a secret takes on its way back from an API, in a line of other text.
    fn forms_of(secret: &str) -> Vec<(String, String)> {
        let s = secret.as_bytes();
        let mut forms = Vec::new();
        let mut add = |what: String, text: String| forms.push((what, text));
        add("as is".into(), format!("echo {secret} end"));
        for path in [false, true] {
            let mut encoded = String::new();
            percent_encode(&mut encoded, secret, path);
            add(
                format!("percent-encoded (path {path})"),
                format!("GET /x?k={encoded}&y=1"),
            );
            let lower = encoded
                .split('%')
                .enumerate()
                .map(|(i, part)| {
                    if i == 0 {
                        part.to_owned()
                    } else {
                        format!("%{}{}", part[..2].to_lowercase(), &part[2..])
                    }
                })
                .collect::<String>();
            add(
                format!("percent-encoded, lower-case hex (path {path})"),
                format!("u={lower} ."),
            );
        }
        let every_byte: String = s.iter().map(|b| format!("%{b:02X}")).collect();
        add(
            "every byte percent-encoded".into(),
            format!("url=https://x/?t={every_byte}"),
        );
        add(
            "form-encoded".into(),
            format!(
                "t={}",
                form_urlencoded::byte_serialize(s).collect::<String>()
            ),
        );
        let json = serde_json::to_string(secret).unwrap();
        add("JSON-escaped".into(), format!("{{\"echo\":{json}}}"));
        add(
            "JSON, every character escaped".into(),
            format!("{{\"echo\":\"{}\"}}", json_every_char(secret)),
        );
        add(
            "JSON, slashes escaped".into(),
            format!("{{\"echo\":{}}}", json.replace('/', "\\/")),
        );
        add("hex".into(), format!("key={} .", hex(s)));
        add(
            "upper-case hex".into(),
            format!("key={} .", hex(s).to_uppercase()),
        );
        let mut odd = b"\x01".to_vec();
        odd.extend_from_slice(s);
        odd.push(0xfe);
        add(
            "hex in a longer hex string".into(),
            format!("dump 0a{}ff", hex(&odd)),
        );
        for (engine, name) in [
            (&STANDARD, "standard"),
            (&STANDARD_NO_PAD, "standard unpadded"),
            (&URL_SAFE, "URL-safe"),
            (&URL_SAFE_NO_PAD, "URL-safe unpadded"),
        ] {
            for before in 0..6 {
                for after in [0, 1, 2, 7] {
                    let mut data = b"{\"k\":".to_vec()[..before].to_vec();
                    data.extend_from_slice(s);
                    data.extend_from_slice(&b"\",\"n\":1}"[..after]);
                    add(
                        format!("base64 {name}, {before} bytes before, {after} after"),
                        format!("blob: {} end", engine.encode(&data)),
                    );
                }
            }
        }
        for user in ["", "u", "us", "usr", "octocat"] {
            let credential = STANDARD.encode(format!("{user}:{secret}"));
            add(
                format!("Basic credential, user {user:?}"),
                format!("Authorization: Basic {credential}"),
            );
        }
        add(
            "Basic credential, secret as the user".into(),
            format!(
                "Basic {}",
                STANDARD.encode(format!("{secret}:x-oauth-basic"))
            ),
        );
        let long = format!("{}{secret}{}", "header line\n".repeat(4), " trailing text");
        let wrapped: Vec<String> = STANDARD
            .encode(&long)
            .as_bytes()
            .chunks(60)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        add(
            "base64 wrapped at 60 columns".into(),
            format!("content: {}\n", wrapped.join("\n")),
        );
        add("base64 wrapped with CRLF".into(), wrapped.join("\r\n"));
        let encoded = STANDARD.encode(format!("xy{secret}"));
        add("base64 glued to a word".into(), format!("prefix{encoded}"));
        add(
            "base64 after a path".into(),
            format!("/files/by-key/{encoded}"),
        );
        add(
            "base64 of a JSON document".into(),
            format!(
                "doc={}",
                STANDARD.encode(json!({"name": "a", "key": secret}).to_string())
            ),
        );
        let in_query: String = STANDARD
            .encode(format!("ab{secret}"))
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        add(
            "base64, percent-encoded in a query".into(),
            format!("https://x/cb?state={in_query}&z=1"),
        );
        add(
            "base64 in JSON, slashes escaped".into(),
            STANDARD
                .encode(format!("a{secret}????"))
                .replace('/', "\\/"),
        );
        add(
            "base64 of the percent-encoded secret".into(),
            URL_SAFE.encode(format!(
                "https://x/?k={}",
                form_urlencoded::byte_serialize(s).collect::<String>()
            )),
        );
        add(
            "base64 of the JSON-escaped secret".into(),
            STANDARD.encode(json!({"k": secret}).to_string()),
        );
        add(
            "hex of the JSON-escaped secret".into(),
            hex(json!({"k": secret}).to_string().as_bytes()),
        );
        forms
    }

    /// Texts of about `size` bytes that make a redactor work hardest, each with the
    /// secret in it many times: ordinary mixed text; one base64 run; every byte
    /// percent-encoded; every character JSON-escaped; the secret back to back.
    fn heavy_texts(size: usize) -> Vec<(&'static str, String)> {
        let fill = |unit: &str| unit.repeat(size / unit.len() + 1)[..size].to_owned();
        let mixed_unit = format!(
            "{{\"id\":12345,\"name\":\"quick brown fox\",\"url\":\"https://x/a%20b?c=d+e\",\
             \"sha\":\"{}\",\"esc\":\"line\\nnext \\u00e9\",\"blob\":\"{}\"}}\n",
            hex(&[0xab; 20]),
            STANDARD.encode([7u8; 300])
        );
        let mut mixed = fill(&mixed_unit);
        let every = size / 20;
        for (n, form) in [
            TOKEN.to_owned(),
            STANDARD.encode(format!("u:{TOKEN}")),
            hex(TOKEN.as_bytes()),
        ]
        .iter()
        .cycle()
        .take(19)
        .enumerate()
        {
            let at = (n + 1) * every;
            let at = mixed.floor_char_boundary(at);
            mixed.replace_range(at..at + form.len(), form);
        }
        let base64_run = STANDARD
            .encode(format!("{}{TOKEN}", "payload ".repeat(100)).repeat(size / 1000 + 1))[..size]
            .to_owned();
        let percent: String = fill(&format!(
            "{}{}",
            "%41".repeat(300),
            TOKEN
                .bytes()
                .map(|b| format!("%{b:02x}"))
                .collect::<String>()
        ));
        let json = fill(&format!(
            "{}{}",
            "\\u0041".repeat(200),
            json_every_char(TOKEN)
        ));
        let back_to_back = fill(TOKEN);
        vec![
            ("mixed text", mixed),
            ("one base64 run", base64_run),
            ("every byte percent-encoded", percent),
            ("every character JSON-escaped", json),
            ("the secret back to back", back_to_back),
        ]
    }

    /// The fastest of three redactions of `text`, and the result.
    fn timed(redactor: &Redactor, text: &str) -> (std::time::Duration, String) {
        let mut best = std::time::Duration::MAX;
        let mut out = String::new();
        for _ in 0..3 {
            let start = std::time::Instant::now();
            out = redactor.text(text);
            best = best.min(start.elapsed());
        }
        (best, out)
    }

    #[test]
    fn redaction_time_grows_linearly_with_the_text() {
        const MIB: usize = 1024 * 1024;
        let redactor = redactor_of(&[TOKEN, TRICKY]);
        let small = heavy_texts(MIB / 4);
        let large = heavy_texts(2 * MIB);
        let mut report = Vec::new();
        for ((what, small), (_, large)) in small.iter().zip(&large) {
            let (t_small, _) = timed(&redactor, small);
            let (t_large, out) = timed(&redactor, large);
            let head = &out[..out.floor_char_boundary(MIB)];
            assert!(
                revealed(head, TOKEN).is_empty(),
                "{what}: {}",
                &head[..head.len().min(400)]
            );
            let ratio = t_large.as_secs_f64() / t_small.as_secs_f64().max(1e-6);
            report.push(format!(
                "{what}: {t_small:?} for {} bytes, {t_large:?} for {} ({ratio:.1}x)",
                small.len(),
                large.len()
            ));
            // 8 times the text: linear work takes about 8 times as long; a quadratic
            // step would take 64 times.
            assert!(
                ratio < 24.0,
                "{what} grows faster than the text:\n{}",
                report.join("\n")
            );
        }
        println!("{}", report.join("\n"));
    }

    #[test]
    fn no_form_of_a_secret_survives_at_any_alignment() {
        let redactor = redactor_of(&[TOKEN, TRICKY]);
        let mut leaks = Vec::new();
        for secret in [TOKEN, TRICKY] {
            for (what, text) in forms_of(secret) {
                assert!(
                    !revealed(&text, secret).is_empty(),
                    "the test's own check cannot read {secret:?} from {what}: {text}"
                );
                let out = redactor.text(&text);
                let seen = revealed(&out, secret);
                if !seen.is_empty() || !out.contains("***") {
                    leaks.push(format!(
                        "{secret:?} {what}:\n  in:  {text}\n  out: {out}\n  {seen:?}"
                    ));
                }
            }
        }
        assert!(
            leaks.is_empty(),
            "{} forms leak:\n{}",
            leaks.len(),
            leaks.join("\n")
        );
    }

    #[test]
    fn searching_needle_by_needle_and_with_the_automaton_replace_the_same() {
        let secrets = [TOKEN, TRICKY, "abab"];
        let fresh = redactor_of(&secrets);
        let warmed = redactor_of(&secrets);
        // Enough text searched needle by needle to pay for the automaton.
        let filler = "x".repeat(AUTOMATON_AFTER_BYTES);
        assert_eq!(warmed.text(&filler), filler);
        assert!(matches!(warmed.needles.automaton.get(), Some(Some(_))));
        // Overlapping occurrences of one needle, and of two: a short answer does not pay
        // for the automaton.
        for text in [
            "x ababab abababab y".to_owned(),
            format!("{TOKEN}{TOKEN}abab{}", &TOKEN[3..]),
        ] {
            assert_eq!(fresh.text(&text), warmed.text(&text), "{text}");
        }
        assert!(fresh.needles.automaton.get().is_none());
        assert_eq!(fresh.text("x ababab y"), "x *** y");
        // Each form of each secret, each searched by a redactor of its own needle by needle.
        for secret in secrets {
            for (what, text) in forms_of(secret) {
                let needle_by_needle = redactor_of(&secrets);
                let out = needle_by_needle.text(&text);
                assert!(needle_by_needle.needles.automaton.get().is_none());
                assert_eq!(out, warmed.text(&text), "{secret} {what}");
            }
        }
        // Larger texts bring `fresh` to the automaton too.
        for (what, text) in heavy_texts(16 * 1024) {
            assert_eq!(fresh.text(&text), warmed.text(&text), "{what}");
        }
        assert!(matches!(fresh.needles.automaton.get(), Some(Some(_))));
    }

    #[test]
    fn one_needle_is_never_searched_with_an_automaton() {
        let redactor = redactor_of(&[TOKEN]);
        let big = format!("{} {TOKEN}", "y".repeat(4 * AUTOMATON_AFTER_BYTES));
        assert!(redactor.text(&big).ends_with(" ***"));
        assert!(redactor.needles.automaton.get().is_none());
    }

    #[test]
    fn only_what_carries_the_secret_is_replaced() {
        let redactor = redactor_of(&[TOKEN]);
        // The parts of a base64 string before and after the secret's characters stay.
        let encoded = STANDARD.encode(format!("user:{TOKEN}"));
        let out = redactor.text(&format!("Authorization: Basic {encoded}"));
        assert!(out.starts_with("Authorization: Basic dXNlcj"), "{out}");
        assert!(out.ends_with("***="), "{out}");
        let doc = STANDARD.encode(format!(
            "{{\"user\":\"ada\",\"key\":\"{TOKEN}\",\"n\":1234567}}"
        ));
        let out = redactor.text(&doc);
        assert!(out.starts_with(&doc[..20]), "{out}");
        assert!(out.ends_with(&doc[doc.len() - 12..]), "{out}");
        // Text that merely looks encoded, and other secrets' neighbours, are left alone.
        let innocent = format!(
            "plain words, {} and {} and %7B%22a%22%7D and \\u0041\\n and deadbeef0123 and \
             aGVsbG8gd29ybGQ= and https://example.com/a-b_c/d+e?x=%20",
            STANDARD.encode([0u8, 1, 2, 3, 250, 251, 252, 253].repeat(40)),
            hex(&[9u8; 100]),
        );
        assert_eq!(redactor.text(&innocent), innocent);
        let big = "The quick brown fox jumps over the lazy dog 0123456789abcdef. ".repeat(20_000);
        assert_eq!(
            redactor.text(&big),
            big,
            "no false match in {} bytes of text",
            big.len()
        );
    }

    #[test]
    fn encoded_secrets_are_replaced_in_every_block_structured_value_and_error() {
        let redactor = redactor_of(&[TOKEN]);
        let b64 = STANDARD.encode(format!("ci:{TOKEN}"));
        let url_b64 = URL_SAFE_NO_PAD.encode(format!("x{TOKEN}"));
        let hexed = hex(TOKEN.as_bytes()).to_uppercase();
        let mut image = b"\x89PNG\r\n\x1a\n tEXt ".to_vec();
        image.extend_from_slice(TOKEN.as_bytes());
        image.extend_from_slice(b" IEND");
        let mut link = ResourceLink::new(format!("https://x/cb?state={url_b64}"), hexed.clone());
        link.title = Some(format!("Basic {b64}"));
        link.description = Some(format!("token {hexed}"));
        link.mime_type = Some(format!("text/{url_b64}"));
        let answer = Answer {
            structured: Some(json!({
                "authorization": format!("Basic {b64}"),
                hexed.clone(): [url_b64.clone(), {"deep": format!("key={hexed}")}],
                "kept": "ok"
            })),
            content: vec![
                Content::Text(format!("echo {b64}")),
                Content::ResourceLink(link),
                text_resource(&format!("https://x/{hexed}"), &format!("x {url_b64} y")),
                Content::Image {
                    data: image.clone(),
                    mime_type: "image/png".into(),
                },
                Content::Audio {
                    data: STANDARD.encode(TOKEN).into_bytes(),
                    mime_type: "audio/wav".into(),
                },
                Content::Resource {
                    uri: "https://x/blob".into(),
                    mime_type: None,
                    contents: ResourceContents::Blob(hex(TOKEN.as_bytes()).into_bytes()),
                },
            ],
        };
        let out = redactor.answer(answer).unwrap();
        let structured = out.structured_value().unwrap();
        assert_eq!(structured["kept"], "ok");
        let shown = format!("{structured} {:?}", out.content());
        for form in [b64.as_str(), &url_b64, &hexed, TOKEN] {
            assert!(
                !shown.contains(&form[form.len() - 12..]),
                "{form} in {shown}"
            );
        }
        for block in out.content() {
            let bytes = match block {
                Content::Image { data, .. } | Content::Audio { data, .. } => data.clone(),
                Content::Resource {
                    contents: ResourceContents::Blob(b),
                    ..
                } => b.clone(),
                _ => continue,
            };
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                revealed(&text, TOKEN).is_empty(),
                "a blob carries it: {text}"
            );
        }
        for error in [
            ToolError::Failed(format!("HTTP 500: {{\"auth\":\"Basic {b64}\"}}")),
            ToolError::Unauthorized(format!("HTTP 401: bad key {hexed}")),
            ToolError::InvalidArguments(format!("state {url_b64}")),
        ] {
            let shown = format!("{:?}", redactor.error(error));
            assert!(revealed(&shown, TOKEN).is_empty(), "{shown}");
        }
        // A numeric secret returned as a JSON number.
        let plan: Plan = serde_json::from_value(json!({
            "format": 1, "slug": "s", "namespace": "s", "display_name": "s", "description": "",
            "version": "1", "config_schema": {}, "allowed_hosts": [], "webhooks": false,
            "secret_keys": ["pin"], "argument_defaults": {}, "config_defaults": {},
            "binding_parameters": [], "required_config": [], "github_installation_key": null, "tools": [], "events": []
        }))
        .unwrap();
        let numeric = Redactor::new(
            &plan.secret_keys,
            json!({"pin": 918273}).as_object().unwrap(),
        );
        assert_eq!(
            numeric.value(json!({"pin": 918273, "hex": hex(b"918273"), "other": 5})),
            json!({"pin": "***", "hex": "***", "other": 5})
        );
    }
}
