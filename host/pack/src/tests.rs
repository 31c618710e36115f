//! The mapping rules, the refusals (each with its line and field), OpenAPI compilation,
//! MCP discovery against a local server that enforces the protocol, and the reference
//! examples.

use std::path::Path;

use declarative_plan::{Backend, Body, Encoding, HttpRequest, McpCall, Plan, Ref, Root, Segment};
use serde_json::{json, Value};

use super::*;

const HEAD: &str = "kind: commonagents.info/v1beta2/tool\nnamespace: acme\nname: acme-tool\ndescription: Test tool.\n";

fn pack_with(yaml: &str, options: &PackOptions) -> Result<Packed, PackError> {
    pack_str(yaml, "TOOL.yaml", Path::new("."), options)
}

fn plan(yaml: &str) -> Plan {
    plan_with(yaml, &PackOptions::default())
}

fn plan_with(yaml: &str, options: &PackOptions) -> Plan {
    match pack_with(yaml, options) {
        Ok(p) => p.plan,
        Err(e) => panic!("expected the manifest to pack, got:\n{e}\n--- manifest:\n{yaml}"),
    }
}

fn refused(yaml: &str) -> PackError {
    refused_with(yaml, &PackOptions::default())
}

fn refused_with(yaml: &str, options: &PackOptions) -> PackError {
    match pack_with(yaml, options) {
        Ok(p) => panic!("expected a refusal, got a plan: {:?}", p.plan),
        Err(e) => {
            assert_eq!(e.kind, PackErrorKind::Invalid, "{e}");
            e
        }
    }
}

/// The (1-based) line of the only line of `yaml` containing `needle`.
fn line_of(yaml: &str, needle: &str) -> usize {
    let lines: Vec<usize> = yaml
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "`{needle}` must be on exactly one line");
    lines[0]
}

/// Asserts a problem at `line` in `field` whose message contains `text`.
fn has_problem(e: &PackError, line: usize, field: &str, text: &str) {
    assert!(
        e.problems
            .iter()
            .any(|p| p.line == line && p.field == field && p.message.contains(text)),
        "no problem at line {line} in `{field}` containing `{text}`; got:\n{e}"
    );
}

fn schema(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).expect("schemas are JSON")
}

fn http(plan: &Plan, i: usize) -> &HttpRequest {
    match &plan.tools[i].backend {
        Backend::Http(h) => h,
        other => panic!("not an HTTP tool: {other:?}"),
    }
}

fn arg(key: &str) -> Ref {
    Ref {
        root: Root::Argument,
        key: key.into(),
        path: vec![],
    }
}

fn config(key: &str) -> Ref {
    Ref {
        root: Root::Config,
        key: key.into(),
        path: vec![],
    }
}

fn seg(value: Ref, encoding: Encoding) -> Segment {
    Segment::Ref { value, encoding }
}

fn lit(s: &str) -> Segment {
    Segment::Literal(s.into())
}

/// One GET action named `a` on `url`, after `extra` top-level YAML.
fn one_get(extra: &str, url: &str) -> String {
    format!(
        "{HEAD}{extra}actions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http:\n        method: GET\n        url: \"{url}\"\n"
    )
}

// ---------------------------------------------------------------------------------------
// Mapping rules.

#[test]
fn slug_namespace_description_and_version() {
    let yaml = one_get("", "https://api.example.com/x");
    let p = plan(&yaml);
    assert_eq!(
        (
            p.slug.as_str(),
            p.namespace.as_str(),
            p.display_name.as_str()
        ),
        ("acme-tool", "acme", "acme-tool")
    );
    assert_eq!(p.description, "Test tool.");
    assert_eq!(p.format, declarative_plan::FORMAT);
    // The default version is the digest of the plan (its JSON with an empty version).
    let mut unversioned = p.clone();
    unversioned.version = String::new();
    let digest = hex::encode(sha2::Sha256::digest(
        serde_json::to_vec(&unversioned).expect("plan JSON"),
    ));
    assert_eq!(p.version, format!("0.0.0+{}", &digest[..12]));
    let p = plan_with(
        &yaml,
        &PackOptions {
            version: Some("1.2.3".into()),
            ..PackOptions::default()
        },
    );
    assert_eq!(p.version, "1.2.3");

    let bad = yaml.replace("name: acme-tool", "name: Acme_Tool!");
    let e = refused(&bad);
    has_problem(&e, 3, "name", "not a valid connector slug");
    let bad = yaml.replace("namespace: acme", "namespace: sv");
    has_problem(&refused(&bad), 2, "namespace", "reserved");
    let bad = yaml.replace("namespace: acme", "namespace: a-b");
    has_problem(&refused(&bad), 2, "namespace", "not a valid tool namespace");
    let bad = yaml.replace(
        "commonagents.info/v1beta2/tool",
        "commonagents.info/v1beta1/agent",
    );
    has_problem(&refused(&bad), 1, "kind", "must be");
}

#[test]
fn settings_become_binding_config_and_secret_like_ones_are_write_only() {
    let yaml = one_get(
        "settings:\n  properties:\n    api.token: {type: string}\n    base_path: {type: string, default: v1}\n    login: {type: string, format: password}\n    hidden: {type: string, writeOnly: true}\n    My_ApiKey: {type: string}\n    region: {type: string}\n",
        "https://api.example.com/{settings.base_path}/{settings.region}?k={settings.api.token}&l={settings.login}&h={settings.hidden}&m={settings.My_ApiKey}",
    );
    let p = plan(&yaml);
    let s = schema(&p.config_schema);
    assert_eq!(s["type"], "object");
    assert_eq!(s["additionalProperties"], false);
    for secret in ["api.token", "login", "hidden", "My_ApiKey"] {
        assert_eq!(s["properties"][secret]["writeOnly"], true, "{secret}: {s}");
    }
    for plain in ["base_path", "region"] {
        assert!(
            s["properties"][plain].get("writeOnly").is_none(),
            "{plain}: {s}"
        );
    }
    let mut secrets = p.secret_keys.clone();
    secrets.sort();
    assert_eq!(secrets, ["My_ApiKey", "api.token", "hidden", "login"]);
    // Required: everything without a default.
    assert_eq!(
        s["required"],
        json!(["api.token", "login", "hidden", "My_ApiKey", "region"])
    );
    assert_eq!(p.config_defaults.get("base_path"), Some(&json!("v1")));
    // The setting keeps its dotted key, and lands in the URL as config.
    assert_eq!(
        http(&p, 0).url[3],
        seg(config("region"), Encoding::Path),
        "{:?}",
        http(&p, 0).url
    );

    // An explicit `required` list wins.
    let yaml = one_get(
        "settings:\n  required: [a]\n  properties:\n    a: {type: string}\n    b: {type: string}\n",
        "https://api.example.com/{settings.a}/{settings.b}",
    );
    assert_eq!(schema(&plan(&yaml).config_schema)["required"], json!(["a"]));
}

#[test]
fn require_binding_parameters_are_config_and_absent_from_every_input_schema() {
    let yaml = format!(
        "{HEAD}parameters:\n  properties:\n    owner: {{type: string, require_binding: true}}\n    team: {{type: string, require_binding: true, default: core}}\n    q: {{type: string}}\nactions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http: {{method: GET, url: \"https://api.example.com/{{parameters.owner}}/{{parameters.team}}?q={{parameters.q}}\"}}\n  - name: b\n    description: B.\n    parameters:\n      properties:\n        n: {{type: integer}}\n    execute:\n      stateless_http: {{method: POST, url: \"https://api.example.com/b\", body: {{n: \"{{parameters.n}}\", owner: \"{{parameters.owner}}\"}}}}\n"
    );
    let p = plan(&yaml);
    let s = schema(&p.config_schema);
    assert_eq!(s["properties"]["owner"], json!({"type": "string"}));
    assert_eq!(
        s["properties"]["team"],
        json!({"type": "string", "default": "core"})
    );
    assert_eq!(
        s["required"],
        json!(["owner"]),
        "a default makes it optional"
    );
    assert_eq!(p.binding_parameters, ["owner", "team"]);
    assert_eq!(p.config_defaults.get("team"), Some(&json!("core")));
    for tool in &p.tools {
        let input = schema(&tool.input_schema);
        assert!(input["properties"].get("owner").is_none(), "{input}");
        assert!(input["properties"].get("team").is_none(), "{input}");
        assert!(!input.to_string().contains("require_binding"), "{input}");
    }
    assert_eq!(http(&p, 0).url[1], seg(config("owner"), Encoding::Path));
    assert_eq!(http(&p, 0).url[5], seg(arg("q"), Encoding::Query));
    assert_eq!(
        http(&p, 1).body,
        Some(Body::Object(vec![
            ("n".into(), Body::Value(arg("n"))),
            ("owner".into(), Body::Value(config("owner"))),
        ]))
    );
}

