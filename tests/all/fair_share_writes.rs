//! Slow work never holds up other operators' writes or other agents' calls: a rotation
//! whose guest `bind` is slow, installs that compile, a bind racing a rotation, and a
//! replica catching up while readers read (CONTRACT.md section 12).

use connector_store::StateStore as _;
use std::time::{Duration, Instant};

use connector_host::Host;
use connector_model::records::Subject;
use integration_tests::guests;
use integration_tests::harness::{
    machine_load, now_unix, send_standard_webhook, test_config, try_send, upload_component,
    with_custom_section, ServerProcess, TestHost, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::{json, Value};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// What each binding's config makes version 2's `bind` do: sleep 9 s.
fn slow_in_v2(unit: &str) -> Value {
    json!({"region": "eu", "routes": [unit], "bind_sleep_ms": {"v2": 9000}})
}

/// The `q`-quantile of `samples` (sorted here).
fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[i.min(samples.len() - 1)]
}

/// `PUT /api/v1/units/{id}` every 200 ms against `bases` in turn until `done`, returning
/// how long each took (and failing on anything but 200/201).
async fn operator_writes_until(
    bases: Vec<String>,
    done: tokio::sync::watch::Receiver<bool>,
) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let mut took = Vec::new();
    let mut i = 0usize;
    while !*done.borrow() {
        let base = &bases[i % bases.len()];
        let started = Instant::now();
        // A write that meets another replica's commit at the same moment is answered
        // `409 state_changed` at once and retried, as the contract tells a client to;
        // the time until it lands, retries included, is what is measured.
        let mut attempts = 0;
        let (status, body) = loop {
            let (status, body) = try_send(
                &client,
                Method::PUT,
                &format!("{base}/api/v1/units/other-{i}"),
                Some(OPERATOR_TOKEN),
                Some(json!({})),
            )
            .await;
            attempts += 1;
            if status != 409 || body["error"]["code"] != "state_changed" || attempts == 3 {
                break (status, body);
            }
        };
        took.push(started.elapsed());
        if started.elapsed() > Duration::from_secs(1) {
            eprintln!(
                "PUT /units/other-{i} on {base} took {:?}",
                started.elapsed()
            );
        }
        assert!(
            status == 201 || status == 200,
            "PUT /units/other-{i} on {base}: {status} {body}"
        );
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    took
}

/// Binds `hostile` on units b1..b4 of `base`, each with a config version 2's `bind` takes
/// 9 s over.
async fn four_slow_bindings(client: &reqwest::Client, base: &str) {
    for unit in ["b1", "b2", "b3", "b4"] {
        let url = format!("{base}/api/v1/units/{unit}");
        let (s, b) = try_send(
            client,
            Method::PUT,
            &url,
            Some(OPERATOR_TOKEN),
            Some(json!({})),
        )
        .await;
        assert_eq!(s, 201, "{b}");
        let (s, b) = try_send(
            client,
            Method::PUT,
            &format!("{url}/connectors/hostile"),
            Some(OPERATOR_TOKEN),
            Some(json!({"config": slow_in_v2(unit)})),
        )
        .await;
        assert_eq!(s, 201, "{b}");
    }
}

/// Rotates `hostile` to version 2 on `rotate_on` while operators write through `write_on`;
/// returns the rotation's answer, how long it took, and the writes' latencies.
async fn rotate_while_writing(
    rotate_on: &str,
    write_on: Vec<String>,
) -> ((u16, Value), Duration, Vec<Duration>) {
    let (finished, done) = tokio::sync::watch::channel(false);
    let writes = tokio::spawn(operator_writes_until(write_on, done));
    let client = reqwest::Client::new();
    let v2 = std::fs::read(guests::HOSTILE_V2).expect("the v2 component");
    let started = Instant::now();
    let rotated = upload_component(&client, rotate_on, v2, "").await;
    let took = started.elapsed();
    let _ = finished.send(true);
    let writes = writes.await.expect("the writes");
    (rotated, took, writes)
}

/// Every binding kept its config, and calls run on version 2.
async fn assert_rotated(client: &reqwest::Client, base: &str) {
    let (s, c) = try_send(
        client,
        Method::GET,
        &format!("{base}/api/v1/connectors/hostile"),
        Some(OPERATOR_TOKEN),
        None,
    )
    .await;
    assert_eq!((s, c["version"].as_str()), (200, Some("2.0.0")), "{c}");
    for unit in ["b1", "b2", "b3", "b4"] {
        let (s, b) = try_send(
            client,
            Method::GET,
            &format!("{base}/api/v1/units/{unit}/connectors"),
            Some(OPERATOR_TOKEN),
            None,
        )
        .await;
        assert_eq!(s, 200, "{b}");
        assert_eq!(b["bindings"][0]["config"], slow_in_v2(unit), "{b}");
    }
}

