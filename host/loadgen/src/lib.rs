//! A closed-loop load generator for the benchmarks: `conns` workers, each with its own
//! HTTP/1.1 keep-alive connection (or its own in-process task), send requests back to
//! back until a request budget or a time budget runs out. Every answer is checked; only
//! checked answers count and are timed, so a fast stream of errors never looks like
//! throughput.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;

/// How many distinct errors a run keeps to print.
const ERROR_SAMPLES: usize = 5;

/// How much load one run applies.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Concurrent connections (or tasks).
    pub conns: usize,
    /// Requests in all, across connections.
    pub max_requests: u64,
    /// Wall-clock budget.
    pub max_time: Duration,
}

/// Which request a worker is about to send.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    /// The worker (connection) index, `0..conns`.
    pub conn: usize,
    /// The request number across the run, `0..max_requests`, each used once.
    pub n: u64,
}

/// Builds the request for an attempt.
pub type MakeRequest = Arc<dyn Fn(Attempt) -> Request<Full<Bytes>> + Send + Sync>;
/// Whether an answer is the expected one.
pub type Check = fn(StatusCode, &[u8]) -> bool;

/// What a run measured.
#[derive(Debug, Default)]
pub struct Run {
    /// Checked answers.
    pub ok: u64,
    /// Failed requests and unexpected answers.
    pub errors: u64,
    pub elapsed: Duration,
    /// Latencies of the checked answers, nanoseconds.
    pub latencies: Vec<u64>,
    /// Distinct error descriptions (a few).
    pub error_samples: Vec<String>,
}

impl Run {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.error_samples.len() < ERROR_SAMPLES && !self.error_samples.contains(&what) {
            self.error_samples.push(what);
        }
    }

    /// Adds `other`'s counts, latencies and samples (elapsed times add up too).
    pub fn absorb(&mut self, other: Run) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        for e in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES && !self.error_samples.contains(&e) {
                self.error_samples.push(e);
            }
        }
    }

    /// Checked answers per second.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile (0.0..=1.0) of the checked answers' latency.
    pub fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let i = ((sorted.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        Duration::from_nanos(sorted[i])
    }

    /// One machine-readable line for a headline figure, read by `bench/table.py`:
    /// `@result <key> rate=… p50_us=… p99_us=… errors=…`.
    pub fn emit(&self, key: &str) {
        println!(
            "@result {key} rate={:.1} p50_us={:.1} p99_us={:.1} errors={}",
            self.rate(),
            self.percentile(0.50).as_secs_f64() * 1e6,
            self.percentile(0.99).as_secs_f64() * 1e6,
            self.errors
        );
    }

    /// One line: rate, p50, p99, counts, then the error samples.
    pub fn print(&self, label: &str, unit: &str) {
        println!(
            "  {label}: {:.0} {unit}/s, p50 {}, p99 {}, ok {}, errors {}, {:.2} s",
            self.rate(),
            ms(self.percentile(0.50)),
            ms(self.percentile(0.99)),
            self.ok,
            self.errors,
            self.elapsed.as_secs_f64()
        );
        for e in &self.error_samples {
            println!("    error: {e}");
        }
    }
}

/// `d` in milliseconds, three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Whether `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The number in environment variable `name`, or `default` when it is unset.
pub fn env_num(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("{name}={v} is not a number")),
        Err(_) => Ok(default),
    }
}

