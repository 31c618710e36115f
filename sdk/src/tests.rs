//! Native unit tests: manifest rules (CONTRACT.md §1) and the Guest glue.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::__private::Adapter;
use crate::bindings::spring::connector::types as wit;
use crate::bindings::Guest;
use crate::*;

#[derive(Debug, Deserialize, Serialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to echo.
    message: String,
}

fn echo(_: &CallContext, args: EchoArgs) -> Result<EchoArgs, ToolError> {
    Ok(args)
}

fn echo_tool(name: &'static str) -> Tool {
    Tool::new(name, "Echo", echo)
}

fn err(m: Manifest) -> ManifestError {
    m.validate().expect_err("manifest should be rejected")
}

#[test]
fn grammar_helpers() {
    assert!(is_tool_id("acme.echo"));
    assert!(is_tool_id("a.b_1.c9"));
    for bad in [
        "",
        "acme",
        "acme.",
        ".echo",
        "acme..echo",
        "Acme.Echo",
        "acme/echo",
        "acme.9x",
        "acme.e-x",
    ] {
        assert!(!is_tool_id(bad), "{bad}");
    }
    assert!(is_slug("acme"));
    assert!(is_slug("my-conn_2"));
    assert!(is_slug(&format!("a{}", "b".repeat(62))));
    for bad in [
        "",
        "Bad Slug",
        "1acme",
        "-a",
        "acme.x",
        &format!("a{}", "b".repeat(63)),
    ] {
        assert!(!is_slug(bad), "{bad}");
    }
    assert!(is_id_segment("acme_2"));
    assert!(!is_id_segment("acme-2"));
    assert!(!is_id_segment(""));
}

#[test]
fn valid_manifest_keeps_order_and_qualifies_names() {
    let m = Manifest::new("acme")
        .tool(echo_tool("zeta"))
        .tool(echo_tool("acme.alpha"))
        .tool(echo_tool("mid"));
    assert_eq!(m.validate(), Ok(()));
    assert_eq!(m.tool_ids(), ["acme.zeta", "acme.alpha", "acme.mid"]);
    assert!(m.find_tool("acme.alpha").is_some());
    assert!(m.find_tool("acme.mid").is_some());
    assert!(m.find_tool("mid").is_none());
    assert!(m.find_tool("other.mid").is_none());
    assert!(m.find_tool("acmemid").is_none());
}

#[test]
fn explicit_namespace_is_used() {
    let m = Manifest::new("my-conn")
        .namespace("mine")
        .tool(echo_tool("echo"));
    assert_eq!(m.validate(), Ok(()));
    assert_eq!(m.tool_ids(), ["mine.echo"]);
}

#[test]
fn empty_tool_list_is_fine() {
    assert_eq!(Manifest::new("acme").validate(), Ok(()));
}

#[test]
fn tool_outside_namespace_is_rejected() {
    let e = err(Manifest::new("acme").tool(echo_tool("other.echo")));
    assert_eq!(
        e,
        ManifestError::ToolOutsideNamespace {
            id: "other.echo".into(),
            namespace: "acme".into()
        }
    );
    let text = e.to_string();
    assert!(
        text.contains("other.echo") && text.contains("acme."),
        "{text}"
    );
    // A prefix that is not a whole segment is outside too.
    assert!(matches!(
        err(Manifest::new("acme").tool(echo_tool("acmex.echo"))),
        ManifestError::ToolOutsideNamespace { .. }
    ));
}

#[test]
fn sv_namespace_is_rejected() {
    assert_eq!(
        err(Manifest::new("sv").tool(echo_tool("echo"))),
        ManifestError::ReservedNamespace("sv".into())
    );
    let e = err(Manifest::new("platformish").namespace("sv"));
    assert_eq!(e, ManifestError::ReservedNamespace("sv".into()));
    assert!(e.to_string().contains("`sv`"));
}