/// A rotation whose new version's `bind` takes 9 s on each of 4 bindings: another
/// operator's writes are answered within a second all along, and the rotation completes
/// with every binding kept. (The bindings used to be checked one by one under the write
/// lock: every other write waited for all four, 36 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_whose_bind_is_slow_holds_up_no_other_write() {
    let _machine = machine_load().await;
    let dir = tempfile::tempdir().expect("a data directory");
    let server = ServerProcess::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let v1 = std::fs::read(guests::HOSTILE).expect("the v1 component");
    let (s, b) = upload_component(&client, &server.url, v1, "").await;
    assert_eq!(s, 201, "{b}");
    four_slow_bindings(&client, &server.url).await;

    let ((status, body), took, mut writes) =
        rotate_while_writing(&server.url, vec![server.url.clone()]).await;
    assert_eq!(status, 200, "the rotation: {body}");
    assert!(
        took >= Duration::from_secs(9),
        "version 2's bind sleeps 9 s, but the rotation took {took:?}"
    );
    assert!(writes.len() >= 10, "only {} writes ran", writes.len());
    let worst = quantile(&mut writes, 1.0);
    eprintln!(
        "rotation in {took:?}; {} writes meanwhile, the slowest {worst:?}",
        writes.len()
    );
    assert!(
        worst <= Duration::from_secs(1),
        "a write waited {worst:?} for the rotation (it took {took:?})"
    );
    assert_rotated(&client, &server.url).await;
}

/// The same on two PostgreSQL replicas: operators write through both while one rotates;
/// every write is answered within a second and the rotation completes (a write that
/// lands on the other replica meanwhile makes it refresh and write again, checking only
/// what changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_rotation_on_one_replica_holds_up_neither_and_completes() {
    let Some(pg) = integration_tests::postgres::require_postgres() else {
        return;
    };
    let _machine = machine_load().await;
    let url = pg.fresh_database("slowrotation").expect("a fresh database");
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env = [("CONNECTOR_HOST_DATABASE_URL", url.as_str())];
    let a = ServerProcess::start(a_dir.path(), &env).await;
    let b = ServerProcess::start(b_dir.path(), &env).await;
    let client = reqwest::Client::new();
    let v1 = std::fs::read(guests::HOSTILE).expect("the v1 component");
    let (s, body) = upload_component(&client, &a.url, v1, "").await;
    assert_eq!(s, 201, "{body}");
    four_slow_bindings(&client, &a.url).await;

    let ((status, body), took, mut writes) =
        rotate_while_writing(&a.url, vec![a.url.clone(), b.url.clone()]).await;
    assert_eq!(status, 200, "the rotation: {body}");
    assert!(writes.len() >= 10, "only {} writes ran", writes.len());
    let worst = quantile(&mut writes, 1.0);
    eprintln!(
        "rotation on one replica in {took:?}; {} writes through both meanwhile, the slowest {worst:?}",
        writes.len()
    );
    assert!(
        worst <= Duration::from_secs(1),
        "a write waited {worst:?} for the rotation (it took {took:?})"
    );
    assert_rotated(&client, &a.url).await;
    assert_rotated(&client, &b.url).await;
}

