//! A closed-loop load generator for MCP `tools/call`, for the peer whose HTTP transport `wrk`
//! cannot drive: MCP's older HTTP+SSE transport (protocol 2024-11-05), where a client opens
//! `GET /sse`, is told where to POST (`event: endpoint`), and every answer arrives as an
//! `event: message` on that stream while the POST itself only gets `202 Accepted`. Timing the
//! POST alone would time a queue, not a call, so each worker here POSTs a call and waits for
//! the answer with its id on its stream before sending the next.
//!
//! The same program drives a plain POST endpoint (one request, one answer: this host's
//! stateless MCP endpoint) with the same workers and the same clock, so a server on the older
//! transport is compared with this host by one generator, as the other peers are by `wrk`.
//!
//! ```text
//! mcp-load sse  --base http://127.0.0.1:9001 --tool NAME --args '{"message":"hi"}' \
//!               --expect 'hi' [--conns 32] [--threads 2] [--seconds 5]
//! mcp-load post --base http://127.0.0.1:8080 --path /mcp/agents/a1 \
//!               --header 'Authorization: Bearer …' … --body '{…}' --expect '…' [--status 200]
//! ```
//!
//! Every answer is checked (its status, the JSON-RPC id, no `error`, the `--expect` text);
//! it prints one line in the shape `bench/peers/wrk_request.lua` prints:
//! `@load requests=N duration_us=N p50_us=N p90_us=N p99_us=N max_us=N errors=N unexpected=N`
//! where errors are transport failures and timeouts (a worker stops at its first) and
//! unexpected the answers that failed a check.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Barrier;

/// How long one call may take before it counts as an error (wrk's `--timeout 10s`).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

struct Options {
    mode: Mode,
    addr: SocketAddr,
    host: String,
    conns: usize,
    threads: usize,
    seconds: u64,
    expect: String,
}

enum Mode {
    /// The HTTP+SSE transport: the tool's name, its arguments, the protocol version offered.
    Sse {
        tool: String,
        args: serde_json::Value,
        protocol: String,
    },
    /// One POST, one answer.
    Post {
        path: String,
        headers: Vec<(String, String)>,
        body: Bytes,
        status: u16,
    },
}

const USAGE: &str = "usage: mcp-load sse --base URL --tool NAME --args JSON --expect TEXT \
[--protocol 2024-11-05] [--conns 32] [--threads 2] [--seconds 5]\n       mcp-load post --base URL \
--path PATH [--header 'Name: value']... --body TEXT --expect TEXT [--status 200] [--conns 32] \
[--threads 2] [--seconds 5]";

fn parse_options() -> anyhow::Result<Options> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let (mut base, mut tool, mut call_args, mut expect) = (None, None, None, None);
    let (mut path, mut body, mut headers) = (None, None, Vec::new());
    let (mut protocol, mut status) = ("2024-11-05".to_string(), 200u16);
    let (mut conns, mut threads, mut seconds) = (32usize, 2usize, 5u64);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = |what: &str| -> anyhow::Result<u64> {
            value
                .parse()
                .with_context(|| format!("{what} {value}: expected a whole number"))
        };
        match flag.as_str() {
            "--base" => base = Some(value),
            "--tool" => tool = Some(value),
            "--args" => {
                call_args = Some(
                    serde_json::from_str(&value)
                        .with_context(|| format!("--args {value}: not JSON"))?,
                )
            }
            "--expect" => expect = Some(value),
            "--protocol" => protocol = value,
            "--path" => path = Some(value),
            "--body" => body = Some(value),
            "--header" => {
                let (name, v) = value
                    .split_once(':')
                    .with_context(|| format!("--header {value}: expected 'Name: value'"))?;
                headers.push((name.trim().to_string(), v.trim().to_string()));
            }
            "--status" => status = number("--status")? as u16,
            "--conns" => conns = number("--conns")? as usize,
            "--threads" => threads = number("--threads")? as usize,
            "--seconds" => seconds = number("--seconds")?,
            _ => bail!("unknown option {flag}\n{USAGE}"),
        }
    }
    let base = base.with_context(|| format!("--base is required\n{USAGE}"))?;
    let host = base
        .strip_prefix("http://")
        .with_context(|| format!("--base {base}: expected http://HOST:PORT"))?
        .trim_end_matches('/')
        .to_string();
    let addr: SocketAddr = host
        .parse()
        .with_context(|| format!("--base {base}: expected an IP address and port"))?;
    let expect = expect.with_context(|| format!("--expect is required\n{USAGE}"))?;
    if conns == 0 || threads == 0 || seconds == 0 {
        bail!("--conns, --threads and --seconds must be at least 1");
    }
    let mode = match mode.as_str() {
        "sse" => Mode::Sse {
            tool: tool.with_context(|| format!("sse needs --tool\n{USAGE}"))?,
            args: call_args.unwrap_or_else(|| serde_json::json!({})),
            protocol,
        },
        "post" => Mode::Post {
            path: path.with_context(|| format!("post needs --path\n{USAGE}"))?,
            headers,
            body: Bytes::from(body.with_context(|| format!("post needs --body\n{USAGE}"))?),
            status,
        },
        _ => bail!("{USAGE}"),
    };
    Ok(Options {
        mode,
        addr,
        host,
        conns,
        threads,
        seconds,
        expect,
    })
}

