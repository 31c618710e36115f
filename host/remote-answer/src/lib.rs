//! Reading another server's answer with a size limit.
//!
//! Whatever the host fetches (an agent image's tool list, a GitHub token exchange, a
//! host's answer to the command line, an MCP server's tool list at pack time) comes from a
//! server that may be broken or hostile, and may stream without end. Reading such a body
//! whole before looking at its size lets that server fill the host's memory, so every
//! such read goes through [`read_at_most`] (or [`read_at_most_blocking`]): the body is
//! read piece by piece and the read stops, with [`AnswerError::TooLarge`], as soon as it
//! passes the limit. A `Content-Length` above the limit is refused before any byte is
//! read. Time is bounded by the caller's client (its total timeout).

#![deny(missing_docs)]

/// Why an answer's body was not read.
#[derive(Debug)]
pub enum AnswerError {
    /// It is (or says it is) larger than the limit, in bytes.
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// Reading it failed: the connection broke, or (`timeout`) the client's deadline
    /// passed.
    Failed {
        /// Why, with its causes.
        reason: String,
        /// Whether the client's deadline passed.
        timeout: bool,
    },
}

impl AnswerError {
    fn failed(e: &reqwest::Error) -> Self {
        AnswerError::Failed {
            reason: error_chain(e),
            timeout: e.is_timeout(),
        }
    }

    /// Whether the read failed because the client's deadline passed.
    pub fn is_timeout(&self) -> bool {
        matches!(self, AnswerError::Failed { timeout: true, .. })
    }
}

/// An error and its causes on one line, `: `-separated, each cause once (clients'
/// own messages are terse: reqwest's "error sending request" says nothing without them).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        source = s.source();
    }
    text
}

impl std::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerError::TooLarge { limit } => {
                write!(f, "the answer is larger than {}", size(*limit))
            }
            AnswerError::Failed { reason, .. } => write!(f, "reading the answer failed: {reason}"),
        }
    }
}

impl std::error::Error for AnswerError {}

/// `limit` bytes as an operator reads it (`8 MiB`, `512 KiB`, `100 bytes`).
pub fn size(limit: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if limit >= MIB && limit.is_multiple_of(MIB) {
        format!("{} MiB", limit / MIB)
    } else if limit >= 1024 && limit.is_multiple_of(1024) {
        format!("{} KiB", limit / 1024)
    } else {
        format!("{limit} bytes")
    }
}

/// The body of `response`, at most `limit` bytes.
pub async fn read_at_most(
    mut response: reqwest::Response,
    limit: u64,
) -> Result<Vec<u8>, AnswerError> {
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(AnswerError::TooLarge { limit });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| AnswerError::failed(&e))?
    {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(AnswerError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The body of `response`, at most `limit` bytes (the blocking client's form of
/// [`read_at_most`]).
#[cfg(feature = "blocking")]
pub fn read_at_most_blocking(
    response: reqwest::blocking::Response,
    limit: u64,
) -> Result<Vec<u8>, AnswerError> {
    use std::io::Read as _;
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(AnswerError::TooLarge { limit });
    }
    let mut body = Vec::new();
    let read = response
        .take(limit.saturating_add(1))
        .read_to_end(&mut body);
    if let Err(e) = read {
        return Err(AnswerError::Failed {
            // The blocking client's read errors carry its own error.
            timeout: e.kind() == std::io::ErrorKind::TimedOut
                || e.get_ref()
                    .and_then(|inner| inner.downcast_ref::<reqwest::Error>())
                    .is_some_and(reqwest::Error::is_timeout),
            reason: error_chain(&e),
        });
    }
    if body.len() as u64 > limit {
        return Err(AnswerError::TooLarge { limit });
    }
    Ok(body)
}

/// A server for tests whose every answer streams without end.
#[cfg(any(test, feature = "endless"))]
pub mod endless {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// Starts a server on 127.0.0.1 that answers every request `200` with `content_type`
    /// and a body (`[`, then spaces) delimited by the connection's close, streamed until
    /// the client hangs up. Returns its base URL and how many body bytes it has sent.
    pub fn start(content_type: &'static str) -> (String, Arc<AtomicU64>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream);
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                        line.clear();
                    }
                    let mut stream = reader.into_inner();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n["
                    );
                    if stream.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    let chunk = vec![b' '; 64 * 1024];
                    while stream.write_all(&chunk).is_ok() {
                        counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        (url, sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[tokio::test]
    async fn an_endless_answer_is_cut_off_past_the_limit() {
        let (url, sent) = endless::start("application/json");
        let response = reqwest::get(&url).await.expect("answered");
        let err = read_at_most(response, 1024 * 1024)
            .await
            .expect_err("endless");
        assert!(
            matches!(err, AnswerError::TooLarge { limit: 1048576 }),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "the answer is larger than 1 MiB");
        let sent = sent.load(Ordering::Relaxed);
        assert!(
            sent < 64 * 1024 * 1024,
            "{sent} bytes were sent before the read stopped"
        );
    }

    #[cfg(feature = "blocking")]
    #[test]
    fn an_endless_answer_is_cut_off_past_the_limit_by_the_blocking_client() {
        let (url, sent) = endless::start("application/json");
        let response = reqwest::blocking::get(&url).expect("answered");
        let err = read_at_most_blocking(response, 100 * 1024).expect_err("endless");
        assert_eq!(err.to_string(), "the answer is larger than 100 KiB");
        assert!(sent.load(Ordering::Relaxed) < 64 * 1024 * 1024);
    }

    #[test]
    fn sizes_read_as_an_operator_writes_them() {
        assert_eq!(size(8 * 1024 * 1024), "8 MiB");
        assert_eq!(size(1536), "1536 bytes");
        assert_eq!(size(2048), "2 KiB");
    }
}
