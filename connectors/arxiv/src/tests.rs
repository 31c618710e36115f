use connector_sdk::{Connector, ToolError};
use serde_json::json;

use crate::atom::{collapse_whitespace, parse_feed, Entry};
use crate::config::ArxivConfig;
use crate::id::{from_entry_url, is_new_style, is_old_style, normalize};
use crate::tools::{
    abstract_result, encode_component, id_url, search_result, search_url, Sort,
    SEARCH_SUMMARY_CHARS,
};
use crate::Arxiv;

const SEARCH: &str = include_str!("../fixtures/search.xml");
const ABSTRACT: &str = include_str!("../fixtures/abstract.xml");
const ABSTRACT_OLD: &str = include_str!("../fixtures/abstract_old_style.xml");
const ERROR: &str = include_str!("../fixtures/error.xml");

#[test]
fn manifest_is_valid_and_declares_only_export_arxiv_org() {
    let m = Arxiv::manifest();
    m.validate().unwrap();
    assert_eq!(m.tool_ids(), ["arxiv.search", "arxiv.fetch_abstract"]);
    for tool in m.tool_list() {
        let hints = tool.hints();
        assert!(hints.read_only && hints.idempotent && hints.open_world);
    }
    let debug = format!("{m:?}");
    assert!(debug.contains("export.arxiv.org"), "{debug}");
    let schema = m.tool_list()[0].input_schema();
    assert_eq!(schema["properties"]["max_results"]["minimum"], 1);
    assert_eq!(schema["properties"]["max_results"]["maximum"], 50);
    assert_eq!(schema["required"], json!(["query"]));
}

#[test]
fn new_style_ids() {
    for id in [
        "2101.00001",
        "2101.00001v2",
        "0704.0001",
        "1412.9999v10",
        "2312.12345",
    ] {
        assert!(is_new_style(id), "{id}");
        assert_eq!(normalize(id).unwrap(), id);
    }
    assert_eq!(normalize("arXiv:2101.00001").unwrap(), "2101.00001");
    assert_eq!(normalize(" arxiv:2101.00001v2 ").unwrap(), "2101.00001v2");
    assert_eq!(
        normalize("https://arxiv.org/abs/2101.00001v2").unwrap(),
        "2101.00001v2"
    );
    assert_eq!(
        normalize("https://arxiv.org/pdf/2101.00001.pdf").unwrap(),
        "2101.00001"
    );
    for bad in [
        "2101.001",
        "2101.000001",
        "2113.00001",
        "2100.00001",
        "2101.00001v",
        "2101.00001v0",
        "2101.00001v2x",
        "21010.0001",
        "2101-00001",
        "2101.0000a",
    ] {
        assert!(!is_new_style(bad), "{bad}");
        assert!(normalize(bad).is_err(), "{bad}");
    }
}

#[test]
fn old_style_ids() {
    for id in [
        "hep-th/9901001",
        "hep-th/9901001v1",
        "math.GT/0309136",
        "cond-mat.mes-hall/0501001v3",
        "q-bio/0701001",
        "astro-ph/9912345",
    ] {
        assert!(is_old_style(id), "{id}");
        assert_eq!(normalize(id).unwrap(), id);
    }
    assert_eq!(normalize("arXiv:hep-th/9901001").unwrap(), "hep-th/9901001");
    for bad in [
        "hep-th/990100",
        "hep-th/99010011",
        "hep-th/9913001",
        "HEP-TH/9901001",
        "-th/9901001",
        "hep-th/",
        "/9901001",
        "math./0309136",
        "math.G1/0309136",
        "hep th/9901001",
        "hep-th/9901001/x",
    ] {
        assert!(!is_old_style(bad), "{bad}");
        assert!(normalize(bad).is_err(), "{bad}");
    }
}

#[test]
fn bad_ids_explain_both_forms() {
    for bad in [
        "",
        "   ",
        "arXiv:",
        "not an id",
        "10.1103/PhysRevC.103.035201",
    ] {
        let e = normalize(bad).unwrap_err();
        assert!(e.contains("2101.00001"), "{e}");
        assert!(e.contains("hep-th/9901001"), "{e}");
    }
}