/// One worker's figures.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    unexpected: u64,
    errors: u64,
    started: Option<Instant>,
    ended: Option<Instant>,
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP/1.1 handshake")?;
    tokio::spawn(connection);
    Ok(sender)
}

/// Sends one request and reads its whole answer.
async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    sender.ready().await.context("connection closed")?;
    let answer = sender.send_request(request).await.context("request")?;
    let status = answer.status();
    let body = answer.into_body().collect().await.context("answer body")?;
    Ok((status, body.to_bytes()))
}

/// The events of an SSE answer, one `(event, data)` at a time; comments and pings skipped.
struct Events {
    body: Incoming,
    buf: Vec<u8>,
}

impl Events {
    async fn next(&mut self) -> anyhow::Result<(String, String)> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&raw);
                let (mut event, mut data) = (String::from("message"), String::new());
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        if !data.is_empty() {
                            data.push('\n');
                        }
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if !data.is_empty() {
                    return Ok((event, data));
                }
                continue;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend(data.iter().filter(|&&b| b != b'\r'));
                    }
                }
                Some(Err(e)) => return Err(e).context("event stream"),
                None => bail!("the event stream ended"),
            }
        }
    }

    /// The next `message` event that answers request `id`.
    async fn answer(&mut self, id: u64) -> anyhow::Result<(serde_json::Value, String)> {
        loop {
            let (event, data) = self.next().await?;
            if event != "message" {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(&data)
                .with_context(|| format!("an event that is not JSON: {data}"))?;
            if value.get("id").and_then(|v| v.as_u64()) == Some(id) {
                return Ok((value, data));
            }
        }
    }
}

/// An HTTP+SSE session: the event stream, the POST connection and the path to POST to.
struct SseSession {
    events: Events,
    post: SendRequest<Full<Bytes>>,
    endpoint: String,
    host: String,
}

impl SseSession {
    async fn open(o: &Options, protocol: &str) -> anyhow::Result<Self> {
        let mut stream = connect(o.addr).await?;
        let request = Request::get("/sse")
            .header("host", &o.host)
            .header("accept", "text/event-stream")
            .body(Full::new(Bytes::new()))?;
        stream.ready().await?;
        let answer = stream.send_request(request).await.context("GET /sse")?;
        if answer.status() != StatusCode::OK {
            bail!("GET /sse answered {}", answer.status());
        }
        // The stream's connection stays open as long as `events` reads it.
        let mut events = Events {
            body: answer.into_body(),
            buf: Vec::new(),
        };
        let (event, endpoint) = events.next().await?;
        if event != "endpoint" {
            bail!("the event stream began with `{event}`, not `endpoint`");
        }
        let mut session = SseSession {
            events,
            post: connect(o.addr).await?,
            endpoint,
            host: o.host.clone(),
        };
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": protocol, "capabilities": {},
                       "clientInfo": {"name": "mcp-load", "version": "0"}}});
        session.post_message(&init).await?;
        let (answer, data) = session.events.answer(0).await?;
        if answer.get("result").is_none() {
            bail!("initialize failed: {data}");
        }
        session
            .post_message(&serde_json::json!({"jsonrpc": "2.0",
                "method": "notifications/initialized"}))
            .await?;
        Ok(session)
    }

    async fn post_message(&mut self, message: &serde_json::Value) -> anyhow::Result<()> {
        let request = Request::post(&self.endpoint)
            .header("host", &self.host)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(message.to_string())))?;
        let (status, body) = send(&mut self.post, request).await?;
        if !status.is_success() {
            bail!(
                "POST {} answered {status}: {}",
                self.endpoint,
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }
}

