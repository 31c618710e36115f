//! The audit log's records and the hash chain that makes them provable (CONTRACT §9).
//!
//! A change or a use of a capability is described by an [`AuditEntry`] (who, what, on
//! what, how it ended); the store that appends it gives it the next `seq` and the hash of
//! the record before it, and seals it into an [`AuditRecord`]:
//! `hash = "sha256:" + hex(SHA-256(prev + "\n" + JCS(record without hash)))`, JCS being
//! RFC 8785 canonical JSON, written straight from the record by the `canonical` module
//! (number forms other than plain integers by the `serde_json_canonicalizer` crate,
//! against which it is tested: number and string serialisation are where canonicalisers
//! go wrong). The chain starts at [`GENESIS`]; pruning moves its start (the [`AuditAnchor`]) to the last pruned record,
//! so what is kept still verifies from its first record ([`ChainCheck`]).
//!
//! Times are written as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, always three fraction digits), so
//! their text order is their time order and the stores filter and prune by comparing
//! text.

mod canonical;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What [`AuditRecord::computed_hash`] gives a record it cannot canonicalise; a record
/// with it never verifies ([`ChainCheck`] reports it broken).
const UNHASHABLE: &str = "sha256:unhashable";

/// How every hash of the chain starts.
const HASH_PREFIX: &str = "sha256:";

/// The `prev` of the first record ever appended.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// Who did what a record records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorKind {
    /// A caller holding the operator token (API, CLI).
    Operator,
    /// A signed-in console session.
    Console,
    /// An agent, by its agent token.
    Agent,
    /// A webhook sender, by its signature.
    Webhook,
    /// The host itself (start-up installs, background work, an embedding program).
    Host,
}

impl ActorKind {
    /// Every kind, in the contract's order.
    pub const ALL: [ActorKind; 5] = [
        ActorKind::Operator,
        ActorKind::Console,
        ActorKind::Agent,
        ActorKind::Webhook,
        ActorKind::Host,
    ];

    /// The kind as the contract spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Operator => "operator",
            ActorKind::Console => "console",
            ActorKind::Agent => "agent",
            ActorKind::Webhook => "webhook",
            ActorKind::Host => "host",
        }
    }

    /// The kind spelled `text`, if it is one.
    pub fn parse(text: &str) -> Option<ActorKind> {
        ActorKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// An actor: its kind and, where it has one, its id (an agent's id, a webhook's
/// connector slug, a console session's short id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Actor {
    /// What kind of caller it is.
    pub kind: ActorKind,
    /// Which one, where that is known.
    pub id: Option<String>,
}

impl Actor {
    /// The operator (its token names no one).
    pub fn operator() -> Actor {
        Actor {
            kind: ActorKind::Operator,
            id: None,
        }
    }

    /// A console session (`session`: an id that names the session, never its secret).
    pub fn console(session: Option<String>) -> Actor {
        Actor {
            kind: ActorKind::Console,
            id: session,
        }
    }

    /// Agent `id`, by its own token.
    pub fn agent(id: &str) -> Actor {
        Actor {
            kind: ActorKind::Agent,
            id: Some(id.to_string()),
        }
    }

    /// The sender of a webhook to connector `slug`.
    pub fn webhook(slug: &str) -> Actor {
        Actor {
            kind: ActorKind::Webhook,
            id: Some(slug.to_string()),
        }
    }

    /// The host itself.
    pub fn host() -> Actor {
        Actor {
            kind: ActorKind::Host,
            id: None,
        }
    }
}

/// The `target` of a record, as the contract spells each kind.
pub mod target {
    /// `unit:<id>`.
    pub fn unit(id: &str) -> String {
        format!("unit:{id}")
    }
    /// `agent:<id>`.
    pub fn agent(id: &str) -> String {
        format!("agent:{id}")
    }
    /// `binding:<unitId>/<slug>`.
    pub fn binding(unit: &str, slug: &str) -> String {
        format!("binding:{unit}/{slug}")
    }
    /// `grant:<subject>/<tool>` (`subject` as `unit:<id>` or `agent:<id>`).
    pub fn grant(subject: &str, tool: &str) -> String {
        format!("grant:{subject}/{tool}")
    }
    /// `connector:<slug>`.
    pub fn connector(slug: &str) -> String {
        format!("connector:{slug}")
    }
    /// `tool:<toolId>`.
    pub fn tool(id: &str) -> String {
        format!("tool:{id}")
    }
    /// `delivery:<slug>/<deliveryId>`.
    pub fn delivery(slug: &str, delivery_id: &str) -> String {
        format!("delivery:{slug}/{delivery_id}")
    }
}