#[test]
fn entry_urls_give_ids() {
    assert_eq!(
        from_entry_url("http://arxiv.org/abs/2101.00001v2"),
        "2101.00001v2"
    );
    assert_eq!(
        from_entry_url("http://arxiv.org/abs/hep-th/9901001v1"),
        "hep-th/9901001v1"
    );
    assert_eq!(from_entry_url("something"), "something");
}

#[test]
fn whitespace_collapses() {
    assert_eq!(collapse_whitespace("  a \n\t b\r\n\nc  "), "a b c");
    assert_eq!(collapse_whitespace("\n \t"), "");
    assert_eq!(collapse_whitespace("one"), "one");
    assert_eq!(collapse_whitespace("x\u{a0}y"), "x y");
}

#[test]
fn search_fixture_parses() {
    let feed = parse_feed(SEARCH).unwrap();
    assert_eq!(feed.total, Some(1742));
    assert_eq!(feed.entries.len(), 3);
    let first = &feed.entries[0];
    assert_eq!(first.id, "2101.00001v2");
    assert_eq!(
        first.title,
        "Proton Radius Extraction from Elastic Electron Scattering & the Low-$Q^2$ Regime"
    );
    assert_eq!(first.authors, ["Ana M. Ferreira", "Jürgen Weiß", "Li Wei"]);
    assert!(first.summary.starts_with("We revisit the extraction"));
    assert!(first.summary.contains("with controlled truncation bias"));
    assert!(first.summary.contains("corrections <em>beyond</em> the"));
    assert!(first.summary.ends_with("peaking approximation."));
    assert_eq!(first.published, "2021-01-01T00:00:21Z");
    assert_eq!(first.updated, "2021-03-02T17:45:12Z");
    assert_eq!(first.primary_category.as_deref(), Some("nucl-th"));
    assert_eq!(first.categories, ["nucl-th", "hep-ph", "nucl-ex"]);
    assert_eq!(
        first.pdf_url.as_deref(),
        Some("http://arxiv.org/pdf/2101.00001v2")
    );
    assert_eq!(
        first.abs_url.as_deref(),
        Some("http://arxiv.org/abs/2101.00001v2")
    );
    assert!(!first.is_error());

    let old = &feed.entries[2];
    assert_eq!(old.id, "hep-th/9901001v1");
    assert_eq!(
        old.title,
        "Electron and Proton Form Factors from a Holographic Model"
    );
    assert_eq!(old.authors, ["M. Okamoto", "P. Lindqvist"]);
    assert_eq!(old.primary_category.as_deref(), Some("hep-th"));
    assert_eq!(
        old.pdf_url.as_deref(),
        Some("http://arxiv.org/pdf/hep-th/9901001v1")
    );

    let result = search_result(feed).unwrap();
    let v = serde_json::to_value(&result).unwrap();
    assert_eq!(v["total"], 1742);
    assert_eq!(v["results"][1]["id"], "1501.00123v1");
    assert_eq!(v["results"][1]["primaryCategory"], "hep-ph");
    assert_eq!(
        v["results"][1]["absUrl"],
        "http://arxiv.org/abs/1501.00123v1"
    );
    assert!(v["results"][1].get("summaryTruncated").is_none());
    let keys: Vec<&String> = v["results"][0].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 10, "{keys:?}");
}

#[test]
fn abstract_fixture_parses_with_the_full_summary() {
    let feed = parse_feed(ABSTRACT).unwrap();
    assert_eq!(feed.total, Some(1));
    let entry = abstract_result(feed, "2101.00001").unwrap();
    assert_eq!(entry.id, "2101.00001v2");
    assert!(entry.summary.chars().count() > 2_000);
    assert!(!entry.summary.contains('\n'));
    assert!(!entry.summary.contains("  "));
    assert!(entry.summary.ends_with("remains to be understood."));
    assert!(!entry.summary_truncated);

    let old = abstract_result(parse_feed(ABSTRACT_OLD).unwrap(), "hep-th/9901001").unwrap();
    assert_eq!(old.id, "hep-th/9901001v1");
    assert_eq!(old.categories, ["hep-th", "hep-ph"]);
}