#[test]
fn root_parameters_merge_into_every_action_with_required_and_defaults() {
    let yaml = format!(
        "{HEAD}parameters:\n  properties:\n    path: {{type: string}}\n    branch: {{type: string, default: main}}\nactions:\n  - name: read\n    description: R.\n    execute:\n      stateless_http: {{method: GET, url: \"https://api.example.com/{{parameters.path}}?ref={{parameters.branch}}\"}}\n  - name: write\n    description: W.\n    parameters:\n      required: []\n      properties:\n        content: {{type: string}}\n        mode: {{type: string, default: fast}}\n    execute:\n      stateless_http: {{method: PUT, url: \"https://api.example.com/{{parameters.path}}\", body: {{c: \"{{parameters.content}}\", m: \"{{parameters.mode}}\", b: \"{{parameters.branch}}\"}}}}\n"
    );
    let p = plan(&yaml);
    let read = schema(&p.tools[0].input_schema);
    assert_eq!(
        read,
        json!({"type": "object", "additionalProperties": false, "required": ["path"],
               "properties": {"path": {"type": "string"}, "branch": {"type": "string", "default": "main"}}})
    );
    let write = schema(&p.tools[1].input_schema);
    assert_eq!(
        write["properties"],
        json!({"path": {"type": "string"}, "branch": {"type": "string", "default": "main"},
               "content": {"type": "string"}, "mode": {"type": "string", "default": "fast"}})
    );
    // Root: without default; the action's explicit (empty) `required` wins for its own.
    assert_eq!(write["required"], json!(["path"]));
    // Each tool has its own defaults; the plan's are the root ones (what filters see).
    assert_eq!(
        Value::Object(p.tools[0].argument_defaults.clone()),
        json!({"branch": "main"})
    );
    assert_eq!(
        Value::Object(p.tools[1].argument_defaults.clone()),
        json!({"branch": "main", "mode": "fast"})
    );
    assert_eq!(
        Value::Object(p.argument_defaults.clone()),
        json!({"branch": "main"})
    );
}

#[test]
fn two_actions_may_give_one_parameter_name_different_defaults() {
    let yaml = format!(
        "{HEAD}actions:\n  - name: a\n    description: A.\n    parameters:\n      properties:\n        n: {{type: integer, default: 1}}\n    execute:\n      stateless_http: {{method: GET, url: \"https://x.example.com/{{parameters.n}}\"}}\n  - name: b\n    description: B.\n    parameters:\n      properties:\n        n: {{type: integer, default: 2}}\n    execute:\n      stateless_http: {{method: GET, url: \"https://x.example.com/{{parameters.n}}\"}}\n"
    );
    let p = plan(&yaml);
    assert_eq!(
        Value::Object(p.tools[0].argument_defaults.clone()),
        json!({"n": 1})
    );
    assert_eq!(
        Value::Object(p.tools[1].argument_defaults.clone()),
        json!({"n": 2})
    );
    assert!(
        p.argument_defaults.is_empty(),
        "an action's defaults are not the root's: {:?}",
        p.argument_defaults
    );
    // A default that does not match its own schema.
    let yaml = one_get(
        "parameters:\n  properties:\n    n: {type: integer, default: many}\n",
        "https://x.example.com/{parameters.n}",
    );
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "default: many"),
        "parameters.properties.n.default",
        "does not match",
    );
}

#[test]
fn auth_github_adds_a_required_installation_id() {
    let yaml = format!(
        "{HEAD}actions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http:\n        method: GET\n        url: https://api.github.com/user\n        headers:\n          Authorization: \"Bearer {{auth.github()}}\"\n"
    );
    let p = plan(&yaml);
    let s = schema(&p.config_schema);
    assert_eq!(s["properties"]["installationId"]["type"], "integer");
    assert_eq!(s["properties"]["installationId"]["minimum"], 1);
    assert_eq!(
        s["properties"]["installationId"]["x-github-installation"],
        true
    );
    assert_eq!(s["required"], json!(["installationId"]));
    assert_eq!(p.github_installation_key.as_deref(), Some("installationId"));
    assert_eq!(
        http(&p, 0).headers,
        vec![(
            "Authorization".to_string(),
            vec![lit("Bearer "), Segment::GithubToken]
        )]
    );
    // Without auth.github(): no installation id.
    let p = plan(&one_get("", "https://api.github.com/user"));
    assert!(p.github_installation_key.is_none());
    assert!(schema(&p.config_schema)["properties"]
        .get("installationId")
        .is_none());
    // A declared `installationId` clashes.
    let clash = yaml.replace(
        "actions:",
        "settings:\n  properties:\n    installationId: {type: integer}\nactions:",
    );
    has_problem(
        &refused(&clash),
        line_of(&clash, "installationId: {type"),
        "settings.properties.installationId",
        "rename",
    );
    // Other providers are refused.
    let other = yaml.replace("auth.github()", "auth.gitlab()");
    has_problem(
        &refused(&other),
        line_of(&other, "Authorization"),
        "actions[0].execute.stateless_http.headers.Authorization",
        "unknown auth provider `auth.gitlab()`",
    );
}

#[test]
fn actions_become_tools_in_declared_order() {
    let mut yaml = format!("{HEAD}actions:\n");
    for name in ["zeta", "alpha", "mid"] {
        yaml.push_str(&format!("  - name: {name}\n    description: {name}.\n    execute:\n      stateless_http: {{method: GET, url: \"https://x.example.com/{name}\"}}\n"));
    }
    let p = plan(&yaml);
    let ids: Vec<&str> = p.tools.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["acme.zeta", "acme.alpha", "acme.mid"]);
    assert_eq!(p.tools[1].description, "alpha.");
    let dup = yaml.replace("name: mid", "name: zeta");
    has_problem(
        &refused(&dup),
        line_of(&dup, "description: mid.") - 1,
        "actions[2].name",
        "already named `zeta`",
    );
    let bad = yaml.replace("name: mid", "name: Mid-1");
    has_problem(
        &refused(&bad),
        line_of(&bad, "Mid-1"),
        "actions[2].name",
        "not a valid action name",
    );
}

#[test]
fn annotations_follow_the_method() {
    let mut yaml = format!("{HEAD}actions:\n");
    for (i, m) in ["GET", "HEAD", "POST", "PUT", "PATCH", "delete"]
        .iter()
        .enumerate()
    {
        yaml.push_str(&format!("  - name: t{i}\n    description: T.\n    execute:\n      stateless_http: {{method: {m}, url: \"https://x.example.com/\"}}\n"));
    }
    let p = plan(&yaml);
    let a: Vec<(bool, bool, bool, bool)> = p
        .tools
        .iter()
        .map(|t| {
            let a = t.annotations;
            (a.read_only, a.destructive, a.idempotent, a.open_world)
        })
        .collect();
    assert_eq!(
        a,
        [
            (true, false, true, true),
            (true, false, true, true),
            (false, false, false, true),
            (false, false, true, true),
            (false, false, false, true),
            (false, true, true, true),
        ]
    );
    assert_eq!(http(&p, 5).method, "DELETE");
    let bad = yaml.replace("method: PATCH", "method: \"{parameters.m}\"");
    has_problem(
        &refused(&bad),
        line_of(&bad, "parameters.m"),
        "actions[4].execute.stateless_http.method",
        "literal",
    );
}

#[test]
fn top_level_blocks_are_inherited_and_headers_merge_by_name() {
    let yaml = format!(
        "{HEAD}stateless_http:\n  method: GET\n  url: https://api.example.com/default\n  headers:\n    Accept: application/json\n    X-Team: core\nactions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http:\n        url: https://api.example.com/a\n        headers:\n          accept: text/plain\n          X-Extra: \"1\"\n  - name: b\n    description: B.\n    execute:\n      stateless_http:\n        method: DELETE\n"
    );
    let p = plan(&yaml);
    let a = http(&p, 0);
    assert_eq!(a.method, "GET");
    assert_eq!(a.url, vec![lit("https://api.example.com/a")]);
    assert_eq!(
        a.headers,
        vec![
            ("X-Team".to_string(), vec![lit("core")]),
            ("accept".to_string(), vec![lit("text/plain")]),
            ("X-Extra".to_string(), vec![lit("1")]),
        ]
    );
    let b = http(&p, 1);
    assert_eq!(b.method, "DELETE");
    assert_eq!(b.url, vec![lit("https://api.example.com/default")]);
    assert_eq!(b.headers.len(), 2);
    // A key the top-level block may not have is refused there, with its line.
    let bad = yaml.replace("  method: GET\n", "  method: GET\n  verb: GET\n");
    has_problem(
        &refused(&bad),
        line_of(&bad, "verb"),
        "stateless_http.verb",
        "unknown key `verb`",
    );
}

