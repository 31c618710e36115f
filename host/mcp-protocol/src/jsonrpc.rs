//! JSON-RPC 2.0 as MCP uses it: classifying what a client sent, and writing answers.
//!
//! Answers are serialised straight to bytes from borrowed parts (the request id, the
//! result), so a response costs one allocation for its body.

use serde::Serialize;
use serde_json::{Map, Value};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object (also: batches where they are not allowed,
/// a missing session id).
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (also: an unknown tool, arguments that break the schema).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// Authentication failed (HTTP 401/403 bodies).
pub const UNAUTHORIZED: i64 = -32000;
/// The session (or the agent) does not exist (HTTP 404 bodies).
pub const NOT_FOUND: i64 = -32001;
/// The tool exists but is not granted to this agent (CONTRACT.md §5).
pub const NOT_GRANTED: i64 = -32002;
/// 2026-07-28: the HTTP headers do not match the body, or a required one is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request's protocol version is not one the server serves.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// One message a client sent.
#[derive(Debug)]
pub enum Incoming {
    /// A request: it gets exactly one answer.
    Request {
        /// Its id (a string or a number), which the answer repeats.
        id: Value,
        /// What is asked.
        method: String,
        /// Its `params`, as sent.
        params: Option<Value>,
    },
    /// A notification: no answer.
    Notification {
        /// What is notified.
        method: String,
    },
    /// A client's answer to a server request (we send none, so these are dropped).
    Response,
}

/// Why a message is not a valid JSON-RPC message: the id to answer with (`null` when
/// none could be read) and a sentence.
#[derive(Debug)]
pub struct Invalid {
    /// The id to answer with.
    pub id: Value,
    /// What is wrong, as the error's message.
    pub message: &'static str,
}

/// Classifies one JSON value as a JSON-RPC message.
pub fn classify(value: Value) -> Result<Incoming, Invalid> {
    let Value::Object(mut obj) = value else {
        return Err(Invalid {
            id: Value::Null,
            message: "Invalid Request: a JSON-RPC message is a JSON object",
        });
    };
    let id = obj.remove("id");
    let usable_id = match &id {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        _ => Value::Null,
    };
    let invalid = |message| {
        Err(Invalid {
            id: usable_id.clone(),
            message,
        })
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("Invalid Request: `jsonrpc` must be \"2.0\"");
    }
    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = obj.remove("params");
            match id {
                None => Ok(Incoming::Notification { method }),
                Some(Value::String(_) | Value::Number(_)) => Ok(Incoming::Request {
                    id: usable_id,
                    method,
                    params,
                }),
                Some(_) => invalid("Invalid Request: `id` must be a string or an integer"),
            }
        }
        Some(_) => invalid("Invalid Request: `method` must be a string"),
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            Ok(Incoming::Response)
        }
        None => {
            invalid("Invalid Request: a message needs a `method`, or `result`/`error` and an `id`")
        }
    }
}

/// `params` of a request as an object: absent and `null` read as `{}`.
pub fn params_object(params: Option<Value>) -> Result<Map<String, Value>, &'static str> {
    match params {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o),
        Some(_) => Err("`params` must be an object"),
    }
}

#[derive(Serialize)]
struct Success<'a, T: Serialize> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: T,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
}

/// `{"jsonrpc": "2.0", "id": id, "result": result}` as bytes.
pub fn result<T: Serialize>(id: &Value, result: T) -> Vec<u8> {
    serde_json::to_vec(&Success {
        jsonrpc: "2.0",
        id,
        result,
    })
    .unwrap_or_else(|e| {
        error(
            id,
            INTERNAL_ERROR,
            &format!("cannot serialise the result: {e}"),
            None,
        )
    })
}

/// `{"jsonrpc": "2.0", "id": id, "error": {code, message, data?}}` as bytes.
pub fn error(id: &Value, code: i64, message: &str, data: Option<&Value>) -> Vec<u8> {
    serde_json::to_vec(&Failure {
        jsonrpc: "2.0",
        id,
        error: ErrorObject {
            code,
            message,
            data,
        },
    })
    .unwrap_or_default()
}

/// A notification from the server, as the JSON text of one SSE `data` field.
pub fn notification(method: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}"}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_requests_notifications_and_responses() {
        match classify(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})) {
            Ok(Incoming::Request { id, method, params }) => {
                assert_eq!((id, method.as_str(), params), (json!(7), "ping", None))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            Ok(Incoming::Notification { .. })
        ));
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "id": "a", "result": {}})),
            Ok(Incoming::Response)
        ));
    }

    #[test]
    fn rejects_what_is_not_json_rpc() {
        for (bad, id) in [
            (json!([]), Value::Null),
            (json!("ping"), Value::Null),
            (json!({"id": 1, "method": "ping"}), json!(1)),
            (
                json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
                json!(1),
            ),
            (
                json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
                Value::Null,
            ),
            (
                json!({"jsonrpc": "2.0", "id": {}, "method": "ping"}),
                Value::Null,
            ),
            (
                json!({"jsonrpc": "2.0", "id": "x", "method": 5}),
                json!("x"),
            ),
            (json!({"jsonrpc": "2.0", "result": {}}), Value::Null),
        ] {
            let err = classify(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.id, id, "{bad}");
        }
    }

    #[test]
    fn writes_answers() {
        let ok: Value = serde_json::from_slice(&result(&json!(1), json!({}))).unwrap();
        assert_eq!(ok, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        let data = json!({"x": 1});
        let err: Value =
            serde_json::from_slice(&error(&json!("a"), NOT_GRANTED, "no", Some(&data))).unwrap();
        assert_eq!(
            err,
            json!({"jsonrpc": "2.0", "id": "a", "error": {"code": -32002, "message": "no", "data": {"x": 1}}})
        );
        let n: Value =
            serde_json::from_str(&notification("notifications/tools/list_changed")).unwrap();
        assert_eq!(n["method"], "notifications/tools/list_changed");
    }
}
