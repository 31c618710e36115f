//! Outbound HTTP policy: which hosts a connector may reach, and how.
//!
//! A connector declares the hosts it needs; the operator may narrow that list. The
//! effective list is the intersection, so an operator can never be tricked into widening
//! what a component asked for, and a component can never reach more than the operator
//! allows. Host names alone are not enough: an allowed name can resolve to a private,
//! loopback or link-local address (DNS rebinding, or a hostile DNS record), so the host
//! resolves the name itself, refuses such addresses unless the operator explicitly allows
//! private networks, and connects to exactly the address it checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use connector_trace::InSpan;
use http_body_util::BodyExt;
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The hosts one connector may reach and whether private addresses are allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    hosts: Vec<String>,
    allow_private_networks: bool,
}

impl OutboundPolicy {
    /// No outbound HTTP at all.
    pub fn deny_all() -> Self {
        Self::default()
    }

    /// The intersection of what the component `declared` and what the `operator` allows
    /// (`None`: the operator did not narrow the list). Entries are host names, matched
    /// case-insensitively; `*.example.com` matches any subdomain of `example.com`.
    pub fn new(
        declared: &[String],
        operator: Option<&[String]>,
        allow_private_networks: bool,
    ) -> Self {
        let normalise = |h: &String| h.trim().trim_end_matches('.').to_ascii_lowercase();
        let declared: Vec<String> = declared.iter().map(normalise).collect();
        let hosts = match operator {
            None => declared,
            Some(operator) => {
                let operator: Vec<String> = operator.iter().map(normalise).collect();
                declared
                    .into_iter()
                    .filter(|d| {
                        operator
                            .iter()
                            .any(|o| o == d || (o.starts_with("*.") && pattern_matches(o, d)))
                    })
                    .collect()
            }
        };
        Self {
            hosts,
            allow_private_networks,
        }
    }

    /// The effective host list.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Whether private, loopback and link-local destinations are allowed.
    pub fn allows_private_networks(&self) -> bool {
        self.allow_private_networks
    }

    /// Whether `host` (a name or an IP literal) is on the effective list.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts
            .iter()
            .any(|allowed| *allowed == host || pattern_matches(allowed, &host))
    }

    /// Whether connecting to `ip` is allowed.
    pub fn allows_address(&self, ip: IpAddr) -> bool {
        self.allow_private_networks || is_public(ip)
    }
}

fn pattern_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host.ends_with(suffix)
                && host[..host.len() - suffix.len()].ends_with('.')
        }
        None => false,
    }
}

/// Whether `ip` is a globally routable address (not loopback, private, link-local,
/// shared, unspecified, multicast or documentation space).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10 shared address space
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24 protocol assignments
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15 benchmarking
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x64 && s[1] == 0xff9b)) // NAT64 can reach private v4
        }
    }
}

/// Connections one guest call may hold open at once; a further request waits for one to
/// end (a response read or dropped), within the call's deadline.
pub(crate) const CONNECTIONS_PER_CALL: usize = 8;

/// The `wasi:http` hooks of one guest call: every outgoing request passes the policy, and
/// holds one of the call's [`CONNECTIONS_PER_CALL`] until its connection ends.
pub(crate) struct OutboundHooks {
    pub(crate) policy: Arc<OutboundPolicy>,
    pub(crate) connector: Arc<str>,
    pub(crate) connections: Arc<tokio::sync::Semaphore>,
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl WasiHttpHooks for OutboundHooks {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn std::future::Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn std::future::Future<Output = SendResult> + Send> {
        let policy = self.policy.clone();
        let connector = self.connector.clone();
        let connections = self.connections.clone();
        let span = outbound_span(&mut request);
        Box::new(
            async move {
                let Ok(connection) = connections.acquire_owned().await else {
                    return Err(HttpError::ConnectionRefused);
                };
                let sent = send_checked(&policy, &connector, request, options, connection).await;
                if let Ok((response, _)) = &sent {
                    connector_trace::Span::current()
                        .record("http.response.status_code", response.status().as_u16());
                }
                sent
            }
            .in_span(span),
        )
    }
}

/// The span of one outbound request (a child of the guest call making it), whose
/// `traceparent` the request carries when the call is traced, replacing any the guest set:
/// the receiver joins the host's trace.
fn outbound_span(request: &mut http::Request<WasiBody>) -> connector_trace::Span {
    let span = connector_trace::span("guest HTTP request")
        .kind(connector_trace::Kind::Client)
        .attr("http.request.method", request.method().as_str())
        .attr("server.address", request.uri().host().unwrap_or_default())
        .start();
    let traced = span.headers();
    if traced.is_empty() {
        return span;
    }
    let headers = request.headers_mut();
    headers.remove(connector_trace::TRACEPARENT);
    headers.remove(connector_trace::TRACESTATE);
    for (name, value) in traced {
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    span
}

async fn send_checked(
    policy: &OutboundPolicy,
    connector: &str,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    connection: tokio::sync::OwnedSemaphorePermit,
) -> SendResult {
    let uri = request.uri().clone();
    let host = uri
        .host()
        .ok_or(HttpError::HttpRequestUriInvalid)?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if !policy.allows_host(&host) {
        tracing::warn!(connector, host = %host, allowed = ?policy.hosts(), "outbound request refused: host not allowed");
        return Err(HttpError::HttpRequestDenied);
    }
    let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let connect_timeout = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(CONNECT_TIMEOUT)
        .min(CONNECT_TIMEOUT);

    let addrs: Vec<SocketAddr> = match tokio::time::timeout(
        connect_timeout,
        tokio::net::lookup_host((host.as_str(), port)),
    )
    .await
    {
        Err(_) => return Err(HttpError::DnsTimeout),
        Ok(Err(err)) => {
            return Err(HttpError::DnsError {
                rcode: Some(err.to_string()),
                info_code: None,
            })
        }
        Ok(Ok(addrs)) => addrs.collect(),
    };
    if addrs.is_empty() {
        return Err(HttpError::DestinationNotFound);
    }
    if let Some(bad) = addrs.iter().find(|a| !policy.allows_address(a.ip())) {
        tracing::warn!(connector, host = %host, address = %bad.ip(), "outbound request refused: private, loopback or link-local address");
        return Err(HttpError::DestinationIpProhibited);
    }

    let mut last_err = None;
    let mut stream = None;
    for addr in &addrs {
        match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(err)) => last_err = Some(HttpError::Connect(err)),
            Err(_) => last_err = Some(HttpError::ConnectionTimeout),
        }
    }
    let stream = match stream {
        Some(s) => s,
        None => return Err(last_err.unwrap_or(HttpError::ConnectionRefused)),
    };