/// Installs that compile run beside requests, not in their way: four concurrent installs
/// of a 1.5 MiB packed declarative component (four digests, so each one compiles) while
/// `/healthz` and another agent's tool calls keep their latency (p99 <= 100 ms; they
/// used to wait seconds while compilations held the request threads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_that_compile_leave_requests_fast() {
    let _machine = machine_load().await;
    let dir = tempfile::tempdir().expect("a data directory");
    let packed = dir.path().join("packed.wasm");
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../connectors/examples/github-pr.yaml"
    );
    let status = std::process::Command::new(integration_tests::harness::host_binary())
        .args(["pack", manifest, "-o"])
        .arg(&packed)
        .status()
        .expect("connector-host pack runs");
    assert!(status.success(), "pack failed");
    let component = std::fs::read(&packed).expect("the packed component");
    assert!(
        component.len() > 1024 * 1024,
        "the packed component is {} bytes",
        component.len()
    );
    // A compiled-component cache of its own, so that each install compiles.
    std::fs::create_dir_all(dir.path().join("data/compiled")).expect("the server's cache");
    let server = ServerProcess::start(&dir.path().join("data"), &[]).await;
    let client = reqwest::Client::new();
    let base = server.url.clone();
    for (method, path, body) in [
        (Method::PUT, "/api/v1/units/calls", json!({})),
        (
            Method::PUT,
            "/api/v1/agents/caller",
            json!({"units": ["calls"]}),
        ),
        (
            Method::PUT,
            "/api/v1/units/calls/connectors/acme",
            json!({"config": {}}),
        ),
    ] {
        let (s, b) = try_send(
            &client,
            method,
            &format!("{base}{path}"),
            Some(OPERATOR_TOKEN),
            Some(body),
        )
        .await;
        assert!(s == 200 || s == 201, "{path}: {s} {b}");
    }

    let (finished, done) = tokio::sync::watch::channel(false);
    let probe = |path: &'static str, body: Option<Value>| {
        let (client, base, done) = (client.clone(), base.clone(), done.clone());
        tokio::spawn(async move {
            let mut took = Vec::new();
            while !*done.borrow() {
                let started = Instant::now();
                let (s, b) = try_send(
                    &client,
                    if body.is_some() {
                        Method::POST
                    } else {
                        Method::GET
                    },
                    &format!("{base}{path}"),
                    Some(OPERATOR_TOKEN),
                    body.clone(),
                )
                .await;
                took.push(started.elapsed());
                assert_eq!(s, 200, "{path}: {b}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            took
        })
    };
    let health = probe("/healthz", None);
    let calls = probe(
        "/api/v1/agents/caller/tool-calls",
        Some(json!({"tool": "acme.echo", "arguments": {"message": "hi"}})),
    );
    let started = Instant::now();
    let installs = (0..4).map(|i| {
        let bytes = with_custom_section(&component, &format!("install-{i}"));
        let (client, base) = (client.clone(), base.clone());
        async move { upload_component(&client, &base, bytes, "").await }
    });
    for (s, b) in futures::future::join_all(installs).await {
        assert!(s == 200 || s == 201, "an install: {s} {b}");
    }
    let took = started.elapsed();
    let _ = finished.send(true);
    let (mut health, mut calls) = (health.await.unwrap(), calls.await.unwrap());
    let (h99, c99) = (quantile(&mut health, 0.99), quantile(&mut calls, 0.99));
    eprintln!(
        "4 installs in {took:?}: /healthz p99 {h99:?} max {:?} ({} probes), acme.echo p99 {c99:?} max {:?} ({} calls)",
        quantile(&mut health, 1.0),
        health.len(),
        quantile(&mut calls, 1.0),
        calls.len()
    );
    assert!(health.len() >= 20, "only {} probes ran", health.len());
    assert!(h99 <= Duration::from_millis(100), "/healthz p99 {h99:?}");
    assert!(c99 <= Duration::from_millis(100), "acme.echo p99 {c99:?}");
}

/// A bind checked against one version while a rotation installs the next stores the
/// routing keys of the version installed when it is written: the new version checks it
/// again. (It used to keep the keys of the version that was replaced.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_racing_a_rotation_keeps_the_new_versions_routing_keys() {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("u", None).await;
    // Version 1's bind takes 4 s over this config (version 2's takes no time); version 2
    // adds routing key `version:2`.
    let config = json!({"region": "eu", "routes": ["orders"], "bind_sleep_ms": {"v1": 4000}});
    let binding = {
        let (client, url) = (h.client.clone(), h.at("/api/v1/units/u/connectors/hostile"));
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = try_send(
                &client,
                Method::PUT,
                &url,
                Some(OPERATOR_TOKEN),
                Some(json!({"config": config})),
            )
            .await;
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let v2 = std::fs::read(guests::HOSTILE_V2).expect("the v2 component");
    let (s, b) = upload_component(&h.client, &h.url, v2, "").await;
    assert_eq!(s, 200, "the rotation, while the bind is being checked: {b}");
    let ((s, b), took) = binding.await.expect("the bind");
    assert_eq!(s, 201, "{b}");
    assert!(
        took >= Duration::from_secs(4),
        "the bind took {took:?}: version 1 did not check it, so nothing raced"
    );

    let event = json!({"messages": [{"route": "version:2", "kind": "check"}]});
    let (s, b) = send_standard_webhook(
        &h.client,
        &h.url,
        "hostile",
        "race-1",
        &serde_json::to_vec(&event).unwrap(),
        SECRET,
        now_unix(),
    )
    .await
    .expect("an answer");
    assert_eq!(s, 202, "{b}");
    assert_eq!(
        b["routedTo"],
        json!(["u"]),
        "the binding's routing keys are version 2's: {b}"
    );
}

