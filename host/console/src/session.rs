//! Console sessions: what signing in with the operator token leaves behind.
//!
//! A session is a random id in an `HttpOnly`, `SameSite=Strict` cookie scoped to
//! `/console`, and a CSRF token that every form of the session carries back. Both live in
//! this process's memory only: the table is bounded ([`MAX_SESSIONS`]), a session ends
//! after [`IDLE`] without use or [`LIFETIME`] after sign-in, and a restart signs everyone
//! out. The table is keyed by the SHA-256 of the id, so looking a cookie up compares no
//! secret byte by byte; the CSRF token is compared in constant time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, Method};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use connector_http::Peer;

/// The session cookie's name.
pub const COOKIE: &str = "console_session";
/// Sessions held at once; signing in past it ends the session closest to its end.
pub const MAX_SESSIONS: usize = 1024;
/// A session not used for this long ends.
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token every state-changing form of this session must send back.
    pub csrf: String,
    started: Instant,
    last_used: Instant,
    /// What the last change did, for the next page this session loads (rendered HTML);
    /// shared by every copy of the session.
    notice: Arc<Mutex<Option<String>>>,
}

impl Session {
    fn ends_at(&self) -> Instant {
        (self.last_used + IDLE).min(self.started + LIFETIME)
    }

    /// Leaves a notice (rendered HTML) for the next page this session loads: what a
    /// change did, shown after its redirect (post/redirect/get). A later notice replaces
    /// one not yet shown.
    pub fn leave_notice(&self, html: String) {
        *self.notice.lock() = Some(html);
    }

    /// Whether `token` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, token: &str) -> bool {
        !token.is_empty() && bool::from(self.csrf.as_bytes().ct_eq(token.as_bytes()))
    }
}

/// The sessions of one console (one router).
#[derive(Debug, Default)]
pub struct Sessions {
    by_id_hash: Mutex<HashMap<[u8; 32], Session>>,
}

fn id_hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// Starts a session; returns its id (for the cookie) and the session.
    pub fn start(&self) -> (String, Session) {
        self.start_at(Instant::now())
    }

    fn start_at(&self, now: Instant) -> (String, Session) {
        let id = connector_core::auth::random_secret(32);
        let session = Session {
            csrf: connector_core::auth::random_secret(32),
            started: now,
            last_used: now,
            notice: Arc::default(),
        };
        let mut table = self.by_id_hash.lock();
        if table.len() >= MAX_SESSIONS {
            table.retain(|_, s| s.ends_at() > now);
        }
        if table.len() >= MAX_SESSIONS {
            let closest = table
                .iter()
                .min_by_key(|(_, s)| s.ends_at())
                .map(|(k, _)| *k);
            if let Some(k) = closest {
                table.remove(&k);
            }
        }
        table.insert(id_hash(&id), session.clone());
        (id, session)
    }

    /// The live session with this id, marked as used now.
    pub fn get(&self, id: &str) -> Option<Session> {
        self.get_at(id, Instant::now())
    }

    fn get_at(&self, id: &str, now: Instant) -> Option<Session> {
        let key = id_hash(id);
        let mut table = self.by_id_hash.lock();
        let session = table.get_mut(&key)?;
        if session.ends_at() <= now {
            table.remove(&key);
            return None;
        }
        session.last_used = now;
        Some(session.clone())
    }

    /// Whether the session with this id is live, without marking it used (for a stream
    /// that must stop once its session ends).
    pub fn is_live(&self, id: &str) -> bool {
        let now = Instant::now();
        self.by_id_hash
            .lock()
            .get(&id_hash(id))
            .is_some_and(|s| s.ends_at() > now)
    }

    /// Takes the notice left for the session with this id (shown once).
    pub fn take_notice(&self, id: &str) -> Option<String> {
        let notice = self.by_id_hash.lock().get(&id_hash(id))?.notice.clone();
        let taken = notice.lock().take();
        taken
    }

    /// Ends a session (sign-out); a no-op for an unknown id.
    pub fn end(&self, id: &str) {
        self.by_id_hash.lock().remove(&id_hash(id));
    }

    /// How many sessions are held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.by_id_hash.lock().len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Wrong operator tokens one address may send in a burst before its sign-ins are braked.
pub const SIGN_IN_BURST: u32 = 10;
/// How often one more wrong token is forgiven after a burst; also how far apart a braked
/// address's sign-ins are looked at.
pub const SIGN_IN_REFILL: Duration = Duration::from_secs(6);
/// The longest a braked address's sign-in waits for its turn.
pub const SIGN_IN_MAX_WAIT: Duration = Duration::from_secs(60);
/// Addresses the brake remembers at once; past it, addresses it has no room for share
/// one account.
pub const SIGN_IN_ADDRESSES: usize = 4096;
/// The most wrong-token debt an address can run up (a bound for the arithmetic; an
/// address that keeps guessing stays braked anyway).
const MAX_DEBT: Duration = Duration::from_secs(60 * 60);

