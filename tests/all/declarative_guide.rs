//! docs/writing-a-connector.md §7 ("A connector without code"), followed mechanically:
//! the manifest block is saved as the file its first line names, and every
//! `connector-host` line of the section's `sh` blocks runs, in order, in that directory,
//! against a running host.
//!
//! Two things differ from a reader's machine, and only these: the example API
//! (`https://notes.example.com`) is a local server on 127.0.0.1, whose address replaces
//! that text; and because it is on loopback, the host allows the connector private
//! networks (`connectors.notes.allow_private_networks`) and local calls get
//! `--allow-private-networks`.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use integration_tests::docs::fenced;
use integration_tests::harness::{host_binary, send, ServerProcess, OPERATOR_TOKEN};
use serde_json::{json, Value};

const GUIDE: &str = include_str!("../../docs/writing-a-connector.md");
const SECTION: &str = "## 7. A connector without code";
const EXAMPLE_API: &str = "https://notes.example.com";

/// The fenced blocks of `lang` in the guide's section 7, before its mapping table.
fn blocks(lang: &str) -> Vec<String> {
    let start = GUIDE.find(SECTION).expect("the guide has section 7");
    let section = &GUIDE[start..];
    let end = section
        .find("### How a manifest maps")
        .unwrap_or(section.len());
    fenced(&section[..end], lang)
        .into_iter()
        .map(|block| block.text)
        .collect()
}

/// Splits a shell line into words (single quotes only, as the guide writes them).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            '#' if !quoted && word.is_empty() => break,
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

#[derive(Default)]
struct Notes {
    added: Vec<Value>,
}

type Shared = Arc<Mutex<Notes>>;

fn authorised(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer k-123")
}

async fn get_note(
    UrlPath((folder, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, StatusCode> {
    if !authorised(&headers) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    Ok(Json(
        json!({"id": id, "folder": folder, "title": "Welcome"}),
    ))
}

async fn add_note(
    State(notes): State<Shared>,
    UrlPath(folder): UrlPath<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Result<(StatusCode, Json<Value>), StatusCode> {
    if !authorised(&headers) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    let mut note = body.clone();
    note["folder"] = json!(folder);
    note["id"] = json!("n2");
    notes.lock().expect("notes").added.push(body);
    Ok((StatusCode::CREATED, Json(note)))
}

/// Runs one command of the guide; its stdout and stderr.
fn run(dir: &Path, url: &str, argv: &[String]) -> String {
    let mut args: Vec<String> = argv[1..].to_vec();
    let local_call = args.first().is_some_and(|a| a == "call")
        && args.get(1).is_some_and(|t| t.ends_with(".wasm"));
    if local_call {
        args.push("--allow-private-networks".into());
    }
    let out = Command::new(host_binary())
        .args(&args)
        .current_dir(dir)
        .env("CONNECTOR_HOST_URL", url)
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "error")
        .output()
        .expect("run connector-host");
    let text = format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "$ {}\n{text}", argv.join(" "));
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_packs_installs_binds_and_calls_a_manifest() {
    let notes: Shared = Arc::default();
    let app = Router::new()
        .route("/folders/{folder}/notes/{id}", get(get_note))
        .route("/folders/{folder}/notes", post(add_note))
        .with_state(notes.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let yaml = blocks("yaml");
    let manifest = yaml
        .iter()
        .find(|b| b.starts_with("# notes.yaml"))
        .expect("the guide's manifest block starts with `# notes.yaml`");
    assert!(manifest.contains(EXAMPLE_API));
    std::fs::write(
        dir.path().join("notes.yaml"),
        manifest.replace(EXAMPLE_API, &api),
    )
    .unwrap();

    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_with_config(
        data.path(),
        &[],
        "[connectors.notes]\nallow_private_networks = true\n",
    )
    .await;

    let commands: Vec<Vec<String>> = blocks("sh")
        .iter()
        .flat_map(|b| b.lines().map(str::to_owned).collect::<Vec<_>>())
        .map(|l| words(&l))
        .filter(|w| w.first().is_some_and(|c| c == "connector-host"))
        .collect();
    assert!(commands.len() >= 8, "the guide's commands: {commands:?}");
    let dir_path = dir.path().to_path_buf();
    let url = server.url.clone();
    let outputs = tokio::task::spawn_blocking(move || {
        commands
            .iter()
            .map(|argv| run(&dir_path, &url, argv))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let all = outputs.join("\n");

    // `pack` wrote the component and said what is in it.
    assert!(dir.path().join("notes.wasm").is_file(), "{all}");
    let pack = &outputs[0];
    assert!(
        pack.contains("notes.get_note") && pack.contains("notes.add_note"),
        "{pack}"
    );
    // `inspect`: the tools, and the settings and `folder` as binding config fields.
    let inspect = &outputs[1];
    let config = inspect
        .lines()
        .find(|l| l.starts_with("config:"))
        .unwrap_or_else(|| panic!("inspect names the config fields: {inspect}"));
    for field in ["api_key", "base_url", "folder"] {
        assert!(config.contains(field), "{field} in {config}");
    }
    assert!(
        inspect.contains("notes.get_note") && inspect.contains("notes.add_note"),
        "{inspect}"
    );
    // With --json, as the guide says: `api_key` is write-only, the model sees `id` only.
    let (dir_path, url) = (dir.path().to_path_buf(), server.url.clone());
    let inspect_json = tokio::task::spawn_blocking(move || {
        let argv: Vec<String> = ["connector-host", "inspect", "notes.wasm", "--json"]
            .map(String::from)
            .to_vec();
        run(&dir_path, &url, &argv)
    })
    .await
    .unwrap();
    assert!(
        GUIDE.contains("`inspect notes.wasm --json`"),
        "the guide names the --json form this checks"
    );
    let inspect = &inspect_json;
    let described: Value = serde_json::from_str(
        inspect
            .split("stdout: ")
            .nth(1)
            .and_then(|s| s.split("\nstderr:").next())
            .unwrap_or(""),
    )
    .unwrap_or_else(|e| panic!("inspect prints JSON ({e}): {inspect}"));
    let text = described.to_string();
    assert!(
        text.contains("\"writeOnly\":true"),
        "api_key is write-only: {text}"
    );
    let get_schema = described["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "notes.get_note"))
        .map(|t| t["inputSchema"].to_string())
        .unwrap_or_else(|| panic!("notes.get_note in {text}"));
    assert!(get_schema.contains("\"id\""), "{get_schema}");
    assert!(
        !get_schema.contains("folder"),
        "folder is binding config: {get_schema}"
    );
    // The local call reached the API with the key and the bound folder.
    assert!(
        outputs[2].contains("\"folder\": \"team\"") || outputs[2].contains("\"folder\":\"team\""),
        "{}",
        outputs[2]
    );
    // The agent's call through the host added a note with the defaults and its own name.
    let added = notes.lock().unwrap().added.clone();
    assert_eq!(
        added,
        vec![json!({"title": "Standup", "text": "at 10", "pinned": false, "author": "ada"})],
        "{all}"
    );
    // The key is never in what the commands print, nor in what the host shows.
    assert!(!all.contains("k-123"), "{all}");
    let client = reqwest::Client::new();
    let (status, bindings) = send(
        &client,
        reqwest::Method::GET,
        &format!("{}/api/v1/units/team/connectors", server.url),
        Some(OPERATOR_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200, "{bindings}");
    assert!(
        bindings.to_string().contains("***"),
        "the key is shown masked: {bindings}"
    );
    assert!(!bindings.to_string().contains("k-123"), "{bindings}");
}
