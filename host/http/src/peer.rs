//! Who is asking, as the host's fair shares count it: the remote address of the
//! connection a request came on.
//!
//! The connection cap, the webhook reading budget and the console's sign-in brake each
//! give every remote address its own share, so one client holding all of its share hurts
//! only itself. An IPv6 client usually holds a whole /64 (and can pick any address in
//! it), so IPv6 addresses are counted by their /64 prefix; an IPv4-mapped IPv6 address
//! counts as the IPv4 address it carries.
//!
//! [`crate::server::connections`] puts the [`Peer`] of each connection on its requests.
//! A platform that serves [`crate::server::router`] itself may instead serve it with
//! axum's `into_make_service_with_connect_info::<SocketAddr>()`; with neither, the peer is
//! unknown and only the shares that do not depend on it apply.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use http::request::Parts;

/// A remote address as shares count it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Peer(IpAddr);

impl Peer {
    /// The share key of remote address `addr`.
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(v4) => Peer(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    Peer(IpAddr::V6(Ipv6Addr::new(
                        s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                    )))
                }
            },
        }
    }

    /// The address (an IPv6 one with its last 64 bits zero).
    pub fn addr(&self) -> IpAddr {
        self.0
    }

    /// The peer of a request: the one [`crate::server::connections`] recorded, else
    /// axum's `ConnectInfo`, else `None` (unknown).
    pub fn of_request(parts: &Parts) -> Option<Peer> {
        parts.extensions.get::<Peer>().copied().or_else(|| {
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| Peer::of(c.0.ip()))
        })
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// Extractor: the request's [`Peer`], if known. Never rejects.
#[derive(Debug, Clone, Copy)]
pub struct PeerOf(pub Option<Peer>);

impl<S: Send + Sync> FromRequestParts<S> for PeerOf {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(PeerOf(Peer::of_request(parts)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_counts_by_its_64_prefix_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:1:2:3".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Peer::of(a), Peer::of(b));
        assert_ne!(Peer::of(a), Peer::of(other));
        assert_eq!(Peer::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(Peer::of(mapped), Peer::of(v4));
        assert_eq!(Peer::of(v4).to_string(), "192.0.2.7");
        assert_ne!(
            Peer::of("127.0.0.1".parse().unwrap()),
            Peer::of("127.0.0.2".parse().unwrap())
        );
    }
}