/// What a reader saw of unit `u` in [`a_replica_catching_up_is_seen_before_or_after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Version 1 bound.
    Before,
    /// Unbound.
    After,
    /// Anything else (version 2's tools while still bound): half of the change.
    Half,
}

/// A replica catching up with another process's changes is seen by concurrent readers
/// before or after, never half-way. The other process commits, in three quick
/// transactions, new versions of two connectors and version 2 of `hostile` (which adds a
/// tool) with its binding on unit `u` removed; the replica must compile all three.
/// Version 2's tool must never show on `u`, which it is not bound to. (The replica used
/// to put each connector in place as soon as it was compiled, before the directory:
/// readers saw version 2 still bound while the others compiled.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_catching_up_is_seen_before_or_after() {
    use connector_model::records::ConnectorRecord;
    let dir = tempfile::tempdir().expect("the writer's data directory");
    let (server, _) = Host::open(test_config(dir.path()))
        .await
        .expect("the writer opens");
    for path in [guests::HOSTILE, guests::RICH, guests::NATIVE_HTTP] {
        let bytes = std::fs::read(path).expect("a test component");
        server
            .install_connector(&bytes, false)
            .await
            .expect("installed");
    }
    server.put_unit("u", None, None).await.expect("unit");
    server
        .bind("u", "hostile", json!({"region": "eu"}))
        .await
        .expect("bound");

    // The follower has a compiled-component cache of its own: what it must prepare, it
    // compiles.
    let follower_dir = tempfile::tempdir().expect("the follower's data directory");
    let mut config = test_config(follower_dir.path());
    config.database_url = Some(format!("sqlite://{}", dir.path().join("host.db").display()));
    let follower = Host::open_tool_server(config)
        .await
        .expect("the follower opens");
    let unit = Subject::Unit("u".into());
    let seen = |tools: &connector_host::grants::ResolvedTools| match (
        tools.get("hostile.counter").is_some(),
        tools.get("hostile.only_in_v2").is_some(),
    ) {
        (true, false) => Seen::Before,
        (false, false) => Seen::After,
        _ => Seen::Half,
    };
    assert_eq!(
        seen(&follower.effective_tools(&unit).expect("u's tools")),
        Seen::Before
    );

    /// Stops the reader however the test ends (a runtime waits for blocking tasks).
    struct StopReading(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for StopReading {
        fn drop(&mut self) {
            self.0.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let reading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let stop_reading = StopReading(reading.clone());
    let reader = {
        let (follower, reading, unit) = (follower.clone(), reading.clone(), unit.clone());
        tokio::task::spawn_blocking(move || {
            let mut observed = Vec::new();
            while reading.load(std::sync::atomic::Ordering::SeqCst) {
                let now = seen(&follower.effective_tools(&unit).expect("u's tools"));
                if observed.last() != Some(&now) {
                    observed.push(now);
                }
            }
            observed
        })
    };
    // The other process's writes, straight to the shared database through a connection
    // of their own.
    let store = connector_store::sqlite::SqliteStore::open(&dir.path().join("host.db"))
        .expect("the database, opened beside the writer");
    let record = |slug: &str, namespace: &str, bytes: &[u8]| {
        use sha2::Digest;
        ConnectorRecord {
            slug: slug.into(),
            namespace: namespace.into(),
            digest: format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes))),
            bundled: false,
            installed_at: "2026-11-26T00:00:00Z".into(),
            // No description: the follower must compile each one before it can serve it.
            manifest: None,
        }
    };
    for (slug, path) in [("rich", guests::RICH), ("native-http", guests::NATIVE_HTTP)] {
        let installed = server.connector(slug).expect("installed");
        let bytes = with_custom_section(&std::fs::read(path).unwrap(), "again");
        let again = record(slug, &installed.info().tool_namespace, &bytes);
        store
            .rotate_connector(&again, &bytes, &[], &[])
            .await
            .expect("a new version");
    }
    let v2 = std::fs::read(guests::HOSTILE_V2).expect("version 2");
    store
        .rotate_connector(&record("hostile", "hostile", &v2), &v2, &[], &["u".into()])
        .await
        .expect("version 2, unbound from u");

    // Compiling three components may take longer than a request waits for a state
    // check (503 store_unavailable): the compiled code is kept, and the next check
    // finishes the work.
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Err(e) = follower.refresh().await {
        assert!(
            Instant::now() < deadline,
            "the follower never caught up: {e}"
        );
    }
    drop(stop_reading);
    let observed = reader.await.expect("the reader");
    assert!(
        !observed.contains(&Seen::Half),
        "a reader saw half of the change: {observed:?}"
    );
    assert_eq!(
        seen(&follower.effective_tools(&unit).expect("u's tools")),
        Seen::After,
        "caught up; the reader saw {observed:?}"
    );
    assert_eq!(
        follower
            .connector("hostile")
            .expect("hostile")
            .info()
            .version,
        "2.0.0"
    );
}