#[test]
fn templates_compile_to_segments_with_the_right_root_and_encoding() {
    let yaml = format!(
        "{HEAD}settings:\n  properties:\n    base: {{type: string, default: \"https://api.example.com\"}}\n    token: {{type: string}}\nparameters:\n  properties:\n    user: {{type: object}}\n    q: {{type: string}}\nactions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http:\n        method: POST\n        url: \"{{settings.base}}/users/{{parameters.user.login}}/x{{{{1}}}}?q={{parameters.q}}\"\n        headers:\n          X-Agent: \"{{agent.name}} in {{agent.namespace}}\"\n          Authorization: \"token {{settings.token}}\"\n"
    );
    let p = plan(&yaml);
    let h = http(&p, 0);
    assert_eq!(
        h.url,
        vec![
            seg(config("base"), Encoding::Raw),
            lit("/users/"),
            seg(
                Ref {
                    root: Root::Argument,
                    key: "user".into(),
                    path: vec!["login".into()]
                },
                Encoding::Path
            ),
            lit("/x{1}?q="),
            seg(arg("q"), Encoding::Query),
        ]
    );
    let agent = |k: &str| Ref {
        root: Root::Agent,
        key: k.into(),
        path: vec![],
    };
    assert_eq!(
        h.headers[0].1,
        vec![
            seg(agent("name"), Encoding::Raw),
            lit(" in "),
            seg(agent("namespace"), Encoding::Raw)
        ]
    );
    assert_eq!(
        h.headers[1].1,
        vec![lit("token "), seg(config("token"), Encoding::Raw)]
    );
    assert_eq!(p.allowed_hosts, ["api.example.com"]);
    // Longest declared prefix: a setting whose key has dots.
    let yaml = one_get(
        "settings:\n  properties:\n    gh: {type: object}\n    gh.owner: {type: string}\n",
        "https://api.example.com/{settings.gh.owner}/{settings.gh.x}",
    );
    let p = plan(&yaml);
    assert_eq!(http(&p, 0).url[1], seg(config("gh.owner"), Encoding::Path));
    assert_eq!(
        http(&p, 0).url[3],
        seg(
            Ref {
                root: Root::Config,
                key: "gh".into(),
                path: vec!["x".into()]
            },
            Encoding::Path
        )
    );
}

#[test]
fn a_body_string_of_one_reference_keeps_its_json_type() {
    let yaml = format!(
        "{HEAD}parameters:\n  properties:\n    n: {{type: integer}}\n    tags: {{type: array, default: []}}\nactions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http:\n        method: POST\n        url: https://x.example.com/\n        body:\n          count: \"{{parameters.n}}\"\n          text: \"n={{parameters.n}}\"\n          fixed: {{a: [1, \"{{{{x}}}}\"], b: null}}\n          list: [\"{{parameters.tags}}\", 2]\n"
    );
    let p = plan(&yaml);
    assert_eq!(
        http(&p, 0).body,
        Some(Body::Object(vec![
            ("count".into(), Body::Value(arg("n"))),
            (
                "text".into(),
                Body::Text(vec![lit("n="), seg(arg("n"), Encoding::Raw)])
            ),
            (
                "fixed".into(),
                Body::Literal(json!({"a": [1, "{x}"], "b": null}))
            ),
            (
                "list".into(),
                Body::Array(vec![Body::Value(arg("tags")), Body::Literal(json!(2))])
            ),
        ]))
    );
}

#[test]
fn allowed_hosts_are_derived_from_urls_settings_and_flags() {
    let yaml = format!(
        "{HEAD}settings:\n  properties:\n    region: {{type: string, enum: [\"eu.example.com\", \"us.example.com\"]}}\n    base: {{type: string, default: \"https://API.example.org:8443/v2\"}}\n    any: {{type: string}}\nactions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http: {{method: GET, url: \"https://{{settings.region}}/x\"}}\n  - name: b\n    description: B.\n    execute:\n      stateless_http: {{method: GET, url: \"{{settings.base}}/y\"}}\n  - name: c\n    description: C.\n    execute:\n      stateless_http: {{method: GET, url: \"http://literal.example.net:8080/z\"}}\n"
    );
    let p = plan(&yaml);
    assert_eq!(
        p.allowed_hosts,
        [
            "eu.example.com",
            "us.example.com",
            "api.example.org",
            "literal.example.net"
        ]
    );
    // A host from a setting with no default or enum: refused unless --allow-host.
    let with_any = format!(
        "{yaml}  - name: d\n    description: D.\n    execute:\n      stateless_http: {{method: GET, url: \"https://{{settings.any}}/w\"}}\n"
    );
    let e = refused(&with_any);
    has_problem(
        &e,
        line_of(&with_any, "settings.any}/w"),
        "actions[3].execute.stateless_http.url",
        "pass --allow-host HOST or give settings.any a default",
    );
    let p = plan_with(
        &with_any,
        &PackOptions {
            allow_hosts: vec!["Other.Example.com".into()],
            ..PackOptions::default()
        },
    );
    assert_eq!(
        p.allowed_hosts.last().map(String::as_str),
        Some("other.example.com")
    );
    // Only http(s).
    let ftp = one_get("", "ftp://files.example.com/x");
    has_problem(
        &refused(&ftp),
        line_of(&ftp, "ftp://"),
        "actions[0].execute.stateless_http.url",
        "only http and https",
    );
}