/// What happened, before a store gives it its place in the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// When (see [`audit_time`]).
    pub at: String,
    /// Who.
    pub actor: Actor,
    /// What, e.g. `binding.put`, `tool.call`, `delivery.routed`.
    pub action: String,
    /// On what (see [`target`]).
    pub target: String,
    /// `ok`, or the error code it was refused or failed with.
    pub outcome: String,
    /// What else there is to say; never a result, a secret, a token or a webhook body.
    pub details: Value,
    /// The trace the work ran in, when there is one.
    pub trace_id: Option<String>,
}

impl AuditEntry {
    /// An entry made now, with outcome `ok`, empty details and no trace.
    pub fn now(actor: Actor, action: &str, target: String) -> AuditEntry {
        AuditEntry {
            at: audit_time_now(),
            actor,
            action: action.to_string(),
            target,
            outcome: "ok".to_string(),
            details: Value::Object(Default::default()),
            trace_id: None,
        }
    }
}

/// One record of the chain (the contract's `AuditRecord`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Its place: 1, 2, 3, ... without gaps.
    pub seq: i64,
    /// See [`AuditEntry::at`].
    pub at: String,
    /// See [`AuditEntry::actor`].
    pub actor: Actor,
    /// See [`AuditEntry::action`].
    pub action: String,
    /// See [`AuditEntry::target`].
    pub target: String,
    /// See [`AuditEntry::outcome`].
    pub outcome: String,
    /// See [`AuditEntry::details`].
    pub details: Value,
    /// See [`AuditEntry::trace_id`].
    pub trace_id: Option<String>,
    /// The hash of the record before it ([`GENESIS`] for the first).
    pub prev: String,
    /// `"sha256:" + hex(SHA-256(prev + "\n" + JCS(this record without hash)))`.
    pub hash: String,
}

impl AuditRecord {
    /// `entry` placed at `seq` after a record whose hash is `prev`, with its hash.
    pub fn seal(entry: AuditEntry, seq: i64, prev: String) -> AuditRecord {
        Self::seal_with_details(entry, seq, prev).0
    }

    /// [`Self::seal`], and the canonical JSON of the record's `details` (what a store
    /// keeps), written once for the hash and the store both.
    pub fn seal_with_details(entry: AuditEntry, seq: i64, prev: String) -> (AuditRecord, String) {
        let mut record = AuditRecord {
            seq,
            at: entry.at,
            actor: entry.actor,
            action: entry.action,
            target: entry.target,
            outcome: entry.outcome,
            details: entry.details,
            trace_id: entry.trace_id,
            prev,
            hash: String::new(),
        };
        let (hash, details) = match record.hashed_text() {
            Some((text, details)) => {
                // The canonical writer writes UTF-8 (strings through `serde_json`, the
                // rest ASCII).
                let details = String::from_utf8(text[details].to_vec())
                    .unwrap_or_else(|_| record.details.to_string());
                (hash_of(&text), details)
            }
            None => (UNHASHABLE.to_string(), record.details.to_string()),
        };
        record.hash = hash;
        (record, details)
    }

    /// The hash this record's content gives (whatever its `hash` field says).
    pub fn computed_hash(&self) -> String {
        match self.hashed_text() {
            Some((text, _)) => hash_of(&text),
            None => UNHASHABLE.to_string(),
        }
    }

    /// What the hash is taken of, `prev + "\n" + JCS(record without hash)`, and where in
    /// it the canonical JSON of `details` is. `None` for a record that cannot be
    /// canonicalised: its numbers are finite and its keys strings, so that could only come
    /// from writing JSON itself; such a record gets a "hash" that is no SHA-256 and never
    /// verifies (it is reported broken), rather than a panic or a hash that would not
    /// cover its content.
    fn hashed_text(&self) -> Option<(Vec<u8>, std::ops::Range<usize>)> {
        let mut text = Vec::with_capacity(512 + self.prev.len());
        text.extend_from_slice(self.prev.as_bytes());
        text.push(b'\n');
        let details = canonical::record_body(&mut text, self).ok()?;
        Some((text, details))
    }
}