/// A bind on `root` until `agent`'s next read has its tools, then the unbind: how long
/// the bind and the read took.
async fn bind_until_visible(host: &Host, agent: &Subject) -> Duration {
    let started = Instant::now();
    host.bind("root", "acme", json!({})).await.expect("a bind");
    let tools = host.effective_tools(agent).expect("the agent's tools");
    let took = started.elapsed();
    assert!(tools.get("acme.echo").is_some(), "the bind is not visible");
    host.unbind("root", "acme").await.expect("an unbind");
    took
}

/// How many of this process's threads are running or waiting for a core.
fn runnable_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        // `<tid> (<name>) <state> ...`: the name may hold spaces and parentheses.
        .filter(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('R'))
        })
        .count()
}

/// A start puts stored connectors in place from their stored descriptions and loads their
/// code in the background; those loads leave a bind, and the read after it, about as fast
/// as once they are done, and never run on more than a few threads at once. (With 60
/// stored connectors loading all at once, each on a thread of its own, the binds right
/// after a start took up to 50 to 350 times as long: the loads took the cores from the
/// bind's guest call and from the database's writer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_after_a_start_leave_a_bind_as_fast_as_once_they_are_done() {
    use integration_tests::large_directory::{connector_component, connector_slug};
    const CONNECTORS: usize = 60;
    const ROUNDS: usize = 9;

    let _machine = machine_load().await;
    let dir = tempfile::tempdir().expect("a data directory");
    integration_tests::harness::share_compiled_cache(dir.path());
    {
        let (host, _) = Host::open(test_config(dir.path())).await.expect("opens");
        for i in 0..CONNECTORS {
            let bytes = connector_component(i).expect("a distinct component");
            host.install_connector(&bytes, false)
                .await
                .unwrap_or_else(|e| panic!("installing {}: {e}", connector_slug(i)));
        }
        host.put_unit("root", None, None).await.expect("a unit");
        host.put_unit("team", Some("root"), None)
            .await
            .expect("a unit");
        host.put_unit("elsewhere", None, None)
            .await
            .expect("a unit");
        host.put_agent("ada", &["team"], None)
            .await
            .expect("an agent");
    }

    let agent = Subject::Agent("ada".into());
    let opened = Instant::now();
    let (host, _) = Host::open(test_config(dir.path()))
        .await
        .expect("opens again");
    let opening = opened.elapsed();
    let mut during = Vec::with_capacity(ROUNDS);
    let mut most_runnable = runnable_threads();
    for _ in 0..ROUNDS {
        during.push(bind_until_visible(&host, &agent).await);
        most_runnable = most_runnable.max(runnable_threads());
    }
    // Each connector bound once: what is not loaded yet is loaded now.
    let binding = Instant::now();
    for i in 0..CONNECTORS {
        host.bind("elsewhere", &connector_slug(i), json!({}))
            .await
            .unwrap_or_else(|e| panic!("binding {}: {e}", connector_slug(i)));
    }
    let binding = binding.elapsed();
    let mut after: Vec<Duration> = Vec::with_capacity(3 * ROUNDS);
    for _ in 0..3 * ROUNDS {
        after.push(bind_until_visible(&host, &agent).await);
    }
    let baseline = quantile(&mut after, 0.5);
    let total: Duration = during.iter().sum();
    eprintln!(
        "opened in {opening:?}; binds during the loads {during:?} (at most {most_runnable} \
         threads runnable); binding every connector then took {binding:?}; binds after: \
         p50 {baseline:?}, max {:?}",
        quantile(&mut after, 1.0)
    );
    // The process's own request threads, the load-ahead thread and a test running beside
    // this one (a compilation's threads, say); not a thread per connector.
    assert!(
        most_runnable <= CONNECTORS / 4,
        "{most_runnable} threads were runnable at once while {CONNECTORS} connectors loaded"
    );
    // With room: a test running beside this one may slow a few binds several times over.
    assert!(
        total <= baseline * (20 * ROUNDS) as u32,
        "{ROUNDS} binds while the stored connectors loaded took {total:?} ({during:?}); \
         after, a bind took {baseline:?} (p50)"
    );
}
