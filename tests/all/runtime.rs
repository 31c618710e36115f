//! The sandbox against real components: the bundled acme connector and hostile guests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use connector_host::registry::ConnectorRegistry;
use connector_runtime::{
    wit, CacheBound, ConnectorRuntime, GuestError, GuestLimits, LoadSource, OutboundPolicy,
    RuntimeOptions, Sandbox,
};
use integration_tests::guests;

fn runtime_with(limits: GuestLimits) -> Arc<ConnectorRuntime> {
    Arc::new(
        ConnectorRuntime::new(RuntimeOptions {
            limits,
            cache_dir: None,
            installation_tokens: None,
            credential_log: None,
            ..RuntimeOptions::default()
        })
        .expect("runtime"),
    )
}

fn limits(timeout_ms: u64) -> GuestLimits {
    GuestLimits {
        call_timeout: Duration::from_millis(timeout_ms),
        memory_bytes: 32 * 1024 * 1024,
        max_output_bytes: 1024 * 1024,
        max_concurrent_instances: 64,
        ..GuestLimits::default()
    }
}

fn ctx() -> wit::CallContext {
    wit::CallContext {
        binding: wit::Binding {
            unit: "u1".into(),
            config: "{}".into(),
        },
        agent: Some("a1".into()),
        call_id: "c1".into(),
    }
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read test guest {path}: {e}"))
}

async fn call(
    rt: &ConnectorRuntime,
    c: &connector_runtime::LoadedComponent,
    sandbox: &Sandbox,
    tool: &str,
    args: &str,
) -> Result<Result<String, wit::ToolError>, GuestError> {
    // These tools return JSON only: the structured result's text.
    rt.call_tool(c, sandbox, ctx(), tool, args)
        .await
        .map(|r| r.map(|out| out.structured.unwrap_or_default()))
}

/// `acme.echo` of `message` in `component` answers with it.
async fn assert_echoes(
    rt: &ConnectorRuntime,
    component: &connector_runtime::LoadedComponent,
    message: &str,
) {
    let args = serde_json::json!({ "message": message }).to_string();
    let out = call(
        rt,
        component,
        &Sandbox::isolated("acme"),
        "acme.echo",
        &args,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(out.contains(message), "{out}");
}

fn acme_bytes() -> &'static [u8] {
    connector_bundled::component("acme").expect("acme is bundled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acme_echo_and_timestamp() {
    let rt = runtime_with(limits(5_000));
    let acme = rt.load(acme_bytes()).unwrap();
    let sandbox = Sandbox::isolated("acme");
    let out = call(
        &rt,
        &acme,
        &sandbox,
        "acme.echo",
        r#"{"message":"hi","extra":[1,2]}"#,
    )
    .await
    .unwrap()
    .unwrap();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out, serde_json::json!({"message": "hi", "extra": [1, 2]}));

    let ts = call(&rt, &acme, &sandbox, "acme.timestamp", "{}")
        .await
        .unwrap()
        .unwrap();
    let ts: serde_json::Value = serde_json::from_str(&ts).unwrap();
    let text = ts["timestamp"].as_str().expect("timestamp string");
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .expect("RFC 3339");
    let skew = (parsed - time::OffsetDateTime::now_utc()).abs();
    assert!(
        skew < time::Duration::seconds(5),
        "timestamp {text} is {skew} away from now"
    );
}

/// `n` echo calls of `acme`, one after the other: how long they take.
async fn echoes(
    rt: &ConnectorRuntime,
    acme: &connector_runtime::LoadedComponent,
    n: usize,
) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        call(
            rt,
            acme,
            &Sandbox::isolated("acme"),
            "acme.echo",
            r#"{"message":"x"}"#,
        )
        .await
        .unwrap()
        .unwrap();
    }
    start.elapsed()
}