/// `"sha256:" + hex(SHA-256(text))`.
fn hash_of(text: &[u8]) -> String {
    format!("{HASH_PREFIX}{}", hex::encode(Sha256::digest(text)))
}

/// Where the kept chain starts: the seq and hash of the last record pruned (`0` and
/// [`GENESIS`] while nothing was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditAnchor {
    /// The last pruned record's seq.
    pub seq: i64,
    /// The last pruned record's hash.
    pub hash: String,
}

impl Default for AuditAnchor {
    fn default() -> Self {
        AuditAnchor {
            seq: 0,
            hash: GENESIS.to_string(),
        }
    }
}

/// Recomputes a chain record by record, oldest first, from its anchor, and remembers the
/// first record that does not hold: its hash is not its content's, its `prev` is not the
/// hash before it, or its seq does not follow (a removal: the record after the gap).
#[derive(Debug, Clone)]
pub struct ChainCheck {
    expected_seq: i64,
    expected_prev: String,
    checked: u64,
    first_broken: Option<i64>,
}

impl ChainCheck {
    /// A check of the records kept after `anchor`.
    pub fn from(anchor: &AuditAnchor) -> ChainCheck {
        ChainCheck {
            expected_seq: anchor.seq + 1,
            expected_prev: anchor.hash.clone(),
            checked: 0,
            first_broken: None,
        }
    }

    /// Checks the next record (in seq order). Once a record is broken, the rest are only
    /// counted.
    pub fn next(&mut self, record: &AuditRecord) {
        self.checked += 1;
        if self.first_broken.is_some() {
            return;
        }
        let holds = record.seq == self.expected_seq
            && record.prev == self.expected_prev
            && record.hash != UNHASHABLE
            && record.hash == record.computed_hash();
        if !holds {
            self.first_broken = Some(record.seq);
            return;
        }
        self.expected_seq = record.seq + 1;
        self.expected_prev = record.hash.clone();
    }

    /// Ends the check at the chain's `head` (the last record appended, as the store keeps
    /// it apart from the records, read before them): if the records read stop short of
    /// it, the newest were removed and the first of them is the first broken record.
    pub fn ends_at(&mut self, head: &AuditAnchor) {
        if self.first_broken.is_none() && head.seq >= self.expected_seq {
            self.first_broken = Some(self.expected_seq);
        }
    }

    /// How many records were checked.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// The first record that does not hold, if one does not.
    pub fn first_broken(&self) -> Option<i64> {
        self.first_broken
    }
}

/// `t` as an audit record's time: UTC, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
///
/// Written digit by digit rather than with `format!`: every record is dated, a tool call's
/// on the serving thread, and the formatting machinery cost several times as much.
pub fn audit_time(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let (year, month, day) = t.to_calendar_date();
    let (hour, minute, second, milli) = t.to_hms_milli();
    let mut text = String::with_capacity(24);
    // As `{:04}` writes a year: a sign takes one of the four places.
    let year_width = if year < 0 {
        text.push('-');
        3
    } else {
        4
    };
    push_padded(&mut text, year.unsigned_abs(), year_width);
    text.push('-');
    push_padded(&mut text, u8::from(month).into(), 2);
    text.push('-');
    push_padded(&mut text, day.into(), 2);
    text.push('T');
    push_padded(&mut text, hour.into(), 2);
    text.push(':');
    push_padded(&mut text, minute.into(), 2);
    text.push(':');
    push_padded(&mut text, second.into(), 2);
    text.push('.');
    push_padded(&mut text, milli.into(), 3);
    text.push('Z');
    text
}

/// Appends `value` in decimal, zero-padded to at least `width` digits.
fn push_padded(text: &mut String, value: u32, width: usize) {
    let mut digits = [0u8; 10];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for _ in digits.len() - start..width {
        text.push('0');
    }
    text.extend(digits[start..].iter().map(|d| char::from(*d)));
}