#[test]
fn duplicate_ids_are_rejected() {
    let e = err(Manifest::new("acme")
        .tool(echo_tool("echo"))
        .tool(echo_tool("other"))
        .tool(echo_tool("acme.echo")));
    assert_eq!(e, ManifestError::DuplicateToolId("acme.echo".into()));
    assert!(e.to_string().contains("acme.echo"));
}

#[test]
fn uppercase_id_is_rejected() {
    let e = err(Manifest::new("acme").tool(echo_tool("Acme.Echo")));
    assert_eq!(e, ManifestError::InvalidToolId("Acme.Echo".into()));
    let text = e.to_string();
    assert!(
        text.contains("Acme.Echo") && text.contains("[a-z]"),
        "{text}"
    );
}

#[test]
fn slash_id_is_rejected() {
    assert_eq!(
        err(Manifest::new("acme").tool(echo_tool("acme/echo"))),
        ManifestError::InvalidToolId("acme.acme/echo".into())
    );
    assert_eq!(
        err(Manifest::new("acme")
            .tool(echo_tool("acme/echo"))
            .unchecked()),
        ManifestError::InvalidToolId("acme/echo".into())
    );
}

#[test]
fn id_without_namespace_is_rejected() {
    // Through the normal API a dot-less name is relative, so `acme_echo` only reaches
    // the host as a bare id through the (test-only) unchecked escape hatch.
    let relative = Manifest::new("acme").tool(echo_tool("acme_echo"));
    assert_eq!(relative.tool_ids(), ["acme.acme_echo"]);
    assert_eq!(
        err(Manifest::new("acme")
            .tool(echo_tool("acme_echo"))
            .unchecked()),
        ManifestError::InvalidToolId("acme_echo".into())
    );
}

#[test]
fn bad_slugs_and_namespaces_are_rejected() {
    assert_eq!(
        err(Manifest::new("Bad Slug").namespace("bad")),
        ManifestError::InvalidSlug("Bad Slug".into())
    );
    let e = err(Manifest::new("my-conn"));
    assert_eq!(
        e,
        ManifestError::InvalidNamespace {
            namespace: "my-conn".into(),
            from_slug: true
        }
    );
    assert!(e.to_string().contains("Manifest::namespace"));
    assert!(matches!(
        err(Manifest::new("acme").namespace("a.b")),
        ManifestError::InvalidNamespace {
            from_slug: false,
            ..
        }
    ));
}

#[test]
fn typed_args_produce_a_schema() {
    let m = Manifest::new("acme").tool(echo_tool("echo"));
    let schema = m.tool_list()[0].input_schema();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["message"]["type"], "string");
    assert_eq!(
        schema["properties"]["message"]["description"],
        "The text to echo."
    );
    assert_eq!(schema["required"], json!(["message"]));
    assert!(schema.get("title").is_none());

    let none = schema_of::<NoArgs>();
    assert_eq!(none["type"], "object");
    assert_eq!(none["additionalProperties"], false);
    assert_eq!(none["properties"], json!({}));
    assert!(none.get("description").is_none());
}

#[test]
fn annotations_builders() {
    let t = echo_tool("echo").read_only().idempotent();
    assert_eq!(t.hints(), Annotations::new().read_only().idempotent());
    let t = echo_tool("echo").destructive().open_world();
    assert!(t.hints().destructive && t.hints().open_world && !t.hints().read_only);
}

// ---- the Guest glue ------------------------------------------------------------------

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct TestConfig {
    routes: Option<Vec<String>>,
}

struct TestConnector;