    // The request line carries only the path: scheme and authority are for proxies.
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;

    if https {
        let server_name = rustls::pki_types::ServerName::try_from(host.clone())?;
        let tls = tokio_rustls::TlsConnector::from(tls_config())
            .connect(server_name, stream)
            .await
            .map_err(HttpError::Tls)?;
        handshake_and_send(TokioIo::new(tls), request, connect_timeout, connection).await
    } else {
        handshake_and_send(TokioIo::new(stream), request, connect_timeout, connection).await
    }
}

async fn handshake_and_send<S>(
    io: TokioIo<S>,
    request: http::Request<WasiBody>,
    connect_timeout: Duration,
    connection: tokio::sync::OwnedSemaphorePermit,
) -> SendResult
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) =
        tokio::time::timeout(connect_timeout, hyper::client::conn::http1::handshake(io))
            .await
            .map_err(|_| HttpError::ConnectionTimeout)??;
    // The connection must be driven while the request is sent and while the guest
    // reads the body; the future handed back to wasmtime reports how that ended.
    // The call's connection slot is held as long as the connection lives.
    let driving = tokio::spawn(async move {
        let ended = conn.await.map_err(HttpError::from);
        drop(connection);
        ended
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(HttpError::from)?;
    let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
    let io_future = async move {
        driving
            .await
            .unwrap_or(Err(HttpError::ConnectionTerminated))
    };
    Ok((response, Box::new(io_future)))
}

fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(roots).with_no_client_auth())
                .unwrap_or_else(|_| {
                    // The ring provider always supports the default versions; this
                    // branch exists only to avoid a panic path.
                    rustls::ClientConfig::builder_with_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .with_protocol_versions(&[&rustls::version::TLS13])
                    .map(|b| {
                        b.with_root_certificates(rustls::RootCertStore::empty())
                            .with_no_client_auth()
                    })
                    .unwrap_or_else(|_| unreachable!("TLS 1.3 is supported by ring"))
                });
            Arc::new(config)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn effective_hosts_are_the_intersection() {
        let p = OutboundPolicy::new(
            &strings(&["api.example.com", "export.arxiv.org"]),
            Some(&strings(&["EXPORT.arxiv.org", "evil.com"])),
            false,
        );
        assert_eq!(p.hosts(), &["export.arxiv.org".to_string()]);
        assert!(p.allows_host("export.arxiv.org"));
        assert!(!p.allows_host("evil.com"));
        assert!(!p.allows_host("api.example.com"));
        let declared_only = OutboundPolicy::new(&strings(&["api.example.com"]), None, false);
        assert!(declared_only.allows_host("API.example.com."));
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let p = OutboundPolicy::new(&strings(&["*.example.com"]), None, false);
        assert!(p.allows_host("a.example.com"));
        assert!(p.allows_host("a.b.example.com"));
        assert!(!p.allows_host("example.com"));
        assert!(!p.allows_host("badexample.com"));
    }

    #[test]
    fn private_addresses_are_refused_unless_allowed() {
        let p = OutboundPolicy::new(&strings(&["x"]), None, false);
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!p.allows_address(ip), "{ip} must be refused");
        }
        for ip in ["1.1.1.1", "140.82.112.3", "2606:4700::1111"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(p.allows_address(ip), "{ip} must be allowed");
        }
        let open = OutboundPolicy::new(&strings(&["x"]), None, true);
        assert!(open.allows_address("127.0.0.1".parse().unwrap()));
    }
}
