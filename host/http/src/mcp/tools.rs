//! `tools/list` and `tools/call`: the agent's effective tools as MCP tools, and host
//! errors as MCP answers.

use std::hash::Hasher;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::jsonrpc;
use super::names::{Naming, Resolved};
use connector_core::grants::ResolvedTools;
use connector_core::host::Host;
use connector_model::connector::ToolInfo;
use connector_model::error::{ErrorCode, HostError};
use connector_model::tool_output::{ContentBlock, ToolOutput};

/// The `tools/list` result of an effective tool set: `{"tools": [Tool]}`, named as the
/// endpoint's [`Naming`] says (tools whose names collide there are left out).
///
/// Every tier is listed, as the contract says (`tools/list` = the effective tools). Tools
/// of the image tier run inside the agent's own container: a call of one through the host
/// is answered with an error saying so.
pub struct ToolsList<'a>(pub &'a ResolvedTools, pub &'a Naming);

impl Serialize for ToolsList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Tools<'a>(&'a ResolvedTools, &'a Naming);
        impl Serialize for Tools<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(None)?;
                if self.1.is_canonical() {
                    for tool in self.0.iter() {
                        seq.serialize_element(&McpTool(&tool.info.name, tool.info))?;
                    }
                } else {
                    for (name, tool) in self.1.listing(self.0).tools {
                        seq.serialize_element(&McpTool(&name, tool.info))?;
                    }
                }
                seq.end()
            }
        }
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("tools", &Tools(self.0, self.1))?;
        map.end()
    }
}

/// One MCP `Tool`: `{name, description, inputSchema, annotations, outputSchema?}`, under
/// the name the endpoint shows. The
/// contract's annotations already carry MCP's `ToolAnnotations` names (`readOnlyHint`,
/// ...); an output schema is an object schema (checked at install).
struct McpTool<'a>(&'a str, &'a ToolInfo);

impl Serialize for McpTool<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let info = self.1;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("name", self.0)?;
        map.serialize_entry("description", &info.description)?;
        map.serialize_entry("inputSchema", &InputSchema(&info.input_schema))?;
        map.serialize_entry("annotations", &info.annotations)?;
        if let Some(schema) = &info.output_schema {
            map.serialize_entry("outputSchema", schema)?;
        }
        map.end()
    }
}

/// MCP requires `inputSchema` to be an object schema with `"type": "object"`. Connector
/// schemas are; anything else is presented as one (without copying the schema).
struct InputSchema<'a>(&'a Value);

impl Serialize for InputSchema<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("object") => {
                o.serialize(serializer)
            }
            Value::Object(o) => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", "object")?;
                for (k, v) in o.iter().filter(|(k, _)| *k != "type") {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            _ => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("type", "object")?;
                map.end()
            }
        }
    }
}

/// A fingerprint of what `tools/list` shows for `tools` under `naming`: equal
/// fingerprints, same list.
pub fn fingerprint(tools: &ResolvedTools, naming: &Naming) -> u64 {
    struct HashWriter(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(Default::default());
    // Serialising into a hasher cannot fail.
    let _ = serde_json::to_writer(&mut w, &ToolsList(tools, naming));
    w.0.finish()
}

/// A successful call: the connector's content blocks, or the structured result as JSON
/// text when there are none; and the structured result as `structuredContent` (the
/// result itself when it is an object, else `{"result": value}`), when there is one.
pub struct CallResult(ToolOutput);

#[derive(Serialize)]
struct TextContent {
    r#type: &'static str,
    text: String,
}

/// The first revision with `resource_link` content blocks.
pub const RESOURCE_LINKS: &str = "2025-06-18";

impl CallResult {
    /// The result of a call at protocol revision `version`. Before [`RESOURCE_LINKS`] a
    /// resource link is shown as a text block `<name>: <uri>`, which every client reads.
    pub fn success(mut output: ToolOutput, version: &str) -> Self {
        if version < RESOURCE_LINKS {
            for block in &mut output.content {
                if let ContentBlock::ResourceLink { uri, name, .. } = block {
                    let text = format!("{name}: {uri}");
                    *block = ContentBlock::Text { text };
                }
            }
        }
        CallResult(output)
    }
}

impl Serialize for CallResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Wrapped<'a>(&'a Value);
        impl Serialize for Wrapped<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("result", self.0)?;
                map.end()
            }
        }
        let output = &self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        match &output.structured {
            // No blocks: the structured result's JSON text is what clients read.
            Some(value) if output.content.is_empty() => {
                let text = [TextContent {
                    r#type: "text",
                    text: value.to_string(),
                }];
                map.serialize_entry("content", &text)?;
            }
            _ => map.serialize_entry("content", &output.content)?,
        }
        match &output.structured {
            Some(value @ Value::Object(_)) => map.serialize_entry("structuredContent", value)?,
            Some(value) => map.serialize_entry("structuredContent", &Wrapped(value))?,
            None => {}
        }
        map.serialize_entry("isError", &false)?;
        map.end()
    }
}

