//! Reading a `text/event-stream` (Server-Sent Events) as it arrives.
//!
//! An MCP server answers a POST with JSON or with an event stream whose `message`
//! events carry JSON-RPC messages, and a session's GET is one long stream. The decoder
//! takes chunks however the network cut them (a line, or a CR LF, may be split across
//! two) and yields each `message` event's data; an unfinished line or event larger than
//! its limit makes it give up ([`EventStreamDecoder::overflowed`]) rather than grow
//! without end, and a line is never scanned twice, so a hostile stream costs linear time.

/// An incremental `text/event-stream` decoder yielding the data of `message` events
/// (those with no `event:` field or `event: message`).
#[derive(Debug)]
pub struct EventStreamDecoder {
    limit: usize,
    buffer: Vec<u8>,
    /// How much of `buffer` holds no line ending.
    scanned: usize,
    data: Vec<u8>,
    event: Option<String>,
    last_id: Option<String>,
}

impl EventStreamDecoder {
    /// A decoder that gives up on an unfinished line or event past `limit` bytes.
    pub fn new(limit: usize) -> Self {
        EventStreamDecoder {
            limit,
            buffer: Vec::new(),
            scanned: 0,
            data: Vec::new(),
            event: None,
            last_id: None,
        }
    }

    /// Takes the next chunk of the stream; returns the data of each `message` event it
    /// completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.buffer.extend_from_slice(chunk);
        let mut out = Vec::new();
        // Where the current line starts, and where to look for its end: the part of an
        // unfinished line already looked at is not scanned again.
        let mut start = 0;
        let mut from = self.scanned;
        loop {
            let Some(pos) = self.buffer[from..]
                .iter()
                .position(|b| *b == b'\n' || *b == b'\r')
            else {
                from = self.buffer.len();
                break;
            };
            let end = from + pos;
            let mut next = end + 1;
            if self.buffer[end] == b'\r' {
                if next == self.buffer.len() {
                    from = end; // a CR at the end of a chunk: wait for a possible LF
                    break;
                }
                if self.buffer[next] == b'\n' {
                    next += 1;
                }
            }
            let line = self.buffer[start..end].to_vec();
            start = next;
            from = next;
            self.line(&line, &mut out);
        }
        self.buffer.drain(..start);
        self.scanned = from - start;
        out
    }

    /// The end of the stream: the data of a `message` event that was not closed by a
    /// blank line, if any. (The standard drops such an event; a client that asked one
    /// question and got its answer in it is better off reading it.)
    pub fn finish(mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            let line = line.strip_suffix(b"\r").unwrap_or(&line).to_vec();
            self.line(&line, &mut out);
        }
        self.line(b"", &mut out);
        out.pop()
    }

    /// Whether the unfinished line or event held is larger than the limit: the stream
    /// is then given up.
    pub fn overflowed(&self) -> bool {
        self.buffer.len() > self.limit || self.data.len() > self.limit
    }

    /// The newest `id:` field seen since the last call (what a reconnecting client sends
    /// as `Last-Event-ID`).
    pub fn take_last_event_id(&mut self) -> Option<String> {
        self.last_id.take()
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Vec<u8>>) {
        if line.is_empty() {
            let data = std::mem::take(&mut self.data);
            let event = self.event.take();
            if !data.is_empty() && event.as_deref().is_none_or(|e| e == "message") {
                out.push(data);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" => self.last_id = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 64 * 1024 * 1024;

    #[test]
    fn events_across_chunks_and_line_endings() {
        let mut p = EventStreamDecoder::new(LIMIT);
        assert!(p
            .feed(b": keep-alive\n\nevent: message\nid: 1\nda")
            .is_empty());
        let out = p.feed(b"ta: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\n");
        assert_eq!(out, vec![b"{\"a\":1}".to_vec(), b"x\ny".to_vec()]);
        assert_eq!(p.take_last_event_id().as_deref(), Some("1"));
        assert_eq!(p.take_last_event_id(), None);
        let out = p.feed(b"event: other\ndata: z\n\ndata:w\r");
        assert!(out.is_empty());
        assert_eq!(p.feed(b"\r\n"), vec![b"w".to_vec()]);
    }

    #[test]
    fn a_line_without_end_is_given_up_past_the_limit_in_linear_time() {
        let limit = LIMIT;
        let mut p = EventStreamDecoder::new(limit);
        let chunk = vec![b'x'; 64 * 1024];
        let mut fed = 0;
        let started = std::time::Instant::now();
        while !p.overflowed() {
            assert!(p.feed(&chunk).is_empty());
            fed += chunk.len();
            assert!(fed <= limit + chunk.len(), "never overflowed");
        }
        assert!(fed > limit);
        // Each byte is looked at once (rescanning the held line per chunk, 1,024 chunks
        // of a 64 MiB line, took minutes).
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let mut p = EventStreamDecoder::new(limit);
        for piece in [&b"data: {\"a\""[..], b":1", b"}\r", b"\n", b"\r\n"] {
            let out = p.feed(piece);
            if piece == b"\r\n" {
                assert_eq!(out, vec![b"{\"a\":1}".to_vec()]);
            } else {
                assert!(out.is_empty());
            }
        }
        assert!(!p.overflowed());
    }

    #[test]
    fn an_event_left_open_at_the_end_is_given_by_finish() {
        let mut p = EventStreamDecoder::new(LIMIT);
        assert!(p.feed(b"data: {\"a\":1}\n").is_empty());
        assert_eq!(p.finish(), Some(b"{\"a\":1}".to_vec()));
        let mut p = EventStreamDecoder::new(LIMIT);
        assert!(p.feed(b"data: x\n\nevent: other\ndata: y").len() == 1);
        assert_eq!(p.finish(), None);
        let mut p = EventStreamDecoder::new(LIMIT);
        assert!(p.feed(b"data: z\r").is_empty());
        assert_eq!(p.finish(), Some(b"z".to_vec()));
    }
}
