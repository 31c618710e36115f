//! Connectors written in TypeScript (sdk/js, componentize-js) and Python (sdk/python,
//! componentize-py) get the same path and the same guarantees as Rust ones:
//!
//! - `acme` in each language is installed over the bundled Rust one and answers the same
//!   calls, through the HTTP API and MCP, with the same runtime context;
//! - a probe connector per language (tests/guests/probe-js, probe-py) is refused a host
//!   outside its allow-list and reaches a local server inside it; reads only the secrets
//!   its binding names; gets an installation token for its binding's installation and
//!   none for another (the hostile case); sends a POST body with its Content-Length (a
//!   server answering 411 to chunked bodies takes it); translates and filters a webhook; returns
//!   content blocks and structured output checked against its output schema; starts
//!   every call from its snapshot (a module-level counter is 1 at each call); and a
//!   looping tool is stopped at the deadline, a memory hog at its own limit
//!   (`connectors.<slug>.memory_mib`).
//!
//! The components are built by `integration_tests::languages` (and kept under
//! target/langs/). Every host here shares the test hosts' compiled-component cache
//! (`harness::shared_compiled_cache`), so each component is compiled once per change,
//! not once per test.

use std::path::PathBuf;
use std::time::Duration;

use connector_host::config::{ConnectorSettings, GithubAppSettings};
use integration_tests::fake_github::FakeGithub;
use integration_tests::harness::{
    error_code, now_unix, send_standard_webhook, shared_compiled_cache, upload_component, TestHost,
};
use integration_tests::languages::{component, Lang};
use reqwest::Method;
use serde_json::{json, Value};

use crate::mcp::Mcp;

const APP_ID: &str = "1012345";
const OWN_INSTALLATION: u64 = 48213907;
const FOREIGN_INSTALLATION: u64 = 4242;
/// The probe's own memory bound (`connectors.<slug>.memory_mib`), above the default 64.
const PROBE_MEMORY_MIB: u64 = 96;
const WEBHOOK_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC";

fn acme_source(lang: Lang) -> &'static str {
    match lang {
        Lang::TypeScript => "connectors/acme-js/src/index.ts",
        Lang::Python => "connectors/acme-py/app.py",
    }
}

fn probe_source(lang: Lang) -> &'static str {
    match lang {
        Lang::TypeScript => "tests/guests/probe-js/index.ts",
        Lang::Python => "tests/guests/probe-py/app.py",
    }
}

fn probe_slug(lang: Lang) -> &'static str {
    match lang {
        Lang::TypeScript => "probe-js",
        Lang::Python => "probe-py",
    }
}

/// The compiled code of the component at `wasm` in the shared cache, one file per
/// engine key.
fn compiled_entries(wasm: &std::path::Path) -> Vec<String> {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(
        std::fs::read(wasm).expect("built component"),
    ));
    std::fs::read_dir(shared_compiled_cache())
        .expect("the shared cache")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&digest) && name.ends_with(".cwasm"))
        .collect()
}

async fn upload(h: &TestHost, path: &PathBuf) -> (u16, Value) {
    let bytes = std::fs::read(path).expect("built component");
    upload_component(&h.client, &h.url, bytes, "").await
}