/// A call the connector itself failed: a result with `isError: true`, the message as text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolFailure {
    content: [TextContent; 1],
    is_error: bool,
}

/// How a failed `Host::call_tool` is answered.
pub enum CallError {
    /// A JSON-RPC error: code, message, data.
    Rpc(i64, String, Value),
    /// A result with `isError: true` (the connector's own failure).
    Result(ToolFailure),
}

/// The first revision that answers invalid tool arguments with a tool result the model can
/// read and correct itself from (SEP-1303), rather than a protocol error.
pub const ARGUMENT_ERRORS_AS_RESULTS: &str = "2025-11-25";

/// The first revision without `-32002`: a tool that is not granted is `-32602` with
/// `data.code: "tool_not_granted"` from here on.
pub const NOT_GRANTED_AS_PARAMS: &str = "2026-07-28";

/// Maps a host error to the MCP answer at protocol revision `version`: not granted →
/// `-32002` (`-32602` from [`NOT_GRANTED_AS_PARAMS`] on); unknown tool → `-32602`; invalid arguments → a result with `isError` whose
/// text names each violation from [`ARGUMENT_ERRORS_AS_RESULTS`] on, `-32602` (data lists
/// the JSON pointers) before; a connector's own failure (`tool_failed`,
/// `connector_trapped`, `connector_timeout`) → a result with `isError`; anything else →
/// `-32603`. `data` always carries the host's error `code` and `details`.
pub fn call_error(err: HostError, version: &str) -> CallError {
    if err.code == ErrorCode::InvalidArguments && version >= ARGUMENT_ERRORS_AS_RESULTS {
        return CallError::Result(ToolFailure {
            content: [TextContent {
                r#type: "text",
                text: argument_errors(&err),
            }],
            is_error: true,
        });
    }
    let code = match err.code {
        ErrorCode::ToolFailed | ErrorCode::ConnectorTrapped | ErrorCode::ConnectorTimeout => {
            return CallError::Result(ToolFailure {
                content: [TextContent {
                    r#type: "text",
                    text: format!("{}: {}", err.code, err.message),
                }],
                is_error: true,
            })
        }
        // 2026-07-28 retired `-32002`: not granted is invalid params there, told apart by
        // `data.code`.
        ErrorCode::ToolNotGranted | ErrorCode::NotFound if version >= NOT_GRANTED_AS_PARAMS => {
            jsonrpc::INVALID_PARAMS
        }
        ErrorCode::ToolNotGranted | ErrorCode::NotFound => jsonrpc::NOT_GRANTED,
        ErrorCode::UnknownTool | ErrorCode::InvalidArguments | ErrorCode::InvalidRequest => {
            jsonrpc::INVALID_PARAMS
        }
        _ => jsonrpc::INTERNAL_ERROR,
    };
    let mut data = Map::new();
    data.insert("code".into(), Value::String(err.code.as_str().into()));
    match err.details {
        // Invalid arguments: `data.violations` = [{pointer, message}].
        Some(Value::Object(mut details)) if details.contains_key("violations") => {
            if let Some(v) = details.remove("violations") {
                data.insert("violations".into(), v);
            }
            if !details.is_empty() {
                data.insert("details".into(), Value::Object(details));
            }
        }
        Some(details) => {
            data.insert("details".into(), details);
        }
        None => {}
    }
    CallError::Rpc(code, err.message, Value::Object(data))
}

/// Why a `tools/list` request cannot be answered, if it names a cursor: every tool is
/// listed in one page, so no cursor is ever handed out.
pub fn refused_cursor(params: Option<&Value>) -> Option<&'static str> {
    params
        .and_then(|p| p.get("cursor"))
        .is_some_and(|c| !c.is_null())
        .then_some("Invalid params: unknown cursor (this server lists every tool in one page)")
}

