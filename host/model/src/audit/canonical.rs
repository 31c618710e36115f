//! RFC 8785 (JCS) canonical JSON of an audit record, written straight from the record.
//!
//! Why not only `serde_json_canonicalizer`: sealing a record runs on the store's writer for
//! every tool call, and the crate (the reference this module is tested against) parses
//! every object key back into a JSON value to find its sort order and buffers every value
//! apart: about 8 µs for a tool-call record, against about 1 µs here. What this module
//! writes itself is only the parts where JCS and `serde_json` agree by construction:
//! - strings and keys: `serde_json`'s escaping is JCS's (`\"`, `\\`, `\b`, `\f`, `\n`,
//!   `\r`, `\t`, other controls as `\u00xx` in lowercase hex, nothing else escaped);
//! - integers of at most 2^53 in magnitude: their decimal digits, which is what the
//!   ECMAScript number form gives for them;
//! - object members sorted by their keys' UTF-16 code units.
//!
//! Every other number (a fraction, an exponent, a larger integer) is written by the crate,
//! so the ECMAScript number form stays the crate's. The tests compare this module with the
//! crate on the RFC's examples and on thousands of generated values.

use std::io::Write as _;

use serde_json::{Number, Value};

use super::AuditRecord;

/// The largest integer every JSON reader holds exactly (2^53).
const EXACT_INTEGER: u64 = 1 << 53;

/// Appends the canonical JSON of `record` without its `hash` to `out`; returns where in
/// `out` the canonical JSON of its `details` is.
pub(super) fn record_body(
    out: &mut Vec<u8>,
    record: &AuditRecord,
) -> serde_json::Result<std::ops::Range<usize>> {
    // The members in the order JCS sorts them (all ASCII keys: byte order is UTF-16
    // order).
    out.extend_from_slice(b"{\"action\":");
    string(out, &record.action)?;
    out.extend_from_slice(b",\"actor\":{\"id\":");
    optional_string(out, record.actor.id.as_deref())?;
    out.extend_from_slice(b",\"kind\":");
    string(out, record.actor.kind.as_str())?;
    out.extend_from_slice(b"},\"at\":");
    string(out, &record.at)?;
    out.extend_from_slice(b",\"details\":");
    let details_start = out.len();
    value(out, &record.details)?;
    let details = details_start..out.len();
    out.extend_from_slice(b",\"outcome\":");
    string(out, &record.outcome)?;
    out.extend_from_slice(b",\"prev\":");
    string(out, &record.prev)?;
    out.extend_from_slice(b",\"seq\":");
    integer(out, record.seq)?;
    out.extend_from_slice(b",\"target\":");
    string(out, &record.target)?;
    out.extend_from_slice(b",\"traceId\":");
    optional_string(out, record.trace_id.as_deref())?;
    out.push(b'}');
    Ok(details)
}

/// Appends the canonical JSON of `v` to `out`.
pub(super) fn value(out: &mut Vec<u8>, v: &Value) -> serde_json::Result<()> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => number(out, n)?,
        Value::String(s) => string(out, s)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(members) => {
            if in_utf16_order(members.keys()) {
                object(out, members.iter())?;
            } else {
                let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
                sorted.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
                object(out, sorted.into_iter())?;
            }
        }
    }
    Ok(())
}

fn object<'a>(
    out: &mut Vec<u8>,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
) -> serde_json::Result<()> {
    out.push(b'{');
    for (i, (key, member)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, key)?;
        out.push(b':');
        value(out, member)?;
    }
    out.push(b'}');
    Ok(())
}

/// Whether `keys`, as they come, are already in JCS order (by UTF-16 code units), without
/// sorting them: true when each is greater than the one before by bytes and none holds a
/// character from U+E000 on. Below U+E000, UTF-8 byte order and UTF-16 order agree
/// (they part only where a character of U+E000..U+FFFF meets one past U+FFFF, whose
/// UTF-16 form starts with a surrogate). A map that keeps its keys sorted by bytes (as
/// `serde_json`'s does) passes; anything else is sorted.
fn in_utf16_order<'a>(keys: impl Iterator<Item = &'a String>) -> bool {
    // UTF-8 lead bytes from 0xEE on start U+E000 and beyond.
    let plain = |k: &str| k.bytes().all(|b| b < 0xEE);
    let mut before: Option<&str> = None;
    for key in keys {
        if !plain(key) || before.is_some_and(|b| b >= key.as_str()) {
            return false;
        }
        before = Some(key);
    }
    true
}

fn string(out: &mut Vec<u8>, s: &str) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *out, s)
}

fn optional_string(out: &mut Vec<u8>, s: Option<&str>) -> serde_json::Result<()> {
    match s {
        Some(s) => string(out, s),
        None => {
            out.extend_from_slice(b"null");
            Ok(())
        }
    }
}

fn integer(out: &mut Vec<u8>, n: i64) -> serde_json::Result<()> {
    if n.unsigned_abs() <= EXACT_INTEGER {
        write!(out, "{n}").map_err(serde_json::Error::io)
    } else {
        serde_json_canonicalizer::to_writer(&n, out)
    }
}