impl Connector for TestConnector {
    fn manifest() -> Manifest {
        Manifest::new("test")
            .display_name("Test")
            .version("1.2.3")
            .config::<TestConfig>()
            .webhook(WebhookScheme::StandardWebhooks)
            .allowed_host("example.com")
            .tool(echo_tool("echo").read_only())
            .tool(Tool::raw(
                "raw",
                "Raw pass-through",
                || json!({"type": "object"}),
                |_, args| Ok(args.to_owned()),
            ))
            .tool(Tool::new(
                "whoami",
                "The caller",
                |ctx: &CallContext, _: NoArgs| {
                    Ok::<_, ToolError>(json!({
                        "unit": ctx.binding.unit,
                        "agent": ctx.agent,
                        "call": ctx.call_id,
                        "config": ctx.binding.config,
                    }))
                },
            ))
            .tool(Tool::new("fail", "Fails", |_: &CallContext, _: NoArgs| {
                Err::<(), _>(ToolError::unauthorized("nope"))
            }))
            .tool(
                Tool::new("picture", "A picture", |_: &CallContext, _: NoArgs| {
                    ToolOutput::new()
                        .text("look:")
                        .image(vec![1u8, 2, 3], "image/png")
                        .audio(vec![4u8], "audio/wav")
                        .resource_link(
                            ResourceLink::new("https://example.com/p", "p")
                                .title("P")
                                .description("the p")
                                .mime_type("image/png")
                                .size(3),
                        )
                        .resource_text("test://t", "text/plain", "hello")
                        .resource_blob("test://b", "application/octet-stream", vec![9u8])
                        .structured(&json!({"pixels": 3}))
                })
                .output::<Pixels>(),
            )
    }

    fn bind(config: &Value) -> Result<Vec<String>, String> {
        let config: TestConfig = TestConfig::deserialize(config).map_err(|e| e.to_string())?;
        Ok(config.routes.unwrap_or_default())
    }

    fn translate_webhook(hook: &Webhook) -> Result<Vec<Message>, String> {
        let event = hook.header("X-Event").ok_or("no event header")?;
        let payload: Value = hook.json()?;
        Ok(vec![Message::new("r1", event, payload).thread_key("t")])
    }

    fn accept(_binding: &Binding, message: &Message) -> bool {
        message.kind != "rejected"
    }

    fn runtime_context(binding: &Binding) -> Result<AgentContext, String> {
        Ok(AgentContext::default()
            .env("SPRING_CONNECTOR_TEST_UNIT", binding.unit.clone())
            .file(".spring/connectors/test/a.txt", "hi"))
    }
}

type T = Adapter<TestConnector>;

#[derive(Serialize, schemars::JsonSchema)]
struct Pixels {
    pixels: u32,
}

fn ctx(config: &str) -> wit::CallContext {
    wit::CallContext {
        binding: wit::Binding {
            unit: "unit-1".into(),
            config: config.into(),
        },
        agent: Some("agent-7".into()),
        call_id: "call-1".into(),
    }
}

#[test]
fn describe_emits_the_wit_manifest() {
    let m = T::describe_connector();
    assert_eq!(m.slug, "test");
    assert_eq!(m.tool_namespace, None);
    assert_eq!(m.display_name, "Test");
    assert_eq!(m.version, "1.2.3");
    assert_eq!(m.allowed_hosts, ["example.com"]);
    assert!(matches!(
        m.webhook,
        Some(wit::WebhookScheme::StandardWebhooks)
    ));
    let names: Vec<_> = m.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "test.echo",
            "test.raw",
            "test.whoami",
            "test.fail",
            "test.picture"
        ]
    );
    assert_eq!(m.tools[0].output_schema, None);
    let output: Value = serde_json::from_str(m.tools[4].output_schema.as_deref().unwrap()).unwrap();
    assert_eq!(output["type"], "object");
    assert_eq!(output["properties"]["pixels"]["type"], "integer");
    assert!(m.tools[0].annotations.read_only);
    let schema: Value = serde_json::from_str(&m.tools[0].input_schema).unwrap();
    assert_eq!(schema["properties"]["message"]["type"], "string");
    let config: Value = serde_json::from_str(&m.config_schema).unwrap();
    assert_eq!(config["additionalProperties"], false);
    assert_eq!(
        config["properties"]["routes"]["type"],
        json!(["array", "null"])
    );
}