/// When a timer set for `after` from now actually fires: the machine's own lateness,
/// against which a deadline the host enforces is judged.
fn timer(after: Duration) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        Instant::now()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_times_out_near_the_deadline_and_others_are_not_delayed() {
    let rt = runtime_with(limits(500));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    let acme = rt.load(acme_bytes()).unwrap();
    let sandbox = Sandbox::isolated("hostile");
    // What 20 echo calls take on this machine now, with no spinner (after a first one).
    echoes(&rt, &acme, 1).await;
    let alone = echoes(&rt, &acme, 20).await;

    let started = Instant::now();
    let deadline = timer(Duration::from_millis(500));
    let spinner = {
        let rt = rt.clone();
        let hostile = hostile.clone();
        let sandbox = sandbox.clone();
        tokio::spawn(async move {
            let r = rt
                .call_tool(&hostile, &sandbox, ctx(), "hostile.spin", "{}")
                .await;
            (r, Instant::now())
        })
    };
    // While the spinner burns its budget, echo calls still complete promptly: held
    // behind it they would take the rest of its 500 ms on top of their own time.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let echo_time = echoes(&rt, &acme, 20).await;
    assert!(
        echo_time < alone * 3 + Duration::from_millis(150),
        "echo calls were delayed by a spinning guest: {echo_time:?} (alone: {alone:?})"
    );

    let (result, stopped) = spinner.await.unwrap();
    let fired = deadline.await.unwrap();
    assert!(
        matches!(result, Err(GuestError::Timeout { after_ms: 500 })),
        "{result:?}"
    );
    let elapsed = stopped - started;
    assert!(
        elapsed >= Duration::from_millis(490),
        "stopped too early: {elapsed:?}"
    );
    // Late by at most 100 ms more than a plain timer set for the same deadline was.
    assert!(
        stopped <= fired + Duration::from_millis(100),
        "stopped too late: {elapsed:?}, {:?} after a 500 ms timer",
        stopped.saturating_duration_since(fired)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_guest_is_also_bounded() {
    let rt = runtime_with(limits(300));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    let deadline = timer(Duration::from_millis(300));
    let r = call(
        &rt,
        &hostile,
        &Sandbox::isolated("hostile"),
        "hostile.sleep",
        r#"{"ms": 5000}"#,
    )
    .await;
    let stopped = Instant::now();
    assert!(matches!(r, Err(GuestError::Timeout { .. })), "{r:?}");
    // As late as a plain 300 ms timer was, and 100 ms more at most (not the 5 s asked).
    let fired = deadline.await.unwrap();
    assert!(
        stopped <= fired + Duration::from_millis(100),
        "stopped {:?} after a 300 ms timer",
        stopped.saturating_duration_since(fired)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_reported_and_the_host_keeps_serving() {
    let rt = runtime_with(limits(5_000));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    let acme = rt.load(acme_bytes()).unwrap();
    let sandbox = Sandbox::isolated("hostile");
    // What 50 echo calls take on this machine now, before any fault.
    echoes(&rt, &acme, 1).await;
    let before = echoes(&rt, &acme, 50).await;

    let hog = call(&rt, &hostile, &sandbox, "hostile.hog", "{}").await;
    assert!(
        matches!(hog, Err(GuestError::MemoryExceeded { limit_bytes }) if limit_bytes == 32 * 1024 * 1024),
        "{hog:?}"
    );

    let panic = call(
        &rt,
        &hostile,
        &sandbox,
        "hostile.panic",
        r#"{"message":"boom 42"}"#,
    )
    .await;
    match panic {
        Err(GuestError::Trapped { message }) => {
            assert!(message.contains("deliberate panic: boom 42"), "{message}")
        }
        other => panic!("expected a trap, got {other:?}"),
    }

    let trap = call(&rt, &hostile, &sandbox, "hostile.trap", "{}").await;
    match trap {
        Err(GuestError::Trapped { message }) => {
            assert!(message.contains("unreachable"), "{message}")
        }
        other => panic!("expected a trap, got {other:?}"),
    }

    let huge = call(
        &rt,
        &hostile,
        &sandbox,
        "hostile.huge",
        r#"{"bytes": 8388608}"#,
    )
    .await;
    assert!(
        matches!(huge, Err(GuestError::OutputTooLarge { limit: 1048576, .. })),
        "{huge:?}"
    );
    let small = call(
        &rt,
        &hostile,
        &sandbox,
        "hostile.huge",
        r#"{"bytes": 1000}"#,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(small.len(), 1002);

    // After all of that, calls still run at full speed: as fast as before the faults.
    let after = echoes(&rt, &acme, 50).await;
    assert!(
        after < before * 2 + Duration::from_millis(100),
        "50 echo calls took {after:?} after the faults, {before:?} before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_state_survives_between_calls() {
    let rt = runtime_with(limits(5_000));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    for _ in 0..5 {
        let n = call(
            &rt,
            &hostile,
            &Sandbox::isolated("hostile"),
            "hostile.counter",
            "{}",
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(n, "1");
    }
}

/// Memory a call dirtied, below and far beyond the part of a slot kept resident between
/// calls, is back to the component's image for the next call in that slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_memory_survives_between_calls() {
    let rt = runtime_with(limits(5_000));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    for round in 0..4 {
        let out = call(
            &rt,
            &hostile,
            &Sandbox::isolated("hostile"),
            "hostile.residue",
            "{}",
        )
        .await
        .unwrap()
        .unwrap();
        let out: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["before"], 0, "round {round}: {out}");
        assert!(
            out["after"].as_u64().unwrap() >= 511,
            "round {round}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refused_for_installations_the_binding_does_not_name() {
    let rt = runtime_with(limits(5_000));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    let mut sandbox = Sandbox::isolated("hostile");
    sandbox.installations = Arc::from(vec![42u64]);
    let r = call(
        &rt,
        &hostile,
        &sandbox,
        "hostile.token",
        r#"{"installation_id": 7}"#,
    )
    .await
    .unwrap();
    match r {
        Err(wit::ToolError::Failed(m)) => assert!(
            m.contains("installation 7 is not named by this binding"),
            "{m}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Named, but no App configured: a clear error, not a token.
    let r = call(
        &rt,
        &hostile,
        &sandbox,
        "hostile.token",
        r#"{"installation_id": 42}"#,
    )
    .await
    .unwrap();
    match r {
        Err(wit::ToolError::Failed(m)) => assert!(m.contains("no GitHub App is configured"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A one-request-at-a-time HTTP server on 127.0.0.1 answering `hello from loopback`.
async fn loopback_server() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = "hello from loopback";
                let resp = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_http_follows_the_policy() {
    let rt = runtime_with(limits(5_000));
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    let addr = loopback_server().await;
    let declared = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let fetch = |url: String| format!(r#"{{"url": "{url}"}}"#);

    // Allowed host, loopback explicitly allowed by the operator: answers.
    let open = Sandbox {
        outbound: Arc::new(OutboundPolicy::new(
            &declared,
            Some(&["127.0.0.1".to_string()]),
            true,
        )),
        ..Sandbox::isolated("hostile")
    };
    let fetched = Instant::now();
    let ok = call(
        &rt,
        &hostile,
        &open,
        "hostile.fetch",
        &fetch(format!("http://127.0.0.1:{}/x", addr.port())),
    )
    .await
    .unwrap()
    .unwrap();
    // One allowed fetch, connection and all: what a refusal must not take much longer
    // than, three times over (it resolves and connects nothing).
    let one_fetch = fetched.elapsed();
    let ok: serde_json::Value = serde_json::from_str(&ok).unwrap();
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["body"], "hello from loopback");

    // A host that is not on the effective list (the operator narrowed it to 127.0.0.1).
    let start = Instant::now();
    let denied = call(
        &rt,
        &hostile,
        &open,
        "hostile.fetch",
        &fetch(format!("http://localhost:{}/x", addr.port())),
    )
    .await
    .unwrap();
    match denied {
        Err(wit::ToolError::Failed(m)) => assert!(m.to_lowercase().contains("denied"), "{m}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    // Not declared by the component at all.
    let denied = call(
        &rt,
        &hostile,
        &open,
        "hostile.fetch",
        &fetch("http://example.com/".into()),
    )
    .await
    .unwrap();
    assert!(
        matches!(denied, Err(wit::ToolError::Failed(ref m)) if m.to_lowercase().contains("denied")),
        "{denied:?}"
    );

    // An allowed name that resolves to a loopback address, private networks not allowed.
    let closed = Sandbox {
        outbound: Arc::new(OutboundPolicy::new(&declared, None, false)),
        ..Sandbox::isolated("hostile")
    };
    let prohibited = call(
        &rt,
        &hostile,
        &closed,
        "hostile.fetch",
        &fetch(format!("http://localhost:{}/x", addr.port())),
    )
    .await
    .unwrap();
    match prohibited {
        Err(wit::ToolError::Failed(m)) => assert!(m.to_lowercase().contains("prohibited"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        start.elapsed() < one_fetch * 3 + Duration::from_millis(500),
        "refusals must be prompt, took {:?} (one allowed fetch: {one_fetch:?})",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_components_are_rejected_with_the_rule_named() {
    let rt = runtime_with(limits(5_000));
    let registry = ConnectorRegistry::new(rt);
    let cases = [
        (
            guests::BAD_MANIFEST_OUTSIDE_NAMESPACE,
            "tool_outside_namespace",
            "other.echo",
        ),
        (
            guests::BAD_MANIFEST_SV_NAMESPACE,
            "reserved_namespace",
            "sv",
        ),
        (
            guests::BAD_MANIFEST_DUPLICATE_IDS,
            "duplicate_tool_id",
            "bad.echo",
        ),
        (
            guests::BAD_MANIFEST_UPPERCASE_ID,
            "tool_id_pattern",
            "Acme.Echo",
        ),
        (
            guests::BAD_MANIFEST_SLASH_ID,
            "tool_id_pattern",
            "acme/echo",
        ),
        (
            guests::BAD_MANIFEST_NO_NAMESPACE_ID,
            "tool_id_pattern",
            "acme_echo",
        ),
        (guests::BAD_MANIFEST_BAD_SLUG, "slug_pattern", "Bad Slug"),
    ];
    for (path, rule, id) in cases {
        let err = registry.prepare(&read(path)).await.expect_err(path);
        assert_eq!(err.rule(), rule, "{path}: {err}");
        assert_eq!(err.offending_id(), Some(id), "{path}: {err}");
        assert!(err.to_string().contains(id), "{err}");
    }
    let empty = registry
        .prepare(&read(guests::BAD_MANIFEST_EMPTY_TOOLS))
        .await
        .expect("an empty tool list is fine");
    assert!(empty.info().tools.is_empty());

    let junk = registry.prepare(b"definitely not wasm").await.unwrap_err();
    assert_eq!(junk.rule(), "not_a_component");
    let core_module = registry.prepare(b"\0asm\x01\0\0\0").await.unwrap_err();
    assert_eq!(core_module.rule(), "not_a_component");
    assert!(
        core_module.to_string().contains("core WebAssembly module"),
        "{core_module}"
    );
    let no_exports = registry
        .prepare(&read(guests::NO_EXPORTS))
        .await
        .unwrap_err();
    assert_eq!(no_exports.rule(), "wrong_world", "{no_exports}");
}

/// A digest recorded with the bytes (a stored or bundled connector) spares hashing them
/// on a cached load, but is checked before anything is compiled: bytes that do not match
/// it are refused and never filed in the cache under the digest's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_digest_is_checked_before_compiling_and_never_files_other_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let options = RuntimeOptions {
        limits: limits(5_000),
        cache_dir: Some(dir.path().to_path_buf()),
        installation_tokens: None,
        credential_log: None,
        ..RuntimeOptions::default()
    };
    let acme_digest = runtime_with(limits(5_000))
        .compile_uncached(acme_bytes())
        .unwrap()
        .digest()
        .to_owned();
    let github = connector_bundled::component("github").expect("github is bundled");

    // Another component's bytes under acme's digest, with nothing cached: refused.
    let rt = ConnectorRuntime::new(options.clone()).unwrap();
    let err = rt.load_known(github, &acme_digest).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("do not match the digest") && message.contains(&acme_digest),
        "{message}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // Digests that are not `sha256:` and 64 lowercase hex digits never reach a file name.
    for bad in [
        "sha256:../../escape",
        "acme",
        &acme_digest.to_uppercase(),
        &acme_digest[..acme_digest.len() - 1],
    ] {
        let err = rt.load_known(acme_bytes(), bad).unwrap_err();
        assert!(
            err.to_string()
                .contains("is not `sha256:` and 64 lowercase hex digits"),
            "{bad}: {err}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // The right digest compiles once, then loads from the cache without its bytes being
    // hashed, and runs.
    let first = rt.load_known(acme_bytes(), &acme_digest).unwrap();
    assert_eq!(first.source(), LoadSource::Compiled);
    assert_eq!(first.digest(), acme_digest);
    let rt2 = ConnectorRuntime::new(options).unwrap();
    let cached = rt2.load_known(acme_bytes(), &acme_digest).unwrap();
    assert_eq!(cached.source(), LoadSource::Cache);
    assert_eq!(cached.digest(), acme_digest);
    assert_echoes(&rt2, &cached, "known").await;
    // Hashing the bytes names the same cache entry.
    assert_eq!(rt2.load(acme_bytes()).unwrap().source(), LoadSource::Cache);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_components_are_cached_and_a_corrupt_cache_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let options = RuntimeOptions {
        limits: limits(5_000),
        cache_dir: Some(dir.path().to_path_buf()),
        installation_tokens: None,
        credential_log: None,
        ..RuntimeOptions::default()
    };
    let rt = ConnectorRuntime::new(options.clone()).unwrap();
    assert_eq!(
        rt.load(acme_bytes()).unwrap().source(),
        LoadSource::Compiled
    );
    let rt2 = ConnectorRuntime::new(options.clone()).unwrap();
    let cached = rt2.load(acme_bytes()).unwrap();
    assert_eq!(cached.source(), LoadSource::Cache);
    assert_echoes(&rt2, &cached, "cached").await;

    // Flip a byte in the compiled file: the checksum no longer matches, so it is recompiled.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            let mut bytes = std::fs::read(&path).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let rt3 = ConnectorRuntime::new(options.clone()).unwrap();
    let reloaded = rt3.load(acme_bytes()).unwrap();
    assert_eq!(reloaded.source(), LoadSource::Compiled);
    assert_echoes(&rt3, &reloaded, "again").await;

    // The recompile rewrote the cache: it loads from there again. A file cut short (a
    // torn write) or one without its checksum is recompiled too.
    let cache_files = |ext: &str| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect()
    };
    let rt4 = ConnectorRuntime::new(options.clone()).unwrap();
    assert_eq!(rt4.load(acme_bytes()).unwrap().source(), LoadSource::Cache);
    for path in cache_files("cwasm") {
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    }
    let rt5 = ConnectorRuntime::new(options.clone()).unwrap();
    assert_eq!(
        rt5.load(acme_bytes()).unwrap().source(),
        LoadSource::Compiled
    );
    for path in cache_files("xxh3") {
        std::fs::remove_file(path).unwrap();
    }
    let rt6 = ConnectorRuntime::new(options).unwrap();
    assert_eq!(
        rt6.load(acme_bytes()).unwrap().source(),
        LoadSource::Compiled
    );
}

/// On Linux a component read back from the cache is mapped from its file, not copied
/// into the process's own memory (at 500 stored connectors the copies were half a GiB);
/// its checksum is checked through a mapping too, so the file is never read into memory
/// (it used to be read whole for the check, then mapped); and it keeps running after the
/// cache replaces or removes that file (a mapping outlives the file's name).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_component_is_mapped_not_read_and_outlives_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let options = RuntimeOptions {
        limits: limits(5_000),
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeOptions::default()
    };
    let compiled = ConnectorRuntime::new(options.clone()).unwrap();
    assert_eq!(
        compiled.load(acme_bytes()).unwrap().source(),
        LoadSource::Compiled
    );
    let code = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a compiled file in the cache");
    let mapped = || {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .any(|l| l.contains(code.to_str().unwrap()))
    };
    assert!(!mapped(), "compiled in memory, nothing mapped yet");

    // Bytes this thread read through `read` and the like (a mapping's pages are not
    // counted); the load below runs on this thread.
    let read_by_this_thread = || -> u64 {
        std::fs::read_to_string("/proc/thread-self/io")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("rchar: ")?.parse().ok())
            .expect("rchar in /proc/thread-self/io")
    };
    let code_bytes = std::fs::metadata(&code).unwrap().len();
    let rt = ConnectorRuntime::new(options).unwrap();
    let before = read_by_this_thread();
    let cached = rt.load(acme_bytes()).unwrap();
    let read = read_by_this_thread() - before;
    assert_eq!(cached.source(), LoadSource::Cache);
    assert!(mapped(), "{} is not mapped", code.display());
    assert!(
        read < code_bytes / 10,
        "the load read {read} bytes; the compiled file has {code_bytes}"
    );

    // Replaced by a rename (as the cache writes), then removed: the mapping stays.
    let copy = code.with_extension("copy");
    std::fs::copy(&code, &copy).unwrap();
    std::fs::rename(&copy, &code).unwrap();
    std::fs::remove_file(&code).unwrap();
    assert_echoes(&rt, &cached, "mapped").await;
}

/// The cache is held to its bound after each compile, the least recently used entries
/// first, but never loses the entry of a component the runtime still holds (nor the one
/// just written); once the component is dropped, its entry may go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_is_pruned_but_never_of_a_component_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let rt = ConnectorRuntime::new(RuntimeOptions {
        limits: limits(5_000),
        cache_dir: Some(dir.path().to_path_buf()),
        // Room for nothing: every entry not in use goes.
        cache_bound: CacheBound {
            max_bytes: 1,
            max_unused: Duration::from_secs(3600),
        },
        ..RuntimeOptions::default()
    })
    .unwrap();
    let cached = || -> Vec<String> {
        let mut digests: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().into_string().ok())
            .filter_map(|n| {
                Some(format!(
                    "sha256:{}",
                    n.strip_suffix(".cwasm")?.split('-').next()?
                ))
            })
            .collect();
        digests.sort();
        digests
    };
    let sorted = |mut d: Vec<&str>| -> Vec<String> {
        d.sort();
        d.into_iter().map(str::to_owned).collect()
    };
    let component = |name: &str| connector_bundled::component(name).expect("bundled");

    let acme = rt.load(acme_bytes()).unwrap();
    let github = rt.load(component("github")).unwrap();
    // Over the bound, but both are in use.
    assert_eq!(cached(), sorted(vec![acme.digest(), github.digest()]));
    let acme_digest = acme.digest().to_owned();
    let acme_copy = acme.clone();
    drop(acme);
    let arxiv = rt.load(component("arxiv")).unwrap();
    // A clone still holds acme's entry.
    assert_eq!(
        cached(),
        sorted(vec![&acme_digest, github.digest(), arxiv.digest()])
    );
    assert_echoes(&rt, &acme_copy, "held").await;
    drop(acme_copy);
    drop(github);
    let hostile = rt.load(&read(guests::HOSTILE)).unwrap();
    assert_eq!(cached(), sorted(vec![arxiv.digest(), hostile.digest()]));
    // What went is compiled again when asked for.
    assert_eq!(
        rt.load(acme_bytes()).unwrap().source(),
        LoadSource::Compiled
    );
}