async fn sse_worker(o: Arc<Options>, start: Arc<Barrier>) -> Tally {
    let mut tally = Tally::default();
    let Mode::Sse {
        tool,
        args,
        protocol,
    } = &o.mode
    else {
        return tally;
    };
    let session = SseSession::open(&o, protocol).await;
    start.wait().await;
    let mut session = match session {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-load: opening a session: {e:#}");
            tally.errors += 1;
            return tally;
        }
    };
    let began = Instant::now();
    tally.started = Some(began);
    let deadline = began + Duration::from_secs(o.seconds);
    let mut id = 0u64;
    while Instant::now() < deadline {
        id += 1;
        let call = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}});
        let sent = Instant::now();
        let round_trip = async {
            session.post_message(&call).await?;
            session.events.answer(id).await
        };
        match tokio::time::timeout(CALL_TIMEOUT, round_trip).await {
            Ok(Ok((answer, data))) => {
                tally.latencies_us.push(elapsed_us(sent));
                let failed = answer.get("error").is_some()
                    || answer.pointer("/result/isError") == Some(&serde_json::Value::Bool(true));
                if failed || !data.contains(&o.expect) {
                    tally.unexpected += 1;
                }
            }
            Ok(Err(e)) => {
                eprintln!("mcp-load: call {id}: {e:#}");
                tally.errors += 1;
                break;
            }
            Err(_) => {
                eprintln!("mcp-load: call {id}: no answer within {CALL_TIMEOUT:?}");
                tally.errors += 1;
                break;
            }
        }
    }
    tally.ended = Some(Instant::now());
    tally
}

async fn post_worker(o: Arc<Options>, start: Arc<Barrier>) -> Tally {
    let mut tally = Tally::default();
    let Mode::Post {
        path,
        headers,
        body,
        status,
    } = &o.mode
    else {
        return tally;
    };
    let sender = connect(o.addr).await;
    start.wait().await;
    let mut sender = match sender {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-load: {e:#}");
            tally.errors += 1;
            return tally;
        }
    };
    let began = Instant::now();
    tally.started = Some(began);
    let deadline = began + Duration::from_secs(o.seconds);
    while Instant::now() < deadline {
        let mut request = Request::post(path.as_str()).header("host", &o.host);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = match request.body(Full::new(body.clone())) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("mcp-load: the request: {e}");
                tally.errors += 1;
                break;
            }
        };
        let sent = Instant::now();
        match tokio::time::timeout(CALL_TIMEOUT, send(&mut sender, request)).await {
            Ok(Ok((got, answer))) => {
                tally.latencies_us.push(elapsed_us(sent));
                let text = String::from_utf8_lossy(&answer);
                if got.as_u16() != *status || !text.contains(&o.expect) {
                    tally.unexpected += 1;
                }
            }
            Ok(Err(e)) => {
                eprintln!("mcp-load: {e:#}");
                tally.errors += 1;
                break;
            }
            Err(_) => {
                eprintln!("mcp-load: no answer within {CALL_TIMEOUT:?}");
                tally.errors += 1;
                break;
            }
        }
    }
    tally.ended = Some(Instant::now());
    tally
}

fn elapsed_us(since: Instant) -> u32 {
    u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX)
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    let o = Arc::new(parse_options()?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.threads)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let tallies = runtime.block_on(async {
        let start = Arc::new(Barrier::new(o.conns));
        let workers: Vec<_> = (0..o.conns)
            .map(|_| {
                let (o, start) = (o.clone(), start.clone());
                tokio::spawn(async move {
                    match o.mode {
                        Mode::Sse { .. } => sse_worker(o, start).await,
                        Mode::Post { .. } => post_worker(o, start).await,
                    }
                })
            })
            .collect();
        let mut tallies = Vec::new();
        for worker in workers {
            tallies.push(worker.await.context("a worker panicked")?);
        }
        anyhow::Ok(tallies)
    })?;
    let started = tallies.iter().filter_map(|t| t.started).min();
    let ended = tallies.iter().filter_map(|t| t.ended).max();
    let duration_us = match (started, ended) {
        (Some(s), Some(e)) => e.duration_since(s).as_micros(),
        _ => 0,
    };
    let mut all: Vec<u32> = tallies
        .iter()
        .flat_map(|t| t.latencies_us.iter().copied())
        .collect();
    all.sort_unstable();
    println!(
        "@load requests={} duration_us={duration_us} p50_us={} p90_us={} p99_us={} max_us={} \
         errors={} unexpected={}",
        all.len(),
        percentile(&all, 50.0),
        percentile(&all, 90.0),
        percentile(&all, 99.0),
        all.last().copied().unwrap_or(0),
        tallies.iter().map(|t| t.errors).sum::<u64>(),
        tallies.iter().map(|t| t.unexpected).sum::<u64>(),
    );
    Ok(())
}
