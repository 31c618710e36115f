//! Throwaway PostgreSQL servers for tests.
//!
//! The PostgreSQL store has to be tested against a real server: transactions, locking,
//! durability across restarts and behaviour under many connections are exactly what a
//! mock or an embedded stand-in would get wrong. A [`PgCluster`] is a private server
//! made with `initdb` in a temporary directory, listening on 127.0.0.1 on a free port
//! (its unix socket also stays inside that directory), with `fsync=on` and
//! `synchronous_commit=on`, `max_connections=200`, trust authentication for the
//! `postgres` role, and its log in `postgres.log` next to the data directory.
//!
//! - [`PgCluster::start`] makes one; [`PgCluster::stop`], [`PgCluster::kill`] and
//!   [`PgCluster::start_again`] take it down (fast or immediate shutdown) and bring it
//!   back on the same data and port, so a test can restart the database under load.
//! - [`require_postgres`] hands out the one cluster shared by every test of a test binary
//!   (started on first use); [`PgCluster::fresh_database`] gives each test its own
//!   database in it. [`require_own_postgres`] starts a private cluster for tests that
//!   stop or kill it.
//!
//! **A server never outlives the test process.** The postmaster runs under a small
//! watchdog shell whose standard input is a pipe held only by the test process. When the
//! test process goes away (normal exit, panic, or even `SIGKILL`) the pipe closes, and
//! the watchdog stops the server with a fast shutdown and removes its directory.
//! Dropping a [`PgCluster`] does the same and waits for it, so a dropped cluster's port
//! is free again.
//!
//! **Availability.** The server binaries are found with `pg_config --bindir`, else in the
//! highest `/usr/lib/postgresql/<version>/bin` that has them. When there are none, tests
//! that need PostgreSQL are skipped with a notice on stderr, except under `CI=true` (or
//! `CI=1`), where they fail: `.ci/run` installs PostgreSQL, so a missing server there is
//! a broken setup, not a reason to pass.
//!
//! **Root.** PostgreSQL refuses to run as root. When the tests run as root (containers),
//! the cluster directory is given to the `postgres` user and `initdb`, `postgres` and
//! `pg_ctl` are run through `su postgres`. Clients (`psql`) run as the test's own user.

use std::fs;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

/// How long a starting server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a fast or immediate shutdown may take before it is forced.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a dropped cluster may take to stop before it is forced.
const DROP_TIMEOUT: Duration = Duration::from_secs(30);
/// Server log lines quoted in errors.
const LOG_TAIL_LINES: usize = 40;
/// Fresh ports tried when a port picked as free is taken before the server binds it.
const PORT_ATTEMPTS: usize = 3;

/// The watchdog the postmaster runs under. Arguments: the `postgres` binary, the data
/// directory, the log file, the cluster directory, then the server's own options.
///
/// Standard input is the test process's pipe. A line `fast` or `immediate` stops the
/// server with that shutdown mode; end of input without a line (the test process is
/// gone, or the cluster was dropped) stops it fast and then removes the cluster
/// directory. The watchdog exits with the server, with the server's exit status.
const WATCHDOG: &str = r#"
postgres=$1 data=$2 log=$3 dir=$4
shift 4
exec 3<&0 0</dev/null
"$postgres" -D "$data" "$@" >>"$log" 2>&1 3<&- &
pid=$!
{
    read -r how <&3 || how=
    case $how in
        immediate) kill -QUIT "$pid" ;;
        fast) kill -INT "$pid" ;;
        *) : >"$dir/orphaned"; kill -INT "$pid" ;;
    esac
} 2>/dev/null &
reader=$!
exec 3<&-
wait "$pid"
status=$?
kill "$reader" 2>/dev/null
if [ -e "$dir/orphaned" ]; then rm -rf "$dir"; fi
exit "$status"
"#;

/// A throwaway PostgreSQL server listening on `127.0.0.1:<port>`; see the module docs.
pub struct PgCluster {
    bin: Binaries,
    /// Runs server commands as `postgres` (the tests run as root).
    as_postgres: bool,
    /// Holds `data/` (the data directory), `postgres.log` and the unix socket.
    dir: tempfile::TempDir,
    port: u16,
    /// The running server, `None` while stopped.
    server: Option<Watchdog>,
}

/// A running server: the watchdog process and the write end of its pipe.
struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
}

