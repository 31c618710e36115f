//! The manifest → [`Plan`] mapping: identity, settings and parameters into the binding
//! config and the tools' input schemas, actions into tools (one backend each), outbound
//! hosts, and the checks that keep every name unique.
//!
//! Problems are collected, not returned early: one pass reports everything it can.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use declarative_plan::{Backend, Body, Plan, Ref, Root, Segment, Template, Tool, FORMAT};
use regex_lite::Regex;
use serde_json::{Map, Value};

use super::error::Problems;
use super::events;
use super::mcp;
use super::schema::{self, BlockKind, Property};
use super::templates::{self, AuthorityPiece, Names, SettingInfo, Usage};
use super::yaml::{Entry, Kind, Node, Pos};
use super::PackOptions;
use connector_model::connector::{is_namespace, is_slug, is_tool_id, RESERVED_NAMESPACE};

/// The manifest kind this packer reads.
pub(crate) const KIND: &str = "commonagents.info/v1beta2/tool";

/// The config key of the GitHub App installation id, when `auth.github()` is used.
pub(crate) const INSTALLATION_KEY: &str = "installationId";

const TOP_KEYS: &[&str] = &[
    "kind",
    "namespace",
    "name",
    "description",
    "synchronous",
    "settings",
    "parameters",
    "actions",
    "events",
    "stateless_http",
    "stateful_session",
    "openapi",
    "mcp",
];
const ACTION_KEYS: &[&str] = &["name", "description", "parameters", "execute"];
const BACKENDS: &[&str] = &[
    "stateless_http",
    "openapi",
    "mcp",
    "cel",
    "stateful_session",
    "kubernetes_job",
];
const UNSUPPORTED_BACKENDS: &[&str] = &["cel", "stateful_session", "kubernetes_job"];
pub(crate) const HTTP_KEYS: &[&str] = &["method", "url", "headers", "body"];
pub(crate) const OPENAPI_KEYS: &[&str] = &["spec", "operation", "server", "headers"];
pub(crate) const MCP_KEYS: &[&str] = &["url", "headers", "tools"];
pub(crate) const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

static ACTION_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_]*$").unwrap_or_else(|e| unreachable!("{e}")));
pub(crate) static HEADER_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$").unwrap_or_else(|e| unreachable!("{e}"))
});

/// Everything declared once for the whole manifest.
pub(crate) struct Decls {
    /// Settings by key, for templates and hosts.
    pub settings: BTreeMap<String, SettingInfo>,
    /// The root parameters (arguments and bound ones).
    pub root: Vec<Property>,
    /// Binding parameters: bound root parameters and event parameters.
    pub config_params: BTreeSet<String>,
    /// What templates used.
    pub usage: Usage,
}

impl Decls {
    pub(crate) fn names(&self, arguments: BTreeSet<String>) -> Names<'_> {
        Names {
            settings: &self.settings,
            arguments,
            config_params: &self.config_params,
            usage: &self.usage,
        }
    }

    pub(crate) fn root_arguments(&self) -> impl Iterator<Item = &Property> {
        self.root.iter().filter(|p| !p.binding)
    }
}

/// The state of one pass.
pub(crate) struct Compiler<'a> {
    pub problems: &'a mut Problems,
    pub warnings: Vec<String>,
    pub base_dir: &'a Path,
    pub options: &'a PackOptions,
    hosts: Vec<String>,
    /// OpenAPI documents by path (`None`: could not be loaded, already reported).
    pub specs: HashMap<PathBuf, Option<Value>>,
    /// MCP servers' tools by URL and headers sent.
    pub servers: HashMap<ServerKey, Result<Vec<mcp::ServerTool>, Arc<mcp::DiscoveryError>>>,
    /// Whether `--mcp-url` stood in for a setting.
    pub mcp_url_used: bool,
}

/// An MCP server as listed: its URL and the headers sent.
pub(crate) type ServerKey = (String, Vec<(String, String)>);

/// Compiles a parsed manifest. `None` when there were problems.
pub(crate) fn compile(
    root: &Node,
    base_dir: &Path,
    options: &PackOptions,
    version: String,
    problems: &mut Problems,
) -> (Option<Plan>, Vec<String>) {
    let mut c = Compiler {
        problems,
        warnings: Vec::new(),
        base_dir,
        options,
        hosts: Vec::new(),
        specs: HashMap::new(),
        servers: HashMap::new(),
        mcp_url_used: false,
    };
    let plan = c.manifest(root, version);
    (plan, c.warnings)
}

