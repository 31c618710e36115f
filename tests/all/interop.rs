//! Interoperability with servers that need a request body's length: every request whose
//! body length is known goes out with `Content-Length` (never `Transfer-Encoding:
//! chunked`), from the SDK's HTTP client and from the declarative interpreter's
//! `stateless_http` and `openapi` backends. The server here answers `411 Length Required`
//! to a body without a length, as Python's `http.server`-based servers and many proxies
//! do. Every call is a local `connector-host call FILE.wasm`, the way a connector author
//! first tries a tool; `pack` is run from the manifest's folder with a bare file name.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use integration_tests::guests;
use integration_tests::harness::host_binary;
use serde_json::{json, Value};

/// What the strict server accepted: (method, path, content-length, body).
type Seen = Arc<Mutex<Vec<(String, String, String, String)>>>;

/// A server on 127.0.0.1 that refuses a body without `Content-Length` (or chunked).
struct StrictServer {
    url: String,
    seen: Seen,
    refused: Arc<Mutex<u32>>,
    _task: tokio::task::JoinHandle<()>,
}

impl StrictServer {
    async fn start() -> StrictServer {
        let seen: Seen = Arc::default();
        let refused = Arc::new(Mutex::new(0));
        let (s, r) = (seen.clone(), refused.clone());
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (seen, refused) = (s.clone(), r.clone());
                async move {
                    let has_body = !matches!(method, Method::GET | Method::HEAD);
                    let chunked = headers.contains_key("transfer-encoding");
                    let length = headers
                        .get("content-length")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    if has_body && (chunked || length.is_none()) {
                        *refused.lock().unwrap() += 1;
                        return (StatusCode::LENGTH_REQUIRED, "Length Required").into_response();
                    }
                    let text = String::from_utf8_lossy(&body).into_owned();
                    seen.lock().unwrap().push((
                        method.to_string(),
                        uri.path().to_string(),
                        length.unwrap_or_default(),
                        text.clone(),
                    ));
                    let sent: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    let mut note = json!({"id": 7, "title": sent["title"].clone()});
                    if let Some(t) = sent.get("text") {
                        note["text"] = t.clone();
                    }
                    let status = if uri.path() == "/trigger" {
                        StatusCode::OK
                    } else {
                        StatusCode::CREATED
                    };
                    (status, axum::Json(note)).into_response()
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StrictServer {
            url,
            seen,
            refused,
            _task: task,
        }
    }

    fn seen(&self) -> Vec<(String, String, String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn connector_host(dir: &Path, args: &[&str]) -> Output {
    Command::new(host_binary())
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "error")
        .output()
        .expect("run connector-host")
}

async fn ok(dir: &Path, args: &[&str]) -> String {
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let shown = args.join(" ");
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        connector_host(&dir, &args)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{shown}:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const STATELESS: &str = r#"
kind: "commonagents.info/v1beta2/tool"
namespace: "strict"
name: "strict"
description: "Posts notes to an API that needs a body length."
settings:
  properties:
    api_url:
      type: string
      description: "The API's base URL."
actions:
  - name: post_note
    description: "Posts a note."
    parameters:
      properties:
        title:
          type: string
          description: "The note's title."
    execute:
      stateless_http:
        method: POST
        url: "{settings.api_url}/notes"
        body:
          title: "{parameters.title}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_carry_their_length() {
    let server = StrictServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // The SDK's client: the conformance guest posts `{"agent": null}` to its trigger URL.
    let config = json!({"triggerUrl": format!("{}/trigger", server.url)}).to_string();
    ok(
        d,
        &[
            "call",
            guests::CONFORMANCE,
            "test_trigger_tool_change",
            "{}",
            "--config",
            &config,
            "--allow-private-networks",
        ],
    )
    .await;

    // stateless_http, packed with a bare file name from the manifest's folder.
    std::fs::write(d.join("strict.yaml"), STATELESS).unwrap();
    ok(
        d,
        &[
            "pack",
            "strict.yaml",
            "-o",
            "strict.wasm",
            "--allow-host",
            "127.0.0.1",
        ],
    )
    .await;
    let config = json!({"api_url": server.url}).to_string();
    ok(
        d,
        &[
            "call",
            "./strict.wasm",
            "post_note",
            r#"{"title": "New York"}"#,
            "--config",
            &config,
            "--allow-private-networks",
        ],
    )
    .await;

    // openapi: the spec is found next to the manifest, named by a bare file name too.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/declarative");
    for f in ["notes.yaml", "notes-openapi.yaml"] {
        std::fs::copy(fixtures.join(f), d.join(f)).unwrap();
    }
    ok(
        d,
        &[
            "pack",
            "notes.yaml",
            "-o",
            "notes.wasm",
            "--allow-host",
            "127.0.0.1",
        ],
    )
    .await;
    let config = json!({"notes_url": server.url, "notes_token": "notes-t0ken"}).to_string();
    let created = ok(
        d,
        &[
            "call",
            "./notes.wasm",
            "create_note",
            r#"{"body": {"title": "Trip", "text": "pack light"}}"#,
            "--config",
            &config,
            "--allow-private-networks",
        ],
    )
    .await;
    assert!(created.contains("pack light"), "{created}");

    assert_eq!(
        *server.refused.lock().unwrap(),
        0,
        "no body went out without a length"
    );
    let seen = server.seen();
    let paths: Vec<&str> = seen.iter().map(|(_, p, _, _)| p.as_str()).collect();
    assert_eq!(paths, ["/trigger", "/notes", "/notes"], "{seen:?}");
    for (method, path, length, body) in &seen {
        assert_eq!(method, "POST", "{path}");
        assert_eq!(length, &body.len().to_string(), "{path}: {body}");
        assert!(!body.is_empty(), "{path}: the body arrived");
    }
    assert_eq!(
        serde_json::from_str::<Value>(&seen[1].3).unwrap(),
        json!({"title": "New York"})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&seen[2].3).unwrap(),
        json!({"title": "Trip", "text": "pack light"})
    );
}
