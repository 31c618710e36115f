//! A do-nothing MCP server over stdio: the floor a stdio MCP server cannot go below on
//! this machine (newline-delimited JSON-RPC in, a canned answer out). It answers like
//! `floor_mcp_server.py` (one tool, `echo`, returning its `message`), in Rust, so
//! `bench/table.py` can show how much of a stdio call is the transport and the client.

use std::io::{BufRead, Write};

use serde_json::{json, Value};

fn answer(request: &Value) -> Option<Value> {
    let id = request.get("id")?.clone();
    let result = match request.get("method").and_then(Value::as_str) {
        Some("initialize") => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stdio-floor", "version": "0"}
        }),
        Some("tools/list") => json!({
            "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]
        }),
        _ => {
            let text = request
                .pointer("/params/arguments/message")
                .cloned()
                .unwrap_or(Value::Null);
            json!({"content": [{"type": "text", "text": text}]})
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(answer) = answer(&request) {
            serde_json::to_writer(&mut out, &answer)?;
            out.write_all(b"\n")?;
            out.flush()?;
        }
    }
    Ok(())
}