/// `parent.key`, or `key` at the top.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn quoted(list: &[&str]) -> String {
    list.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Compiler<'_> {
    fn at(&mut self, pos: Pos, field: &str, message: impl Into<String>) {
        self.problems.at(pos, field, message);
    }

    /// Allows `host`.
    pub(crate) fn add_host(&mut self, host: &str) {
        push_host(&mut self.hosts, host);
    }

    /// The mapping's entries; a problem (and `None`) when `node` is something else.
    fn map<'n>(&mut self, node: &'n Node, field: &str, what: &str) -> Option<&'n [Entry]> {
        match &node.kind {
            Kind::Map(entries) => Some(entries),
            _ => {
                self.at(
                    node.pos,
                    field,
                    format!("{what} must be a mapping, found {}", node.describe()),
                );
                None
            }
        }
    }

    /// Refuses keys outside `allowed`.
    fn known_keys(&mut self, entries: &[Entry], field: &str, allowed: &[&str], what: &str) {
        for e in entries {
            if !allowed.contains(&e.key.as_str()) {
                self.at(
                    e.key_pos,
                    &join(field, &e.key),
                    format!(
                        "unknown key `{}` in {what}; it may have {}",
                        e.key,
                        quoted(allowed)
                    ),
                );
            }
        }
    }

    /// A string value of `node[key]`: `None` (and a problem when `required`) if absent or
    /// not a string.
    fn string<'n>(
        &mut self,
        node: &'n Node,
        key: &str,
        field: &str,
        required: bool,
    ) -> Option<(&'n str, Pos)> {
        let at = join(field, key);
        match node.get(key) {
            None
            | Some(Node {
                kind: Kind::Null, ..
            }) => {
                if required {
                    self.at(node.pos, &at, format!("`{key}` is required"));
                }
                None
            }
            Some(Node {
                kind: Kind::Str(s),
                pos,
                ..
            }) => Some((s.as_str(), *pos)),
            Some(other) => {
                self.at(
                    other.pos,
                    &at,
                    format!("must be a string, found {}", other.describe()),
                );
                None
            }
        }
    }

    fn manifest(&mut self, root: &Node, version: String) -> Option<Plan> {
        let Some(entries) = root.as_map() else {
            self.at(
                root.pos,
                "",
                format!(
                    "a tool manifest is a mapping starting with `kind: \"{KIND}\"`, found {}",
                    root.describe()
                ),
            );
            return None;
        };
        self.known_keys(entries, "", TOP_KEYS, "a tool manifest");

        match self.string(root, "kind", "", true) {
            Some((KIND, _)) | None => {}
            Some((other, pos)) => self.at(
                pos,
                "kind",
                format!("`{other}` is not a tool manifest: `kind` must be \"{KIND}\""),
            ),
        }
        let slug = self.string(root, "name", "", true).map(|(s, pos)| {
            if !is_slug(s) {
                self.at(
                    pos,
                    "name",
                    format!(
                        "`{s}` is not a valid connector slug: use ^[a-z][a-z0-9_-]{{0,62}}$ \
                         (lower case letters, digits, `_` and `-`, starting with a letter)"
                    ),
                );
            }
            s.to_string()
        });
        let namespace = self.string(root, "namespace", "", true).map(|(s, pos)| {
            if !is_namespace(s) {
                self.at(
                    pos,
                    "namespace",
                    format!(
                        "`{s}` is not a valid tool namespace: use ^[a-z][a-z0-9_]*$ (lower case \
                         letters, digits and `_`, starting with a letter)"
                    ),
                );
            } else if s == RESERVED_NAMESPACE {
                self.at(
                    pos,
                    "namespace",
                    "`sv` is reserved for the platform's own tools; choose another namespace",
                );
            }
            s.to_string()
        });
        let description = match self.string(root, "description", "", false) {
            Some((s, _)) => s.trim().to_string(),
            None => {
                if root.get("description").is_none() {
                    self.warnings.push(
                        "the manifest has no `description`; operators see an empty one".into(),
                    );
                }
                String::new()
            }
        };
        if let Some(sync) = root.get("synchronous") {
            if !matches!(sync.kind, Kind::Bool(_) | Kind::Null) {
                self.at(
                    sync.pos,
                    "synchronous",
                    format!("must be true or false, found {}", sync.describe()),
                );
            }
        }
        if let Some(e) = entries.iter().find(|e| e.key == "stateful_session") {
            self.at(
                e.key_pos,
                "stateful_session",
                unsupported_backend("stateful_session"),
            );
        }

        // Settings, root parameters, event parameters: the names everything else uses.
        let settings = schema::read_block(
            root.get("settings"),
            "settings",
            BlockKind::Settings,
            self.problems,
        );
        let params = schema::read_block(
            root.get("parameters"),
            "parameters",
            BlockKind::RootParameters,
            self.problems,
        );
        let event_nodes = self.list(root, "events");
        let event_params: Vec<Vec<Property>> = event_nodes
            .iter()
            .enumerate()
            .map(|(i, ev)| {
                schema::read_block(
                    ev.get("parameters"),
                    &format!("events[{i}].parameters"),
                    BlockKind::EventParameters,
                    self.problems,
                )
            })
            .collect();

        // A parameter that would be binding config under a setting's name.
        fn setting_clash(settings: &[Property], p: &Property) -> Option<String> {
            let s = settings.iter().find(|s| s.name == p.name)?;
            Some(format!(
                "`{}` is also a setting (line {}): both would be the same binding config key; \
                 rename one",
                p.name, s.pos.line
            ))
        }
        let mut config: Vec<Property> = Vec::new();
        let mut config_params = BTreeSet::new();
        for s in &settings {
            config.push(s.clone());
        }
        for p in params.iter().filter(|p| p.binding) {
            if let Some(clash) = setting_clash(&settings, p) {
                self.at(p.pos, &p.field, clash);
                continue;
            }
            config_params.insert(p.name.clone());
            config.push(p.clone());
        }
        for p in event_params.iter().flatten() {
            if let Some(r) = params.iter().find(|r| r.name == p.name) {
                self.at(
                    p.pos,
                    &p.field,
                    format!(
                        "`{}` is already a root parameter (line {}); a filter can use root \
                         parameters directly: remove it here or rename it",
                        p.name, r.pos.line
                    ),
                );
                continue;
            }
            if let Some(clash) = setting_clash(&settings, p) {
                self.at(p.pos, &p.field, clash);
                continue;
            }
            if let Some(other) = config.iter().find(|c| c.name == p.name) {
                if other.schema != p.schema {
                    self.at(
                        p.pos,
                        &p.field,
                        format!(
                            "`{}` is declared by another event (line {}) with a different \
                             schema; events share one binding config, so declare it the same \
                             way or rename it",
                            p.name, other.pos.line
                        ),
                    );
                }
                continue;
            }
            config_params.insert(p.name.clone());
            config.push(p.clone());
        }

        let decls = Decls {
            settings: settings
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        SettingInfo {
                            default: s.default.clone(),
                            enum_values: s
                                .schema
                                .get("enum")
                                .and_then(Value::as_array)
                                .cloned()
                                .unwrap_or_default(),
                        },
                    )
                })
                .collect(),
            root: params.clone(),
            config_params,
            usage: Usage::default(),
        };
        // What event filters see as `parameters` besides the binding ones; each tool has
        // its own defaults (`Tool::argument_defaults`).
        let root_defaults: Map<String, Value> = decls
            .root_arguments()
            .filter_map(|p| p.default.clone().map(|d| (p.name.clone(), d)))
            .collect();

        // Top-level runtime blocks: checked once, inherited by the actions.
        let mut top: BTreeMap<&str, &Node> = BTreeMap::new();
        for (key, allowed) in [
            ("stateless_http", HTTP_KEYS),
            ("openapi", OPENAPI_KEYS),
            ("mcp", MCP_KEYS),
        ] {
            let Some(block) = root.get(key) else { continue };
            if block.kind == Kind::Null {
                continue;
            }
            let Some(entries) = self.map(block, key, "a runtime block") else {
                continue;
            };
            for e in entries {
                if key == "openapi" && e.key == "operation" {
                    self.at(
                        e.key_pos,
                        "openapi.operation",
                        "`operation` belongs in each action's `execute.openapi` block: every \
                         action is one operation",
                    );
                } else if !allowed.contains(&e.key.as_str()) {
                    self.at(
                        e.key_pos,
                        &join(key, &e.key),
                        format!(
                            "unknown key `{}` in the top-level `{key}` block; it may have {}",
                            e.key,
                            quoted(allowed)
                        ),
                    );
                }
            }
            top.insert(key, block);
        }

        // Actions → tools.
        let actions = self.list(root, "actions");
        let mut tools: Vec<(Tool, Pos, String)> = Vec::new();
        let mut action_names: BTreeMap<String, usize> = BTreeMap::new();
        let mut backends_used = BTreeSet::new();
        for (i, action) in actions.iter().enumerate() {
            let field = format!("actions[{i}]");
            let Some(entries) = self.map(action, &field, "an action") else {
                continue;
            };
            self.known_keys(entries, &field, ACTION_KEYS, "an action");
            let name = self.string(action, "name", &field, true).and_then(|(n, pos)| {
                if !ACTION_NAME.is_match(n) {
                    self.at(
                        pos,
                        &format!("{field}.name"),
                        format!(
                            "`{n}` is not a valid action name: use ^[a-z][a-z0-9_]*$ (it becomes \
                             the tool id `<namespace>.{n}`)"
                        ),
                    );
                    return None;
                }
                if let Some(first) = action_names.get(n) {
                    self.at(
                        pos,
                        &format!("{field}.name"),
                        format!("another action is already named `{n}` (actions[{first}]); rename one"),
                    );
                    return None;
                }
                action_names.insert(n.to_string(), i);
                Some(n.to_string())
            });
            let description = self
                .string(action, "description", &field, false)
                .map(|(d, _)| d.trim().to_string());
            let own = schema::read_block(
                action.get("parameters"),
                &format!("{field}.parameters"),
                BlockKind::ActionParameters,
                self.problems,
            );
            let mut own_ok = Vec::new();
            for p in own {
                if let Some(r) = decls.root.iter().find(|r| r.name == p.name) {
                    self.at(
                        p.pos,
                        &p.field,
                        format!(
                            "`{}` is already a root parameter (line {}): an action's parameter \
                             may not shadow it; rename one, or use the root one",
                            p.name, r.pos.line
                        ),
                    );
                    continue;
                }
                own_ok.push(p);
            }

            let Some(execute) = action.get("execute") else {
                self.at(
                    action.pos,
                    &format!("{field}.execute"),
                    "`execute` is required: give the action one backend (`stateless_http`, \
                     `openapi` or `mcp`)",
                );
                continue;
            };
            let exec_field = format!("{field}.execute");
            let Some(exec_entries) = self.map(execute, &exec_field, "`execute`") else {
                continue;
            };
            self.known_keys(exec_entries, &exec_field, BACKENDS, "`execute`");
            let found: Vec<&Entry> = exec_entries
                .iter()
                .filter(|e| BACKENDS.contains(&e.key.as_str()))
                .collect();
            let backend = match found.as_slice() {
                [] => {
                    self.at(
                        execute.pos,
                        &exec_field,
                        "an action needs exactly one backend: `stateless_http`, `openapi` or `mcp`",
                    );
                    continue;
                }
                [one] => *one,
                many => {
                    let names: Vec<&str> = many.iter().map(|e| e.key.as_str()).collect();
                    self.at(
                        execute.pos,
                        &exec_field,
                        format!(
                            "an action has exactly one backend, found {}; split it into one action \
                             per backend",
                            names.join(" and ")
                        ),
                    );
                    continue;
                }
            };
            let backend_field = format!("{exec_field}.{}", backend.key);
            if UNSUPPORTED_BACKENDS.contains(&backend.key.as_str()) {
                self.at(
                    backend.key_pos,
                    &backend_field,
                    unsupported_backend(&backend.key),
                );
                continue;
            }
            backends_used.insert(backend.key.clone());
            let action = Action {
                name: name.unwrap_or_default(),
                field,
                description,
                params: own_ok,
                block: &backend.value,
                block_field: backend_field,
                top: top.get(backend.key.as_str()).copied(),
            };
            let namespace = namespace.clone().unwrap_or_default();
            let made = match backend.key.as_str() {
                "stateless_http" => self.http_action(&decls, &action, &namespace),
                "openapi" => self.openapi_action(&decls, &action, &namespace),
                _ => self.mcp_action(&decls, &action, &namespace),
            };
            for tool in made {
                tools.push((tool, action.block.pos, action.block_field.clone()));
            }
        }
        for key in top.keys() {
            if !backends_used.contains(*key) {
                self.warnings.push(format!(
                    "the top-level `{key}` block is not used by any action"
                ));
            }
        }

        // Events.
        let plan_events = events::compile(self, &decls, &event_nodes, &event_params);

        if actions.is_empty() && event_nodes.is_empty() {
            self.at(
                root.pos,
                "actions",
                "the manifest declares no actions and no events: nothing to pack",
            );
        }

        // Tool ids: unique, and valid ids of the namespace.
        let mut ids: BTreeMap<String, String> = BTreeMap::new();
        for (tool, pos, field) in &tools {
            if let Some(first) = ids.get(&tool.id) {
                self.problems.at(
                    *pos,
                    field,
                    format!(
                        "the tool id `{}` is also produced by {first}; rename an action",
                        tool.id
                    ),
                );
            } else if !is_tool_id(&tool.id) {
                self.problems
                    .at(*pos, field, format!("`{}` is not a valid tool id", tool.id));
            }
            ids.entry(tool.id.clone()).or_insert_with(|| field.clone());
        }

        // The binding config.
        let github = decls.usage.github.get();
        if github {
            if let Some(p) = config.iter().find(|p| p.name == INSTALLATION_KEY) {
                self.at(
                    p.pos,
                    &p.field,
                    format!(
                        "`{INSTALLATION_KEY}` is the config key that holds the GitHub App \
                         installation id when `auth.github()` is used; rename this one"
                    ),
                );
            }
        }
        let mut config_schema = schema::object_schema(&config);
        if github {
            add_installation(&mut config_schema);
        }
        let used = decls.usage.settings.borrow().clone();
        for s in &settings {
            if !used.contains(&s.name) {
                self.warnings.push(format!(
                    "settings.{} is declared but no template uses it",
                    s.name
                ));
            }
        }

        // Hosts: the flags too.
        for h in &self.options.allow_hosts {
            if let Some(h) = super::allow_host(h) {
                push_host(&mut self.hosts, &h);
            }
        }
        if let Some(url) = self.options.mcp_url.clone() {
            if let Ok(h) = templates::host_of(&url) {
                push_host(&mut self.hosts, &h);
            }
            if !self.mcp_url_used {
                self.warnings.push(
                    "--mcp-url was given but no `mcp` block takes its URL from a setting".into(),
                );
            }
        }

        if !self.problems.is_empty() {
            return None;
        }
        let config_schema = serde_json::value::to_raw_value(&config_schema).ok()?;
        let config_defaults: Map<String, Value> = config
            .iter()
            .filter_map(|p| p.default.clone().map(|d| (p.name.clone(), d)))
            .collect();
        let tools: Vec<Tool> = tools.into_iter().map(|(t, _, _)| t).collect();
        let required_config = required_config(&tools, &config_defaults);
        Some(Plan {
            format: FORMAT,
            slug: slug.clone().unwrap_or_default(),
            namespace: namespace.unwrap_or_default(),
            display_name: slug.unwrap_or_default(),
            description,
            version,
            config_schema,
            allowed_hosts: self.hosts.clone(),
            webhooks: !plan_events.is_empty(),
            secret_keys: settings
                .iter()
                .filter(|s| s.secret)
                .map(|s| s.name.clone())
                .collect(),
            argument_defaults: root_defaults,
            config_defaults,
            binding_parameters: config
                .iter()
                .filter(|p| decls.config_params.contains(&p.name))
                .map(|p| p.name.clone())
                .collect(),
            required_config,
            github_installation_key: github.then(|| INSTALLATION_KEY.to_string()),
            tools,
            events: plan_events,
        })
    }

    /// The items of the list `root[key]` (absent or null: none).
    fn list<'n>(&mut self, root: &'n Node, key: &str) -> Vec<&'n Node> {
        match root.get(key) {
            None => Vec::new(),
            Some(Node {
                kind: Kind::Null, ..
            }) => Vec::new(),
            Some(Node {
                kind: Kind::Seq(items),
                ..
            }) => items.iter().collect(),
            Some(other) => {
                self.at(
                    other.pos,
                    key,
                    format!(
                        "must be a list (`- name: …` items), found {}",
                        other.describe()
                    ),
                );
                Vec::new()
            }
        }
    }

    /// Adds the hosts a compiled URL can reach, or a problem.
    pub(crate) fn url_hosts(
        &mut self,
        authority: &[AuthorityPiece],
        settings: &BTreeMap<String, SettingInfo>,
        pos: Pos,
        field: &str,
    ) {
        match templates::authority_hosts(authority, settings) {
            Ok(hosts) => {
                for h in hosts {
                    match h {
                        Ok(h) => push_host(&mut self.hosts, &h),
                        Err(e) => self.at(pos, field, e.to_string()),
                    }
                }
            }
            Err(templates::NoKnownValues { setting: key }) => {
                if self.options.allow_hosts.is_empty() {
                    self.at(
                        pos,
                        field,
                        format!(
                            "the host of this URL comes from settings.{key}, which has no \
                             `default` or `enum` to derive it from: pass --allow-host HOST or give \
                             settings.{key} a default"
                        ),
                    );
                }
            }
        }
    }
}

