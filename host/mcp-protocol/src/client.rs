//! A client's side of an MCP session over Streamable HTTP, without the HTTP.
//!
//! [`ClientSession`] numbers requests, keeps the session id and the revision the server
//! chose, and says which headers every later request carries; [`response_in`] and
//! [`outcome`] find the answer to a request in a JSON or event-stream body and split it
//! into its result or its error. The caller sends and receives (blocking, async, or
//! through `wasi:http` in a guest).

use serde_json::{json, Value};

use crate::revision::{CLIENT_VERSION, SESSION_HEADER, VERSION_HEADER};
use crate::sse::EventStreamDecoder;

/// The `Accept` header of every POST: a server may answer with JSON or a stream.
pub const ACCEPT: &str = "application/json, text/event-stream";

/// One session's client state.
#[derive(Debug, Default)]
pub struct ClientSession {
    next_id: u64,
    session_id: Option<String>,
    version: Option<String>,
}

impl ClientSession {
    /// A session not yet initialised.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next request: its id (1, 2, ...) and the JSON-RPC message.
    pub fn request(&mut self, method: &str, params: Value) -> (u64, Value) {
        self.next_id += 1;
        let id = self.next_id;
        (
            id,
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
    }

    /// The `initialize` request, asking for [`CLIENT_VERSION`] as `client` `version`.
    pub fn initialize(&mut self, client: &str, version: &str) -> (u64, Value) {
        self.request(
            "initialize",
            json!({
                "protocolVersion": CLIENT_VERSION,
                "capabilities": {},
                "clientInfo": {"name": client, "version": version},
            }),
        )
    }

    /// A notification (no id, no answer), such as `notifications/initialized`.
    pub fn notification(method: &str) -> Value {
        json!({"jsonrpc": "2.0", "method": method})
    }

    /// Keeps the session id a server's answer carried in [`SESSION_HEADER`] (the first
    /// one given: the server names its session once, at `initialize`).
    pub fn adopt_session_id(&mut self, header: Option<&str>) {
        if let (None, Some(id)) = (&self.session_id, header) {
            self.session_id = Some(id.to_owned());
        }
    }

    /// Keeps the revision `initialize`'s `result` chose (the one asked for when it names
    /// none), which every later request states.
    pub fn adopt_initialize(&mut self, result: &Value) {
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(CLIENT_VERSION);
        self.version = Some(version.to_owned());
    }

    /// The headers every request after `initialize` carries: the session id (when the
    /// server gave one) and the revision.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(2);
        if let Some(id) = &self.session_id {
            headers.push((SESSION_HEADER, id.clone()));
        }
        if let Some(version) = &self.version {
            headers.push((VERSION_HEADER, version.clone()));
        }
        headers
    }

    /// Whether the server gave the session an id (then the client ends it with a
    /// DELETE carrying [`ClientSession::headers`]).
    pub fn has_session_id(&self) -> bool {
        self.session_id.is_some()
    }

    /// Forgets the session id (after the DELETE that ends it).
    pub fn end(&mut self) {
        self.session_id = None;
    }
}

/// How an answer's body is framed, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json`: one message or a batch.
    Json,
    /// `text/event-stream`: messages in `message` events.
    EventStream,
    /// Anything else (not an MCP answer).
    Other,
}

impl BodyKind {
    /// The framing `content_type` names (parameters and case ignored).
    pub fn of(content_type: &str) -> BodyKind {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/json" => BodyKind::Json,
            "text/event-stream" => BodyKind::EventStream,
            _ => BodyKind::Other,
        }
    }
}

/// The response to request `id` in a whole body framed as `kind`, if it holds one.
pub fn response_in(kind: BodyKind, body: &[u8], id: u64) -> Option<Value> {
    match kind {
        BodyKind::Json => find_response(serde_json::from_slice(body).ok()?, id),
        BodyKind::EventStream => {
            let mut decoder = EventStreamDecoder::new(usize::MAX);
            let mut events = decoder.feed(body);
            events.extend(decoder.finish());
            events
                .into_iter()
                .find_map(|data| response_in(BodyKind::Json, &data, id))
        }
        BodyKind::Other => None,
    }
}

