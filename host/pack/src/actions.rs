//! Actions into tools, one backend each: `stateless_http` (one request), `openapi` (one
//! operation of a document) and `mcp` (the tools of a remote server, listed at pack time).
//!
//! A top-level block of the same backend is the default of every action's block: the
//! action's keys win, and `headers` are merged name by name (case-insensitively).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use declarative_plan::{
    Annotations, Backend, Body, HttpRequest, McpCall, QueryParam, Ref, Root, Segment, Template,
    Tool,
};
use serde_json::{Map, Value};

use super::compile::{
    Action, Compiler, Decls, HEADER_NAME, HTTP_KEYS, MCP_KEYS, METHODS, OPENAPI_KEYS,
};
use super::mcp;
use super::openapi;
use super::schema::{self, Property};
use super::templates::{self, AuthorityPiece, Names, Piece, Place};
use super::yaml::{Kind, Node, Pos};

/// A backend block after inheritance.
struct Merged<'n> {
    /// Key, value, field path (where it was written).
    values: Vec<(String, &'n Node, String)>,
    /// Header name, value, field path.
    headers: Vec<(String, &'n Node, String)>,
}

impl<'n> Merged<'n> {
    fn get(&self, key: &str) -> Option<(&'n Node, &str)> {
        self.values
            .iter()
            .find(|(k, n, _)| k == key && n.kind != Kind::Null)
            .map(|(_, n, f)| (*n, f.as_str()))
    }
}

/// Annotations of an HTTP tool, from its method.
fn http_annotations(method: &str) -> Annotations {
    Annotations {
        read_only: matches!(method, "GET" | "HEAD"),
        destructive: method == "DELETE",
        idempotent: matches!(method, "GET" | "HEAD" | "PUT" | "DELETE"),
        open_world: true,
    }
}

/// Annotations of an MCP tool, from the server's `ToolAnnotations` (with MCP's defaults:
/// a tool that is not read-only may be destructive unless it says otherwise).
fn mcp_annotations(a: &Value) -> Annotations {
    let flag = |k: &str| a.get(k).and_then(Value::as_bool);
    let read_only = flag("readOnlyHint").unwrap_or(false);
    Annotations {
        read_only,
        destructive: !read_only && flag("destructiveHint").unwrap_or(true),
        idempotent: flag("idempotentHint").unwrap_or(false),
        open_world: true,
    }
}

/// The defaults of a tool's arguments (the root ones and the action's own).
fn argument_defaults<'a>(params: impl IntoIterator<Item = &'a Property>) -> Map<String, Value> {
    params
        .into_iter()
        .filter_map(|p| p.default.clone().map(|d| (p.name.clone(), d)))
        .collect()
}

fn raw(value: &Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(value)
        .unwrap_or_else(|e| unreachable!("a JSON value always serialises: {e}"))
}