/// CPU time (user + system) this process's threads have used so far, summed by thread name
/// (`/proc/self/task/*/stat`; Linux only, empty elsewhere). Two readings around a run say
/// where its CPU went: the server's workers, the load generator, the store's writer, an
/// exporter's thread. Threads that ended between the readings are not counted.
pub fn thread_cpu() -> std::collections::BTreeMap<String, Duration> {
    // `utime` and `stime` are in USER_HZ ticks, 100 per second on Linux.
    const TICK: Duration = Duration::from_millis(10);
    let mut by_name = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid … utime stime …`: comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            *by_name
                .entry(stat[open + 1..close].to_string())
                .or_insert(Duration::ZERO) += TICK * (user + system);
        }
    }
    by_name
}

/// The CPU each thread name used between two [`thread_cpu`] readings, in µs per `per`
/// (calls, requests), largest first: `server 41.2, load 12.0, …`.
pub fn cpu_per(
    before: &std::collections::BTreeMap<String, Duration>,
    after: &std::collections::BTreeMap<String, Duration>,
    per: u64,
) -> String {
    let mut used: Vec<(&String, f64)> = after
        .iter()
        .map(|(name, t)| {
            let spent = t.saturating_sub(before.get(name).copied().unwrap_or_default());
            (name, spent.as_secs_f64() * 1e6 / per.max(1) as f64)
        })
        .filter(|(_, us)| *us > 0.0)
        .collect();
    used.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = used.iter().map(|(_, us)| us).sum();
    let parts: Vec<String> = used
        .iter()
        .map(|(name, us)| format!("{name} {us:.1}"))
        .collect();
    format!("{total:.1} ({})", parts.join(", "))
}

/// `/proc/loadavg`'s first three fields, or `?`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// The next request number, or `None` when the run is over.
fn next(issued: &AtomicU64, limits: Limits, deadline: Instant) -> Option<u64> {
    if Instant::now() >= deadline {
        return None;
    }
    let n = issued.fetch_add(1, Ordering::Relaxed);
    (n < limits.max_requests).then_some(n)
}

async fn http_worker(
    addr: SocketAddr,
    conn: usize,
    issued: Arc<AtomicU64>,
    limits: Limits,
    deadline: Instant,
    make: MakeRequest,
    check: Check,
) -> Run {
    let mut out = Run::default();
    let mut sender: Option<Sender> = None;
    while let Some(n) = next(&issued, limits, deadline) {
        let s = match sender.as_mut() {
            Some(s) => s,
            None => match connect(addr).await {
                Ok(s) => sender.insert(s),
                Err(e) => {
                    out.error(format!("connect: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let request = make(Attempt { conn, n });
        let started = Instant::now();
        let answer = async {
            s.ready().await?;
            let response = s.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        }
        .await;
        let took = started.elapsed();
        match answer {
            Ok((status, body)) if check(status, &body) => {
                out.ok += 1;
                out.latencies.push(took.as_nanos() as u64);
            }
            Ok((status, body)) => {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                out.error(format!("{status} {text}"));
            }
            Err(e) => {
                out.error(format!("transport: {e}"));
                sender = None;
            }
        }
    }
    out
}

/// Runs one closed-loop load over HTTP/1.1; connection `c` goes to `targets[c % len]`.
pub async fn http(targets: &[SocketAddr], limits: Limits, make: MakeRequest, check: Check) -> Run {
    let mut result = Run::default();
    if targets.is_empty() {
        result.error("no target to send load to".into());
        return result;
    }
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + limits.max_time;
    let tasks: Vec<_> = (0..limits.conns)
        .map(|conn| {
            tokio::spawn(http_worker(
                targets[conn % targets.len()],
                conn,
                issued.clone(),
                limits,
                deadline,
                make.clone(),
                check,
            ))
        })
        .collect();
    collect(tasks, &mut result).await;
    result.elapsed = started.elapsed();
    result
}

/// Runs a closed loop of `limits.conns` concurrent in-process tasks (no HTTP): each
/// attempt is one call of `f`; an `Err` is counted and sampled with its causes.
pub async fn in_process<F, Fut>(limits: Limits, f: F) -> Run
where
    F: Fn(Attempt) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let f = Arc::new(f);
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + limits.max_time;
    let tasks: Vec<_> = (0..limits.conns)
        .map(|conn| {
            let f = f.clone();
            let issued = issued.clone();
            tokio::spawn(async move {
                let mut out = Run::default();
                while let Some(n) = next(&issued, limits, deadline) {
                    let t = Instant::now();
                    match f(Attempt { conn, n }).await {
                        Ok(()) => {
                            out.ok += 1;
                            out.latencies.push(t.elapsed().as_nanos() as u64);
                        }
                        Err(e) => out.error(format!("{e:#}")),
                    }
                }
                out
            })
        })
        .collect();
    let mut result = Run::default();
    collect(tasks, &mut result).await;
    result.elapsed = started.elapsed();
    result
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Run>>, into: &mut Run) {
    for t in tasks {
        match t.await {
            Ok(mut out) => {
                out.elapsed = Duration::ZERO;
                into.absorb(out);
            }
            Err(e) => into.error(format!("worker failed: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_rates() {
        let run = Run {
            ok: 4,
            elapsed: Duration::from_secs(2),
            latencies: vec![40, 10, 30, 20],
            ..Run::default()
        };
        assert_eq!(run.rate(), 2.0);
        assert_eq!(run.percentile(0.0), Duration::from_nanos(10));
        assert_eq!(run.percentile(1.0), Duration::from_nanos(40));
        assert_eq!(run.percentile(0.5), Duration::from_nanos(30));
        assert_eq!(Run::default().percentile(0.5), Duration::ZERO);
    }

    #[tokio::test]
    async fn in_process_stops_at_the_request_budget_and_counts_errors() {
        let limits = Limits {
            conns: 3,
            max_requests: 10,
            max_time: Duration::from_secs(10),
        };
        let run = in_process(limits, |a: Attempt| async move {
            if a.n.is_multiple_of(5) {
                Err(anyhow::anyhow!("failed {}", a.n % 2))
            } else {
                Ok(())
            }
        })
        .await;
        assert_eq!(run.ok + run.errors, 10);
        assert_eq!(run.errors, 2);
        assert_eq!(run.error_samples.len(), 2);
        assert_eq!(run.latencies.len(), 8);
    }

    #[tokio::test]
    async fn http_checks_every_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        |req: Request<hyper::body::Incoming>| async move {
                            let status = if req.uri().path() == "/bad" { 500 } else { 200 };
                            http::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from_static(b"ok")))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let make: MakeRequest = Arc::new(|a: Attempt| {
            let path = if a.n.is_multiple_of(4) {
                "/bad"
            } else {
                "/good"
            };
            Request::get(path)
                .header("host", "127.0.0.1")
                .body(Full::new(Bytes::new()))
                .unwrap()
        });
        let limits = Limits {
            conns: 2,
            max_requests: 20,
            max_time: Duration::from_secs(10),
        };
        let run = http(&[addr], limits, make, |s, b| {
            s == StatusCode::OK && b == b"ok"
        })
        .await;
        assert_eq!(run.ok, 15);
        assert_eq!(run.errors, 5);
        assert!(run.error_samples[0].starts_with("500"));
    }
}