/// The response to request `id` in a message or a batch: a message with that id and a
/// `result` or an `error`.
pub fn find_response(value: Value, id: u64) -> Option<Value> {
    match value {
        Value::Array(items) => items.into_iter().find_map(|v| find_response(v, id)),
        v if v.get("id").and_then(Value::as_u64) == Some(id)
            && (v.get("result").is_some() || v.get("error").is_some()) =>
        {
            Some(v)
        }
        _ => None,
    }
}

/// What a response says.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// A JSON-RPC error: its code (as sent, `null` when absent) and message.
    Error {
        /// `error.code`.
        code: Value,
        /// `error.message` (empty when absent).
        message: String,
    },
    /// Neither `result` nor `error`.
    Malformed,
}

/// The `result` of a response, or why there is none.
pub fn outcome(response: Value) -> Result<Value, Failure> {
    let Value::Object(mut response) = response else {
        return Err(Failure::Malformed);
    };
    if let Some(error) = response.remove("error") {
        return Err(Failure::Error {
            code: error.get("code").cloned().unwrap_or(Value::Null),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        });
    }
    response.remove("result").ok_or(Failure::Malformed)
}

/// Whether a JSON-RPC message is an answer (has a `result` or an `error`), as opposed to
/// a request or a notification the server sent.
pub fn is_answer(message: &[u8]) -> bool {
    serde_json::from_slice::<Value>(message)
        .is_ok_and(|v| v.get("result").is_some() || v.get("error").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_numbers_requests_and_states_its_id_and_revision() {
        let mut s = ClientSession::new();
        let (id, init) = s.initialize("pack", "1.0");
        assert_eq!(id, 1);
        assert_eq!(init["params"]["protocolVersion"], CLIENT_VERSION);
        assert!(s.headers().is_empty());
        s.adopt_session_id(Some("abc"));
        s.adopt_session_id(Some("later"));
        s.adopt_initialize(&json!({"protocolVersion": "2025-11-25"}));
        assert_eq!(
            s.headers(),
            vec![
                (SESSION_HEADER, "abc".to_string()),
                (VERSION_HEADER, "2025-11-25".to_string())
            ]
        );
        let (id, list) = s.request("tools/list", json!({}));
        assert_eq!((id, list["id"].as_u64()), (2, Some(2)));
        s.end();
        assert!(!s.has_session_id());
    }

    #[test]
    fn responses_are_found_in_json_batches_and_event_streams() {
        let stream =
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n\
                       : comment\ndata: {\"jsonrpc\":\"2.0\",\n\
                       data: \"id\":3,\"result\":{\"ok\":true}}\n\nid: 9\n";
        let found = response_in(BodyKind::EventStream, stream, 3).expect("found");
        assert_eq!(outcome(found), Ok(json!({"ok": true})));
        assert_eq!(response_in(BodyKind::EventStream, stream, 4), None);
        // A request of the server's that reuses the id is not the answer.
        let batch = br#"[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no"}}]"#;
        let found = response_in(BodyKind::Json, batch, 2).expect("found");
        assert_eq!(
            outcome(found),
            Err(Failure::Error {
                code: json!(-32601),
                message: "no".into()
            })
        );
        assert_eq!(response_in(BodyKind::Other, batch, 2), None);
        assert_eq!(outcome(json!({"id": 1})), Err(Failure::Malformed));
        assert_eq!(
            BodyKind::of("Text/Event-Stream; charset=utf-8"),
            BodyKind::EventStream
        );
        assert_eq!(BodyKind::of("application/json"), BodyKind::Json);
        assert_eq!(BodyKind::of("text/html"), BodyKind::Other);
    }

    #[test]
    fn answers_are_told_from_server_requests() {
        assert!(is_answer(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        assert!(is_answer(br#"{"jsonrpc":"2.0","id":1,"error":{}}"#));
        assert!(!is_answer(
            br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#
        ));
        assert!(!is_answer(b"not json"));
    }
}