/// What a `tools/call` came to, for each endpoint to frame as its revision says.
pub enum CallOutcome {
    /// The tool ran: its result.
    Done(CallResult),
    /// A result with `isError: true` (the connector's own failure, or arguments the
    /// model can correct from SEP-1303 on).
    Failed(ToolFailure),
    /// A JSON-RPC error: code, message, data.
    Rpc(i64, String, Option<Value>),
}

/// Runs `tools/call` with `params` for `agent` at protocol revision `version`, the tool
/// named as `naming` shows it: the same grant and schema checks as
/// `POST /agents/{id}/tool-calls` (`Host::call_tool`).
pub async fn call(
    host: &Host,
    agent: &str,
    naming: &Naming,
    version: &str,
    params: Option<Value>,
) -> CallOutcome {
    let mut params = match jsonrpc::params_object(params) {
        Ok(p) => p,
        Err(m) => return CallOutcome::Rpc(jsonrpc::INVALID_PARAMS, m.into(), None),
    };
    let Some(Value::String(name)) = params.remove("name") else {
        return CallOutcome::Rpc(
            jsonrpc::INVALID_PARAMS,
            "Invalid params: `name` (the tool's name, a string) is required".into(),
            None,
        );
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v,
    };
    let id = match canonical_id(host, agent, naming, &name) {
        Ok(id) => id,
        Err(outcome) => return outcome,
    };
    match host.call_tool(agent, &id, arguments).await {
        Ok(output) => CallOutcome::Done(CallResult::success(output, version)),
        Err(e) => match call_error(e, version) {
            CallError::Rpc(code, message, data) => {
                let message = naming.message(message, &id, &name);
                let message = if code == jsonrpc::NOT_GRANTED || code == jsonrpc::INVALID_PARAMS {
                    message
                } else {
                    format!("Internal error: {message}")
                };
                CallOutcome::Rpc(code, message, Some(data))
            }
            CallError::Result(failure) => CallOutcome::Failed(failure),
        },
    }
}

/// The id a call by `name` reaches under `naming`; a name several tools present is
/// `-32602` naming them.
pub fn canonical_id(
    host: &Host,
    agent: &str,
    naming: &Naming,
    name: &str,
) -> Result<String, CallOutcome> {
    if naming.is_canonical() {
        return Ok(name.to_string());
    }
    let subject = connector_model::records::Subject::Agent(agent.to_string());
    let Ok(tools) = host.effective_tools(&subject) else {
        // The agent is gone: the call answers that itself.
        return Ok(naming.guess(name));
    };
    match naming.resolve(&tools, name) {
        Resolved::Tool(id) => Ok(id),
        Resolved::Ambiguous(ids) => Err(CallOutcome::Rpc(
            jsonrpc::INVALID_PARAMS,
            format!(
                "Invalid params: the tool name `{}` is ambiguous here ({} share it), so it is not offered; use the canonical ids on /mcp/agents/{agent}",
                connector_model::ids::truncate(name, 100),
                ids.join(", ")
            ),
            Some(serde_json::json!({"code": "unknown_tool", "details": {"candidates": ids}})),
        )),
    }
}