/// Now, as an audit record's time.
pub fn audit_time_now() -> String {
    audit_time(time::OffsetDateTime::now_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: i64) -> Vec<AuditRecord> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let mut entry =
                    AuditEntry::now(Actor::agent("ada"), "tool.call", target::tool("acme.echo"));
                entry.details = serde_json::json!({"durationMs": seq, "bytesIn": 12});
                let record = AuditRecord::seal(entry, seq, prev.clone());
                prev = record.hash.clone();
                record
            })
            .collect()
    }

    fn check(anchor: &AuditAnchor, records: &[AuditRecord]) -> (u64, Option<i64>) {
        let mut check = ChainCheck::from(anchor);
        records.iter().for_each(|r| check.next(r));
        (check.checked(), check.first_broken())
    }

    /// RFC 8785 §3.2.2 and appendix B: property order by UTF-16 code units, the
    /// ECMAScript number forms, and escapes only where required.
    #[test]
    fn canonical_json_is_rfc_8785() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        let value: Value = serde_json::from_str(input).expect("the RFC's input");
        assert_eq!(
            serde_json_canonicalizer::to_string(&value).expect("canonical"),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        let sorting: Value = serde_json::from_str(
            r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#,
        )
        .expect("the RFC's sorting input");
        let text = serde_json_canonicalizer::to_string(&sorting).expect("canonical");
        // The RFC's expected order of the keys (by UTF-16 code units).
        let order = [
            "\\r",
            "1",
            "\u{80}",
            "\u{f6}",
            "\u{20ac}",
            "\u{1f600}",
            "\u{fb33}",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|k| {
                text.find(&format!("\"{k}\""))
                    .unwrap_or_else(|| panic!("key {k} missing from {text}"))
            })
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "RFC 8785 §3.2.3 order, got {text}"
        );
    }

    #[test]
    fn a_record_hash_covers_prev_and_the_canonical_record() {
        let record = &chain(1)[0];
        assert_eq!(record.prev, GENESIS);
        let body = serde_json::json!({
            "action": record.action, "actor": {"id": "ada", "kind": "agent"}, "at": record.at,
            "details": {"bytesIn": 12, "durationMs": 1}, "outcome": "ok", "prev": GENESIS,
            "seq": 1, "target": "tool:acme.echo", "traceId": null,
        });
        let text = format!(
            "{GENESIS}\n{}",
            serde_json_canonicalizer::to_string(&body).expect("canonical")
        );
        let expected = format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())));
        assert_eq!(record.hash, expected);
        // The serialised record is the contract's shape.
        let json = serde_json::to_value(record).expect("json");
        assert_eq!(json["traceId"], Value::Null);
        assert_eq!(json["actor"]["kind"], "agent");
    }

    /// What a store keeps as a record's details is the canonical JSON its hash covers,
    /// which reads back as the same value.
    #[test]
    fn a_sealed_records_details_text_is_its_canonical_json() {
        let mut entry = AuditEntry::now(Actor::agent("ada"), "tool.call", target::tool("a.b"));
        entry.details = serde_json::json!({
            "z": [1.5, "\u{1}é"], "a": {"y": null, "b": 18446744073709551615u64}, "m": -3
        });
        let (record, details) = AuditRecord::seal_with_details(entry, 7, GENESIS.to_string());
        assert_eq!(
            details,
            serde_json_canonicalizer::to_string(&record.details).expect("canonical")
        );
        let read: Value = serde_json::from_str(&details).expect("json");
        let mut reread = record.clone();
        reread.details = read;
        assert_eq!(reread.computed_hash(), record.hash);
        assert_eq!(
            record,
            AuditRecord::seal(record_entry(&record), 7, GENESIS.into())
        );
    }

    fn record_entry(record: &AuditRecord) -> AuditEntry {
        AuditEntry {
            at: record.at.clone(),
            actor: record.actor.clone(),
            action: record.action.clone(),
            target: record.target.clone(),
            outcome: record.outcome.clone(),
            details: record.details.clone(),
            trace_id: record.trace_id.clone(),
        }
    }

    #[test]
    fn the_check_names_the_first_edited_removed_or_reordered_record() {
        let anchor = AuditAnchor::default();
        let records = chain(5);
        assert_eq!(check(&anchor, &records), (5, None));

        let mut edited = records.clone();
        edited[2].details = serde_json::json!({"durationMs": 999});
        assert_eq!(check(&anchor, &edited), (5, Some(3)));

        let mut removed = records.clone();
        removed.remove(1);
        assert_eq!(check(&anchor, &removed), (4, Some(3)));

        let mut reordered = records.clone();
        reordered.swap(1, 3);
        assert_eq!(check(&anchor, &reordered).1, Some(4));

        // Renumbered after a swap: seq follows, but the prev links do not.
        let mut renumbered = records.clone();
        renumbered.swap(1, 3);
        renumbered[1].seq = 2;
        renumbered[3].seq = 4;
        assert_eq!(check(&anchor, &renumbered).1, Some(2));

        // The first record removed without a prune moving the anchor.
        assert_eq!(check(&anchor, &records[1..]).1, Some(2));
    }

    #[test]
    fn the_newest_records_removed_are_found_from_the_head() {
        let anchor = AuditAnchor::default();
        let records = chain(5);
        let head = AuditAnchor {
            seq: 5,
            hash: records[4].hash.clone(),
        };
        let ended = |kept: &[AuditRecord]| {
            let mut check = ChainCheck::from(&anchor);
            for r in kept {
                check.next(r);
            }
            check.ends_at(&head);
            (check.checked(), check.first_broken())
        };
        assert_eq!(ended(&records), (5, None));
        // Without the head the shorter chain holds; with it, the first missing record is
        // named.
        assert_eq!(check(&anchor, &records[..3]), (3, None));
        assert_eq!(ended(&records[..3]), (3, Some(4)));
        assert_eq!(ended(&[]), (0, Some(1)));
        // Records appended after the head was read are past it, not missing.
        assert_eq!(ended(&chain(6)), (6, None));
    }

    #[test]
    fn a_pruned_chain_verifies_from_its_anchor() {
        let records = chain(5);
        let anchor = AuditAnchor {
            seq: 2,
            hash: records[1].hash.clone(),
        };
        assert_eq!(check(&anchor, &records[2..]), (3, None));
        assert_eq!(check(&anchor, &records[3..]).1, Some(4));
    }

    #[test]
    fn audit_times_sort_as_text() {
        let early = time::OffsetDateTime::from_unix_timestamp(1_700_000_000).expect("time");
        let later = early + time::Duration::milliseconds(5);
        assert_eq!(audit_time(early), "2023-11-14T22:13:20.000Z");
        assert!(audit_time(early) < audit_time(later));
    }

    #[test]
    fn audit_times_read_as_their_format_string_writes_them() {
        let by_format = |t: time::OffsetDateTime| {
            let t = t.to_offset(time::UtcOffset::UTC);
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millisecond()
            )
        };
        let at = |year: i32, month: u8, day: u8, hour: u8, milli: u16| {
            let month = time::Month::try_from(month).expect("month");
            let date = time::Date::from_calendar_date(year, month, day).expect("date");
            let time = time::Time::from_hms_milli(hour, 59, 58, milli).expect("time");
            time::PrimitiveDateTime::new(date, time).assume_utc()
        };
        let offset = time::UtcOffset::from_hms(5, 30, 0).expect("offset");
        let mut times = vec![
            time::OffsetDateTime::UNIX_EPOCH,
            at(0, 1, 1, 0, 0),
            at(9, 2, 3, 4, 7),
            at(999, 12, 31, 23, 999),
            at(9999, 12, 31, 23, 999),
            at(-1, 6, 15, 12, 0),
            at(-999, 6, 15, 12, 10),
            at(2026, 3, 1, 1, 500).to_offset(offset),
        ];
        // Every field width, in a spread of ordinary times.
        let mut t = at(2023, 11, 14, 22, 0);
        for step in 0..2000 {
            t += time::Duration::milliseconds(7 * step + 1) + time::Duration::hours(13);
            times.push(t);
        }
        for t in times {
            assert_eq!(audit_time(t), by_format(t), "{t}");
        }
    }
}