#[test]
fn events_become_plan_events_with_filter_paths() {
    let yaml = format!(
        "{HEAD}parameters:\n  properties:\n    repo: {{type: string, require_binding: true}}\nevents:\n  - name: issue.opened\n    message: >\n      {{event.payload.sender.login}} opened\n      #{{event.payload.issue.number}} {{{{new}}}}\n    parameters:\n      properties:\n        label: {{type: string, default: bug}}\n    receive:\n      webhook:\n        secret: \"{{settings.hook_secret}}\"\n        filter: >\n          event.payload.action == 'opened'\n          && has(event.payload.issue.pull_request)\n          && event.payload.issue.labels.exists(l, l.name == parameters.label)\n          && event.payload.repository.full_name == parameters.repo\n          && size(event.payload.issue.title) > 0\n  - name: push\n    message: pushed\n    receive:\n      webhook:\n        secret: \"{{settings.hook_secret}}\"\n        filter: event.payload != null\n  - name: any\n    message: \"{{event.payload.x}}\"\n    receive:\n      webhook:\n        secret: \"{{settings.hook_secret}}\"\n"
    );
    let p = plan(&yaml);
    assert!(p.webhooks);
    assert!(p.tools.is_empty());
    assert_eq!(p.binding_parameters, ["repo", "label"]);
    assert_eq!(p.config_defaults.get("label"), Some(&json!("bug")));
    let s = schema(&p.config_schema);
    assert_eq!(s["required"], json!(["repo"]));
    assert!(s["properties"].get("hook_secret").is_none(), "{s}");
    let e = &p.events[0];
    assert_eq!(e.name, "issue.opened");
    let payload = |k: &str, path: &[&str]| {
        seg(
            Ref {
                root: Root::EventPayload,
                key: k.into(),
                path: path.iter().map(|s| s.to_string()).collect(),
            },
            Encoding::Raw,
        )
    };
    assert_eq!(
        e.message,
        vec![
            payload("sender", &["login"]),
            lit(" opened #"),
            payload("issue", &["number"]),
            lit(" {new}"),
        ]
    );
    let paths = |v: &[&[&str]]| {
        v.iter()
            .map(|p| p.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        e.filter_paths,
        Some(paths(&[
            &["action"],
            &["issue", "pull_request"],
            &["issue", "labels"],
            &["repository", "full_name"],
            &["issue", "title"],
        ]))
    );
    assert!(e
        .filter
        .as_deref()
        .is_some_and(|f| f.starts_with("event.payload.action == 'opened'")));
    // The payload as a whole: no paths.
    assert_eq!(p.events[1].filter_paths, None);
    assert!(p.events[1].filter.is_some());
    // No filter.
    assert_eq!(p.events[2].filter, None);
    assert_eq!(p.events[2].filter_paths, None);
}

// ---------------------------------------------------------------------------------------
// Refusals, each with its line and field.

#[test]
fn unknown_keys_are_refused_with_their_line() {
    let yaml = format!(
        "{HEAD}colour: red\nactions:\n  - name: a\n    description: A.\n    timeout: 3s\n    execute:\n      stateless_http: {{method: GET, url: \"https://x.example.com/\", retries: 3}}\nevents:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n        verify: true\n"
    );
    let e = refused(&yaml);
    has_problem(
        &e,
        line_of(&yaml, "colour"),
        "colour",
        "unknown key `colour`",
    );
    has_problem(
        &e,
        line_of(&yaml, "timeout: 3s"),
        "actions[0].timeout",
        "unknown key `timeout` in an action",
    );
    has_problem(
        &e,
        line_of(&yaml, "retries"),
        "actions[0].execute.stateless_http.retries",
        "unknown key `retries`",
    );
    has_problem(
        &e,
        line_of(&yaml, "verify"),
        "events[0].receive.webhook.verify",
        "unknown key `verify`",
    );
    // Every problem of the pass, not just the first.
    assert!(e.problems.len() >= 4, "{e}");
    assert!(e.to_string().starts_with(&format!(
        "TOOL.yaml:{}:1: colour: unknown key",
        line_of(&yaml, "colour")
    )));
}

#[test]
fn wrong_types_are_refused() {
    let yaml = format!(
        "{HEAD}synchronous: maybe\nactions:\n  - name: [a]\n    description: A.\n    execute:\n      stateless_http: {{method: GET, url: 5}}\n"
    );
    let e = refused(&yaml);
    has_problem(&e, line_of(&yaml, "maybe"), "synchronous", "true or false");
    has_problem(
        &e,
        line_of(&yaml, "name: [a]"),
        "actions[0].name",
        "must be a string",
    );
    has_problem(
        &e,
        line_of(&yaml, "url: 5"),
        "actions[0].execute.stateless_http.url",
        "must be a string",
    );
}

#[test]
fn two_backends_in_one_action_are_refused() {
    let yaml = format!(
        "{HEAD}actions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http: {{method: GET, url: \"https://x.example.com/\"}}\n      openapi: {{spec: api.yaml, operation: op}}\n"
    );
    let e = refused(&yaml);
    has_problem(
        &e,
        line_of(&yaml, "stateless_http:"),
        "actions[0].execute",
        "an action has exactly one backend, found stateless_http and openapi",
    );
    let none = format!("{HEAD}actions:\n  - name: a\n    description: A.\n    execute: {{}}\n");
    has_problem(
        &refused(&none),
        line_of(&none, "execute"),
        "actions[0].execute",
        "exactly one backend",
    );
}

#[test]
fn parameter_name_clashes_are_refused() {
    let yaml = format!(
        "{HEAD}settings:\n  properties:\n    owner: {{type: string}}\nparameters:\n  properties:\n    path: {{type: string}}\n    owner: {{type: string, require_binding: true}}\nactions:\n  - name: a\n    description: A.\n    parameters:\n      properties:\n        path: {{type: integer}}\n    execute:\n      stateless_http: {{method: GET, url: \"https://x.example.com/{{parameters.path}}\"}}\n"
    );
    let e = refused(&yaml);
    has_problem(
        &e,
        line_of(&yaml, "path: {type: integer}"),
        "actions[0].parameters.properties.path",
        "already a root parameter",
    );
    has_problem(
        &e,
        line_of(&yaml, "owner: {type: string, require"),
        "parameters.properties.owner",
        "also a setting",
    );
}

#[test]
fn an_unknown_interpolation_root_or_name_is_refused() {
    for (url, text) in [
        ("https://x.example.com/{session.id}", "`session` values"),
        (
            "https://x.example.com/{runtime.version}",
            "`runtime` values",
        ),
        ("https://x.example.com/{mount.bucket}", "mounts"),
        (
            "https://x.example.com/{secrets.x}",
            "unknown interpolation root `secrets`",
        ),
        (
            "https://x.example.com/{parameters.nope}",
            "unknown parameter `nope`",
        ),
        (
            "https://x.example.com/{settings.nope}",
            "unknown setting `nope`",
        ),
        ("https://x.example.com/{agent.id}", "unknown agent value"),
        (
            "https://x.example.com/{event.payload.x}",
            "only be used in an event's `message`",
        ),
        ("https://x.example.com/{x", "not closed"),
        ("https://x.example.com/x}", "lone `}`"),
    ] {
        let yaml = one_get("", url);
        has_problem(
            &refused(&yaml),
            line_of(&yaml, "url:"),
            "actions[0].execute.stateless_http.url",
            text,
        );
    }
}

#[test]
fn a_cel_syntax_error_is_refused_at_the_filter_line() {
    let yaml = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n        filter: >\n          event.payload.action == 'opened'\n          && (event.payload.x ==\n"
    );
    let e = refused(&yaml);
    assert!(
        e.problems
            .iter()
            .any(|p| p.field == "events[0].receive.webhook.filter"
                && p.message.contains("not a valid CEL expression")
                && p.line > line_of(&yaml, "filter:")
                && p.line <= line_of(&yaml, "(event.payload.x")),
        "{e}"
    );
    // Identifiers and parameters are checked too.
    let yaml = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n        filter: \"request.x == parameters.who && event.payload.a.matches('x')\"\n"
    );
    let e = refused(&yaml);
    let line = line_of(&yaml, "request.x");
    has_problem(
        &e,
        line,
        "events[0].receive.webhook.filter",
        "unknown identifier `request`",
    );
    has_problem(
        &e,
        line,
        "events[0].receive.webhook.filter",
        "unknown parameter `parameters.who`",
    );
    has_problem(
        &e,
        line,
        "events[0].receive.webhook.filter",
        "`.matches()` is not available",
    );
}

#[test]
fn a_parameter_in_the_url_host_is_refused() {
    let yaml = one_get(
        "parameters:\n  properties:\n    host: {type: string}\n",
        "https://{parameters.host}/x",
    );
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "url:"),
        "actions[0].execute.stateless_http.url",
        "would let the caller pick the host",
    );
    let yaml = one_get(
        "parameters:\n  properties:\n    base: {type: string}\n",
        "{parameters.base}/x",
    );
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "url:"),
        "actions[0].execute.stateless_http.url",
        "would let the caller pick the host",
    );
}

#[test]
fn unsupported_backends_are_refused_by_name() {
    for backend in ["cel", "stateful_session", "kubernetes_job"] {
        let yaml = format!(
            "{HEAD}actions:\n  - name: a\n    description: A.\n    execute:\n      {backend}:\n        expression: \"1\"\n"
        );
        has_problem(
            &refused(&yaml),
            line_of(&yaml, &format!("{backend}:")),
            &format!("actions[0].execute.{backend}"),
            &format!("the `{backend}` backend cannot run on this host"),
        );
    }
    let yaml = format!("{HEAD}stateful_session: {{}}\n");
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "stateful_session"),
        "stateful_session",
        "cannot run on this host",
    );
}

#[test]
fn an_event_without_a_webhook_secret_is_refused() {
    let yaml = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        filter: \"true\"\n"
    );
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "filter"),
        "events[0].receive.webhook.secret",
        "this host verifies every webhook",
    );
    let literal = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: hunter2\n"
    );
    has_problem(
        &refused(&literal),
        line_of(&literal, "hunter2"),
        "events[0].receive.webhook.secret",
        "exactly one settings reference",
    );
    let poll = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      poll: {{every: 1m}}\n"
    );
    let e = refused(&poll);
    has_problem(
        &e,
        line_of(&poll, "poll"),
        "events[0].receive.poll",
        "not supported",
    );
    // Bad durations.
    let yaml = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    timeout: 2d\n    max_timeout: 1h\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n"
    );
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "timeout: 2d"),
        "events[0].timeout",
        "not a duration",
    );
    let yaml = yaml.replace("2d", "2h");
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "max_timeout"),
        "events[0].max_timeout",
        "at least `timeout`",
    );
}

#[test]
fn invalid_yaml_is_refused_with_its_position() {
    let e = refused("kind: x\n  bad: [\n");
    assert_eq!(e.problems.len(), 1);
    assert!(e.problems[0].line >= 1 && e.problems[0].message.contains("not valid YAML"));
    let e = refused(&format!("{HEAD}name: again\n"));
    has_problem(&e, 5, "", "duplicate key `name`");
}

// ---------------------------------------------------------------------------------------
// OpenAPI.

const SPEC: &str = r##"openapi: 3.0.3
info: {title: Pets, version: "1"}
servers:
  - url: https://{region}.pets.example.com/v1
    variables:
      region: {default: eu}
paths:
  /owners/{ownerId}/pets:
    parameters:
      - $ref: "#/components/parameters/OwnerId"
    get:
      operationId: listPets
      summary: List pets
      description: Of one owner.
      parameters:
        - name: limit
          in: query
          schema: {type: integer, nullable: true}
        - name: X-Trace
          in: header
          required: true
          schema: {type: string}
    post:
      operationId: createPet
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Pet"}
    delete:
      operationId: loopy
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Node"}
components:
  parameters:
    OwnerId: {name: ownerId, in: path, required: true, schema: {type: string}}
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        name: {type: string}
        tag: {$ref: "#/components/schemas/Tag"}
    Tag: {type: string}
    Node:
      type: object
      properties:
        next: {$ref: "#/components/schemas/Node"}
"##;