async fn acme_answers_over_http_and_mcp(lang: Lang) {
    let Some(path) = component(lang, acme_source(lang)) else {
        return;
    };
    let h = TestHost::start().await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "acme", json!({"greeting": "hey"})).await;
    let args = json!({"message": "hi", "extra": [1, 2]});
    let (s, rust) = h.call_tool("ada", "acme.echo", args.clone()).await;
    assert_eq!(s, 200, "{rust}");

    // Rotated to this language's build: the same slug, tools and config; the binding stays.
    let (s, b) = upload(&h, &path).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["world"], "spring:connector@0.3.0", "{b}");
    let names: Vec<&str> = b["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["acme.echo", "acme.timestamp"], "{b}");

    let (s, answer) = h.call_tool("ada", "acme.echo", args.clone()).await;
    assert_eq!((s, &answer), (200, &rust), "{lang:?}");
    assert_eq!(answer["result"], args);
    let (s, b) = h.call_tool("ada", "acme.echo", json!({"message": 5})).await;
    assert_eq!((s, error_code(&b)), (422, "invalid_arguments"), "{b}");
    let (s, b) = h.call_tool("ada", "acme.timestamp", json!({})).await;
    assert_eq!(s, 200, "{b}");
    let stamp = b["result"]["timestamp"].as_str().unwrap_or_default();
    assert!(
        stamp.len() == 20 && stamp.ends_with('Z') && stamp.starts_with("20"),
        "{b}"
    );
    let (s, context) = h
        .op(Method::GET, "/api/v1/agents/ada/runtime-context", None)
        .await;
    assert_eq!(s, 200, "{context}");
    assert_eq!(context["env"]["SPRING_CONNECTOR_ACME_GREETING"], "hey");

    let token = h.agent_token("ada").await;
    let session = Mcp::open(&h.url, "ada", &token, "2025-11-25").await;
    let echoed = session.call("acme.echo", args.clone()).await;
    assert_eq!(echoed["result"]["structuredContent"], args, "{echoed}");
    assert_eq!(echoed["result"]["isError"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acme_in_typescript_answers_like_the_rust_one() {
    acme_answers_over_http_and_mcp(Lang::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acme_in_python_answers_like_the_rust_one() {
    acme_answers_over_http_and_mcp(Lang::Python).await;
}

fn key(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/github")
        .join(name)
}

/// A host with a GitHub App (a fake GitHub knowing both installations) and the probe
/// installed, bound on `u` (routes r1, its installation, secret `pat`) and on `quiet`
/// (route r1, muting `noise`); agent `ada` in `u`.
async fn probe_host(lang: Lang) -> Option<(TestHost, FakeGithub)> {
    let path = component(lang, probe_source(lang))?;
    let slug = probe_slug(lang);
    let public = std::fs::read_to_string(key("app-public.pem")).expect("public key");
    let fake = FakeGithub::start(&public, APP_ID).await;
    fake.register(OWN_INSTALLATION);
    fake.register(FOREIGN_INSTALLATION);
    let api_url = fake.url();
    let h = TestHost::start_with(move |c| {
        c.limits.call_timeout = Duration::from_secs(3);
        c.github_app = Some(GithubAppSettings {
            app_id: APP_ID.into(),
            private_key_path: key("app-key-pkcs1.pem"),
            api_url,
        });
        let mut settings = ConnectorSettings {
            allow_private_networks: true,
            github_app: Some(true),
            webhook_secrets: vec![WEBHOOK_SECRET.into()],
            ..ConnectorSettings::default()
        };
        settings.memory_mib = Some(PROBE_MEMORY_MIB);
        settings.secrets.insert("pat".into(), "ghp_yours".into());
        settings
            .secrets
            .insert("other".into(), "ghp_not_named".into());
        c.connectors.insert(slug.into(), settings);
    })
    .await;
    let (s, b) = upload(&h, &path).await;
    assert_eq!(s, 201, "{b}");
    for unit in ["u", "quiet"] {
        h.unit(unit, None).await;
    }
    h.agent("ada", &["u"]).await;
    h.bind(
        "u",
        slug,
        json!({"routes": ["r1"], "installationId": OWN_INSTALLATION, "secret": "pat"}),
    )
    .await;
    h.bind("quiet", slug, json!({"routes": ["r1"], "mute": ["noise"]}))
        .await;
    Some((h, fake))
}

/// A server on 127.0.0.1 that answers `411 Length Required` to a request body sent
/// chunked or without a Content-Length (as many servers do), and otherwise echoes the
/// length and the body as `{"contentLength", "body"}`. Its base URL.
async fn length_required_server() -> String {
    use axum::http::{HeaderMap, StatusCode};
    let app =
        axum::Router::new().fallback(|headers: HeaderMap, body: axum::body::Bytes| async move {
            let length = headers
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            match length {
                Some(length) if !headers.contains_key("transfer-encoding") => (
                    StatusCode::OK,
                    json!({"contentLength": length, "body": String::from_utf8_lossy(&body)})
                        .to_string(),
                ),
                _ => (StatusCode::LENGTH_REQUIRED, "Length Required".to_string()),
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the strict server");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn probe_keeps_the_rules(lang: Lang) {
    let Some((h, fake)) = probe_host(lang).await else {
        return;
    };
    let call = |tool: &'static str, args: Value| {
        let h = &h;
        async move { h.call_tool("ada", &format!("probe.{tool}"), args).await }
    };

    // Outbound HTTP: inside the allow-list (127.0.0.1) it reaches the host's own
    // /healthz; `localhost` is not on the list, and the policy refuses it.
    let port = h.url.rsplit(':').next().unwrap_or_default().to_string();
    let (s, b) = call("fetch", json!({"url": format!("{}/healthz", h.url)})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["result"]["status"], 200, "{b}");
    let (s, b) = call(
        "fetch",
        json!({"url": format!("http://localhost:{port}/healthz")}),
    )
    .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");

    // Request bodies go out with their Content-Length: a server that answers 411 to a
    // chunked body, or one without a length, takes the SDK's POST.
    let strict = length_required_server().await;
    let sent = r#"{"title": "New York"}"#;
    let (s, b) = call(
        "post",
        json!({"url": format!("{strict}/notes"), "body": sent}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["result"]["status"], 200,
        "the body went out without a length: {b}"
    );
    let echoed: Value =
        serde_json::from_str(b["result"]["body"].as_str().unwrap_or_default()).unwrap_or_default();
    assert_eq!(
        echoed,
        json!({"contentLength": sent.len().to_string(), "body": sent}),
        "{b}"
    );

    // Nothing a call leaves in the interpreter's state reaches the next call: each starts
    // from the component's snapshot.
    for _ in 0..3 {
        let (s, b) = call("counter", json!({})).await;
        assert_eq!((s, &b["result"]), (200, &json!({"count": 1})), "{b}");
    }

    // Secrets: the one the binding names, not another of the same connector.
    let (s, b) = call("secret_value", json!({"name": "pat"})).await;
    assert_eq!(
        (s, &b["result"]["value"]),
        (200, &json!("ghp_yours")),
        "{b}"
    );
    let (s, b) = call("secret_value", json!({"name": "other"})).await;
    assert_eq!((s, &b["result"]["value"]), (200, &Value::Null), "{b}");

    // Installation tokens: the binding's installation, never another.
    let (s, b) = call("token", json!({"installation_id": FOREIGN_INSTALLATION})).await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert_eq!(
        fake.exchanges(),
        0,
        "asked GitHub for a foreign installation"
    );
    let (s, b) = call("token", json!({"installation_id": OWN_INSTALLATION})).await;
    assert_eq!(s, 200, "{b}");
    assert!(fake
        .issued_tokens()
        .iter()
        .any(|t| Some(t.as_str()) == b["result"]["token"].as_str()));

    // Rich content and output schemas.
    let (s, tools) = h.op(Method::GET, "/api/v1/agents/ada/tools", None).await;
    assert_eq!(s, 200, "{tools}");
    let weather = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "probe.weather")
        .cloned()
        .unwrap_or_default();
    assert_eq!(weather["outputSchema"]["type"], "object", "{weather}");
    let (s, b) = call("weather", json!({"city": "Oslo"})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["result"], json!({"city": "Oslo", "celsius": 21.5}));
    assert_eq!(
        b["content"],
        json!([
            {"type": "text", "text": "Oslo: 21.5 C"},
            {"type": "image", "data": PNG_B64, "mimeType": "image/png"}
        ])
    );
    let (s, b) = call("broken_output", json!({})).await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    let (s, b) = call("refuse", json!({})).await;
    assert_eq!((s, error_code(&b)), (422, "invalid_arguments"), "{b}");
    assert!(b.to_string().contains("nothing is ever right"), "{b}");

    // Webhooks: translated, routed to both bindings of r1, filtered by `quiet`.
    let slug = probe_slug(lang);
    let deliver = |id: &'static str, kind: &'static str| {
        let h = &h;
        async move {
            let body = json!({"route": "r1", "kind": kind, "thread": "t-1", "data": {"n": 1}});
            send_standard_webhook(
                &h.client,
                &h.url,
                slug,
                id,
                body.to_string().as_bytes(),
                WEBHOOK_SECRET,
                now_unix(),
            )
            .await
            .expect("webhook sent")
        }
    };
    let routed = |b: &Value| {
        let mut units: Vec<String> = b["routedTo"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        units.sort();
        units
    };
    let (s, b) = deliver("d-1", "issue.opened").await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(routed(&b), ["quiet", "u"], "{b}");
    let (s, b) = deliver("d-2", "noise").await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(routed(&b), ["u"], "{b}");
    let (s, inbox) = h.op(Method::GET, "/api/v1/units/u/messages", None).await;
    assert_eq!(s, 200, "{inbox}");
    let first = &inbox["messages"][0];
    assert_eq!(
        (&first["kind"], &first["threadKey"], &first["payload"]),
        (&json!("issue.opened"), &json!("t-1"), &json!({"n": 1})),
        "{inbox}"
    );

    // Runtime context from the connector's hook.
    let (s, context) = h
        .op(Method::GET, "/api/v1/agents/ada/runtime-context", None)
        .await;
    assert_eq!(s, 200, "{context}");
    let var = format!(
        "SPRING_CONNECTOR_{}_UNIT",
        slug.to_uppercase().replace('-', "_")
    );
    assert_eq!(context["env"][&var], "u", "{context}");

    // Containment: a loop is stopped at the deadline, a hog at its memory limit, and
    // the connector answers again right after.
    let (s, b) = call("spin", json!({})).await;
    assert_eq!((s, error_code(&b)), (504, "connector_timeout"), "{b}");
    let (s, b) = call("hog", json!({})).await;
    assert_eq!((s, error_code(&b)), (502, "connector_trapped"), "{b}");
    assert!(
        b.to_string()
            .contains(&format!("memory limit of {PROBE_MEMORY_MIB} MiB")),
        "the connector's own memory_mib applies: {b}"
    );
    let (s, b) = call("secret_value", json!({"name": "pat"})).await;
    assert_eq!(s, 200, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_connector_keeps_the_rules() {
    probe_keeps_the_rules(Lang::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_connector_keeps_the_rules() {
    probe_keeps_the_rules(Lang::Python).await;
}

/// `connector-host new SLUG --lang …` writes a project that builds as is; the component
/// passes `inspect`, installs, binds and answers over HTTP and MCP; and the dev loop `new`
/// prints (`dev --live`, then the build command after an edit) rotates the edit in.
async fn the_scaffold_builds_installs_and_answers(lang: Lang) {
    use integration_tests::harness::host_binary;
    use integration_tests::languages::{js_toolchain, python_toolchain};
    use std::process::Command;

    // What the build needs, for `new` and for the build command it prints: the
    // variables, and the toolchain's folder first on PATH (the printed command names
    // `node` or `python3`).
    let (toolchain_env, toolchain_bin) = match lang {
        Lang::TypeScript => {
            let Some((node, modules)) =
                integration_tests::harness::required("the typescript toolchain", js_toolchain())
            else {
                return;
            };
            let bin = node.parent().expect("node's folder").to_path_buf();
            (
                vec![
                    ("NODE", node.into_os_string()),
                    ("SPRING_CONNECTOR_NODE_MODULES", modules.into_os_string()),
                ],
                bin,
            )
        }
        Lang::Python => {
            let Some(python) =
                integration_tests::harness::required("the python toolchain", python_toolchain())
            else {
                return;
            };
            let bin = python.parent().expect("the venv's bin").to_path_buf();
            (vec![("PYTHON", python.into_os_string())], bin)
        }
    };
    let mut new = Command::new(host_binary());
    new.envs(toolchain_env.iter().map(|(k, v)| (k, v)));
    let dir = tempfile::tempdir().expect("temp dir");
    let project = dir.path().join("hello-there");
    let out = new
        .args([
            "new",
            "hello-there",
            "--namespace",
            "hello",
            "--lang",
            lang.name(),
        ])
        .arg("--dir")
        .arg(&project)
        .output()
        .expect("run connector-host new");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wasm = project.join("hello-there.wasm");
    assert!(stdout.contains("connector-host dev"), "{stdout}");
    let inspect = Command::new(host_binary())
        .arg("inspect")
        .arg(&wasm)
        .arg("--json")
        // The host below reads the code this compiles.
        .env("CONNECTOR_HOST_CACHE_DIR", shared_compiled_cache())
        .output()
        .expect("run inspect");
    assert!(
        inspect.status.success(),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    let info: Value = serde_json::from_slice(&inspect.stdout).expect("inspect prints JSON");
    assert_eq!(info["tools"][0]["name"], "hello.hello", "{info}");
    assert_eq!(info["tools"][0]["outputSchema"]["type"], "object", "{info}");
    let compiled = || compiled_entries(&wasm);
    assert_eq!(
        compiled().len(),
        1,
        "inspect compiled into the shared cache"
    );

    let h = TestHost::start().await;
    let (s, b) = upload(&h, &wasm).await;
    assert_eq!(s, 201, "{b}");
    // The host loaded what inspect compiled: the same entry, not a second compilation
    // under another engine key.
    assert_eq!(compiled().len(), 1, "{:?}", compiled());
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "hello-there", json!({})).await;
    let (s, b) = h
        .call_tool("ada", "hello.hello", json!({"name": "Ada"}))
        .await;
    assert_eq!(
        (s, &b["result"]),
        (200, &json!({"greeting": "Hello, Ada!"})),
        "{b}"
    );
    let token = h.agent_token("ada").await;
    let session = Mcp::open(&h.url, "ada", &token, "2025-11-25").await;
    let called = session.call("hello.hello", json!({"name": "Bo"})).await;
    assert_eq!(
        called["result"]["structuredContent"],
        json!({"greeting": "Hello, Bo!"}),
        "{called}"
    );

    // The loop `new` prints, as printed: `dev --live` installs, binds and calls; an edit
    // rebuilt with the printed build command is rotated in and called again.
    let printed = |start: &str| {
        stdout
            .lines()
            .map(str::trim)
            .find(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("`new` printed no line starting {start:?}:\n{stdout}"))
            .to_string()
    };
    let (dev_line, build_line) = (printed("connector-host dev "), printed("(cd "));
    let shell = |line: &str| {
        let mut cmd = integration_tests::harness::example_shell(dir.path(), &h.url, line);
        let path = std::env::join_paths(
            std::iter::once(toolchain_bin.clone()).chain(std::env::split_paths(&cmd_path(&cmd))),
        )
        .expect("PATH");
        cmd.env("PATH", path)
            .envs(toolchain_env.iter().map(|(k, v)| (k, v)));
        cmd
    };
    let mut dev = integration_tests::harness::Foreground::start(shell(&dev_line), "");
    let within = Duration::from_secs(240);
    for expect in [
        "`hello-there` bound on `dev`",
        "Hello, Ada!",
        "watching for changes",
    ] {
        if let Err(e) = dev.until(expect, within) {
            panic!("{dev_line}: {e}");
        }
    }
    let (source, hello) = match lang {
        Lang::TypeScript => (project.join("src/index.ts"), "`Hello, ${name}!`"),
        Lang::Python => (project.join("app.py"), "f\"Hello, {name}!\""),
    };
    let text = std::fs::read_to_string(&source).expect("the scaffold's source");
    assert!(text.contains(hello), "{}: {text}", source.display());
    std::fs::write(&source, text.replace(hello, &hello.replace("Hello", "Hi"))).expect("edit");
    let built = shell(&build_line).output().expect("run the build command");
    assert!(
        built.status.success(),
        "{build_line}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    for expect in ["live: rotated `hello-there`", "Hi, Ada!"] {
        if let Err(e) = dev.until(expect, within) {
            panic!("{dev_line} after the rebuild: {e}");
        }
    }
}

/// The PATH a command was given, else this process's.
fn cmd_path(cmd: &std::process::Command) -> std::ffi::OsString {
    cmd.get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(|v| v.to_os_string()))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_scaffold_builds_installs_and_answers() {
    the_scaffold_builds_installs_and_answers(Lang::TypeScript).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_scaffold_builds_installs_and_answers() {
    the_scaffold_builds_installs_and_answers(Lang::Python).await;
}
