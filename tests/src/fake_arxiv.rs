//! A fake arXiv API for tests: `GET /api/query`, served on 127.0.0.1, answering with the
//! hand-written Atom fixtures of `connectors/arxiv/fixtures/`.
//!
//! - `id_list=<id>`: `2101.00001` (any version, `v2` is the current one) gets
//!   `abstract.xml`, `hep-th/9901001` (any version) gets `abstract_old_style.xml`; any
//!   other id gets `error.xml` with status 200, as arXiv answers unknown ids.
//! - `search_query=<q>`: `search.xml`, after checking the parameters the connector must
//!   send (`start=0`, `max_results` 1–50, `sortBy` one of arXiv's three values,
//!   `sortOrder=descending`); a breach gets 400 with an arXiv-style error entry.
//! - [`FakeArxiv::fail_with`] makes every answer that status instead (e.g. 503).
//!
//! Every request's query parameters are recorded ([`FakeArxiv::requests`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// One fixture of `connectors/arxiv/fixtures/`.
pub fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../connectors/arxiv/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Default)]
struct Shared {
    fail_with: Mutex<Option<u16>>,
    requests: Mutex<Vec<HashMap<String, String>>>,
}

/// A running fake arXiv. Stops when dropped.
pub struct FakeArxiv {
    url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeArxiv {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeArxiv {
    /// Starts the fake on an ephemeral port of 127.0.0.1.
    pub async fn start() -> FakeArxiv {
        let shared = Arc::new(Shared::default());
        let router = Router::new()
            .route("/api/query", get(query))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeArxiv {
            url: format!("http://{addr}"),
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Answer every request with `status` (and a plain-text body), or normally again.
    pub fn fail_with(&self, status: Option<u16>) {
        *self.shared.fail_with.lock().unwrap() = status;
    }

    /// The query parameters of every request so far.
    pub fn requests(&self) -> Vec<HashMap<String, String>> {
        self.shared.requests.lock().unwrap().clone()
    }
}

fn atom(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/atom+xml; charset=utf-8")],
        body,
    )
        .into_response()
}

/// arXiv's error entry for a bad request.
fn bad_request(why: &str) -> Response {
    let body = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title type="html">ArXiv Query: bad request</title>
  <id>http://arxiv.org/api/bad</id>
  <opensearch:totalResults xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">1</opensearch:totalResults>
  <entry>
    <id>http://arxiv.org/api/errors#{why}</id>
    <title>Error</title>
    <summary>{why}</summary>
    <author><name>arXiv api core</name></author>
  </entry>
</feed>
"#
    );
    atom(StatusCode::BAD_REQUEST, body)
}

/// The id without its version suffix.
fn unversioned(id: &str) -> &str {
    match id.rfind('v') {
        Some(i) if i > 0 && id[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &id[..i],
        _ => id,
    }
}

async fn query(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    shared.requests.lock().unwrap().push(params.clone());
    if let Some(status) = *shared.fail_with.lock().unwrap() {
        let status = StatusCode::from_u16(status).expect("status");
        return (status, "Service Unavailable: arXiv is being maintained").into_response();
    }
    if let Some(ids) = params.get("id_list") {
        if params.contains_key("search_query") {
            return bad_request("search_query_and_id_list_together");
        }
        return match unversioned(ids) {
            "2101.00001" => atom(StatusCode::OK, fixture("abstract.xml")),
            "hep-th/9901001" => atom(StatusCode::OK, fixture("abstract_old_style.xml")),
            _ => atom(StatusCode::OK, fixture("error.xml")),
        };
    }
    if params
        .get("search_query")
        .is_none_or(|q| q.trim().is_empty())
    {
        return bad_request("missing_search_query");
    }
    if params.get("start").map(String::as_str) != Some("0") {
        return bad_request("start_must_be_0");
    }
    match params
        .get("max_results")
        .and_then(|m| m.parse::<u32>().ok())
    {
        Some(1..=50) => {}
        _ => return bad_request("max_results_out_of_range"),
    }
    match params.get("sortBy").map(String::as_str) {
        Some("relevance" | "submittedDate" | "lastUpdatedDate") => {}
        _ => return bad_request("sortBy_must_be_relevance_or_lastUpdatedDate_or_submittedDate"),
    }
    if params.get("sortOrder").map(String::as_str) != Some("descending") {
        return bad_request("sortOrder_must_be_descending");
    }
    atom(StatusCode::OK, fixture("search.xml"))
}
