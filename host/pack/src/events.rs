//! Events: `events[]` into the plan's events, with their message templates and their CEL
//! filters checked at pack time.
//!
//! A filter is compiled here, so a syntax error is a pack error with a line. Its
//! identifiers are checked (`event`, `parameters`, and the variables of its own
//! comprehensions), as are the parameters it names. The members of `event.payload` it
//! reads become the event's `filter_paths`: only they travel with a message for the
//! per-binding `accept`, so a message does not carry the whole webhook body around.
//!
//! Webhook signatures: every event needs `secret: "{settings.<key>}"`. The value is not
//! binding config: the host verifies `X-Hub-Signature-256` against the operator's
//! `connectors.<slug>.webhook_secrets` before any guest code runs, so the key only names
//! the secret for the author (it need not be a declared setting).

use std::collections::BTreeSet;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use declarative_plan::Event;

use super::compile::{Compiler, Decls};
use super::schema::Property;
use super::templates::{self, Piece, Place};
use super::yaml::{Kind, Node, Pos};

const EVENT_KEYS: &[&str] = &[
    "name",
    "description",
    "message",
    "timeout",
    "max_timeout",
    "parameters",
    "receive",
];
const RECEIVE_KEYS: &[&str] = &["webhook", "subscription", "poll"];
const WEBHOOK_KEYS: &[&str] = &["filter", "secret"];
/// CEL type names, usable as identifiers (`type(x) == string`).
const CEL_TYPES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];
/// The functions the interpreter's CEL has (`cel` 0.15 without its default features:
/// `Env::stdlib`'s overloads, no regular expressions, no time), called globally…
pub(crate) const CEL_GLOBAL_FUNCTIONS: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "size",
    "string",
    "type",
    "uint",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
];
/// …and as members (`x.f()`).
pub(crate) const CEL_MEMBER_FUNCTIONS: &[&str] = &[
    "contains",
    "endsWith",
    "startsWith",
    "size",
    "value",
    "hasValue",
    "or",
    "orValue",
];
/// The standard macros: expanded when a filter is compiled; a call left by that name
/// (a wrong number of arguments) fails like any other.
const CEL_MACROS: &[&str] = &["has", "all", "exists", "exists_one", "map", "filter"];
/// Functions of full CEL the interpreter's does not have, with a hint.
const MISSING_FUNCTIONS: &[(&str, &str)] = &[
    ("matches", "it has no regular expressions"),
    ("timestamp", "it has no time functions"),
    ("duration", "it has no time functions"),
];

/// A duration such as `72h`, in milliseconds.
pub(crate) fn duration_ms(text: &str) -> Option<u64> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

fn name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
}