/// Where the PostgreSQL binaries are.
#[derive(Clone, Debug)]
struct Binaries {
    bindir: PathBuf,
}

/// An open `psql` session ([`PgCluster::psql_session`]); killed if dropped unfinished.
pub struct PsqlSession {
    child: Child,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl PsqlSession {
    /// Sends `sql` (one or more statements) to the session.
    pub fn write(&mut self, sql: &str) -> anyhow::Result<()> {
        let stdin = self
            .child
            .stdin
            .as_mut()
            .context("the psql session's input is closed")?;
        writeln!(stdin, "{sql}").context("writing to the psql session")?;
        stdin.flush().context("writing to the psql session")
    }

    /// Reads the session's output up to a line that is `line` (what a `SELECT` sent before
    /// printed once it ran): `Err` if the session ends first.
    pub fn wait_for(&mut self, line: &str) -> anyhow::Result<()> {
        use std::io::BufRead as _;
        let mut read = String::new();
        loop {
            read.clear();
            if self.output.read_line(&mut read)? == 0 {
                bail!("the psql session ended before printing {line:?}");
            }
            if read.trim_end() == line {
                return Ok(());
            }
        }
    }

    /// Ends the session (its input closed) and waits for it: `Err` if psql failed.
    pub fn finish(mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        let status = self.child.wait().context("waiting for psql")?;
        if !status.success() {
            bail!("the psql session failed ({status})");
        }
        Ok(())
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Binaries {
    fn tool(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }

    /// `psql` next to the server, else the one on `PATH`.
    fn psql(&self) -> PathBuf {
        let next_to_server = self.tool("psql");
        if next_to_server.is_file() {
            next_to_server
        } else {
            PathBuf::from("psql")
        }
    }
}

/// The directory with the PostgreSQL server binaries (`initdb`, `postgres`, `pg_ctl`), or
/// why there is none.
pub fn server_bindir() -> Result<PathBuf, String> {
    find_binaries().map(|b| b.bindir)
}

fn has_server(dir: &Path) -> bool {
    ["initdb", "postgres", "pg_ctl"]
        .iter()
        .all(|tool| dir.join(tool).is_file())
}

fn find_binaries() -> Result<Binaries, String> {
    let mut looked = Vec::new();
    match Command::new("pg_config").arg("--bindir").output() {
        Ok(out) if out.status.success() => {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if has_server(&dir) {
                return Ok(Binaries { bindir: dir });
            }
            looked.push(format!(
                "`pg_config --bindir` names {}, which has no server binaries",
                dir.display()
            ));
        }
        Ok(out) => looked.push(format!("`pg_config --bindir` failed ({})", out.status)),
        Err(e) => looked.push(format!("no `pg_config` ({e})")),
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(|part| part.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()?;
            let bindir = entry.path().join("bin");
            has_server(&bindir).then_some((version, bindir))
        })
        .collect();
    versions.sort();
    if let Some((_, bindir)) = versions.pop() {
        return Ok(Binaries { bindir });
    }
    looked.push("no /usr/lib/postgresql/<version>/bin with initdb, postgres and pg_ctl".into());
    Err(format!(
        "no PostgreSQL server binaries: {}. Install the server (Debian/Ubuntu: \
         `apt-get install postgresql`; `.ci/run` does this) or put its `pg_config` on PATH",
        looked.join("; ")
    ))
}

/// Whether the effective user is root: from `/proc/self/status`, else `id -u`.
fn running_as_root() -> bool {
    if let Ok(status) = fs::read_to_string("/proc/self/status") {
        if let Some(uids) = status.lines().find_map(|l| l.strip_prefix("Uid:")) {
            // Real, effective, saved, filesystem.
            return uids.split_whitespace().nth(1) == Some("0");
        }
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `s` as one single-quoted shell word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn utf8(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .ok_or_else(|| anyhow!("path {} is not UTF-8", path.display()))
}

fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("binding 127.0.0.1:0 to pick a free port for PostgreSQL")?;
    Ok(listener.local_addr()?.port())
}

/// Whether something accepts TCP connections on `127.0.0.1:port`.
fn accepts_tcp(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

/// Polls `child` until it exits or `timeout` passes.
fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => return None,
        }
    }
}

/// Shutdown modes of [`PgCluster::shut_down`].
#[derive(Clone, Copy, Debug)]
enum Shutdown {
    Fast,
    Immediate,
}

impl PgCluster {
    /// Makes a new cluster (`initdb`) in a temporary directory and starts it on a free
    /// port; returns once it accepts connections.
    pub fn start() -> anyhow::Result<PgCluster> {
        let bin = find_binaries().map_err(|why| anyhow!(why))?;
        let as_postgres = running_as_root();
        if as_postgres {
            let user = Command::new("id").args(["-u", "postgres"]).output();
            if !user.is_ok_and(|out| out.status.success()) {
                bail!(
                    "the tests run as root, which PostgreSQL refuses, and there is no \
                     `postgres` user to run it as: create one (`useradd --system \
                     --user-group postgres`) or run the tests as another user"
                );
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("pgcluster-")
            .tempdir()
            .context("creating a temporary directory for a PostgreSQL cluster")?;
        let mut cluster = PgCluster {
            bin,
            as_postgres,
            dir,
            port: 0,
            server: None,
        };
        fs::File::create(cluster.log_path())
            .with_context(|| format!("creating the server log {}", cluster.log_path().display()))?;
        if as_postgres {
            let out = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(cluster.dir.path())
                .output()
                .context("running chown to give the cluster directory to `postgres`")?;
            if !out.status.success() {
                bail!(
                    "`chown -R postgres {}` failed: {}",
                    cluster.dir.path().display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        cluster.initdb()?;
        let mut attempt = 1;
        loop {
            cluster.port = free_port()?;
            match cluster.start_again() {
                Ok(()) => return Ok(cluster),
                Err(_) if attempt < PORT_ATTEMPTS && cluster.lost_port_race() => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts the stopped server again, on the same data directory and port; returns
    /// once it accepts connections. Does nothing if it is running.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        if self.server.is_some() {
            return Ok(());
        }
        let dir = utf8(self.dir.path())?.to_string();
        let mut argv = vec![
            "/bin/sh".to_string(),
            "-c".into(),
            WATCHDOG.into(),
            "pg-watchdog".into(),
            utf8(&self.bin.tool("postgres"))?.to_string(),
            utf8(&self.data_dir())?.to_string(),
            utf8(&self.log_path())?.to_string(),
            dir.clone(),
            "-p".into(),
            self.port.to_string(),
        ];
        for setting in [
            "listen_addresses=127.0.0.1".to_string(),
            format!("unix_socket_directories={dir}"),
            "fsync=on".into(),
            "synchronous_commit=on".into(),
            "full_page_writes=on".into(),
            "max_connections=200".into(),
        ] {
            argv.push("-c".into());
            argv.push(setting);
        }
        let log = fs::OpenOptions::new()
            .append(true)
            .open(self.log_path())
            .with_context(|| format!("opening the server log {}", self.log_path().display()))?;
        let child = self
            .server_command(&argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawning the PostgreSQL watchdog shell (/bin/sh)")?;
        let mut watchdog = Watchdog { pipe: None, child };
        watchdog.pipe = watchdog.child.stdin.take();
        self.server = Some(watchdog);
        self.wait_ready()
    }

    /// Stops the server with a fast shutdown (open sessions are cut, committed work is
    /// kept) and returns once its port refuses connections. Does nothing if it is stopped.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.shut_down(Shutdown::Fast)
    }

    /// Stops the server with an immediate shutdown (like a crash: no checkpoint; the next
    /// start recovers from the WAL) and returns once its port refuses connections.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.shut_down(Shutdown::Immediate)
    }

    /// [`PgCluster::stop`] then [`PgCluster::start_again`].
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        self.start_again()
    }

    /// Whether the server is running (not stopped or killed through this value).
    pub fn is_running(&self) -> bool {
        self.server.is_some()
    }

    /// The TCP port on 127.0.0.1, the same across stops and starts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the data directory, the log and the unix socket.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// `postgres://postgres@127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `name` (ASCII letters, digits, `_` and `-`, at most 63 bytes)
    /// and returns its URL.
    pub fn create_database(&self, name: &str) -> anyhow::Result<String> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with('-')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            bail!(
                "database name {name:?} is not 1 to 63 ASCII letters, digits, `_` or `-` \
                 (not starting with `-`)"
            );
        }
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""))
            .with_context(|| format!("creating database {name}"))?;
        Ok(self.url(name))
    }

    /// Creates a database with a name unique in this process, `<prefix>_<pid>_<n>`
    /// (the prefix lowercased, other characters than letters, digits and `_` made `_`),
    /// and returns its URL.
    pub fn fresh_database(&self, prefix: &str) -> anyhow::Result<String> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let prefix: String = prefix
            .chars()
            .take(32)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.create_database(&format!("{prefix}_{}_{n}", std::process::id()))
    }

    /// Runs `sql` with `psql` in database `db` as `postgres`, stopping at the first
    /// error; returns the output (tuples only, unaligned: one row per line, columns
    /// separated by `|`).
    pub fn psql(&self, db: &str, sql: &str) -> anyhow::Result<String> {
        let psql = self.bin.psql();
        let out = Command::new(&psql)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(format!("{}?connect_timeout=5", self.url(db)))
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", psql.display()))?;
        if !out.status.success() {
            bail!(
                "psql on {} ({}) failed: {}\nSQL: {sql}",
                self.url(db),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// An open `psql` session in database `db` (as `postgres`), for a test that holds a
    /// transaction open while the host works: statements are sent with
    /// [`PsqlSession::write`] and run as they arrive.
    pub fn psql_session(&self, db: &str) -> anyhow::Result<PsqlSession> {
        let psql = self.bin.psql();
        let mut child = Command::new(&psql)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(format!("{}?connect_timeout=5", self.url(db)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", psql.display()))?;
        let output = child
            .stdout
            .take()
            .map(std::io::BufReader::new)
            .context("the psql session has no output")?;
        Ok(PsqlSession { child, output })
    }

    /// The last `lines` lines of the server log (or why it cannot be read).
    pub fn log_tail(&self, lines: usize) -> String {
        match fs::read(self.log_path()) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log_path().display()),
        }
    }

    /// The one cluster of this test binary, started on first use and stopped when the
    /// process exits (by its watchdog: statics are never dropped). Use
    /// [`require_postgres`] in tests, which also applies the availability policy.
    pub fn shared() -> anyhow::Result<&'static PgCluster> {
        static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| PgCluster::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|why| anyhow!("the shared PostgreSQL cluster did not start: {why}"))
    }

    /// `argv` as a command run as `postgres` when the tests run as root (through `su`),
    /// else as is; in the cluster directory either way.
    fn server_command(&self, argv: &[String]) -> Command {
        let mut command = if self.as_postgres {
            let line = argv
                .iter()
                .map(|arg| sh_quote(arg))
                .collect::<Vec<_>>()
                .join(" ");
            let mut su = Command::new("su");
            su.args(["postgres", "-s", "/bin/sh", "-c"])
                .arg(format!("exec {line}"));
            su
        } else {
            let mut direct = Command::new(&argv[0]);
            direct.args(&argv[1..]);
            direct
        };
        command.current_dir(self.dir.path());
        command
    }

    fn initdb(&self) -> anyhow::Result<()> {
        let argv = [
            utf8(&self.bin.tool("initdb"))?.to_string(),
            "-D".into(),
            utf8(&self.data_dir())?.to_string(),
            "-U".into(),
            "postgres".into(),
            "--auth=trust".into(),
            "--encoding=UTF8".into(),
            "--locale=C".into(),
            "--no-sync".into(),
        ];
        let out = self
            .server_command(&argv)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", argv[0]))?;
        if !out.status.success() {
            let hint = if self.as_postgres {
                "\n(running as root, so initdb ran as `postgres`: every parent of the \
                 cluster directory must be searchable by that user; point TMPDIR at one \
                 that is, e.g. /tmp)"
            } else {
                ""
            };
            bail!(
                "initdb of {} failed ({}):\n{}\n{}{hint}",
                self.data_dir().display(),
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim(),
            );
        }
        Ok(())
    }

    /// Waits until the server answers `SELECT 1`; on failure stops it again.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let Some(server) = self.server.as_mut() else {
                bail!("the server is not running");
            };
            if let Ok(Some(status)) = server.child.try_wait() {
                self.server = None;
                bail!(
                    "PostgreSQL exited while starting on port {} ({status}); log {}:\n{}",
                    self.port,
                    self.log_path().display(),
                    self.log_tail(LOG_TAIL_LINES)
                );
            }
            if accepts_tcp(self.port) && self.psql("postgres", "SELECT 1").is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tail = self.log_tail(LOG_TAIL_LINES);
                let _ = self.shut_down(Shutdown::Immediate);
                bail!(
                    "PostgreSQL did not accept connections on 127.0.0.1:{} within {}s; log {}:\n{tail}",
                    self.port,
                    READY_TIMEOUT.as_secs(),
                    self.log_path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the last start failed because another process took the port.
    fn lost_port_race(&self) -> bool {
        let tail = self.log_tail(LOG_TAIL_LINES);
        tail.contains("Address already in use") || tail.contains("could not bind")
    }

    fn shut_down(&mut self, mode: Shutdown) -> anyhow::Result<()> {
        let Some(mut server) = self.server.take() else {
            return Ok(());
        };
        let line = match mode {
            Shutdown::Fast => "fast\n",
            Shutdown::Immediate => "immediate\n",
        };
        if let Some(mut pipe) = server.pipe.take() {
            // A failed write means the watchdog is already gone, which the wait shows.
            let _ = pipe.write_all(line.as_bytes());
        }
        if wait_bounded(&mut server.child, STOP_TIMEOUT).is_none() {
            self.force_stop(&mut server);
            bail!(
                "PostgreSQL on port {} did not finish a {mode:?} shutdown within {}s and was \
                 stopped with `pg_ctl stop -m immediate`; log {}:\n{}",
                self.port,
                STOP_TIMEOUT.as_secs(),
                self.log_path().display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while accepts_tcp(self.port) {
            if Instant::now() >= deadline {
                bail!(
                    "PostgreSQL stopped, but 127.0.0.1:{} still accepts connections (another \
                     process took the port?)",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Last resort when the watchdog does not stop the server: `pg_ctl stop -m
    /// immediate`, then killing the watchdog.
    fn force_stop(&self, server: &mut Watchdog) {
        if let (Ok(pg_ctl), Ok(data)) = (utf8(&self.bin.tool("pg_ctl")), utf8(&self.data_dir())) {
            let argv = [
                pg_ctl,
                "-D",
                data,
                "stop",
                "-m",
                "immediate",
                "-w",
                "-t",
                "10",
            ]
            .map(String::from);
            let _ = self
                .server_command(&argv)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if wait_bounded(&mut server.child, Duration::from_secs(10)).is_none() {
            let _ = server.child.kill();
            let _ = server.child.wait();
        }
    }
}

impl Drop for PgCluster {
    /// Stops the server (fast shutdown, forced after a while) and removes the directory.
    fn drop(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        if std::thread::panicking() {
            let _ = writeln!(
                std::io::stderr(),
                "--- PostgreSQL log of the cluster on port {} (last {LOG_TAIL_LINES} lines) ---\n{}\n---",
                self.port,
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        // End of input: the watchdog stops the server and removes the directory.
        drop(server.pipe.take());
        if wait_bounded(&mut server.child, DROP_TIMEOUT).is_none() {
            self.force_stop(&mut server);
        }
    }
}

/// [`crate::harness::skip_or_fail`] for PostgreSQL.
fn skip_or_fail<T>(why: &str) -> Option<T> {
    crate::harness::skip_or_fail("PostgreSQL", why)
}

/// The shared cluster of this test binary ([`PgCluster::shared`]), for tests that need a
/// database: `let Some(pg) = require_postgres() else { return };` then
/// [`PgCluster::fresh_database`]. `None` (after a skip notice) when no PostgreSQL server
/// is installed, except under `CI=true`, where that panics. Panics when the server is
/// installed but does not start.
pub fn require_postgres() -> Option<&'static PgCluster> {
    if let Err(why) = server_bindir() {
        return skip_or_fail(&why);
    }
    match PgCluster::shared() {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("{e:#}"),
    }
}

/// Whether the PostgreSQL server binaries are installed, under the same policy as
/// [`require_postgres`]: `false` after a skip notice, or a panic under `CI=true`. For tests
/// that start servers in other ways, e.g. in a child process.
pub fn require_server_binaries() -> bool {
    match server_bindir() {
        Ok(_) => true,
        Err(why) => skip_or_fail::<()>(&why).is_some(),
    }
}

/// A private cluster ([`PgCluster::start`]) for tests that stop, kill or restart it,
/// under the same policy as [`require_postgres`].
pub fn require_own_postgres() -> Option<PgCluster> {
    if let Err(why) = server_bindir() {
        return skip_or_fail(&why);
    }
    match PgCluster::start() {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("starting a PostgreSQL cluster: {e:#}"),
    }
}
