//! The throwaway PostgreSQL clusters the store tests run against: they start, serve
//! databases, stop (fast and immediate) and start again with their data, free their port
//! when dropped, and never outlive the test process, even one killed with SIGKILL.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::postgres::{
    require_own_postgres, require_postgres, require_server_binaries, PgCluster,
};

/// Set in the child process of [`server_stops_when_the_test_process_is_killed`].
const CHILD_ENV: &str = "PG_CLUSTER_TEST_CHILD";

fn refuses(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err()
}

/// Polls `check` for up to 30 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn value(pg: &PgCluster, db: &str, sql: &str) -> String {
    pg.psql(db, sql)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .trim()
        .to_string()
}

#[test]
fn cluster_stops_and_starts_again_with_its_data_and_frees_its_port_when_dropped() {
    let Some(mut pg) = require_own_postgres() else {
        return;
    };
    let port = pg.port();
    let url = pg
        .create_database("cluster_check")
        .expect("create database");
    assert_eq!(
        url,
        format!("postgres://postgres@127.0.0.1:{port}/cluster_check")
    );
    assert_eq!(url, pg.url("cluster_check"));
    assert_eq!(value(&pg, "cluster_check", "SELECT 1"), "1");
    assert_eq!(value(&pg, "postgres", "SHOW fsync"), "on");
    assert_eq!(value(&pg, "postgres", "SHOW max_connections"), "200");
    assert_eq!(value(&pg, "postgres", "SHOW server_encoding"), "UTF8");
    pg.psql(
        "cluster_check",
        "CREATE TABLE t (v int); INSERT INTO t VALUES (42)",
    )
    .expect("write");

    pg.stop().expect("fast shutdown");
    assert!(!pg.is_running());
    assert!(refuses(port), "port {port} still accepts after stop");
    let err = pg
        .psql("cluster_check", "SELECT 1")
        .expect_err("psql works on a stopped server");
    assert!(format!("{err:#}").contains("psql"), "{err:#}");
    pg.stop().expect("stopping a stopped server is a no-op");

    pg.start_again().expect("start again");
    assert!(pg.is_running());
    assert_eq!(pg.port(), port, "the port stays across restarts");
    assert_eq!(value(&pg, "cluster_check", "SELECT v FROM t"), "42");

    pg.psql("cluster_check", "INSERT INTO t VALUES (43)")
        .expect("write");
    pg.kill().expect("immediate shutdown");
    assert!(refuses(port), "port {port} still accepts after kill");
    pg.restart()
        .expect("start after immediate shutdown (crash recovery)");
    assert_eq!(
        value(
            &pg,
            "cluster_check",
            "SELECT string_agg(v::text, ',' ORDER BY v) FROM t"
        ),
        "42,43"
    );

    let dir = pg.dir().to_path_buf();
    drop(pg);
    assert!(refuses(port), "port {port} still accepts after drop");
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("port free again after drop");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn shared_cluster_hands_out_distinct_fresh_databases() {
    let Some(pg) = require_postgres() else {
        return;
    };
    let a = pg.fresh_database("Store Suite").expect("fresh database");
    let b = pg.fresh_database("Store Suite").expect("fresh database");
    assert_ne!(a, b);
    for url in [&a, &b] {
        let db = url.rsplit('/').next().expect("database in url");
        assert!(db.starts_with("store_suite_"), "{url}");
        assert_eq!(value(pg, db, "SELECT current_database()"), db);
    }
    assert!(std::ptr::eq(pg, PgCluster::shared().expect("shared")));
    let err = pg
        .create_database("bad name")
        .expect_err("names are checked");
    assert!(format!("{err}").contains("bad name"), "{err}");
}

/// Run by [`server_stops_when_the_test_process_is_killed`] in a child process: starts a
/// cluster, prints its port and directory, and waits to be killed.
#[test]
#[ignore = "run by server_stops_when_the_test_process_is_killed in a child process"]
fn child_holds_a_cluster_until_killed() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let pg = PgCluster::start().unwrap_or_else(|e| panic!("{e:#}"));
    let mut out = std::io::stdout();
    writeln!(out, "CLUSTER {} {}", pg.port(), pg.dir().display()).expect("stdout");
    out.flush().expect("stdout");
    std::thread::sleep(Duration::from_secs(120));
}

/// Kills the child process if the test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn server_stops_when_the_test_process_is_killed() {
    if !require_server_binaries() {
        return;
    }
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            // The test's path inside this binary (`<module>::<name>`).
            format!(
                "{}::child_holds_a_cluster_until_killed",
                module_path!()
                    .split_once("::")
                    .map_or(module_path!(), |(_, path)| path)
            )
            .as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the test binary");
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("child stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (port, dir) = loop {
        let line = lines
            .next()
            .expect("child printed its cluster")
            .expect("child stdout");
        // libtest prints `test <name> ... ` before the test's own output.
        if let Some((_, rest)) = line.split_once("CLUSTER ") {
            let (port, dir) = rest.split_once(' ').expect("port and dir");
            break (port.parse::<u16>().expect("port"), PathBuf::from(dir));
        }
    };
    assert!(!refuses(port), "child's cluster is not up");
    child.0.kill().expect("SIGKILL the child");
    child.0.wait().expect("reap the child");
    eventually("the orphaned server stops", || refuses(port));
    eventually("the orphaned cluster directory is removed", || {
        !dir.exists()
    });
}