impl Compiler<'_> {
    fn merge<'n>(&mut self, action: &Action<'n>, top_key: &str, allowed: &[&str]) -> Merged<'n> {
        let mut merged = Merged {
            values: Vec::new(),
            headers: Vec::new(),
        };
        let add = |merged: &mut Merged<'n>, this: &mut Self, block: &'n Node, field: &str| {
            for e in block.as_map().unwrap_or_default() {
                let at = format!("{field}.{}", e.key);
                if e.key == "headers" {
                    match &e.value.kind {
                        Kind::Null => {}
                        Kind::Map(headers) => {
                            for h in headers {
                                let hf = format!("{at}.{}", h.key);
                                merged
                                    .headers
                                    .retain(|(n, _, _)| !n.eq_ignore_ascii_case(&h.key));
                                merged.headers.push((h.key.clone(), &h.value, hf));
                            }
                        }
                        _ => this.problems.at(
                            e.value.pos,
                            &at,
                            format!(
                                "must be a mapping of header names to values, found {}",
                                e.value.describe()
                            ),
                        ),
                    }
                    continue;
                }
                merged.values.retain(|(k, _, _)| k != &e.key);
                merged.values.push((e.key.clone(), &e.value, at));
            }
        };
        if let Some(top) = action.top {
            add(&mut merged, self, top, top_key);
        }
        match &action.block.kind {
            Kind::Null => {}
            Kind::Map(entries) => {
                for e in entries {
                    if !allowed.contains(&e.key.as_str()) {
                        self.problems.at(
                            e.key_pos,
                            &format!("{}.{}", action.block_field, e.key),
                            format!(
                                "unknown key `{}` in a `{top_key}` block; it may have {}",
                                e.key,
                                allowed
                                    .iter()
                                    .map(|k| format!("`{k}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        );
                    }
                }
                add(&mut merged, self, action.block, &action.block_field);
            }
            _ => self.problems.at(
                action.block.pos,
                &action.block_field,
                format!("must be a mapping, found {}", action.block.describe()),
            ),
        }
        merged
    }

    /// A required string of the merged block, or a problem at the block.
    fn merged_string<'n>(
        &mut self,
        merged: &Merged<'n>,
        action: &Action<'_>,
        key: &str,
    ) -> Option<(&'n str, Pos, String)> {
        match merged.get(key) {
            None => {
                self.problems.at(
                    action.block.pos,
                    &format!("{}.{key}", action.block_field),
                    format!("`{key}` is required (in this block or the top-level one)"),
                );
                None
            }
            Some((node, field)) => match node.as_str() {
                Some(s) => Some((s, node.pos, field.to_string())),
                None => {
                    self.problems.at(
                        node.pos,
                        field,
                        format!("must be a string, found {}", node.describe()),
                    );
                    None
                }
            },
        }
    }

    /// Compiles the merged headers.
    fn headers(&mut self, names: &Names<'_>, merged: &Merged<'_>) -> Vec<(String, Template)> {
        let mut out = Vec::new();
        for (name, node, field) in &merged.headers {
            if !HEADER_NAME.is_match(name) {
                self.problems.at(
                    node.pos,
                    field,
                    format!("`{name}` is not a valid HTTP header name"),
                );
                continue;
            }
            let text = match &node.kind {
                Kind::Str(s) => s.clone(),
                Kind::Int(_) | Kind::Float(_) | Kind::Bool(_) => node.to_json().to_string(),
                _ => {
                    self.problems.at(
                        node.pos,
                        field,
                        format!("a header value must be a string, found {}", node.describe()),
                    );
                    continue;
                }
            };
            match names.text(&text, Place::Header) {
                Ok(t) => out.push((name.clone(), t)),
                Err(errors) => {
                    for e in errors {
                        self.problems.at(node.pos, field, e);
                    }
                }
            }
        }
        out
    }

    fn description(&mut self, action: &Action<'_>, fallback: Option<String>) -> String {
        match action
            .description
            .clone()
            .filter(|d| !d.is_empty())
            .or(fallback)
        {
            Some(d) => d,
            None => {
                self.problems.at(
                    action.block.pos,
                    &format!("{}.description", action.field),
                    "`description` is required: the model reads it to decide when to call the tool",
                );
                String::new()
            }
        }
    }

    /// The tool arguments visible to an action: root arguments and its own parameters.
    fn argument_names(decls: &Decls, action: &Action<'_>) -> BTreeSet<String> {
        decls
            .root
            .iter()
            .filter(|p| !p.binding)
            .chain(action.params.iter())
            .map(|p| p.name.clone())
            .collect()
    }

    pub(crate) fn http_action(
        &mut self,
        decls: &Decls,
        action: &Action<'_>,
        ns: &str,
    ) -> Vec<Tool> {
        let merged = self.merge(action, "stateless_http", HTTP_KEYS);
        let names = decls.names(Self::argument_names(decls, action));
        let method = self
            .merged_string(&merged, action, "method")
            .and_then(|(m, pos, field)| {
                let upper = m.trim().to_ascii_uppercase();
                if m.contains('{') {
                    self.problems.at(
                        pos,
                        &field,
                        "the method must be literal, like `GET`, not a template",
                    );
                    None
                } else if !METHODS.contains(&upper.as_str()) {
                    self.problems.at(
                        pos,
                        &field,
                        format!(
                            "`{m}` is not a supported HTTP method; use one of {}",
                            METHODS.join(", ")
                        ),
                    );
                    None
                } else {
                    Some(upper)
                }
            });
        let url = self
            .merged_string(&merged, action, "url")
            .and_then(|(u, pos, field)| {
                let pieces = templates::split(u)
                    .map_err(|e| self.problems.at(pos, &field, e.to_string()))
                    .ok()?;
                match names.url(&pieces) {
                    Ok(compiled) => {
                        self.url_hosts(&compiled.authority, &decls.settings, pos, &field);
                        Some(compiled.template)
                    }
                    Err(errors) => {
                        for e in errors {
                            self.problems.at(pos, &field, e);
                        }
                        None
                    }
                }
            });
        let headers = self.headers(&names, &merged);
        let body = merged
            .get("body")
            .map(|(node, field)| names.body(node, field, self.problems));
        let description = self.description(action, None);
        let (Some(method), Some(url)) = (method, url) else {
            return Vec::new();
        };
        let params: Vec<&Property> = decls.root_arguments().chain(action.params.iter()).collect();
        let mut used = BTreeSet::new();
        arguments_in(&url, &mut used);
        headers.iter().for_each(|(_, t)| arguments_in(t, &mut used));
        if let Some(b) = &body {
            body_arguments(b, &mut used);
        }
        let unused: Vec<String> = action
            .params
            .iter()
            .filter(|p| !used.contains(&p.name))
            .map(|p| format!("`{}`", p.name))
            .collect();
        if !unused.is_empty() {
            self.warnings.push(format!(
                "{}: the parameters {} are never sent: no URL, header or body uses them",
                action.field,
                unused.join(", ")
            ));
        }
        vec![Tool {
            id: format!("{ns}.{}", action.name),
            description,
            argument_defaults: argument_defaults(params.iter().copied()),
            input_schema: raw(&schema::object_schema(params)),
            annotations: http_annotations(&method),
            backend: Backend::Http(HttpRequest {
                method,
                url,
                query: Vec::new(),
                headers,
                body,
            }),
        }]
    }

    pub(crate) fn openapi_action(
        &mut self,
        decls: &Decls,
        action: &Action<'_>,
        ns: &str,
    ) -> Vec<Tool> {
        let merged = self.merge(action, "openapi", OPENAPI_KEYS);
        let spec = self.merged_string(&merged, action, "spec");
        let operation = self.merged_string(&merged, action, "operation");
        let (Some((spec, spec_pos, spec_field)), Some((op_id, op_pos, op_field))) =
            (spec, operation)
        else {
            return Vec::new();
        };
        let Some(doc) = self.spec(spec, spec_pos, &spec_field) else {
            return Vec::new();
        };
        let op = match openapi::operation(&doc, op_id) {
            Ok(op) => op,
            Err(e) => {
                self.problems
                    .at(op_pos, &op_field, format!("in {spec}: {e}"));
                return Vec::new();
            }
        };
        for w in &op.warnings {
            self.warnings
                .push(format!("{}: operation `{op_id}`: {w}", action.field));
        }

        // The operation's arguments, checked against the manifest's parameters.
        let mut op_params: Vec<Property> = Vec::new();
        let mut clash = false;
        let from_spec = op
            .path_params
            .iter()
            .chain(op.query.iter())
            .chain(op.headers.iter())
            .map(|p| (p.name.clone(), p.schema.clone(), p.required))
            .chain(
                op.body
                    .iter()
                    .map(|(s, r)| ("body".to_string(), s.clone(), *r)),
            );
        for (name, schema, required) in from_spec {
            let manifest = decls
                .root
                .iter()
                .chain(action.params.iter())
                .find(|p| p.name == name);
            if let Some(p) = manifest {
                self.problems.at(
                    op_pos,
                    &op_field,
                    format!(
                        "operation `{op_id}` has an argument `{name}` and so does {} (line {}); \
                         rename the manifest's parameter",
                        p.field, p.pos.line
                    ),
                );
                clash = true;
                continue;
            }
            if op_params.iter().any(|p| p.name == name) {
                self.problems.at(
                    op_pos,
                    &op_field,
                    format!(
                        "operation `{op_id}` has two arguments named `{name}` (in different \
                         places: path, query, header or the body); it cannot become one tool"
                    ),
                );
                clash = true;
                continue;
            }
            let Value::Object(schema) = schema else {
                // A boolean schema (`true`): anything.
                op_params.push(Property {
                    name: name.clone(),
                    pos: op_pos,
                    field: op_field.clone(),
                    schema: Map::new(),
                    default: None,
                    binding: false,
                    required,
                    secret: false,
                });
                continue;
            };
            op_params.push(Property {
                name,
                pos: op_pos,
                field: op_field.clone(),
                schema,
                default: None,
                binding: false,
                required,
                secret: false,
            });
        }
        if clash {
            return Vec::new();
        }

        let mut arguments = Self::argument_names(decls, action);
        arguments.extend(op_params.iter().map(|p| p.name.clone()));
        let names = decls.names(arguments);

        // The URL: the server (manifest or document), then the path with its parameters.
        let (mut pieces, server_pos, server_field) = match merged.get("server") {
            Some((node, field)) => match node.as_str().map(templates::split) {
                Some(Ok(p)) => (p, node.pos, field.to_string()),
                Some(Err(e)) => {
                    self.problems.at(node.pos, field, e.to_string());
                    return Vec::new();
                }
                None => {
                    self.problems.at(
                        node.pos,
                        field,
                        format!("must be a URL string, found {}", node.describe()),
                    );
                    return Vec::new();
                }
            },
            None => match &op.server {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    (vec![Piece::Lit(url.clone())], spec_pos, spec_field.clone())
                }
                other => {
                    self.problems.at(
                        spec_pos,
                        &spec_field,
                        format!(
                            "{spec} gives {} for operation `{op_id}`; set `server:` in the \
                             `openapi` block to the API's base URL (like https://api.example.com/v1)",
                            match other {
                                Some(url) => format!("only the relative server URL `{url}`"),
                                None => "no server URL".to_string(),
                            }
                        ),
                    );
                    return Vec::new();
                }
            },
        };
        if let Some(Piece::Lit(last)) = pieces.last_mut() {
            while last.ends_with('/') && op.path.starts_with('/') {
                last.pop();
            }
        }
        let mut rest = op.path.as_str();
        while let Some(open) = rest.find('{') {
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
            if open > 0 {
                pieces.push(Piece::Lit(rest[..open].to_string()));
            }
            pieces.push(Piece::Arg(rest[open + 1..close].to_string()));
            rest = rest.get(close + 1..).unwrap_or("");
        }
        if !rest.is_empty() {
            pieces.push(Piece::Lit(rest.to_string()));
        }
        let url = match names.url(&pieces) {
            Ok(compiled) => {
                self.url_hosts(
                    &compiled.authority,
                    &decls.settings,
                    server_pos,
                    &server_field,
                );
                compiled.template
            }
            Err(errors) => {
                for e in errors {
                    self.problems.at(server_pos, &server_field, e);
                }
                return Vec::new();
            }
        };

        let mut headers = self.headers(&names, &merged);
        for p in &op.headers {
            if headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(&p.name)) {
                continue;
            }
            headers.push((
                p.name.clone(),
                vec![Segment::Ref {
                    value: Ref {
                        root: Root::Argument,
                        key: p.name.clone(),
                        path: Vec::new(),
                    },
                    encoding: declarative_plan::Encoding::Raw,
                }],
            ));
        }
        let query = op
            .query
            .iter()
            .map(|p| QueryParam {
                name: p.name.clone(),
                value: Ref {
                    root: Root::Argument,
                    key: p.name.clone(),
                    path: Vec::new(),
                },
            })
            .collect();
        let body = op.body.as_ref().map(|_| {
            Body::Value(Ref {
                root: Root::Argument,
                key: "body".into(),
                path: Vec::new(),
            })
        });
        let description = self.description(action, op.description.clone());
        let params: Vec<&Property> = decls
            .root_arguments()
            .chain(action.params.iter())
            .chain(op_params.iter())
            .collect();
        vec![Tool {
            id: format!("{ns}.{}", action.name),
            description,
            argument_defaults: argument_defaults(params.iter().copied()),
            input_schema: raw(&schema::object_schema(params)),
            annotations: http_annotations(&op.method),
            backend: Backend::Http(HttpRequest {
                method: op.method.clone(),
                url,
                query,
                headers,
                body,
            }),
        }]
    }

    /// Loads (once) the OpenAPI document at `spec`, relative to the manifest's folder and
    /// confined to it: a manifest from elsewhere must not read (and embed) other files.
    fn spec(&mut self, spec: &str, pos: Pos, field: &str) -> Option<Value> {
        let path = match openapi::confine(self.base_dir, spec) {
            Ok(path) => path,
            Err(e) => {
                self.problems
                    .at(pos, field, connector_remote_answer::error_chain(&e));
                return None;
            }
        };
        if let Some(cached) = self.specs.get(&path) {
            return cached.clone();
        }
        let shown = self.base_dir.join(spec).display().to_string();
        let loaded = match openapi::load(&path, &shown) {
            Ok(doc) => Some(doc),
            Err(e) => {
                match e.pos {
                    Some(at) => self.problems.in_file(&shown, at, "", e.message),
                    None => self.problems.at(pos, field, e.message),
                }
                None
            }
        };
        self.specs.insert(path, loaded.clone());
        loaded
    }

    pub(crate) fn mcp_action(&mut self, decls: &Decls, action: &Action<'_>, ns: &str) -> Vec<Tool> {
        let merged = self.merge(action, "mcp", MCP_KEYS);
        let names = decls.names(Self::argument_names(decls, action));
        let Some((url_text, url_pos, url_field)) = self.merged_string(&merged, action, "url")
        else {
            return Vec::new();
        };
        let pieces = match templates::split(url_text) {
            Ok(p) => p,
            Err(e) => {
                self.problems.at(url_pos, &url_field, e.to_string());
                return Vec::new();
            }
        };
        let (template, discovery): (Template, Option<String>) = match pieces.as_slice() {
            [Piece::Lit(u)] => {
                match templates::host_of(u) {
                    Ok(h) => self.add_host(&h),
                    Err(e) => {
                        self.problems.at(url_pos, &url_field, e.to_string());
                        return Vec::new();
                    }
                }
                (vec![Segment::Literal(u.clone())], Some(u.clone()))
            }
            [Piece::Hole(h)] if h.starts_with("settings.") => {
                let key = match names.resolve(h, Place::Url) {
                    Ok(templates::Resolved::Ref(r)) if r.path.is_empty() => r.key,
                    Ok(_) => {
                        self.problems.at(
                            url_pos,
                            &url_field,
                            "must be exactly `{settings.<key>}`, naming a whole setting",
                        );
                        return Vec::new();
                    }
                    Err(e) => {
                        self.problems.at(url_pos, &url_field, e.to_string());
                        return Vec::new();
                    }
                };
                let default = decls
                    .settings
                    .get(&key)
                    .and_then(|s| s.default.as_ref())
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let discovery = match (&self.options.mcp_url, default) {
                    (Some(flag), _) => {
                        self.mcp_url_used = true;
                        Some(flag.clone())
                    }
                    (None, Some(d)) => Some(d),
                    (None, None) => {
                        self.problems.at(
                            url_pos,
                            &url_field,
                            format!(
                                "the MCP server's URL is the setting `{key}`, which has no \
                                 default: pass --mcp-url URL so pack can list the server's tools"
                            ),
                        );
                        None
                    }
                };
                let authority = [AuthorityPiece::Setting(key.clone())];
                if self.options.mcp_url.is_none() {
                    self.url_hosts(&authority, &decls.settings, url_pos, &url_field);
                } else if let Ok(hosts) = templates::authority_hosts(&authority, &decls.settings) {
                    // The flag's host is allowed anyway; the setting's own values too.
                    hosts.iter().flatten().for_each(|h| self.add_host(h));
                }
                (
                    vec![Segment::Ref {
                        value: Ref {
                            root: Root::Config,
                            key,
                            path: Vec::new(),
                        },
                        encoding: declarative_plan::Encoding::Raw,
                    }],
                    discovery,
                )
            }
            _ => {
                self.problems.at(
                    url_pos,
                    &url_field,
                    "must be a literal URL (like https://mcp.example.com/mcp) or exactly \
                     `{settings.<key>}`",
                );
                return Vec::new();
            }
        };
        let headers = self.headers(&names, &merged);
        let filter: Option<Vec<(String, Pos)>> = match merged.get("tools") {
            None => None,
            Some((node, field)) => match node.as_seq() {
                Some(items) => {
                    let mut names = Vec::new();
                    for item in items {
                        match item.as_str() {
                            Some(s) => names.push((s.to_string(), item.pos)),
                            None => self.problems.at(
                                item.pos,
                                field,
                                format!(
                                    "must list the server's tool names, found {}",
                                    item.describe()
                                ),
                            ),
                        }
                    }
                    Some(names)
                }
                None => {
                    self.problems.at(
                        node.pos,
                        field,
                        format!(
                            "must be a list of the server's tool names, found {}",
                            node.describe()
                        ),
                    );
                    None
                }
            },
        };
        let Some(discovery) = discovery else {
            return Vec::new();
        };

        // The headers pack can send while listing: literal ones and settings with defaults.
        let mut sent = Vec::new();
        for (name, template) in &headers {
            match render_for_discovery(template, decls) {
                Some(value) => sent.push((name.clone(), value)),
                None => self.warnings.push(format!(
                    "{}: header `{name}` is not sent while listing the MCP server's tools: its \
                     value is only known when a binding calls the tool",
                    action.field
                )),
            }
        }
        let cache_key = (discovery.clone(), sent.clone());
        let listed = match self.servers.get(&cache_key) {
            Some(r) => r.clone(),
            None => {
                let r = mcp::discover(&discovery, &sent).map_err(Arc::new);
                self.servers.insert(cache_key, r.clone());
                r
            }
        };
        let server_tools = match listed {
            Ok(t) => t,
            Err(e) => {
                self.problems.at(
                    url_pos,
                    &url_field,
                    connector_remote_answer::error_chain(&*e),
                );
                return Vec::new();
            }
        };

        let selected: Vec<&mcp::ServerTool> = match &filter {
            None => server_tools.iter().collect(),
            Some(wanted) => {
                let mut out = Vec::new();
                for (name, pos) in wanted {
                    match server_tools.iter().find(|t| &t.name == name) {
                        Some(t) => out.push(t),
                        None => self.problems.at(
                            *pos,
                            &format!("{}.tools", action.block_field),
                            format!(
                                "the MCP server at {discovery} has no tool `{name}`; it has: {}",
                                server_tools
                                    .iter()
                                    .map(|t| t.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ),
                    }
                }
                out
            }
        };
        if selected.is_empty() && filter.is_none() {
            self.problems.at(
                url_pos,
                &url_field,
                format!("the MCP server at {discovery} lists no tools"),
            );
        }
        let single = filter.as_ref().is_some_and(|f| f.len() == 1);
        let extra: Vec<&Property> = decls.root_arguments().chain(action.params.iter()).collect();
        let mut ids = BTreeMap::new();
        let mut tools = Vec::new();
        for st in selected {
            let id = if single {
                format!("{ns}.{}", action.name)
            } else {
                format!("{ns}.{}_{}", action.name, mcp::normalise(&st.name))
            };
            if let Some(other) = ids.insert(id.clone(), st.name.clone()) {
                self.problems.at(
                    url_pos,
                    &url_field,
                    format!(
                        "the server's tools `{other}` and `{}` both become `{id}`; list the ones \
                         to expose with `tools:`",
                        st.name
                    ),
                );
                continue;
            }
            let mut input = match &st.input_schema {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            input.entry("type").or_insert("object".into());
            let mut merged_names = Vec::new();
            for p in &extra {
                let props = input
                    .entry("properties")
                    .or_insert_with(|| Value::Object(Map::new()));
                let Some(props) = props.as_object_mut() else {
                    continue;
                };
                if props.contains_key(&p.name) {
                    self.problems.at(
                        p.pos,
                        &p.field,
                        format!(
                            "the MCP server's tool `{}` has an argument `{}` too; rename this \
                             parameter",
                            st.name, p.name
                        ),
                    );
                    continue;
                }
                props.insert(p.name.clone(), Value::Object(p.schema.clone()));
                merged_names.push(p.name.clone());
                if p.required {
                    let required = input
                        .entry("required")
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Some(list) = required.as_array_mut() {
                        list.push(Value::String(p.name.clone()));
                    }
                }
            }
            let (forward, warning) = mcp_forward(&st.input_schema, &merged_names);
            if let Some(w) = warning {
                self.warnings.push(format!(
                    "{}: the MCP server's tool `{}` {w}",
                    action.field, st.name
                ));
            }
            let description = st
                .description
                .clone()
                .filter(|d| !d.trim().is_empty())
                .or_else(|| action.description.clone().filter(|d| !d.is_empty()))
                .unwrap_or_else(|| st.name.clone());
            tools.push(Tool {
                id,
                description,
                argument_defaults: argument_defaults(extra.iter().copied()),
                input_schema: raw(&Value::Object(input)),
                annotations: mcp_annotations(&st.annotations),
                backend: Backend::Mcp(McpCall {
                    url: template.clone(),
                    headers: headers.clone(),
                    tool: st.name.clone(),
                    forward,
                }),
            });
        }
        tools
    }
}

/// The argument names a call of a server's tool passes on, from the server's own
/// `inputSchema` and the manifest's parameters merged into it (`merged`), and a warning.
///
/// The server's property names, when it has `properties`. Without: every argument
/// (`None`) when nothing was merged in; none when the schema says
/// `additionalProperties: false` (the tool takes no arguments); else every argument, the
/// merged parameters included (the plan cannot say "all but these"), which the warning
/// tells the author.
pub(crate) fn mcp_forward(
    server_schema: &Value,
    merged: &[String],
) -> (Option<Vec<String>>, Option<String>) {
    if let Some(props) = server_schema.get("properties").and_then(Value::as_object) {
        return (Some(props.keys().cloned().collect()), None);
    }
    if merged.is_empty() {
        return (None, None);
    }
    if server_schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        return (Some(Vec::new()), None);
    }
    let names: Vec<String> = merged.iter().map(|n| format!("`{n}`")).collect();
    (
        None,
        Some(format!(
            "names no `properties` in its inputSchema, so a call passes every argument on to \
             it, the manifest's parameters {} too (the server may refuse or misread them)",
            names.join(", ")
        )),
    )
}

/// A header's value as pack can know it: literal text and setting defaults.
fn render_for_discovery(template: &Template, decls: &Decls) -> Option<String> {
    let mut out = String::new();
    for segment in template {
        match segment {
            Segment::Literal(s) => out.push_str(s),
            Segment::Ref { value, .. } if value.root == Root::Config && value.path.is_empty() => {
                match decls.settings.get(&value.key)?.default.as_ref()? {
                    Value::String(s) => out.push_str(s),
                    other => out.push_str(&other.to_string()),
                }
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The tool arguments a template refers to.
fn arguments_in(template: &Template, used: &mut BTreeSet<String>) {
    for segment in template {
        if let Segment::Ref { value, .. } = segment {
            if value.root == Root::Argument {
                used.insert(value.key.clone());
            }
        }
    }
}

fn body_arguments(body: &Body, used: &mut BTreeSet<String>) {
    match body {
        Body::Literal(_) => {}
        Body::Text(t) => arguments_in(t, used),
        Body::Value(r) => {
            if r.root == Root::Argument {
                used.insert(r.key.clone());
            }
        }
        Body::Object(members) => members.iter().for_each(|(_, b)| body_arguments(b, used)),
        Body::Array(items) => items.iter().for_each(|b| body_arguments(b, used)),
    }
}