#[test]
fn an_openapi_operation_compiles_to_path_query_header_and_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pets.yaml"), SPEC).expect("write spec");
    let yaml = format!(
        "{HEAD}settings:\n  properties:\n    api_key: {{type: string}}\nparameters:\n  properties:\n    verbose: {{type: boolean, default: false}}\nopenapi:\n  spec: pets.yaml\n  headers:\n    X-Api-Key: \"{{settings.api_key}}\"\nactions:\n  - name: list_pets\n    execute:\n      openapi: {{operation: listPets}}\n  - name: create_pet\n    description: Adds a pet.\n    execute:\n      openapi:\n        operation: createPet\n        server: https://staging.pets.example.com/v1/\n"
    );
    let packed = pack_str(&yaml, "TOOL.yaml", dir.path(), &PackOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let p = packed.plan;
    let list = http(&p, 0);
    assert_eq!(list.method, "GET");
    // A path parameter is one segment (OpenAPI's `simple` style encodes `/`).
    assert_eq!(
        list.url,
        vec![
            lit("https://eu.pets.example.com/v1/owners/"),
            seg(arg("ownerId"), Encoding::Segment),
            lit("/pets"),
        ]
    );
    assert_eq!(list.query.len(), 1);
    assert_eq!(list.query[0].name, "limit");
    assert_eq!(list.query[0].value, arg("limit"));
    assert_eq!(
        list.headers,
        vec![
            (
                "X-Api-Key".to_string(),
                vec![seg(config("api_key"), Encoding::Raw)]
            ),
            (
                "X-Trace".to_string(),
                vec![seg(arg("X-Trace"), Encoding::Raw)]
            ),
        ]
    );
    assert_eq!(list.body, None);
    assert_eq!(p.tools[0].description, "List pets\n\nOf one owner.");
    assert!(p.tools[0].annotations.read_only);
    let input = schema(&p.tools[0].input_schema);
    assert_eq!(
        input["properties"]["limit"],
        json!({"type": ["integer", "null"]})
    );
    assert_eq!(input["properties"]["verbose"]["default"], false);
    let mut required: Vec<String> =
        serde_json::from_value(input["required"].clone()).expect("list");
    required.sort();
    assert_eq!(required, ["X-Trace", "ownerId"]);

    let create = http(&p, 1);
    assert_eq!(create.method, "POST");
    assert_eq!(
        create.url,
        vec![
            lit("https://staging.pets.example.com/v1/owners/"),
            seg(arg("ownerId"), Encoding::Segment),
            lit("/pets"),
        ]
    );
    assert_eq!(create.body, Some(Body::Value(arg("body"))));
    let input = schema(&p.tools[1].input_schema);
    assert_eq!(
        input["properties"]["body"],
        json!({"type": "object", "required": ["name"],
               "properties": {"name": {"type": "string"}, "tag": {"type": "string"}}})
    );
    assert!(input["required"]
        .as_array()
        .is_some_and(|r| r.contains(&json!("body"))));
    assert_eq!(
        p.allowed_hosts,
        ["eu.pets.example.com", "staging.pets.example.com"]
    );
    assert_eq!(p.required_config, ["api_key"]);
    assert_eq!(
        Value::Object(p.tools[0].argument_defaults.clone()),
        json!({"verbose": false})
    );

    // A cyclic schema, an unknown operation, and a missing document are refused.
    let bad = format!(
        "{HEAD}openapi: {{spec: pets.yaml}}\nactions:\n  - name: a\n    description: A.\n    execute:\n      openapi: {{operation: loopy}}\n  - name: b\n    description: B.\n    execute:\n      openapi: {{operation: nope}}\n  - name: c\n    description: C.\n    execute:\n      openapi: {{operation: x, spec: missing.yaml}}\n"
    );
    let e = pack_str(&bad, "TOOL.yaml", dir.path(), &PackOptions::default()).expect_err("refused");
    has_problem(
        &e,
        line_of(&bad, "loopy"),
        "actions[0].execute.openapi.operation",
        "cycle",
    );
    has_problem(
        &e,
        line_of(&bad, "operation: nope"),
        "actions[1].execute.openapi.operation",
        "no operation `nope`",
    );
    has_problem(
        &e,
        line_of(&bad, "missing.yaml"),
        "actions[2].execute.openapi.spec",
        "could not read the OpenAPI document",
    );
    // An operation argument clashing with a manifest parameter.
    let clash = yaml.replace("verbose: {type", "limit: {type");
    let e =
        pack_str(&clash, "TOOL.yaml", dir.path(), &PackOptions::default()).expect_err("refused");
    has_problem(
        &e,
        line_of(&clash, "operation: listPets"),
        "actions[0].execute.openapi.operation",
        "has an argument `limit`",
    );
}

// ---------------------------------------------------------------------------------------
// The reference examples.

pub(crate) const GITHUB_FILE: &str = include_str!("../fixtures/github.yaml");

const GITHUB_PR: &str = r#"kind: "commonagents.info/v1beta2/tool"
namespace: "tools"
name: "github-pr"
description: "Creates and manages GitHub Pull Requests."

parameters:
  properties:
    owner:
      type: string
      require_binding: true
    repo:
      type: string
      require_binding: true

actions:
  - name: create_pr
    description: "Opens a new pull request."
    parameters:
      properties:
        title: { type: string }
        body: { type: string }
        head: { type: string }
        base: { type: string }
    execute:
      stateless_http:
        method: POST
        url: "https://api.github.com/repos/{parameters.owner}/{parameters.repo}/pulls"
        headers:
          Authorization: "Bearer {auth.github()}"

  - name: list_prs
    description: "Lists open pull requests."
    execute:
      stateless_http:
        method: GET
        url: "https://api.github.com/repos/{parameters.owner}/{parameters.repo}/pulls"
        headers:
          Authorization: "Bearer {auth.github()}"

events:
  - name: comment
    description: "A comment was posted on a pull request."
    timeout: "72h"
    max_timeout: "168h"
    message: >
      {event.payload.comment.user.login} commented on
      PR #{event.payload.issue.number}: {event.payload.comment.body}
    receive:
      webhook:
        secret: "{settings.github_webhook_secret}"
        filter: >
          event.payload.action == 'created'
          && has(event.payload.issue.pull_request)
          && event.payload.repository.owner.login == parameters.owner
          && event.payload.repository.name == parameters.repo

  - name: review
    description: "A review was submitted on a pull request."
    timeout: "72h"
    max_timeout: "168h"
    message: >
      {event.payload.review.user.login} submitted a
      {event.payload.review.state} review on PR
      #{event.payload.pull_request.number}: {event.payload.review.body}
    receive:
      webhook:
        secret: "{settings.github_webhook_secret}"
        filter: >
          event.payload.action == 'submitted'
          && event.payload.repository.owner.login == parameters.owner
          && event.payload.repository.name == parameters.repo
"#;

/// The plan in a packed component's slot.
pub(crate) fn slot_plan(component: &[u8]) -> Value {
    let slot = declarative_plan::embedded(component).expect("the component has a filled slot");
    let plan = declarative_plan::decode(slot).expect("the slot holds a plan");
    serde_json::to_value(plan).expect("a plan is JSON")
}