/// Compiles `events[]`; `params[i]` are the already read parameters of event `i`.
pub(crate) fn compile(
    c: &mut Compiler<'_>,
    decls: &Decls,
    nodes: &[&Node],
    params: &[Vec<Property>],
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut names: Vec<(String, usize)> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let field = format!("events[{i}]");
        let Some(entries) = node.as_map() else {
            c.problems.at(
                node.pos,
                &field,
                format!("an event must be a mapping, found {}", node.describe()),
            );
            continue;
        };
        for e in entries {
            if !EVENT_KEYS.contains(&e.key.as_str()) {
                c.problems.at(
                    e.key_pos,
                    &format!("{field}.{}", e.key),
                    format!(
                        "unknown key `{}` in an event; it may have {}",
                        e.key,
                        list(EVENT_KEYS)
                    ),
                );
            }
        }
        let name = match node.get("name") {
            Some(Node {
                kind: Kind::Str(n),
                pos,
                ..
            }) => {
                if !name_ok(n) {
                    c.problems.at(
                        *pos,
                        &format!("{field}.name"),
                        format!(
                            "`{n}` is not a valid event name: use ^[a-z][a-z0-9_.]*$ (it is the \
                             kind of the messages it becomes)"
                        ),
                    );
                } else if let Some((_, first)) = names.iter().find(|(m, _)| m == n) {
                    c.problems.at(
                        *pos,
                        &format!("{field}.name"),
                        format!(
                            "another event is already named `{n}` (events[{first}]); rename one"
                        ),
                    );
                } else {
                    names.push((n.clone(), i));
                }
                n.clone()
            }
            Some(other) => {
                c.problems.at(
                    other.pos,
                    &format!("{field}.name"),
                    format!("must be a string, found {}", other.describe()),
                );
                String::new()
            }
            None => {
                c.problems
                    .at(node.pos, &format!("{field}.name"), "`name` is required");
                String::new()
            }
        };
        if let Some(d) = node.get("description") {
            if !matches!(d.kind, Kind::Str(_) | Kind::Null) {
                c.problems.at(
                    d.pos,
                    &format!("{field}.description"),
                    format!("must be a string, found {}", d.describe()),
                );
            }
        }
        durations(c, node, &field);

        // The message: event.payload only.
        let names_for_message = decls.names(BTreeSet::new());
        let message = match node.get("message") {
            Some(Node {
                kind: Kind::Str(text),
                pos,
                ..
            }) => match names_for_message.text(text.trim(), Place::Message) {
                Ok(t) => t,
                Err(errors) => {
                    for e in errors {
                        c.problems.at(*pos, &format!("{field}.message"), e);
                    }
                    Vec::new()
                }
            },
            Some(other) => {
                c.problems.at(
                    other.pos,
                    &format!("{field}.message"),
                    format!("must be a string, found {}", other.describe()),
                );
                Vec::new()
            }
            None => {
                c.problems.at(
                    node.pos,
                    &format!("{field}.message"),
                    "`message` is required: it is the text the event becomes, like \
                     `{event.payload.comment.body}`",
                );
                Vec::new()
            }
        };

        let receive_field = format!("{field}.receive");
        let Some(receive) = node.get("receive") else {
            c.problems.at(
                node.pos,
                &receive_field,
                "`receive` is required, with a `webhook` block",
            );
            continue;
        };
        let Some(receive_entries) = receive.as_map() else {
            c.problems.at(
                receive.pos,
                &receive_field,
                format!(
                    "must be a mapping with `webhook`, found {}",
                    receive.describe()
                ),
            );
            continue;
        };
        for e in receive_entries {
            let at = format!("{receive_field}.{}", e.key);
            match e.key.as_str() {
                "webhook" => {}
                "subscription" | "poll" => c.problems.at(
                    e.key_pos,
                    &at,
                    format!(
                        "`receive.{}` is not supported on this host: events arrive as webhooks \
                         only (`receive.webhook`)",
                        e.key
                    ),
                ),
                other => c.problems.at(
                    e.key_pos,
                    &at,
                    format!(
                        "unknown key `{other}` in `receive`; it may have {}",
                        list(RECEIVE_KEYS)
                    ),
                ),
            }
        }
        let webhook_field = format!("{receive_field}.webhook");
        let Some(webhook) = receive.get("webhook") else {
            c.problems.at(
                receive.pos,
                &webhook_field,
                "`receive.webhook` is required: this host receives events as webhooks",
            );
            continue;
        };
        let webhook_entries = match &webhook.kind {
            Kind::Map(entries) => entries.as_slice(),
            Kind::Null => &[],
            _ => {
                c.problems.at(
                    webhook.pos,
                    &webhook_field,
                    format!(
                        "must be a mapping with `secret` and `filter`, found {}",
                        webhook.describe()
                    ),
                );
                continue;
            }
        };
        for e in webhook_entries {
            if !WEBHOOK_KEYS.contains(&e.key.as_str()) {
                c.problems.at(
                    e.key_pos,
                    &format!("{webhook_field}.{}", e.key),
                    format!(
                        "unknown key `{}` in `webhook`; it may have {}",
                        e.key,
                        list(WEBHOOK_KEYS)
                    ),
                );
            }
        }
        secret(c, decls, webhook, &webhook_field);

        let (filter, filter_paths) = match webhook.get("filter") {
            None
            | Some(Node {
                kind: Kind::Null, ..
            }) => {
                c.warnings.push(format!(
                    "{webhook_field}: event `{name}` has no `filter`: every signed webhook \
                     becomes this event's message in every bound unit; add a filter such as \
                     `event.payload.action == 'opened'`"
                ));
                (None, None)
            }
            Some(Node {
                kind: Kind::Str(src),
                pos,
                block_scalar,
            }) => {
                let src = src.trim();
                let event_params = params.get(i).map(Vec::as_slice).unwrap_or_default();
                match check_filter(src, decls, event_params) {
                    Ok(check) => {
                        for w in check.warnings {
                            c.warnings
                                .push(format!("{field}.receive.webhook.filter: {w}"));
                        }
                        (Some(src.to_string()), check.paths)
                    }
                    Err(errors) => {
                        for (at, message) in errors {
                            let pos = match at {
                                Some((line, column)) => {
                                    filter_pos(*pos, *block_scalar, line, column)
                                }
                                None => *pos,
                            };
                            c.problems
                                .at(pos, &format!("{webhook_field}.filter"), message);
                        }
                        (None, None)
                    }
                }
            }
            Some(other) => {
                c.problems.at(
                    other.pos,
                    &format!("{webhook_field}.filter"),
                    format!(
                        "must be a CEL expression string, found {}",
                        other.describe()
                    ),
                );
                (None, None)
            }
        };
        events.push(Event {
            name,
            message,
            filter,
            filter_paths,
        });
    }
    events
}