#[test]
fn describe_panics_on_an_invalid_manifest() {
    struct Broken;
    impl Connector for Broken {
        fn manifest() -> Manifest {
            Manifest::new("broken").tool(echo_tool("other.echo"))
        }
    }
    let panic = std::panic::catch_unwind(Adapter::<Broken>::describe_connector).unwrap_err();
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("other.echo"), "{text}");

    struct Unchecked;
    impl Connector for Unchecked {
        fn manifest() -> Manifest {
            Manifest::new("bad")
                .unchecked()
                .tool(echo_tool("acme_echo"))
        }
    }
    let m = Adapter::<Unchecked>::describe_connector();
    assert_eq!(m.tools[0].name, "acme_echo");
}

#[test]
fn call_tool_dispatches_by_id() {
    let json_only = |tool: &str, args: &str, config: &str| {
        let out = T::call_tool(ctx(config), tool.into(), args.into()).unwrap();
        assert!(out.content.is_empty(), "{tool}: {:?}", out.content);
        out.structured.unwrap()
    };
    assert_eq!(
        json_only("test.echo", r#"{"message":"hi"}"#, "{}"),
        r#"{"message":"hi"}"#
    );

    let raw = r#"{ "x" : [1, 2],  "y":"z" }"#;
    assert_eq!(json_only("test.raw", raw, "{}"), raw);

    let who = json_only("test.whoami", "{}", r#"{"routes":["a"]}"#);
    let who: Value = serde_json::from_str(&who).unwrap();
    assert_eq!(
        who,
        json!({"unit": "unit-1", "agent": "agent-7", "call": "call-1", "config": {"routes": ["a"]}})
    );
}

#[test]
fn content_blocks_reach_the_host_in_order() {
    let out = T::call_tool(ctx("{}"), "test.picture".into(), "{}".into()).unwrap();
    assert_eq!(out.structured.as_deref(), Some(r#"{"pixels":3}"#));
    let kinds: Vec<String> = out
        .content
        .iter()
        .map(|b| match b {
            wit::ContentBlock::Text(t) => format!("text {t}"),
            wit::ContentBlock::Image(m) => format!("image {} {:?}", m.mime_type, m.data),
            wit::ContentBlock::Audio(m) => format!("audio {} {:?}", m.mime_type, m.data),
            wit::ContentBlock::ResourceLink(l) => format!(
                "link {} {} {:?} {:?} {:?} {:?}",
                l.uri, l.name, l.title, l.description, l.mime_type, l.size
            ),
            wit::ContentBlock::Resource(r) => match &r.contents {
                wit::ResourceContents::Text(t) => format!("text resource {} {t}", r.uri),
                wit::ResourceContents::Blob(b) => format!("blob resource {} {b:?}", r.uri),
            },
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "text look:",
            "image image/png [1, 2, 3]",
            "audio audio/wav [4]",
            r#"link https://example.com/p p Some("P") Some("the p") Some("image/png") Some(3)"#,
            "text resource test://t hello",
            "blob resource test://b [9]",
        ]
    );
}

#[test]
fn call_tool_errors() {
    match T::call_tool(ctx("{}"), "test.nope".into(), "{}".into()) {
        Err(wit::ToolError::Failed(m)) => assert!(m.contains("test.nope"), "{m}"),
        other => panic!("{other:?}"),
    }
    match T::call_tool(ctx("{}"), "test.echo".into(), r#"{"message": 5}"#.into()) {
        Err(wit::ToolError::InvalidArguments(m)) => assert!(m.contains("invalid type"), "{m}"),
        other => panic!("{other:?}"),
    }
    match T::call_tool(ctx("{}"), "test.whoami".into(), r#"{"extra": 1}"#.into()) {
        Err(wit::ToolError::InvalidArguments(m)) => assert!(m.contains("extra"), "{m}"),
        other => panic!("{other:?}"),
    }
    match T::call_tool(ctx("{}"), "test.echo".into(), "not json".into()) {
        Err(wit::ToolError::InvalidArguments(_)) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        T::call_tool(ctx("{}"), "test.fail".into(), "{}".into()),
        Err(wit::ToolError::Unauthorized(m)) if m == "nope"
    ));
    assert!(matches!(
        T::call_tool(
            ctx("{oops"),
            "test.echo".into(),
            r#"{"message":"x"}"#.into()
        ),
        Err(wit::ToolError::Failed(_))
    ));
}

#[test]
fn bind_translate_accept_runtime_context() {
    assert_eq!(
        T::validate_binding(r#"{"routes":["a","b"]}"#.into()),
        Ok(vec!["a".into(), "b".into()])
    );
    assert!(T::validate_binding(r#"{"nope":1}"#.into()).is_err());
    assert!(T::validate_binding("{".into())
        .unwrap_err()
        .contains("not valid JSON"));

    let hook = wit::Webhook {
        headers: vec![("x-event".into(), "issues.opened".into())],
        body: br#"{"n":1}"#.to_vec(),
    };
    let messages = T::translate_webhook(hook).unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].kind, "issues.opened");
    assert_eq!(messages[0].thread_key.as_deref(), Some("t"));
    assert_eq!(messages[0].payload, r#"{"n":1}"#);
    assert!(T::translate_webhook(wit::Webhook {
        headers: vec![],
        body: vec![]
    })
    .is_err());

    let binding = || wit::Binding {
        unit: "u".into(),
        config: "{}".into(),
    };
    let message = |kind: &str, payload: &str| wit::Message {
        route: "r".into(),
        kind: kind.into(),
        thread_key: None,
        payload: payload.into(),
    };
    assert!(T::accepts_message(binding(), message("ok", "{}")));
    assert!(!T::accepts_message(binding(), message("rejected", "{}")));
    assert!(!T::accepts_message(binding(), message("ok", "{not json")));

    let rc = T::runtime_context(binding()).unwrap();
    assert_eq!(
        rc.env,
        [("SPRING_CONNECTOR_TEST_UNIT".to_string(), "u".to_string())]
    );
    assert_eq!(rc.files.len(), 1);
}

#[test]
fn default_trait_methods() {
    struct Minimal;
    impl Connector for Minimal {
        fn manifest() -> Manifest {
            Manifest::new("minimal")
        }
    }
    type M = Adapter<Minimal>;
    let m = M::describe_connector();
    assert!(m.tools.is_empty());
    assert_eq!(m.display_name, "minimal");
    let config: Value = serde_json::from_str(&m.config_schema).unwrap();
    assert_eq!(config["type"], "object");
    assert_eq!(M::validate_binding("{}".into()), Ok(vec![]));
    assert!(M::translate_webhook(wit::Webhook {
        headers: vec![],
        body: vec![]
    })
    .unwrap()
    .is_empty());
    let b = wit::Binding {
        unit: "u".into(),
        config: "{}".into(),
    };
    let rc = M::runtime_context(b).unwrap();
    assert!(rc.env.is_empty() && rc.files.is_empty());
}

#[test]
fn webhook_and_binding_helpers() {
    let hook = Webhook {
        headers: vec![
            ("x-github-event".into(), "push".into()),
            ("x-github-event".into(), "second".into()),
        ],
        body: b"{}".to_vec(),
    };
    assert_eq!(hook.header("X-GitHub-Event"), Some("push"));
    assert_eq!(hook.header("missing"), None);

    let b = Binding {
        unit: "u".into(),
        config: json!({"routes": ["x"]}),
    };
    let c: TestConfig = b.config_as().unwrap();
    assert_eq!(c.routes.unwrap(), ["x"]);
    let bad = Binding {
        unit: "u".into(),
        config: json!({"other": 1}),
    };
    assert!(bad.config_as::<TestConfig>().is_err());
}

#[test]
fn host_imports_fail_cleanly_natively() {
    log::info("native log line");
    assert!(github::installation_token(1).is_err());
}