/// The brake on guessing the operator token at the sign-in form, per remote address
/// ([`Peer`]).
///
/// Each address may send [`SIGN_IN_BURST`] wrong tokens at once, and one more per
/// [`SIGN_IN_REFILL`] after that. Past that the address is *braked*: each of its sign-ins
/// waits its turn — turns are [`SIGN_IN_REFILL`] apart, and no turn is more than
/// [`SIGN_IN_MAX_WAIT`] away — and only then is its token looked at. The right token
/// then signs in, as from any address (the brake never refuses the right token); a wrong
/// one is answered `429` with `Retry-After` and adds to the address's debt. The token is
/// looked at only at the turn, so a guesser learns nothing sooner by hanging up early.
///
/// What it stops: one address (an IPv6 /64) trying more than one token per 6 s once its
/// burst is spent, as long as it waits for its answers one at a time; with many
/// connections at once, at most one per connection per [`SIGN_IN_MAX_WAIT`] (the
/// connections per address are capped by `server.max_connections_per_peer`). And one
/// address's guessing never slows another address's sign-in.
///
/// What it does not stop: guessing spread over many addresses (each has its own burst;
/// addresses past [`SIGN_IN_ADDRESSES`] share one account, braked together); an
/// operator sharing an address with a guesser waits for a turn like the guesser (at most
/// [`SIGN_IN_MAX_WAIT`]). The operator token is a long random secret unless an operator
/// chose it: the brake is a second line, not a reason for a short token. Sessions already
/// signed in and the HTTP API are not braked. Requests whose address is unknown (a
/// platform serving the router without connection info) share one account.
#[derive(Debug, Default)]
pub struct SignInBrake {
    accounts: Mutex<Accounts>,
}

#[derive(Debug, Default)]
struct Accounts {
    by_peer: HashMap<Peer, Account>,
    /// Addresses without an account of their own: unknown, or past the table's bound.
    shared: Account,
}

/// One address's wrong tokens.
#[derive(Debug, Default, Clone, Copy)]
struct Account {
    /// When all wrong tokens counted so far are forgiven (`None`: none counted).
    clear_at: Option<Instant>,
    /// The earliest turn of the next braked sign-in.
    next_turn: Option<Instant>,
}

impl Account {
    /// How long until this account is no longer braked (`None`: it is not).
    fn braked_for(&self, now: Instant) -> Option<Duration> {
        let allowed = SIGN_IN_REFILL * (SIGN_IN_BURST - 1);
        let debt = self.clear_at?.checked_duration_since(now)?;
        debt.checked_sub(allowed).filter(|d| !d.is_zero())
    }

    fn is_spent(&self, now: Instant) -> bool {
        self.clear_at.is_none_or(|at| at <= now) && self.next_turn.is_none_or(|at| at <= now)
    }
}

impl Accounts {
    /// The account `peer` is counted in, making room for one when `create`.
    fn of(&mut self, peer: Option<Peer>, now: Instant, create: bool) -> &mut Account {
        let Some(peer) = peer else {
            return &mut self.shared;
        };
        if !self.by_peer.contains_key(&peer) {
            if !create {
                return &mut self.shared;
            }
            if self.by_peer.len() >= SIGN_IN_ADDRESSES {
                self.by_peer.retain(|_, a| !a.is_spent(now));
            }
            if self.by_peer.len() >= SIGN_IN_ADDRESSES {
                return &mut self.shared;
            }
        }
        self.by_peer.entry(peer).or_default()
    }
}

impl SignInBrake {
    /// When a sign-in from `peer` may have its token looked at: `None` at once, else the
    /// turn to wait for (the address is braked). Never a refusal.
    pub fn turn(&self, peer: Option<Peer>) -> Option<Instant> {
        self.turn_at(peer, Instant::now())
    }

    fn turn_at(&self, peer: Option<Peer>, now: Instant) -> Option<Instant> {
        let mut accounts = self.accounts.lock();
        let account = accounts.of(peer, now, false);
        account.braked_for(now)?;
        let turn = account
            .next_turn
            .map_or(now, |at| at.max(now))
            .min(now + SIGN_IN_MAX_WAIT);
        account.next_turn = Some(turn + SIGN_IN_REFILL);
        Some(turn)
    }