fn list(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where line `line`, column `column` (from 1) of a filter is in the manifest: `node` is
/// where its text starts (a block scalar's first line of text). Approximate for folded
/// text, whose lines were joined, and for the columns of quoted text.
fn filter_pos(node: Pos, block_scalar: bool, line: usize, column: usize) -> Pos {
    let line = line.max(1);
    match (block_scalar, line) {
        (_, 1) => Pos {
            line: node.line,
            column: node.column + column.saturating_sub(1),
        },
        (false, _) => Pos {
            line: node.line + line - 1,
            column,
        },
        (true, _) => Pos {
            line: node.line + line - 1,
            column: node.column + column.saturating_sub(1),
        },
    }
}

fn durations(c: &mut Compiler<'_>, node: &Node, field: &str) {
    let mut values = [None, None];
    for (slot, key) in ["timeout", "max_timeout"].iter().enumerate() {
        let Some(v) = node.get(key) else { continue };
        let at = format!("{field}.{key}");
        match &v.kind {
            Kind::Null => {}
            Kind::Str(s) => match duration_ms(s) {
                Some(ms) => values[slot] = Some((ms, v.pos)),
                None => c.problems.at(
                    v.pos,
                    &at,
                    format!("`{s}` is not a duration: write a number and a unit, like `72h`, `30m`, `10s` or `500ms`"),
                ),
            },
            _ => c.problems.at(
                v.pos,
                &at,
                format!("must be a duration string like \"72h\", found {}", v.describe()),
            ),
        }
    }
    if let [Some((timeout, _)), Some((max, pos))] = values {
        if max < timeout {
            c.problems.at(
                pos,
                &format!("{field}.max_timeout"),
                "must be at least `timeout`",
            );
        }
    }
}

/// `secret: "{settings.<key>}"`: required, exactly one settings reference.
fn secret(c: &mut Compiler<'_>, decls: &Decls, webhook: &Node, field: &str) {
    let at = format!("{field}.secret");
    let hint = "write `secret: \"{settings.webhook_secret}\"`; the host takes the value from its \
                configuration `connectors.<slug>.webhook_secrets`";
    match webhook.get("secret") {
        None
        | Some(Node {
            kind: Kind::Null, ..
        }) => c.problems.at(
            webhook.pos,
            &at,
            format!("`secret` is required: this host verifies every webhook (unsigned webhooks are refused); {hint}"),
        ),
        Some(Node {
            kind: Kind::Str(s),
            pos,
            ..
        }) => match templates::split(s.trim()).as_deref() {
            Ok([Piece::Hole(h)]) if h.strip_prefix("settings.").is_some_and(|k| !k.is_empty()) => {
                let key = &h["settings.".len()..];
                if decls.settings.contains_key(key) {
                    decls.usage.settings.borrow_mut().insert(key.to_string());
                    c.warnings.push(format!(
                        "{at}: settings.{key} is declared, but the webhook secret is not read from \
                         a binding: the host verifies signatures with `connectors.<slug>.webhook_secrets`; \
                         remove it from `settings` so bindings do not have to give it"
                    ));
                }
            }
            _ => c.problems.at(
                *pos,
                &at,
                format!("must be exactly one settings reference; {hint}"),
            ),
        },
        Some(other) => c.problems.at(
            other.pos,
            &at,
            format!("must be a string, found {}; {hint}", other.describe()),
        ),
    }
}

/// What a filter reads.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct FilterCheck {
    /// The member chains under `event.payload`; `None`: the payload as a whole.
    pub paths: Option<Vec<Vec<String>>>,
    /// Worth telling, not wrong.
    pub warnings: Vec<String>,
}

