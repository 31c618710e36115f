//! Reading a request body with a size limit, answerably.
//!
//! Refusing an oversized body the moment the limit is passed closes the connection while
//! the client is still sending, and the client then sees a reset instead of the `413`.
//! So the rest of an oversized body is read and dropped (bounded in bytes and time)
//! before the answer goes out.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use bytes::Buf;
use http_body_util::BodyExt;

use connector_model::error::{ErrorCode, HostError};

/// How much of an oversized body is read (and dropped) before answering.
const DRAIN_BYTES: u64 = 64 * 1024 * 1024;
/// How long an oversized body is drained before answering.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Why a request body read failed: the client stopped sending it for this long
/// (`server.header_timeout_ms`).
#[derive(Debug)]
pub struct BodyStalled(pub Duration);

impl std::fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body stopped arriving for {} ms",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyStalled {}

/// Reads the rest of a body a handler did not read and drops it: at most 64 MiB, for at
/// most 5 s (past either, the connection is closed).
pub async fn discard<B: http_body::Body + Unpin>(mut body: B) {
    let drain = async {
        let mut seen = 0u64;
        while seen <= DRAIN_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => seen += frame.data_ref().map_or(0, |d| d.remaining() as u64),
                Some(Err(_)) | None => break,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than the limit.
    TooLarge,
    /// The client stopped sending the body (for `server.header_timeout_ms`).
    Stalled,
    /// The client's body stream failed.
    Unreadable(String),
    /// The host had no room for more of it (see [`read_limited_counted`]).
    NoRoom,
}

impl BodyError {
    fn of(error: axum::Error) -> Self {
        let inner = error.into_inner();
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(inner.as_ref());
        while let Some(e) = source {
            if e.is::<BodyStalled>() {
                return BodyError::Stalled;
            }
            source = e.source();
        }
        BodyError::Unreadable(inner.to_string())
    }

    /// The contract's error for this failure.
    pub fn into_host_error(self, too_large: impl FnOnce() -> HostError) -> HostError {
        match self {
            BodyError::TooLarge => too_large(),
            BodyError::Stalled => HostError::new(
                ErrorCode::RequestTimeout,
                "the request body stopped arriving before it was complete; send it without pausing",
            ),
            BodyError::Unreadable(e) => {
                HostError::invalid_request(format!("could not read the request body: {e}"))
            }
            BodyError::NoRoom => HostError::new(
                ErrorCode::HostBusy,
                "the host is holding as many request bodies of this kind as it reads at once; retry shortly",
            ),
        }
    }
}

/// Reads `body`, at most `limit` bytes; an oversized body is drained (up to 64 MiB, for at
/// most 5 s) before [`BodyError::TooLarge`] is returned.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, BodyError> {
    read_limited_counted(headers, body, limit, |_| std::future::ready(true)).await
}

/// Like [`read_limited`], asking `room(bytes so far)` as each part arrives whether the
/// host may hold that much (it may wait for room; [`BodyError::NoRoom`] when not).
pub async fn read_limited_counted<R>(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
    mut room: impl FnMut(u64) -> R,
) -> Result<Bytes, BodyError>
where
    R: std::future::Future<Output = bool>,
{
    let limit = limit as u64;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut seen = 0u64;
    if declared.is_none_or(|n| n <= limit) {
        // What is reserved up front is bounded: a declared length is only a claim.
        let mut buffer = Vec::with_capacity(declared.unwrap_or(0).min(64 * 1024) as usize);
        loop {
            let Some(frame) = body.frame().await else {
                return Ok(Bytes::from(buffer));
            };
            let Ok(data) = frame.map_err(BodyError::of)?.into_data() else {
                continue;
            };
            seen += data.len() as u64;
            if seen > limit {
                break;
            }
            if !room(seen).await {
                return Err(BodyError::NoRoom);
            }
            buffer.extend_from_slice(&data);
        }
    }
    if seen <= DRAIN_BYTES {
        discard(body).await;
    }
    Err(BodyError::TooLarge)
}