/// `invalid_arguments: <message>` and one line per violation (`<pointer>: <message>`).
fn argument_errors(err: &HostError) -> String {
    let mut text = format!("{}: {}", err.code, err.message);
    let violations = err
        .details
        .as_ref()
        .and_then(|d| d.get("violations"))
        .and_then(Value::as_array);
    for v in violations.into_iter().flatten() {
        let pointer = v.get("pointer").and_then(Value::as_str).unwrap_or("");
        let message = v.get("message").and_then(Value::as_str).unwrap_or("");
        let pointer = if pointer.is_empty() {
            "(the arguments)"
        } else {
            pointer
        };
        text.push_str(&format!("\n{pointer}: {message}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A revision with every content kind.
    const V: &str = "2025-11-25";

    #[test]
    fn input_schemas_are_object_schemas() {
        let s = |v: Value| serde_json::to_value(InputSchema(&v)).unwrap();
        let good = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(s(good.clone()), good);
        assert_eq!(
            s(json!({"properties": {}})),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(s(json!(true)), json!({"type": "object"}));
        assert_eq!(s(json!({"type": "string"})), json!({"type": "object"}));
    }

    #[test]
    fn results_carry_text_and_structured_content() {
        let success =
            |v: Value| serde_json::to_value(CallResult::success(ToolOutput::json(v), V)).unwrap();
        let r = success(json!({"message": "hi"}));
        assert_eq!(
            r,
            json!({"content": [{"type": "text", "text": "{\"message\":\"hi\"}"}], "structuredContent": {"message": "hi"}, "isError": false})
        );
        let r = success(json!([1, 2]));
        assert_eq!(r["structuredContent"], json!({"result": [1, 2]}));
        assert_eq!(r["content"][0]["text"], "[1,2]");
    }

    #[test]
    fn content_blocks_are_the_content_and_structured_results_stay_beside_them() {
        let text = |t: &str| ContentBlock::Text { text: t.into() };
        let image = ContentBlock::Image {
            data: "AQI=".into(),
            mime_type: "image/png".into(),
        };
        let r = serde_json::to_value(CallResult::success(
            ToolOutput {
                structured: None,
                content: vec![text("look"), image],
            },
            V,
        ))
        .unwrap();
        assert_eq!(
            r,
            json!({"content": [{"type": "text", "text": "look"}, {"type": "image", "data": "AQI=", "mimeType": "image/png"}], "isError": false})
        );
        let r = serde_json::to_value(CallResult::success(
            ToolOutput {
                structured: Some(json!({"n": 1})),
                content: vec![text("one")],
            },
            V,
        ))
        .unwrap();
        assert_eq!(
            r,
            json!({"content": [{"type": "text", "text": "one"}], "structuredContent": {"n": 1}, "isError": false})
        );
        // Nothing at all: an empty content list, not the text `null`.
        let r = serde_json::to_value(CallResult::success(
            ToolOutput {
                structured: None,
                content: Vec::new(),
            },
            V,
        ))
        .unwrap();
        assert_eq!(r, json!({"content": [], "isError": false}));
        // Before 2025-06-18 there are no resource links: the link is shown as text.
        let link = || ToolOutput {
            structured: None,
            content: vec![ContentBlock::ResourceLink {
                uri: "https://e.com/r".into(),
                name: "r".into(),
                title: None,
                description: None,
                mime_type: None,
                size: None,
            }],
        };
        let old = serde_json::to_value(CallResult::success(link(), "2025-03-26")).unwrap();
        assert_eq!(
            old["content"],
            json!([{"type": "text", "text": "r: https://e.com/r"}])
        );
        let new = serde_json::to_value(CallResult::success(link(), "2025-06-18")).unwrap();
        assert_eq!(new["content"][0]["type"], "resource_link");
    }

    #[test]
    fn host_errors_map_to_mcp() {
        let e = |code| HostError::new(code, "m");
        assert!(matches!(
            call_error(e(ErrorCode::ToolNotGranted), "2025-11-25"),
            CallError::Rpc(-32002, _, _)
        ));
        let CallError::Rpc(code, _, data) = call_error(e(ErrorCode::ToolNotGranted), "2026-07-28")
        else {
            panic!("not granted is an rpc error at 2026-07-28")
        };
        assert_eq!(code, -32602);
        assert_eq!(data["code"], "tool_not_granted");
        assert!(matches!(
            call_error(e(ErrorCode::UnknownTool), "2025-11-25"),
            CallError::Rpc(-32602, _, _)
        ));
        for code in [
            ErrorCode::ToolFailed,
            ErrorCode::ConnectorTrapped,
            ErrorCode::ConnectorTimeout,
        ] {
            assert!(matches!(
                call_error(e(code), "2025-03-26"),
                CallError::Result(_)
            ));
        }
        let invalid = e(ErrorCode::InvalidArguments)
            .with_details(json!({"violations": [{"pointer": "/message", "message": "x"}]}));
        let CallError::Rpc(code, _, data) = call_error(invalid.clone(), "2025-06-18") else {
            panic!("not an rpc error before 2025-11-25")
        };
        assert_eq!(code, -32602);
        assert_eq!(data["violations"][0]["pointer"], "/message");
        assert_eq!(data["code"], "invalid_arguments");
        // SEP-1303: from 2025-11-25 on, a result the model can read.
        let CallError::Result(failure) = call_error(invalid, "2025-11-25") else {
            panic!("not a result from 2025-11-25 on")
        };
        let failure = serde_json::to_value(failure).unwrap();
        assert_eq!(failure["isError"], true);
        let text = failure["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("/message: x"), "{text}");
    }
}