/// One action being compiled.
pub(crate) struct Action<'n> {
    pub name: String,
    pub field: String,
    pub description: Option<String>,
    /// Its own parameters (not the root ones).
    pub params: Vec<Property>,
    /// The action's backend block.
    pub block: &'n Node,
    pub block_field: String,
    /// The top-level block of the same backend.
    pub top: Option<&'n Node>,
}

fn unsupported_backend(name: &str) -> String {
    format!(
        "the `{name}` backend cannot run on this host: it runs `stateless_http`, `openapi` and \
         `mcp` actions only; rewrite this action with one of those"
    )
}

/// The config keys the tools' templates refer to (URLs, headers, bodies, MCP URLs and
/// headers) that have no default: a binding without them could only send a request with a
/// hole left empty, so `bind` refuses it. Sorted.
pub(crate) fn required_config(tools: &[Tool], defaults: &Map<String, Value>) -> Vec<String> {
    let mut keys = BTreeSet::new();
    for tool in tools {
        match &tool.backend {
            Backend::Http(h) => {
                template_config(&h.url, &mut keys);
                h.headers
                    .iter()
                    .for_each(|(_, t)| template_config(t, &mut keys));
                h.query.iter().for_each(|q| ref_config(&q.value, &mut keys));
                if let Some(body) = &h.body {
                    body_config(body, &mut keys);
                }
            }
            Backend::Mcp(m) => {
                template_config(&m.url, &mut keys);
                m.headers
                    .iter()
                    .for_each(|(_, t)| template_config(t, &mut keys));
            }
        }
    }
    keys.into_iter()
        .filter(|k| !defaults.contains_key(k))
        .collect()
}