#[test]
fn the_reference_examples_pack_cleanly_into_the_interpreter() {
    let packed = pack_with(GITHUB_FILE, &PackOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let p = &packed.plan;
    assert_eq!(p.slug, "github-file");
    assert_eq!(
        p.tools.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["engineering.read_file", "engineering.write_file"]
    );
    assert_eq!(p.secret_keys, ["github.token"]);
    assert_eq!(p.allowed_hosts, ["api.github.com"]);
    assert_eq!(
        p.required_config,
        ["github.owner", "github.repo", "github.token"]
    );
    assert_eq!(
        http(p, 1).body,
        Some(Body::Object(vec![
            (
                "message".into(),
                Body::Text(vec![lit("Update "), seg(arg("path"), Encoding::Raw)])
            ),
            ("content".into(), Body::Value(arg("content"))),
            ("branch".into(), Body::Value(arg("branch"))),
        ]))
    );
    assert!(packed.warnings.is_empty(), "{:?}", packed.warnings);
    // The component is the interpreter with this plan in its slot.
    assert_eq!(
        slot_plan(&packed.component),
        serde_json::to_value(p).expect("plan JSON")
    );
    assert_eq!(
        packed.component.len(),
        connector_bundled::DECLARATIVE_INTERPRETER.len()
    );

    let packed = pack_with(GITHUB_PR, &PackOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let p = &packed.plan;
    assert_eq!(p.namespace, "tools");
    assert_eq!(p.binding_parameters, ["owner", "repo"]);
    assert_eq!(p.required_config, ["owner", "repo"]);
    assert_eq!(p.github_installation_key.as_deref(), Some("installationId"));
    assert!(p.webhooks);
    assert_eq!(
        p.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["comment", "review"]
    );
    assert_eq!(
        p.events[0].filter_paths.as_ref().map(Vec::len),
        Some(4),
        "{:?}",
        p.events[0].filter_paths
    );
    assert_eq!(
        schema(&p.config_schema)["required"],
        json!(["owner", "repo", "installationId"])
    );
    // create_pr declares arguments its request never sends: said, not refused.
    assert!(
        packed.warnings.iter().any(|w| w.contains("never sent")),
        "{:?}",
        packed.warnings
    );
    assert_eq!(
        slot_plan(&packed.component)["tools"][0]["id"],
        "tools.create_pr"
    );
}

#[test]
fn pack_file_reads_relative_to_the_manifest_and_reports_unreadable_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gh.yaml");
    std::fs::write(&path, GITHUB_FILE).expect("write");
    let packed = pack_file(&path, &PackOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(packed.plan.slug, "github-file");
    let e = pack_file(&dir.path().join("nope.yaml"), &PackOptions::default()).expect_err("missing");
    assert_eq!(e.kind, PackErrorKind::Unreadable);
    let e = pack_with(
        GITHUB_FILE,
        &PackOptions {
            allow_hosts: vec!["https://x.example.com/".into()],
            ..PackOptions::default()
        },
    )
    .expect_err("bad flag");
    assert_eq!(e.kind, PackErrorKind::Options);
}

// ---------------------------------------------------------------------------------------
// MCP discovery against a local Streamable HTTP server that enforces the protocol.

mod mcp_server {
    use std::sync::{Arc, Mutex};

    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use axum::Router;
    use serde_json::{json, Value};

    pub const SESSION: &str = "session-7f3a";

    #[derive(Default)]
    pub struct Log {
        /// Methods seen (and `DELETE`), in order.
        pub calls: Mutex<Vec<String>>,
        /// The `Authorization` header of every request.
        pub auth: Mutex<Vec<Option<String>>>,
    }

    fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
        h.get(name).and_then(|v| v.to_str().ok())
    }

    fn refuse(status: StatusCode, why: &str) -> Response {
        (status, why.to_string()).into_response()
    }

    async fn handle(State(log): State<Arc<Log>>, headers: HeaderMap, body: Bytes) -> Response {
        let accept = header(&headers, "accept").unwrap_or("");
        if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
            return refuse(
                StatusCode::NOT_ACCEPTABLE,
                "Accept must list application/json and text/event-stream",
            );
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
            return refuse(StatusCode::BAD_REQUEST, "not JSON");
        };
        let method = msg["method"].as_str().unwrap_or("").to_string();
        log.calls.lock().expect("lock").push(method.clone());
        log.auth
            .lock()
            .expect("lock")
            .push(header(&headers, "authorization").map(str::to_string));
        let id = msg["id"].clone();
        if method == "initialize" {
            let result = json!({
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "test", "version": "1"},
            });
            return (
                [
                    ("mcp-session-id", SESSION),
                    ("content-type", "application/json"),
                ],
                json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
            )
                .into_response();
        }
        if header(&headers, "mcp-session-id") != Some(SESSION) {
            return refuse(StatusCode::BAD_REQUEST, "missing or unknown Mcp-Session-Id");
        }
        if header(&headers, "mcp-protocol-version") != Some("2025-06-18") {
            return refuse(StatusCode::BAD_REQUEST, "missing MCP-Protocol-Version");
        }
        match method.as_str() {
            "notifications/initialized" => StatusCode::ACCEPTED.into_response(),
            "tools/list" => match msg["params"]["cursor"].as_str() {
                // Page one as a JSON body.
                None => (
                    [("content-type", "application/json")],
                    json!({"jsonrpc": "2.0", "id": id, "result": {
                        "tools": [{
                            "name": "get-weather",
                            "description": "Weather for a city.",
                            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                            "annotations": {"readOnlyHint": true, "idempotentHint": true},
                        }],
                        "nextCursor": "page-2",
                    }})
                    .to_string(),
                )
                    .into_response(),
                // Page two as an event stream, after a notification.
                Some("page-2") => {
                    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}});
                    let result = json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                        {"name": "Delete.Item", "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}}}},
                        {"name": "ping", "description": "Ping."},
                    ]}});
                    (
                        [("content-type", "text/event-stream")],
                        format!("event: message\ndata: {note}\n\nevent: message\ndata: {result}\n\n"),
                    )
                        .into_response()
                }
                Some(_) => (
                    [("content-type", "application/json")],
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "bad cursor"}}).to_string(),
                )
                    .into_response(),
            },
            _ => (
                [("content-type", "application/json")],
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}).to_string(),
            )
                .into_response(),
        }
    }

    async fn delete(State(log): State<Arc<Log>>, headers: HeaderMap) -> Response {
        if header(&headers, "mcp-session-id") != Some(SESSION) {
            return refuse(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id");
        }
        log.calls.lock().expect("lock").push("DELETE".into());
        StatusCode::OK.into_response()
    }

    /// Starts the server on 127.0.0.1; returns its `/mcp` URL and the log.
    pub fn start() -> (String, Arc<Log>) {
        let log = Arc::new(Log::default());
        let app = Router::new()
            .route("/mcp", post(handle).delete(delete))
            .with_state(log.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let addr = listener.local_addr().expect("addr");
                tx.send(addr).expect("send");
                axum::serve(listener, app).await.expect("serve");
            });
        });
        let addr = rx.recv().expect("server address");
        (format!("http://{addr}/mcp"), log)
    }
}

#[test]
fn mcp_tools_are_discovered_over_streamable_http() {
    let (url, log) = mcp_server::start();
    // The server really enforces the protocol: no Accept, no session → refused.
    let client = reqwest::blocking::Client::new();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let status = client
        .post(&url)
        .header("content-type", "application/json")
        .body(list.clone())
        .send()
        .expect("send")
        .status();
    assert_eq!(status, 406);
    let status = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(list)
        .send()
        .expect("send")
        .status();
    assert_eq!(status, 400);
    log.calls.lock().expect("lock").clear();
    log.auth.lock().expect("lock").clear();

    let yaml = format!(
        "{HEAD}parameters:\n  properties:\n    trace: {{type: string, default: none}}\nmcp:\n  url: {url}\n  headers:\n    Authorization: Bearer static\nactions:\n  - name: remote\n    execute:\n      mcp: {{}}\n  - name: weather\n    description: The weather.\n    execute:\n      mcp:\n        tools: [get-weather]\n"
    );
    let packed = pack_with(&yaml, &PackOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let p = &packed.plan;
    let ids: Vec<&str> = p.tools.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "acme.remote_get_weather",
            "acme.remote_delete_item",
            "acme.remote_ping",
            "acme.weather"
        ]
    );
    assert_eq!(p.allowed_hosts, ["127.0.0.1"]);
    let Backend::Mcp(McpCall {
        url: call_url,
        headers,
        tool,
        forward,
    }) = &p.tools[0].backend
    else {
        panic!("not MCP")
    };
    assert_eq!(call_url, &vec![lit(&url)]);
    assert_eq!(tool, "get-weather");
    assert_eq!(forward.as_deref(), Some(&["city".to_string()][..]));
    assert_eq!(
        headers,
        &vec![("Authorization".to_string(), vec![lit("Bearer static")])]
    );
    let input = schema(&p.tools[0].input_schema);
    assert_eq!(
        input["properties"],
        json!({"city": {"type": "string"}, "trace": {"type": "string", "default": "none"}})
    );
    assert_eq!(input["required"], json!(["city"]));
    assert_eq!(p.tools[0].description, "Weather for a city.");
    let a = p.tools[0].annotations;
    assert!(a.read_only && a.idempotent && !a.destructive && a.open_world);
    let a = p.tools[1].annotations;
    assert!(
        !a.read_only && a.destructive,
        "MCP's default for a tool that is not read-only"
    );
    assert_eq!(
        Value::Object(p.tools[0].argument_defaults.clone()),
        json!({"trace": "none"})
    );
    let Backend::Mcp(call) = &p.tools[2].backend else {
        panic!("not MCP")
    };
    // No properties: every argument is passed on (the plan cannot say "all but
    // `trace`"), so the merged root parameter is too, which the author is told.
    assert_eq!(call.forward, None);
    assert!(
        packed.warnings.iter().any(|w| w.contains("tool `ping`")
            && w.contains("names no `properties`")
            && w.contains("`trace`")),
        "{:?}",
        packed.warnings
    );
    assert!(
        !packed
            .warnings
            .iter()
            .any(|w| w.contains("tool `get-weather`")),
        "{:?}",
        packed.warnings
    );
    assert_eq!(p.tools[2].description, "Ping.");
    assert_eq!(p.tools[3].description, "Weather for a city.");

    // One session, listed once (both actions share it), paged, then deleted.
    let calls = log.calls.lock().expect("lock").clone();
    assert_eq!(
        calls,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list",
            "DELETE"
        ]
    );
    assert!(log
        .auth
        .lock()
        .expect("lock")
        .iter()
        .all(|a| a.as_deref() == Some("Bearer static")));

    // A tool the server does not have.
    let missing = yaml.replace("tools: [get-weather]", "tools: [get-wether]");
    let e = refused(&missing);
    has_problem(
        &e,
        line_of(&missing, "get-wether"),
        "actions[1].execute.mcp.tools",
        "has no tool `get-wether`",
    );
}