    /// Counts one wrong token from `peer`; returns how long the address is braked from
    /// now (`None`: it is not).
    pub fn failed(&self, peer: Option<Peer>) -> Option<Duration> {
        self.failed_at(peer, Instant::now())
    }

    fn failed_at(&self, peer: Option<Peer>, now: Instant) -> Option<Duration> {
        let mut accounts = self.accounts.lock();
        let account = accounts.of(peer, now, true);
        let from = account.clear_at.filter(|at| *at > now).unwrap_or(now);
        account.clear_at = Some((from + SIGN_IN_REFILL).min(now + MAX_DEBT));
        // The first braked turn comes a refill after the last wrong token.
        let next = account.next_turn.map_or(now, |at| at.max(now));
        account.next_turn = Some(next.max(now + SIGN_IN_REFILL));
        account.braked_for(now)
    }

    /// How many addresses have an account of their own.
    pub fn addresses(&self) -> usize {
        self.accounts.lock().by_peer.len()
    }
}

/// The session id the request's cookie carries, if any.
pub fn cookie_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty())
}

/// Whether the request came over TLS (directly, or through a proxy that says so); the
/// cookie is then marked `Secure`.
pub fn over_tls(headers: &HeaderMap, uri: &axum::http::Uri) -> bool {
    uri.scheme_str() == Some("https")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value that hands a browser session `id`.
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{}",
        LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that makes a browser forget its session.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Why a state-changing request is refused before its body is looked at: the browser
/// says it comes from another site or origin. `None` when it may proceed (to the CSRF
/// token check). Requests without these headers (not from a browser) are left to the
/// CSRF token, which they cannot know without a session.
pub fn cross_site_refusal(method: &Method, headers: &HeaderMap) -> Option<&'static str> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if !matches!(site, "same-origin" | "none") {
            return Some("the browser says this request comes from another site or origin");
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|authority| !host.is_empty() && authority.eq_ignore_ascii_case(host));
        if !same {
            return Some("the request's Origin is not this console");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_started_session_is_found_by_its_id_and_ended_by_sign_out() {
        let sessions = Sessions::default();
        let (id, session) = sessions.start();
        let found = sessions.get(&id).expect("the session is live");
        assert_eq!(found.csrf, session.csrf);
        assert!(sessions.get("not-an-id").is_none());
        sessions.end(&id);
        assert!(sessions.get(&id).is_none());
        assert!(sessions.is_empty());
    }

    #[test]
    fn ids_and_csrf_tokens_are_random_and_distinct() {
        let sessions = Sessions::default();
        let (a, sa) = sessions.start();
        let (b, sb) = sessions.start();
        assert_ne!(a, b);
        assert_ne!(sa.csrf, sb.csrf);
        assert_ne!(a, sa.csrf);
        assert!(a.len() >= 40, "{a}");
    }

    #[test]
    fn sessions_end_when_idle_and_after_their_lifetime() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let (id, _) = sessions.start_at(t0);
        assert!(sessions.get_at(&id, t0 + IDLE / 2).is_some());
        // Used half-way: idle counts from then.
        assert!(sessions.get_at(&id, t0 + IDLE).is_some());
        assert!(sessions
            .get_at(&id, t0 + IDLE + IDLE + Duration::from_secs(1))
            .is_none());

        let (id, _) = sessions.start_at(t0);
        let mut t = t0;
        while t < t0 + LIFETIME - IDLE / 2 {
            t += IDLE / 2;
            assert!(sessions.get_at(&id, t).is_some());
        }
        assert!(sessions.get_at(&id, t0 + LIFETIME).is_none());
    }

    #[test]
    fn the_table_is_bounded() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let (first, _) = sessions.start_at(t0);
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.start_at(t0 + Duration::from_secs(1));
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert!(
            sessions
                .get_at(&first, t0 + Duration::from_secs(2))
                .is_none(),
            "the session closest to its end made room"
        );
    }

    fn peer(ip: &str) -> Option<Peer> {
        Some(Peer::of(ip.parse().expect("an IP address")))
    }

    #[test]
    fn a_burst_of_wrong_tokens_brakes_that_address_only() {
        let brake = SignInBrake::default();
        let t0 = Instant::now();
        let guesser = peer("192.0.2.7");
        for i in 0..SIGN_IN_BURST {
            assert_eq!(
                brake.turn_at(guesser, t0),
                None,
                "attempt {i} is looked at at once"
            );
            let braked = brake.failed_at(guesser, t0);
            assert_eq!(braked.is_some(), i + 1 == SIGN_IN_BURST, "attempt {i}");
        }
        // Braked: the next sign-in waits a refill, the one after that another.
        assert_eq!(brake.turn_at(guesser, t0), Some(t0 + SIGN_IN_REFILL));
        assert_eq!(brake.turn_at(guesser, t0), Some(t0 + SIGN_IN_REFILL * 2));
        // Other addresses are not braked.
        assert_eq!(brake.turn_at(peer("192.0.2.8"), t0), None);
        assert_eq!(brake.turn_at(peer("2001:db8::1"), t0), None);
        assert_eq!(brake.turn_at(None, t0), None);
        // Forgiven in time.
        let later = t0 + SIGN_IN_REFILL * (SIGN_IN_BURST + 2);
        assert_eq!(brake.turn_at(guesser, later), None);
    }

    #[test]
    fn a_braked_address_waits_at_most_the_longest_wait() {
        let brake = SignInBrake::default();
        let t0 = Instant::now();
        let guesser = peer("2001:db8:1:2::1");
        for _ in 0..SIGN_IN_BURST {
            brake.failed_at(guesser, t0);
        }
        // Many sign-ins at once (connections held open): turns queue up to the bound.
        let mut last = t0;
        for _ in 0..100 {
            let turn = brake.turn_at(guesser, t0).expect("braked");
            assert!(
                turn >= last && turn <= t0 + SIGN_IN_MAX_WAIT,
                "{:?}",
                turn - t0
            );
            last = turn;
        }
        assert_eq!(last, t0 + SIGN_IN_MAX_WAIT);
        // Another address in the same /64 is the same address.
        assert!(brake.turn_at(peer("2001:db8:1:2:ffff::9"), t0).is_some());
        // Wrong tokens at their turns keep it braked; the debt is bounded.
        for i in 0..10_000u32 {
            let at = t0 + Duration::from_millis(u64::from(i));
            assert!(brake.failed_at(guesser, at).is_some_and(|d| d <= MAX_DEBT));
        }
    }

    #[test]
    fn the_table_of_addresses_is_bounded_and_the_rest_share_one_account() {
        let brake = SignInBrake::default();
        let t0 = Instant::now();
        for i in 0..(SIGN_IN_ADDRESSES as u32 + 500) {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            brake.failed_at(Some(Peer::of(ip.into())), t0);
        }
        assert_eq!(brake.addresses(), SIGN_IN_ADDRESSES);
        // The 500 without room were counted together: that account is braked.
        let overflow = Some(Peer::of(std::net::Ipv4Addr::from(0x0b00_0000).into()));
        assert!(brake.turn_at(overflow, t0).is_some());
        // Spent accounts make room.
        let later = t0 + SIGN_IN_REFILL * 2;
        brake.failed_at(overflow, later);
        assert_eq!(brake.addresses(), 1);
    }

    #[test]
    fn csrf_tokens_must_match_exactly() {
        let sessions = Sessions::default();
        let (_, session) = sessions.start();
        assert!(session.csrf_matches(&session.csrf.clone()));
        assert!(!session.csrf_matches(""));
        assert!(!session.csrf_matches("forged"));
        let mut almost = session.csrf.clone();
        almost.pop();
        assert!(!session.csrf_matches(&almost));
    }

    #[test]
    fn the_cookie_is_read_among_others_and_is_strict() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; console_session=abc ; b=2"),
        );
        assert_eq!(cookie_id(&headers), Some("abc"));
        headers.insert(header::COOKIE, HeaderValue::from_static("console_session="));
        assert_eq!(cookie_id(&headers), None);
        let cookie = set_cookie("abc", false);
        for part in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
            assert!(cookie.contains(part), "{cookie}");
        }
        assert!(!cookie.contains("Secure"));
        assert!(set_cookie("abc", true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }

    #[test]
    fn cross_site_posts_are_refused_and_same_origin_ones_pass() {
        let post = Method::POST;
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8787"));
        assert_eq!(cross_site_refusal(&post, &h), None, "no browser headers");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8787"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert_eq!(cross_site_refusal(&post, &h), None);
        for site in ["same-site", "cross-site"] {
            h.insert("sec-fetch-site", HeaderValue::from_static(site));
            assert!(cross_site_refusal(&post, &h).is_some(), "{site}");
        }
        h.remove("sec-fetch-site");
        for origin in ["http://127.0.0.1:9999", "null", "http://evil.example"] {
            h.insert(header::ORIGIN, HeaderValue::from_static(origin));
            assert!(cross_site_refusal(&post, &h).is_some(), "{origin}");
        }
        assert_eq!(cross_site_refusal(&Method::GET, &h), None);
    }
}