fn ref_config(r: &Ref, keys: &mut BTreeSet<String>) {
    if r.root == Root::Config {
        keys.insert(r.key.clone());
    }
}

fn template_config(template: &Template, keys: &mut BTreeSet<String>) {
    for segment in template {
        if let Segment::Ref { value, .. } = segment {
            ref_config(value, keys);
        }
    }
}

fn body_config(body: &Body, keys: &mut BTreeSet<String>) {
    match body {
        Body::Literal(_) => {}
        Body::Text(t) => template_config(t, keys),
        Body::Value(r) => ref_config(r, keys),
        Body::Object(members) => members.iter().for_each(|(_, b)| body_config(b, keys)),
        Body::Array(items) => items.iter().for_each(|b| body_config(b, keys)),
    }
}

fn push_host(hosts: &mut Vec<String>, host: &str) {
    if !host.is_empty() && !hosts.iter().any(|h| h == host) {
        hosts.push(host.to_string());
    }
}

/// Adds the required `installationId` the host's GitHub App capability reads.
fn add_installation(config_schema: &mut Value) {
    if let Some(props) = config_schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)
    {
        props.insert(
            INSTALLATION_KEY.into(),
            serde_json::json!({
                "type": "integer",
                "minimum": 1,
                "x-github-installation": true,
                "description": "The GitHub App installation whose token `auth.github()` sends \
                                (the installation on the account that owns the repositories)",
            }),
        );
    }
    if let Some(required) = config_schema
        .get_mut("required")
        .and_then(Value::as_array_mut)
    {
        required.push(INSTALLATION_KEY.into());
    }
}