/// A problem of a filter: where in the filter (line, column from 1), and what.
type FilterError = (Option<(usize, usize)>, String);

/// Compiles and checks a filter.
pub(crate) fn check_filter(
    src: &str,
    decls: &Decls,
    event_params: &[Property],
) -> Result<FilterCheck, Vec<FilterError>> {
    let program = cel::Program::compile(src).map_err(|errors| {
        errors
            .errors
            .iter()
            .map(|e| {
                let line = usize::try_from(e.pos.0).unwrap_or(1).max(1);
                let column = usize::try_from(e.pos.1).unwrap_or(1).max(1);
                (
                    Some((line, column)),
                    format!(
                        "not a valid CEL expression: {} (line {line}, column {column} of the filter)",
                        e.msg
                    ),
                )
            })
            .collect::<Vec<_>>()
    })?;
    let mut walk = Walk {
        decls,
        event_params,
        scope: Vec::new(),
        paths: Vec::new(),
        whole: false,
        errors: Vec::new(),
        warnings: Vec::new(),
        src,
        info: program.source_info(),
        at: None,
    };
    walk.expr(program.expression());
    if !walk.errors.is_empty() {
        return Err(walk.errors);
    }
    let paths = (!walk.whole).then(|| reduce(walk.paths));
    Ok(FilterCheck {
        paths,
        warnings: walk.warnings,
    })
}