#[test]
fn search_summaries_are_cut() {
    let feed = parse_feed(ABSTRACT).unwrap();
    let full = feed.entries[0].summary.clone();
    let result = search_result(feed).unwrap();
    let cut = &result.results[0];
    assert!(cut.summary_truncated);
    assert!(cut.summary.ends_with('…'));
    let n = cut.summary.chars().count();
    assert!(
        (SEARCH_SUMMARY_CHARS - 80..=SEARCH_SUMMARY_CHARS + 1).contains(&n),
        "{n}"
    );
    assert!(full.starts_with(cut.summary.trim_end_matches('…')));
    let v = serde_json::to_value(cut).unwrap();
    assert_eq!(v["summaryTruncated"], true);

    let mut short = Entry {
        summary: "short".into(),
        ..Entry::default()
    };
    short.truncate_summary(10);
    assert_eq!(short.summary, "short");
    assert!(!short.summary_truncated);
}

#[test]
fn error_fixture_means_unknown_id() {
    let feed = parse_feed(ERROR).unwrap();
    assert_eq!(feed.entries.len(), 1);
    assert!(feed.entries[0].is_error());
    assert_eq!(
        feed.entries[0].summary,
        "incorrect id format for 2101.99999"
    );
    match abstract_result(feed, "2101.99999") {
        Err(ToolError::Failed(m)) => {
            assert!(m.contains("no arXiv paper with id `2101.99999`"), "{m}");
            assert!(m.contains("hep-th/9901001"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // An empty feed is an unknown id too.
    let empty = parse_feed(
        r#"<feed xmlns="http://www.w3.org/2005/Atom"><opensearch:totalResults xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">0</opensearch:totalResults></feed>"#,
    )
    .unwrap();
    assert_eq!(empty.total, Some(0));
    assert!(matches!(
        abstract_result(empty, "2101.00002"),
        Err(ToolError::Failed(m)) if m.contains("no arXiv paper")
    ));
    // A search answered with an error entry is a failure, not a paper called "Error".
    assert!(matches!(
        search_result(parse_feed(ERROR).unwrap()),
        Err(ToolError::Failed(m)) if m.contains("incorrect id format")
    ));
}

#[test]
fn malformed_feeds_are_errors() {
    assert!(parse_feed("not xml <").is_err());
    assert!(parse_feed("<html><body>busy</body></html>").is_err());
    assert!(parse_feed(r#"<feed xmlns="http://www.w3.org/2005/Atom"><entry>"#).is_err());
    let prefixed = parse_feed(
        r#"<a:feed xmlns:a="http://www.w3.org/2005/Atom"><a:entry><a:id>http://arxiv.org/abs/2101.00001v1</a:id><a:title>T</a:title></a:entry></a:feed>"#,
    )
    .unwrap();
    assert_eq!(prefixed.entries[0].id, "2101.00001v1");
    assert_eq!(prefixed.total, None);
}

#[test]
fn urls() {
    assert_eq!(
        search_url(
            "https://export.arxiv.org",
            "ti:quantum AND au:Ng",
            5,
            Sort::Submitted
        ),
        "https://export.arxiv.org/api/query?search_query=ti%3Aquantum%20AND%20au%3ANg\
         &start=0&max_results=5&sortBy=submittedDate&sortOrder=descending"
    );
    assert_eq!(Sort::Updated.api_value(), "lastUpdatedDate");
    assert_eq!(Sort::default().api_value(), "relevance");
    assert_eq!(encode_component("a&b=c/é"), "a%26b%3Dc%2F%C3%A9");
    assert_eq!(
        id_url("http://127.0.0.1:9", "hep-th/9901001"),
        "http://127.0.0.1:9/api/query?id_list=hep-th/9901001"
    );
}

#[test]
fn config_and_bind() {
    assert_eq!(
        ArxivConfig::from_value(&json!({})).unwrap().base_url(),
        "https://export.arxiv.org"
    );
    let c = ArxivConfig::from_value(&json!({"baseUrl": "http://127.0.0.1:8080/"})).unwrap();
    assert_eq!(c.base_url(), "http://127.0.0.1:8080");
    assert!(Arxiv::bind(&json!({"baseUrl": "https://mirror.example/arxiv"})).is_ok());
    for bad in [
        json!({"baseUrl": "ftp://export.arxiv.org"}),
        json!({"baseUrl": "export.arxiv.org"}),
        json!({"baseUrl": "https://"}),
        json!({"baseUrl": "https://x/?q=1"}),
        json!({"baseUrl": "https://user@x/"}),
        json!({"baseUrl": 5}),
        json!({"other": true}),
    ] {
        assert!(Arxiv::bind(&bad).is_err(), "{bad}");
    }
}