#[test]
fn mcp_urls_from_settings_need_a_url_to_list_from() {
    let (url, _log) = mcp_server::start();
    let yaml = format!(
        "{HEAD}settings:\n  properties:\n    server: {{type: string}}\nactions:\n  - name: remote\n    execute:\n      mcp:\n        url: \"{{settings.server}}\"\n        tools: [ping]\n"
    );
    let e = refused(&yaml);
    has_problem(
        &e,
        line_of(&yaml, "url:"),
        "actions[0].execute.mcp.url",
        "pass --mcp-url URL",
    );
    let p = plan_with(
        &yaml,
        &PackOptions {
            mcp_url: Some(url.clone()),
            ..PackOptions::default()
        },
    );
    assert_eq!(p.tools[0].id, "acme.remote");
    assert_eq!(p.allowed_hosts, ["127.0.0.1"]);
    let Backend::Mcp(call) = &p.tools[0].backend else {
        panic!("not MCP")
    };
    assert_eq!(call.url, vec![seg(config("server"), Encoding::Raw)]);
    // `bind` needs the server's URL: the setting has no default.
    assert_eq!(p.required_config, ["server"]);
    // A URL with anything else in it is refused.
    let bad = yaml.replace("\"{settings.server}\"", "\"{settings.server}/mcp\"");
    has_problem(
        &refused_with(
            &bad,
            &PackOptions {
                mcp_url: Some(url),
                ..PackOptions::default()
            },
        ),
        line_of(&bad, "url:"),
        "actions[0].execute.mcp.url",
        "exactly `{settings.<key>}`",
    );
}

#[test]
fn an_unreachable_or_failing_mcp_server_is_named_in_the_error() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let dead = format!("http://127.0.0.1:{port}/mcp");
    let yaml =
        format!("{HEAD}actions:\n  - name: remote\n    execute:\n      mcp: {{url: \"{dead}\"}}\n");
    let e = refused(&yaml);
    has_problem(
        &e,
        line_of(&yaml, "url:"),
        "actions[0].execute.mcp.url",
        &format!("could not reach the MCP server at {dead}"),
    );
    // A server that answers HTTP errors (no Accept check passes without the right path).
    let (url, _log) = mcp_server::start();
    let wrong = url.replace("/mcp", "/other");
    let yaml = format!(
        "{HEAD}actions:\n  - name: remote\n    execute:\n      mcp: {{url: \"{wrong}\"}}\n"
    );
    has_problem(
        &refused(&yaml),
        line_of(&yaml, "url:"),
        "actions[0].execute.mcp.url",
        &format!("the MCP server at {wrong} answered initialize with HTTP 404"),
    );
}

// ---------------------------------------------------------------------------------------
// What a binding must give, what pack may read, and what filters may call.

#[test]
fn required_config_lists_every_referenced_key_without_a_default() {
    // `settings.required` leaves `token` out, yet a header needs it; `base` and `team` have
    // defaults; nothing refers to `unused`; `owner` is a binding parameter in the URL; the
    // body reaches a member of `tag`.
    let yaml = format!(
        "{HEAD}settings:\n  required: []\n  properties:\n    token: {{type: string}}\n    base: {{type: string, default: \"https://api.example.com\"}}\n    unused: {{type: string}}\n    tag: {{type: object}}\nparameters:\n  properties:\n    owner: {{type: string, require_binding: true}}\n    team: {{type: string, require_binding: true, default: core}}\nactions:\n  - name: a\n    description: A.\n    execute:\n      stateless_http:\n        method: POST\n        url: \"{{settings.base}}/{{parameters.owner}}/{{parameters.team}}\"\n        headers:\n          Authorization: \"token {{settings.token}}\"\n        body:\n          t: \"{{settings.tag.name}}\"\n"
    );
    let p = plan(&yaml);
    assert_eq!(p.required_config, ["owner", "tag", "token"]);
    assert_eq!(
        schema(&p.config_schema)["required"],
        json!(["owner"]),
        "the schema keeps the manifest's own `required`"
    );
}

#[test]
fn an_openapi_spec_must_be_a_small_regular_file_inside_the_manifests_folder() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("tool");
    std::fs::create_dir_all(dir.join("specs")).expect("mkdir");
    let outside = root.path().join("outside.yaml");
    std::fs::write(&outside, SPEC).expect("write");
    std::fs::write(dir.join("specs/pets.yaml"), SPEC).expect("write");
    let big = vec![b'#'; 8 * 1024 * 1024 + 1];
    std::fs::write(dir.join("specs/big.yaml"), big).expect("write");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, dir.join("link.yaml")).expect("symlink");
    let manifest = |spec: &str| {
        format!(
            "{HEAD}actions:\n  - name: a\n    description: A.\n    execute:\n      openapi:\n        spec: \"{spec}\"\n        operation: listPets\n"
        )
    };
    let pack_spec =
        |spec: &str| pack_str(&manifest(spec), "TOOL.yaml", &dir, &PackOptions::default());
    // Below the folder, and through a `..` that stays inside: fine.
    pack_spec("specs/pets.yaml").unwrap_or_else(|e| panic!("{e}"));
    pack_spec("specs/../specs/pets.yaml").unwrap_or_else(|e| panic!("{e}"));

    let line = line_of(&manifest("x"), "spec:");
    let field = "actions[0].execute.openapi.spec";
    let absolute = outside.display().to_string();
    let mut cases = vec![
        ("../outside.yaml", "outside the manifest's folder"),
        (absolute.as_str(), "is an absolute path"),
        ("specs", "not a regular file"),
        ("specs/big.yaml", "more than the 8388608"),
        ("specs/missing.yaml", "could not read the OpenAPI document"),
    ];
    if cfg!(unix) {
        cases.push(("link.yaml", "outside the manifest's folder"));
    }
    for (spec, text) in cases {
        let e = pack_spec(spec).expect_err(spec);
        assert_eq!(e.kind, PackErrorKind::Invalid, "{e}");
        has_problem(&e, line, field, text);
    }
}

#[test]
fn openapi_header_parameters_openapi_ignores_are_ignored_and_bad_names_refused() {
    const HEADERS_SPEC: &str = r##"openapi: 3.1.0
info: {title: H, version: "1"}
servers: [{url: "https://h.example.com"}]
paths:
  /items/{id}:
    get:
      operationId: getItem
      summary: Gets an item.
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: Authorization, in: header, required: true, schema: {type: string}}
        - {name: accept, in: header, schema: {type: string}}
        - {name: Content-Type, in: header, schema: {type: string}}
        - {name: X-Request-Id, in: header, schema: {type: string}}
    delete:
      operationId: badHeader
      summary: Deletes an item.
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
        - {name: "X Bad", in: header, schema: {type: string}}
"##;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("h.yaml"), HEADERS_SPEC).expect("write spec");
    let yaml = format!(
        "{HEAD}settings:\n  properties:\n    token: {{type: string}}\nopenapi:\n  spec: h.yaml\n  headers:\n    Authorization: \"Bearer {{settings.token}}\"\nactions:\n  - name: get_item\n    execute:\n      openapi: {{operation: getItem}}\n"
    );
    let packed = pack_str(&yaml, "TOOL.yaml", dir.path(), &PackOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let p = &packed.plan;
    assert_eq!(
        http(p, 0).headers,
        vec![
            (
                "Authorization".to_string(),
                vec![lit("Bearer "), seg(config("token"), Encoding::Raw)]
            ),
            (
                "X-Request-Id".to_string(),
                vec![seg(arg("X-Request-Id"), Encoding::Raw)]
            ),
        ]
    );
    let input = schema(&p.tools[0].input_schema);
    let mut names: Vec<&String> = input["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .collect();
    names.sort();
    assert_eq!(names, ["X-Request-Id", "id"]);
    assert_eq!(input["required"], json!(["id"]));
    for ignored in ["Authorization", "accept", "Content-Type"] {
        assert!(
            packed
                .warnings
                .iter()
                .any(|w| w.contains(&format!("header parameter `{ignored}` is ignored"))),
            "{ignored}: {:?}",
            packed.warnings
        );
    }
    let bad = yaml.replace("operation: getItem", "operation: badHeader");
    let e = pack_str(&bad, "TOOL.yaml", dir.path(), &PackOptions::default()).expect_err("bad");
    has_problem(
        &e,
        line_of(&bad, "badHeader"),
        "actions[0].execute.openapi.operation",
        "header parameter `X Bad` is not a valid HTTP header name",
    );
}

#[test]
fn ref_pointers_are_percent_decoded_up_to_their_last_character() {
    let doc = json!({"components": {"schemas": {
        "A B": {"type": "string"},
        "C ": {"type": "number"},
        "D%4": {"type": "integer"},
        "E%": {"type": "boolean"},
    }}});
    let resolve = |r: &str| super::openapi::resolve(&doc, &json!({ "$ref": r }));
    assert_eq!(
        resolve("#/components/schemas/A%20B"),
        Ok(json!({"type": "string"}))
    );
    // An escape that ends the pointer is decoded too.
    assert_eq!(
        resolve("#/components/schemas/C%20"),
        Ok(json!({"type": "number"}))
    );
    // An incomplete escape at the end is kept as written (nothing is read past the end).
    assert_eq!(
        resolve("#/components/schemas/D%4"),
        Ok(json!({"type": "integer"}))
    );
    assert_eq!(
        resolve("#/components/schemas/E%"),
        Ok(json!({"type": "boolean"}))
    );
}

#[test]
fn an_event_without_a_filter_packs_with_a_warning() {
    let yaml = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n"
    );
    let packed = pack_with(&yaml, &PackOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        packed.warnings.iter().any(|w| w.contains("no `filter`")
            && w.contains("every signed webhook becomes this event's message in every bound unit")),
        "{:?}",
        packed.warnings
    );
    let filtered = yaml.replace(
        "secret: \"{settings.s}\"\n",
        "secret: \"{settings.s}\"\n        filter: event.payload.action == 'opened'\n",
    );
    let packed = pack_with(&filtered, &PackOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !packed.warnings.iter().any(|w| w.contains("no `filter`")),
        "{:?}",
        packed.warnings
    );
}

