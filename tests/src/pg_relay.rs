//! A relay between a PostgreSQL client and server that reads what the client sends, so a
//! test can count what an operation costs the database: the statements it runs and the
//! round trips they take.
//!
//! A *flight* is what the client sends before it next hears from the server: one round
//! trip. Statements the client pipelines (sends without waiting for the answers of those
//! before) share a flight. The relay holds each answer back for a latency of its own, as
//! a network would, so that statements a client pipelines in several writes (its threads
//! scheduled in between) still reach the relay before any answer can have reached the
//! client. It reads the frontend protocol only as far as naming the statements: each
//! `Bind` (by its prepared statement's SQL) and each simple `Query`. It needs a client
//! that does not ask for TLS (`NoTls`, or `sslmode=disable`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The statements of one flight (their SQL), in the order sent; empty when the flight
/// only prepared statements.
pub type Flight = Vec<String>;

/// Every flight of every connection through the relay, in the order they started.
type FlightLog = Arc<Mutex<Vec<Flight>>>;

/// A relay on a free port of 127.0.0.1 to a PostgreSQL server on 127.0.0.1; it stops
/// accepting when dropped.
pub struct PgRelay {
    port: u16,
    server_port: u16,
    flights: FlightLog,
    accepting: tokio::task::JoinHandle<()>,
}

impl PgRelay {
    /// Relays each connection it accepts to the server on 127.0.0.1:`server_port`,
    /// holding each answer back for `latency`.
    pub async fn start(server_port: u16, latency: Duration) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let flights = FlightLog::default();
        let log = Arc::clone(&flights);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await {
                        relay(client, server, latency, log).await;
                    }
                });
            }
        });
        Ok(Self {
            port,
            server_port,
            flights,
            accepting,
        })
    }

    /// `url`, a URL of the relayed server, made to connect through the relay.
    pub fn url(&self, url: &str) -> String {
        url.replacen(
            &format!(":{}/", self.server_port),
            &format!(":{}/", self.port),
            1,
        )
    }

    /// Where the flights sent from now on start ([`PgRelay::since`]).
    pub fn mark(&self) -> usize {
        self.log().len()
    }

    /// The flights sent since `mark`.
    pub fn since(&self, mark: usize) -> Vec<Flight> {
        self.log().get(mark..).unwrap_or_default().to_vec()
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Vec<Flight>> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for PgRelay {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies both ways between `client` and `server` until either side closes, logging the
/// client's flights and holding the server's answers back for `latency`.
async fn relay(client: TcpStream, server: TcpStream, latency: Duration, log: FlightLog) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // Whether the client may have heard from the server since its last bytes: its next
    // bytes start a flight.
    let heard = AtomicBool::new(true);
    let up = async {
        let mut reader = Frontend::default();
        let mut flight = 0;
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf).await {
            let ran = reader.read(&buf[..n]);
            {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                if heard.swap(false, Ordering::SeqCst) {
                    log.push(Vec::new());
                    flight = log.len() - 1;
                }
                log[flight].extend(ran);
            }
            if to_server.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = to_server.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from_server.read(&mut buf).await {
            tokio::time::sleep(latency).await;
            // Set before the client can have it, so its answer starts a new flight.
            heard.store(true, Ordering::SeqCst);
            if to_client.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = to_client.shutdown().await;
    };
    futures::join!(up, down);
}

/// The frontend protocol's messages, as far as the statements they run.
#[derive(Default)]
struct Frontend {
    /// Bytes of a message not complete yet.
    pending: Vec<u8>,
    /// Whether the startup message (the one without a type byte) has gone by.
    started: bool,
    /// Prepared statements' SQL by name (`""`: the unnamed one).
    prepared: HashMap<String, String>,
}

impl Frontend {
    /// The statements run by the messages `bytes` completes: the SQL of each `Bind` and
    /// `Query`, in order.
    fn read(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut ran = Vec::new();
        loop {
            // A message: a type byte (none for the startup message), then its length,
            // which counts itself but not the type byte.
            let at = usize::from(self.started);
            let Some(length) = self.pending.get(at..at + 4) else {
                break;
            };
            let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]);
            let end = at + length as usize;
            if self.pending.len() < end || end < at + 4 {
                break;
            }
            let message: Vec<u8> = self.pending.drain(..end).collect();
            if !self.started {
                self.started = true;
                continue;
            }
            let mut fields = message[5..].split(|b| *b == 0).map(String::from_utf8_lossy);
            match message[0] {
                b'P' => {
                    let name = fields.next().unwrap_or_default().into_owned();
                    let sql = fields.next().unwrap_or_default().into_owned();
                    self.prepared.insert(name, sql);
                }
                b'B' => {
                    let _portal = fields.next();
                    let name = fields.next().unwrap_or_default();
                    let sql = self.prepared.get(name.as_ref()).cloned();
                    ran.push(sql.unwrap_or_else(|| format!("(statement {name})")));
                }
                b'Q' => ran.push(fields.next().unwrap_or_default().into_owned()),
                _ => {}
            }
        }
        ran
    }
}