fn number(out: &mut Vec<u8>, n: &Number) -> serde_json::Result<()> {
    if let Some(i) = n.as_i64() {
        return integer(out, i);
    }
    match n.as_u64() {
        Some(u) if u <= EXACT_INTEGER => write!(out, "{u}").map_err(serde_json::Error::io),
        _ => serde_json_canonicalizer::to_writer(n, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{target, Actor, AuditEntry, GENESIS};

    fn ours(v: &Value) -> String {
        let mut out = Vec::new();
        value(&mut out, v).expect("canonical");
        String::from_utf8(out).expect("utf-8")
    }

    fn reference(v: &Value) -> String {
        serde_json_canonicalizer::to_string(v).expect("canonical")
    }

    /// A small deterministic generator (xorshift), so a failure names its seed.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn string(&mut self) -> String {
            // Characters where canonicalisers differ: controls, quotes, backslash, the
            // solidus, DEL, Latin-1, the BMP's top, and astral (surrogate pairs in
            // UTF-16, which decides key order against U+E000..U+FFFF).
            const POOL: &[char] = &[
                'a',
                'b',
                'Z',
                '1',
                ' ',
                '"',
                '\\',
                '/',
                '\u{0}',
                '\u{8}',
                '\u{9}',
                '\u{a}',
                '\u{c}',
                '\u{d}',
                '\u{1f}',
                '\u{7f}',
                '\u{80}',
                'é',
                '€',
                '\u{2028}',
                '\u{fb33}',
                '\u{ffff}',
                '😀',
                '\u{10ffff}',
            ];
            let len = self.below(6);
            (0..len)
                .map(|_| POOL[self.below(POOL.len() as u64) as usize])
                .collect()
        }
        fn number(&mut self) -> Value {
            match self.below(8) {
                0 => Value::from(self.next() as i64),
                1 => Value::from(self.next()),
                2 => Value::from(self.below(1000) as i64 - 500),
                3 => Value::from((1u64 << 53) + self.below(3) - 1),
                4 => Value::from(-((1i64 << 53) + self.below(3) as i64 - 1)),
                5 => Value::from(f64::from_bits(self.next()) % 1e30),
                6 => Value::from((self.below(1_000_000) as f64) / 1000.0),
                _ => Value::from(1e21 * (self.below(5) as f64 + 0.5)),
            }
        }
        fn value(&mut self, depth: u32) -> Value {
            match self.below(if depth == 0 { 4 } else { 6 }) {
                0 => Value::Null,
                1 => Value::Bool(self.below(2) == 0),
                2 => self.number(),
                3 => Value::String(self.string()),
                4 => Value::Array((0..self.below(4)).map(|_| self.value(depth - 1)).collect()),
                _ => Value::Object(
                    (0..self.below(5))
                        .map(|_| (self.string(), self.value(depth - 1)))
                        .collect(),
                ),
            }
        }
    }

    /// Keys kept in byte order (as `serde_json`'s map keeps them) are written as they come
    /// only where byte order is UTF-16 order: a character of U+E000..U+FFFF sorts before
    /// an astral one by bytes and after it by UTF-16 code units.
    #[test]
    fn keys_in_byte_order_are_resorted_where_utf16_order_differs() {
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert!(in_utf16_order(keys(&["a", "b", "é", "€"]).iter()));
        assert!(!in_utf16_order(keys(&["b", "a"]).iter()));
        assert!(!in_utf16_order(keys(&["a", "a"]).iter()));
        assert!(!in_utf16_order(keys(&["\u{ffff}", "😀"]).iter()));
        let v = serde_json::json!({"\u{ffff}": 1, "😀": 2, "a": 3});
        assert_eq!(ours(&v), reference(&v));
        assert_eq!(ours(&v), "{\"a\":3,\"😀\":2,\"\u{ffff}\":1}");
    }

    /// RFC 8785's own examples (§3.2.2, appendix B) come out as the crate writes them.
    #[test]
    fn the_rfc_examples_are_written_as_the_reference_writes_them() {
        for input in [
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
                "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
                "literals": [null, true, false]}"#,
            r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
                "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control",
                "\u00f6": "Latin Small Letter O With Diaeresis"}"#,
            r#"[9007199254740991, 9007199254740992, 9007199254740993, -9007199254740993,
                18446744073709551615, -9223372036854775808, 0, -0.0, 1e21, 1e20, 5e-7]"#,
        ] {
            let v: Value = serde_json::from_str(input).expect("the example");
            assert_eq!(ours(&v), reference(&v), "input {input}");
        }
    }

    #[test]
    fn generated_values_are_written_as_the_reference_writes_them() {
        for seed in 1..=4000u64 {
            let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let v = g.value(4);
            assert_eq!(ours(&v), reference(&v), "seed {seed}: {v}");
        }
    }

    /// A record's body is the crate's canonical form of the record as a JSON object
    /// (what the chain's hash was defined on), whatever its strings and details hold.
    #[test]
    fn a_record_body_is_the_reference_form_of_the_record() {
        for seed in 1..=500u64 {
            let mut g = Gen(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
            let actor = match g.below(3) {
                0 => Actor::operator(),
                1 => Actor::agent(&g.string()),
                _ => Actor::console(Some(g.string())),
            };
            let mut entry = AuditEntry::now(actor, &g.string(), target::tool(&g.string()));
            entry.outcome = g.string();
            entry.details = g.value(3);
            entry.trace_id = (g.below(2) == 0).then(|| g.string());
            let seq = match g.below(3) {
                0 => 1,
                1 => g.below(1 << 40) as i64,
                _ => (1i64 << 53) + g.below(1000) as i64,
            };
            let record = AuditRecord::seal(entry, seq, GENESIS.to_string());
            let as_object = serde_json::json!({
                "seq": record.seq,
                "at": record.at,
                "actor": {"kind": record.actor.kind.as_str(), "id": record.actor.id},
                "action": record.action,
                "target": record.target,
                "outcome": record.outcome,
                "details": record.details,
                "traceId": record.trace_id,
                "prev": record.prev,
            });
            let mut out = Vec::new();
            record_body(&mut out, &record).expect("canonical");
            assert_eq!(
                String::from_utf8(out).expect("utf-8"),
                reference(&as_object),
                "seed {seed}"
            );
        }
    }
}