#[test]
fn a_filter_may_only_call_functions_the_interpreters_cel_has() {
    let field = "events[0].receive.webhook.filter";
    let yaml = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n        filter: |\n          event.payload.action == 'opened'\n          && event.payload.title.startswith('WIP')\n          && lower(event.payload.body) == ''\n"
    );
    let e = refused(&yaml);
    has_problem(
        &e,
        line_of(&yaml, "startswith"),
        field,
        "`.startswith()` is not available in this host's CEL",
    );
    has_problem(
        &e,
        line_of(&yaml, "lower("),
        field,
        "`lower()` is not available in this host's CEL",
    );
    // Functions, member functions, macros, operators and `optional.…`: all fine.
    let fine = format!(
        "{HEAD}events:\n  - name: e\n    message: m\n    receive:\n      webhook:\n        secret: \"{{settings.s}}\"\n        filter: |\n          event.payload.title.startsWith('WIP') && event.payload.body.endsWith('x')\n          && event.payload.body.contains('y') && size(event.payload.labels) > 0\n          && event.payload.labels.size() < 10 && has(event.payload.sender)\n          && event.payload.labels.exists(l, l.name in ['bug', 'p1'])\n          && event.payload.labels.all(l, has(l.name))\n          && event.payload.labels.map(l, l.name).filter(n, n != '').exists_one(n, n == 'bug')\n          && int(event.payload.n) % 2 == 0 && string(event.payload.n) != ''\n          && type(event.payload.n) == int && double(1) > 0.5 && uint(1) == 1u\n          && bool('true') && bytes('a') == b'a' && dyn(1) == 1\n          && optional.of(1).hasValue() && optional.none().orValue(2) == 2\n          && !(1 > 2 ? true : -1 >= 0)\n"
    );
    let p = plan(&fine);
    assert!(p.events[0].filter.is_some());
}

#[test]
fn the_cel_function_lists_are_those_of_the_interpreters_cel() {
    use super::events::{CEL_GLOBAL_FUNCTIONS, CEL_MEMBER_FUNCTIONS};
    // The host's `cel` has the interpreter's features (none of the default ones): a
    // function it lacks is an undeclared reference when called, whatever its arguments.
    let undeclared = |src: &str| {
        let program = cel::Program::compile(src).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        matches!(
            program.execute(&cel::Context::default()),
            Err(cel::ExecutionError::UndeclaredReference(_))
        )
    };
    for f in CEL_GLOBAL_FUNCTIONS {
        assert!(!undeclared(&format!("{f}()")), "{f}() is not in cel");
    }
    for f in CEL_MEMBER_FUNCTIONS {
        assert!(!undeclared(&format!("null.{f}()")), ".{f}() is not in cel");
    }
    for f in ["matches", "timestamp", "duration", "startswith", "lower"] {
        assert!(undeclared(&format!("{f}('x')")), "{f}() is in cel");
        assert!(undeclared(&format!("'x'.{f}('x')")), ".{f}() is in cel");
    }
}

#[test]
fn a_secret_setting_cannot_have_a_default() {
    for (name, decl) in [
        ("api_token", "{type: string, default: abc}"),
        ("pin", "{type: string, format: password, default: abc}"),
        ("code", "{type: string, writeOnly: true, default: abc}"),
        ("x-api-key", "{type: string, default: abc}"),
    ] {
        let yaml = one_get(
            &format!("settings:\n  properties:\n    {name}: {decl}\n"),
            &format!("https://x.example.com/?k={{settings.{name}}}"),
        );
        has_problem(
            &refused(&yaml),
            line_of(&yaml, "default: abc"),
            &format!("settings.properties.{name}.default"),
            "a secret setting (write-only",
        );
    }
    // A setting that is not secret keeps its default, as does one whose name only looks
    // secret when it says so.
    let yaml = one_get(
        "settings:\n  properties:\n    region: {type: string, default: eu}\n    token_url: {type: string, writeOnly: false, default: \"https://x.example.com/t\"}\n",
        "https://x.example.com/{settings.region}?t={settings.token_url}",
    );
    let p = plan(&yaml);
    assert_eq!(p.config_defaults.get("region"), Some(&json!("eu")));
    assert_eq!(
        p.config_defaults.get("token_url"),
        Some(&json!("https://x.example.com/t"))
    );
    assert!(p.secret_keys.is_empty(), "{:?}", p.secret_keys);
}

#[test]
fn secret_like_names_read_dashes_and_dots_as_underscores() {
    let none = serde_json::Map::new();
    for key in [
        "api-key",
        "x-api-key",
        "X.Api.Key",
        "access_key",
        "aws.access-key",
        "access-token",
        "client_secret",
        "private-key",
        "github.token",
    ] {
        assert!(super::schema::is_secret(key, &none), "{key}");
    }
    for key in ["region", "key_id", "base-url", "api.version"] {
        assert!(!super::schema::is_secret(key, &none), "{key}");
    }
}

#[test]
fn allow_host_flags_are_bare_hosts_without_a_port() {
    let yaml = one_get("", "https://x.example.com/");
    let e = pack_with(
        &yaml,
        &PackOptions {
            allow_hosts: vec!["api.example.com:8443".into()],
            ..PackOptions::default()
        },
    )
    .expect_err("a port");
    assert_eq!(e.kind, PackErrorKind::Options);
    assert!(
        e.problems[0]
            .message
            .contains("--allow-host `api.example.com:8443` has a port"),
        "{e}"
    );
    // IPv6 addresses (bracketed or not) and wildcards are hosts.
    let p = plan_with(
        &yaml,
        &PackOptions {
            allow_hosts: vec!["[::1]".into(), "::2".into(), "*.Example.org.".into()],
            ..PackOptions::default()
        },
    );
    assert_eq!(
        p.allowed_hosts,
        ["x.example.com", "::1", "::2", "*.example.org"]
    );
}

#[test]
fn the_default_version_follows_the_plan_not_the_manifests_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("pets.yaml"), SPEC).expect("write spec");
    let yaml = format!(
        "{HEAD}openapi: {{spec: pets.yaml}}\nactions:\n  - name: list_pets\n    execute:\n      openapi: {{operation: listPets}}\n"
    );
    let version = |yaml: &str| {
        pack_str(yaml, "TOOL.yaml", dir.path(), &PackOptions::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .plan
            .version
    };
    let first = version(&yaml);
    assert!(
        first.starts_with("0.0.0+") && first.len() == "0.0.0+".len() + 12,
        "{first}"
    );
    // A comment changes the manifest's bytes, not what it does.
    assert_eq!(version(&format!("# a note\n{yaml}")), first);
    // A changed document changes the tool, and so the version.
    std::fs::write(
        dir.path().join("pets.yaml"),
        SPEC.replace("summary: List pets", "summary: List the pets"),
    )
    .expect("write spec");
    assert_ne!(version(&yaml), first);
}

#[test]
fn mcp_calls_forward_the_servers_property_names() {
    use super::actions::mcp_forward;
    let merged = ["trace".to_string()];
    assert_eq!(
        mcp_forward(
            &json!({"type": "object", "properties": {"city": {}}}),
            &merged
        ),
        (Some(vec!["city".to_string()]), None)
    );
    // No properties and nothing merged in: every argument is the server's.
    assert_eq!(mcp_forward(&json!({"type": "object"}), &[]), (None, None));
    // A tool that takes no arguments gets none, the merged parameters included.
    assert_eq!(
        mcp_forward(
            &json!({"type": "object", "additionalProperties": false}),
            &merged
        ),
        (Some(vec![]), None)
    );
    // Otherwise every argument goes, the merged ones too: said.
    let (forward, warning) = mcp_forward(&json!({"type": "object"}), &merged);
    assert_eq!(forward, None);
    assert!(
        warning.as_deref().is_some_and(|w| w.contains("`trace`")),
        "{warning:?}"
    );
}