/// Deduplicates paths and drops those another path already covers (`[a]` covers `[a, b]`).
fn reduce(paths: Vec<Vec<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for p in &paths {
        let covered = paths.iter().any(|q| q.len() < p.len() && p.starts_with(q));
        if !covered && !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

struct Walk<'a> {
    decls: &'a Decls,
    event_params: &'a [Property],
    scope: Vec<String>,
    paths: Vec<Vec<String>>,
    whole: bool,
    errors: Vec<FilterError>,
    warnings: Vec<String>,
    src: &'a str,
    info: &'a cel::common::ast::SourceInfo,
    /// Where the expression being checked is in the filter (line, column from 1).
    at: Option<(usize, usize)>,
}

/// `a.b.c` (a test `has(a.b.c)` only as the outermost select): the root and the fields.
fn chain(e: &IdedExpr) -> Option<(&str, Vec<&str>)> {
    let mut fields = Vec::new();
    let mut current = e;
    let mut outermost = true;
    loop {
        match &current.expr {
            Expr::Ident(name) => {
                fields.reverse();
                return Some((name, fields));
            }
            Expr::Select(s) if !s.test || outermost => {
                fields.push(s.field.as_str());
                current = &s.operand;
            }
            _ => return None,
        }
        outermost = false;
    }
}

impl Walk<'_> {
    /// Line and column (from 1) of the node `id` in the filter.
    fn pos_of(&self, id: u64) -> Option<(usize, usize)> {
        let (start, _) = self.info.offset_for(id)?;
        let start = usize::try_from(start).ok()?;
        let mut line = 1;
        let mut column = 1;
        for c in self.src.chars().take(start) {
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        Some((line, column))
    }

    fn error(&mut self, message: String) {
        self.errors.push((self.at, message));
    }

    fn expr(&mut self, e: &IdedExpr) {
        let outer = self.at;
        if let Some(at) = self.pos_of(e.id) {
            self.at = Some(at);
        }
        self.node(e);
        self.at = outer;
    }

    fn node(&mut self, e: &IdedExpr) {
        if let Some((root, fields)) = chain(e) {
            if !self.scope.iter().any(|v| v == root) {
                self.root(root, &fields);
                return;
            }
        }
        match &e.expr {
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                // `optional.of(x)`: a qualified global function, not a member call.
                let qualified = match &call.target {
                    Some(t) => match &t.expr {
                        Expr::Ident(ns) if !self.scope.iter().any(|v| v == ns) => {
                            let full = format!("{ns}.{name}");
                            CEL_GLOBAL_FUNCTIONS
                                .contains(&full.as_str())
                                .then_some(full)
                        }
                        _ => None,
                    },
                    None => None,
                };
                if qualified.is_none() {
                    self.function(name, call.target.is_some());
                }
                if let (Some(target), None) = (&call.target, &qualified) {
                    self.expr(target);
                }
                for arg in &call.args {
                    self.expr(arg);
                }
            }
            Expr::Select(s) => self.expr(&s.operand),
            Expr::Comprehension(c) => {
                self.expr(&c.iter_range);
                self.expr(&c.accu_init);
                let bound = [
                    Some(c.iter_var.clone()),
                    c.iter_var2.clone(),
                    Some(c.accu_var.clone()),
                ];
                let before = self.scope.len();
                self.scope.extend(bound.into_iter().flatten());
                self.expr(&c.loop_cond);
                self.expr(&c.loop_step);
                self.expr(&c.result);
                self.scope.truncate(before);
            }
            Expr::List(l) => l.elements.iter().for_each(|x| self.expr(x)),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        self.expr(&me.key);
                        self.expr(&me.value);
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => self.expr(&f.value),
                        EntryExpr::MapEntry(me) => {
                            self.expr(&me.key);
                            self.expr(&me.value);
                        }
                    }
                }
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    /// Refuses a function the interpreter's CEL does not have (operators, whose names are
    /// not identifiers, and macros are fine).
    fn function(&mut self, name: &str, member: bool) {
        let operator = name
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
        let known = if member {
            CEL_MEMBER_FUNCTIONS
        } else {
            CEL_GLOBAL_FUNCTIONS
        };
        if operator || known.contains(&name) || CEL_MACROS.contains(&name) {
            return;
        }
        let call = if member {
            format!(".{name}()")
        } else {
            format!("{name}()")
        };
        let why = MISSING_FUNCTIONS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(String::new(), |(_, why)| format!(" ({why})"));
        let available: Vec<String> = CEL_GLOBAL_FUNCTIONS
            .iter()
            .map(|f| format!("{f}()"))
            .chain(CEL_MEMBER_FUNCTIONS.iter().map(|f| format!(".{f}()")))
            .collect();
        self.error(format!(
            "`{call}` is not available in this host's CEL{why}: a filter calling it never \
             matches. It has {}, the macros has/all/exists/exists_one/map/filter and the \
             operators",
            available.join(", ")
        ));
    }

    fn root(&mut self, root: &str, fields: &[&str]) {
        match root {
            "event" => match fields {
                ["payload", rest @ ..] if !rest.is_empty() => {
                    self.paths
                        .push(rest.iter().map(|s| s.to_string()).collect());
                }
                [] | ["payload"] => self.whole = true,
                [other, ..] => self.error(format!(
                    "`event.{other}`: a filter reads the webhook body as `event.payload.…`"
                )),
            },
            "parameters" => {
                if fields.is_empty() {
                    return;
                }
                let found = (1..=fields.len()).rev().find_map(|n| {
                    let name = fields[..n].join(".");
                    self.decls
                        .root
                        .iter()
                        .chain(self.event_params.iter())
                        .find(|p| p.name == name)
                });
                match found {
                    Some(p) if !p.binding && p.default.is_none() => self.warnings.push(format!(
                        "`parameters.{}` is a tool argument without `require_binding` or a \
                         default: in a filter it has no value, so the filter is false; give it \
                         `require_binding: true`",
                        p.name
                    )),
                    Some(_) => {}
                    None => {
                        let declared: Vec<String> = self
                            .decls
                            .root
                            .iter()
                            .chain(self.event_params.iter())
                            .map(|p| format!("`{}`", p.name))
                            .collect();
                        self.error(format!(
                            "unknown parameter `parameters.{}` ({}); declare it in the root \
                             `parameters` (with `require_binding: true`) or in this event's \
                             `parameters`",
                            fields.join("."),
                            if declared.is_empty() {
                                "none are declared".to_string()
                            } else {
                                format!("declared: {}", declared.join(", "))
                            }
                        ));
                    }
                }
            }
            t if CEL_TYPES.contains(&t) && fields.is_empty() => {}
            other => self.error(format!(
                "unknown identifier `{other}`: a filter reads `event.payload.…` and \
                 `parameters.…` only"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(duration_ms("72h"), Some(72 * 3_600_000));
        assert_eq!(duration_ms("500ms"), Some(500));
        assert_eq!(duration_ms("10s"), Some(10_000));
        assert_eq!(duration_ms("h"), None);
        assert_eq!(duration_ms("1d"), None);
        assert_eq!(duration_ms("1.5h"), None);
    }

    #[test]
    fn paths_are_reduced() {
        let p = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            reduce(vec![p(&["a", "b"]), p(&["a"]), p(&["c"]), p(&["c"])]),
            vec![p(&["a"]), p(&["c"])]
        );
    }
}
