//! The compiled form of a `commonagents.info/v1beta2/tool` manifest.
//!
//! `connector-host pack` reads a YAML manifest, checks it, resolves everything that can be
//! resolved ahead of time (names of settings and parameters, OpenAPI operations, the tools
//! of a remote MCP server, the outbound hosts, the binding config schema) and writes the
//! result, a [`Plan`], into a slot of the prebuilt interpreter component
//! (`connectors/declarative`). The interpreter reads the plan on every call and only
//! *evaluates*: it never parses YAML or templates, and it trusts nothing in the plan for
//! policy, which the host decides from its own data (grants, outbound hosts, capabilities).
//!
//! This crate is the one definition both sides share: the types, how a plan is laid out in
//! its slot ([`encode`], [`SlotPlan`]), and the slot the plan travels in ([`embed`] on the
//! host side, [`SLOT_MAGIC`] and friends on the guest side). A change to any type or to
//! the layout is a change to [`FORMAT`].
//!
//! Each call runs in a fresh instance of the interpreter, so it reads the plan on every
//! call. The slot holds the plan's head (everything but the tools, and where each tool's
//! JSON lies) followed by each tool's JSON, so a call builds the head and the one tool it
//! runs, and skips the others without reading them. With the whole plan as one JSON
//! document, reading it was a third of a small call's time in the guest and grew with
//! every tool: in-process, a call took 400 µs with a plan of one tool and 940 µs with one
//! of 41 tools (43 KB); laid out this way, 320 µs and 410 µs.

use serde::de::Error as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// The version of this format. The interpreter refuses a plan of another version.
pub const FORMAT: u32 = 2;

/// The routing key every declarative binding with events returns from `bind`, and every
/// message of a declarative connector carries: delivery into units is decided per binding
/// by the event's filter (`accept`), not by the key.
pub const EVENT_ROUTE: &str = "events";

/// A packed manifest: everything the interpreter needs. `T` is how it holds its tools:
/// whole ([`Tool`], as `pack` builds them), or as where each one's JSON lies in a slot
/// ([`ToolSlot`]: the plan's head, as every call reads it).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan<T = Tool> {
    /// [`FORMAT`].
    pub format: u32,
    /// The connector's slug (the manifest's `name`).
    pub slug: String,
    /// The tool namespace (the manifest's `namespace`).
    pub namespace: String,
    /// Shown to operators (the manifest's `name`, or a title).
    pub display_name: String,
    /// The manifest's `description`.
    pub description: String,
    /// The connector version (from `pack --version`, or derived from the digest of the
    /// plan, so it changes with everything the plan holds).
    pub version: String,
    /// The binding config's JSON Schema: settings, binding parameters, and the GitHub
    /// installation id when `auth.github()` is used.
    pub config_schema: Box<RawValue>,
    /// Hosts the connector may reach (the host intersects them with the operator's list).
    pub allowed_hosts: Vec<String>,
    /// Whether the connector takes webhooks, verified by the host with GitHub's
    /// `X-Hub-Signature-256` HMAC scheme before the guest sees them.
    pub webhooks: bool,
    /// Config keys whose values are secret: the interpreter removes their values from
    /// everything it returns (tool output, errors, messages).
    pub secret_keys: Vec<String>,
    /// Defaults of the root parameters the model provides: with the binding parameters,
    /// what event filters see as `parameters`. (Each tool applies its own
    /// [`Tool::argument_defaults`].)
    pub argument_defaults: serde_json::Map<String, Value>,
    /// Defaults of binding config values (settings, binding parameters), applied when
    /// absent.
    pub config_defaults: serde_json::Map<String, Value>,
    /// The config keys that are parameters (`require_binding`, and event parameters):
    /// with [`Plan::argument_defaults`], they are `parameters` in event filters.
    pub binding_parameters: Vec<String>,
    /// Config keys some template refers to that have no default: `bind` refuses a config
    /// without them, so a request never goes out with a hole left empty.
    pub required_config: Vec<String>,
    /// The config key that holds the GitHub App installation id, when any template uses
    /// `auth.github()`.
    pub github_installation_key: Option<String>,
    /// The tools, in declared order.
    pub tools: Vec<T>,
    /// The events, in declared order.
    pub events: Vec<Event>,
}

impl<T> Plan<T> {
    /// This plan with each of its tools turned into `f(tool)`.
    pub fn try_map_tools<U, E>(self, f: impl FnMut(T) -> Result<U, E>) -> Result<Plan<U>, E> {
        Ok(Plan {
            tools: self.tools.into_iter().map(f).collect::<Result<_, _>>()?,
            format: self.format,
            slug: self.slug,
            namespace: self.namespace,
            display_name: self.display_name,
            description: self.description,
            version: self.version,
            config_schema: self.config_schema,
            allowed_hosts: self.allowed_hosts,
            webhooks: self.webhooks,
            secret_keys: self.secret_keys,
            argument_defaults: self.argument_defaults,
            config_defaults: self.config_defaults,
            binding_parameters: self.binding_parameters,
            required_config: self.required_config,
            github_installation_key: self.github_installation_key,
            events: self.events,
        })
    }
}

/// Where one tool's JSON lies in a slot ([`encode`]): `len` bytes from `at`, counted from
/// the end of the plan's head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSlot {
    /// [`Tool::id`].
    pub id: String,
    /// Where its JSON starts.
    pub at: usize,
    /// Its JSON's length.
    pub len: usize,
}

/// What the slot holds for `plan`: its head (the plan with each tool as a [`ToolSlot`]) as
/// JSON, then each tool's JSON on a line of its own. [`SlotPlan`] reads it.
pub fn encode(plan: &Plan) -> serde_json::Result<Vec<u8>> {
    let mut tools = Vec::new();
    let head = plan.clone().try_map_tools(|tool| {
        tools.push(b'\n');
        let at = tools.len();
        serde_json::to_writer(&mut tools, &tool)?;
        Ok::<_, serde_json::Error>(ToolSlot {
            id: tool.id,
            at,
            len: tools.len() - at,
        })
    })?;
    let mut out = serde_json::to_vec(&head)?;
    out.extend_from_slice(&tools);
    Ok(out)
}

/// The whole plan in a slot's contents ([`encode`]).
pub fn decode(bytes: &[u8]) -> serde_json::Result<Plan> {
    SlotPlan::read(bytes)?.into_plan()
}

/// A slot's contents ([`encode`]) as the interpreter reads them: the head built, each
/// tool's JSON left unread until it is asked for.
#[derive(Debug)]
pub struct SlotPlan<'a> {
    /// The plan, each tool as where its JSON lies.
    pub head: Plan<ToolSlot>,
    /// What follows the head: the tools' JSON.
    tools: &'a [u8],
}

impl<'a> SlotPlan<'a> {
    /// Reads the head of `bytes`.
    pub fn read(bytes: &'a [u8]) -> serde_json::Result<Self> {
        let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<Plan<ToolSlot>>();
        let head = values
            .next()
            .ok_or_else(|| serde_json::Error::custom("the slot holds no plan"))??;
        if head.format != FORMAT {
            return Err(serde_json::Error::custom(format!(
                "the plan is of format {}, and this interpreter reads format {FORMAT}",
                head.format
            )));
        }
        let tools = &bytes[values.byte_offset()..];
        Ok(SlotPlan { head, tools })
    }

    /// The tool `id`, read from its JSON; `None` when the plan has no such tool.
    pub fn tool(&self, id: &str) -> Option<serde_json::Result<Tool>> {
        let slot = self.head.tools.iter().find(|t| t.id == id)?;
        Some(read_tool(self.tools, slot))
    }

    /// The whole plan, every tool read.
    pub fn into_plan(self) -> serde_json::Result<Plan> {
        let tools = self.tools;
        self.head.try_map_tools(|slot| read_tool(tools, &slot))
    }
}

/// The tool `slot` says where to find in `tools`.
fn read_tool(tools: &[u8], slot: &ToolSlot) -> serde_json::Result<Tool> {
    let json = slot
        .at
        .checked_add(slot.len)
        .and_then(|end| tools.get(slot.at..end))
        .ok_or_else(|| {
            serde_json::Error::custom(format!("tool `{}` lies outside the slot", slot.id))
        })?;
    serde_json::from_slice(json)
}

/// One tool.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// The canonical id, `<namespace>.<name>`.
    pub id: String,
    /// For the model.
    pub description: String,
    /// The arguments' JSON Schema (binding parameters already removed).
    pub input_schema: Box<RawValue>,
    /// MCP-style hints.
    pub annotations: Annotations,
    /// Defaults of this tool's arguments, applied when an argument is absent.
    pub argument_defaults: serde_json::Map<String, Value>,
    /// What a call does.
    pub backend: Backend,
}

/// Behaviour hints, as MCP's `ToolAnnotations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotations {
    /// Changes nothing.
    pub read_only: bool,
    /// May destroy data.
    pub destructive: bool,
    /// Repeating a call has no further effect.
    pub idempotent: bool,
    /// Reaches an open world.
    pub open_world: bool,
}

/// How a tool call is carried out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Backend {
    /// One HTTP request (`stateless_http`, and each `openapi` operation).
    Http(HttpRequest),
    /// One `tools/call` on a remote MCP server over Streamable HTTP.
    Mcp(McpCall),
}

/// An HTTP request with its holes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// The method (upper case).
    pub method: String,
    /// The absolute URL. The scheme and authority are literal or come from settings only
    /// (pack refuses a parameter there); a parameter in the path is [`Encoding::Path`],
    /// in the query [`Encoding::Query`].
    pub url: Template,
    /// Query parameters appended to the URL when their value is present (OpenAPI).
    pub query: Vec<QueryParam>,
    /// Header name and value template; a header whose template refers to an absent
    /// optional value is left out.
    pub headers: Vec<(String, Template)>,
    /// The JSON body, if any.
    pub body: Option<Body>,
}

/// A query parameter taken from one value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryParam {
    /// The query key.
    pub name: String,
    /// Where the value comes from.
    pub value: Ref,
}

/// A call of one tool on a remote MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpCall {
    /// The server's Streamable HTTP endpoint (literal, or a setting).
    pub url: Template,
    /// Extra request headers (for example `Authorization`).
    pub headers: Vec<(String, Template)>,
    /// The server's own name of the tool.
    pub tool: String,
    /// The argument names passed on to the server; `None` passes every argument.
    pub forward: Option<Vec<String>>,
}

/// A JSON body template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    /// A fixed value.
    Literal(Value),
    /// A string with holes.
    Text(Template),
    /// Exactly one value, keeping its JSON type (a string that is only `{parameters.n}`).
    Value(Ref),
    /// An object; a member whose value is a [`Body::Value`] of an absent optional value
    /// is left out.
    Object(Vec<(String, Body)>),
    /// An array.
    Array(Vec<Body>),
}

/// A string with holes: literal text and references, concatenated.
pub type Template = Vec<Segment>;

/// One piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Segment {
    /// Text as is.
    Literal(String),
    /// A value, rendered as text (strings as they are, other JSON as JSON), then encoded.
    Ref {
        /// The value.
        value: Ref,
        /// How the text is escaped where it lands.
        encoding: Encoding,
    },
    /// `auth.github()`: a GitHub App installation token minted by the host for the
    /// installation in the binding's config ([`Plan::github_installation_key`]).
    GithubToken,
}

/// How an interpolated value is escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// As is (headers, bodies, messages). Header values with control characters are
    /// refused by the interpreter.
    Raw,
    /// In a URL path, where the value may span segments (a file path in
    /// `stateless_http`): percent-encoded except `/`; `.` and `..` segments are refused.
    Path,
    /// In a URL path, exactly one segment (an OpenAPI path parameter): percent-encoded
    /// including `/`; an empty value, `.` and `..` are refused.
    Segment,
    /// In a URL query: percent-encoded as a query component.
    Query,
}

/// A value a template refers to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ref {
    /// Where it lives.
    pub root: Root,
    /// The key in that root (a settings or parameter name, which may contain dots).
    pub key: String,
    /// Members below the key (`{parameters.user.login}` with parameter `user`).
    pub path: Vec<String>,
}

/// The roots a [`Ref`] can start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Root {
    /// A tool argument (`{parameters.x}` of a parameter the model provides).
    Argument,
    /// A binding config value (a setting, or a parameter with `require_binding`).
    Config,
    /// Agent metadata: `name` (the agent id) or `namespace` (the binding's unit).
    Agent,
    /// The event's payload (`{event.payload.x}`, messages only).
    EventPayload,
}

/// One inbound event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The message kind (the event's `name`).
    pub name: String,
    /// The message text.
    pub message: Template,
    /// The CEL filter over `event.payload` and `parameters`, checked at pack time.
    pub filter: Option<String>,
    /// The members of `event.payload` the filter reads (`[["issue", "pull_request"]]`):
    /// only they travel in the message for `accept`. `None`: the filter reads the
    /// payload as a whole, so all of it travels.
    pub filter_paths: Option<Vec<Vec<String>>>,
}

/// The message payload a declarative event becomes: what a model reads, plus the parts
/// of the event the filter needs to decide per binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagePayload {
    /// The rendered `message` template.
    pub text: String,
    /// The parts of the event payload the filter reads ([`Event::filter_paths`]), in
    /// their original nesting; absent when the event has no filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<Value>,
}

/// The first bytes of the slot the plan travels in. They occur exactly once in the
/// interpreter component, so `pack` finds the slot without any knowledge of the layout of
/// the component. The guest never mentions them outside the slot's initialiser.
pub const SLOT_MAGIC: [u8; 16] = *b"\0ch-plan-slot-v1";

/// How many bytes of plan fit in the slot.
pub const SLOT_CAPACITY: usize = 256 * 1024;

/// The byte that fills the unused slot (not zero, so no tool trims it away).
pub const SLOT_FILL: u8 = 0xA5;

/// The slot as it lies in the guest's data: magic, length (little endian), plan JSON.
#[repr(C)]
pub struct Slot {
    /// [`SLOT_MAGIC`].
    pub magic: [u8; 16],
    /// The number of plan bytes that follow, little endian; 0 before `pack`.
    pub len: [u8; 4],
    /// The plan (UTF-8 JSON), then [`SLOT_FILL`].
    pub data: [u8; SLOT_CAPACITY],
}

/// Why a plan could not be written into a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbedError {
    /// The component has no slot, or more than one: it is not the interpreter.
    NoSlot(usize),
    /// The plan is larger than the slot.
    TooLarge {
        /// The plan's size.
        len: usize,
    },
}

impl std::fmt::Display for EmbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedError::NoSlot(n) => write!(
                f,
                "the interpreter component has {n} plan slots instead of exactly one; rebuild connector-host"
            ),
            EmbedError::TooLarge { len } => write!(
                f,
                "the packed manifest takes {len} bytes, more than the {SLOT_CAPACITY} an interpreter holds; \
                 split the tool, or reference fewer OpenAPI operations"
            ),
        }
    }
}

impl std::error::Error for EmbedError {}

/// Writes `plan` (laid out by [`encode`]) into the one empty slot of `interpreter`
/// (component bytes).
pub fn embed(interpreter: &[u8], plan: &[u8]) -> Result<Vec<u8>, EmbedError> {
    if plan.len() > SLOT_CAPACITY {
        return Err(EmbedError::TooLarge { len: plan.len() });
    }
    let hits: Vec<usize> = interpreter
        .windows(SLOT_MAGIC.len())
        .enumerate()
        .filter(|(_, w)| *w == SLOT_MAGIC)
        .map(|(i, _)| i)
        .collect();
    let [at] = hits[..] else {
        return Err(EmbedError::NoSlot(hits.len()));
    };
    let len_at = at + SLOT_MAGIC.len();
    let data_at = len_at + 4;
    if interpreter.len() < data_at + SLOT_CAPACITY || interpreter[len_at..data_at] != [0, 0, 0, 0] {
        return Err(EmbedError::NoSlot(0));
    }
    let mut out = interpreter.to_vec();
    // `plan.len()` fits in u32: it is at most SLOT_CAPACITY.
    out[len_at..data_at].copy_from_slice(&(plan.len() as u32).to_le_bytes());
    out[data_at..data_at + plan.len()].copy_from_slice(plan);
    Ok(out)
}

/// The plan bytes [`embed`] wrote into `component`; `None` when it has no filled slot.
pub fn embedded(component: &[u8]) -> Option<&[u8]> {
    let at = component
        .windows(SLOT_MAGIC.len())
        .position(|w| w == SLOT_MAGIC)?;
    let len_at = at + SLOT_MAGIC.len();
    let len = component.get(len_at..len_at + 4)?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    (len > 0)
        .then(|| component.get(len_at + 4..len_at + 4 + len))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_interpreter() -> Vec<u8> {
        let mut bytes = b"prefix".to_vec();
        bytes.extend_from_slice(&SLOT_MAGIC);
        bytes.extend_from_slice(&[0, 0, 0, 0]);
        bytes.extend(std::iter::repeat_n(SLOT_FILL, SLOT_CAPACITY));
        bytes.extend_from_slice(b"suffix");
        bytes
    }

    #[test]
    fn a_plan_lands_after_the_magic_with_its_length() {
        let out = embed(&fake_interpreter(), b"{\"a\":1}").unwrap();
        let at = 6 + SLOT_MAGIC.len();
        assert_eq!(out[at..at + 4], 7u32.to_le_bytes());
        assert_eq!(&out[at + 4..at + 11], b"{\"a\":1}");
        assert_eq!(out[at + 11], SLOT_FILL);
        assert!(out.ends_with(b"suffix"));
        assert_eq!(embedded(&out), Some(&b"{\"a\":1}"[..]));
        assert_eq!(embedded(&fake_interpreter()), None);
    }

    #[test]
    fn a_packed_component_cannot_be_packed_again_and_big_plans_are_refused() {
        let once = embed(&fake_interpreter(), b"{}").unwrap();
        assert_eq!(embed(&once, b"{}"), Err(EmbedError::NoSlot(0)));
        assert_eq!(embed(b"no slot here", b"{}"), Err(EmbedError::NoSlot(0)));
        let big = vec![b' '; SLOT_CAPACITY + 1];
        assert_eq!(
            embed(&fake_interpreter(), &big),
            Err(EmbedError::TooLarge {
                len: SLOT_CAPACITY + 1
            })
        );
    }

    #[test]
    fn a_plan_round_trips_through_json() {
        let mut plan = Plan {
            format: FORMAT,
            slug: "github-file".into(),
            namespace: "engineering".into(),
            display_name: "github-file".into(),
            description: "d".into(),
            version: "1".into(),
            config_schema: RawValue::from_string("{\"type\":\"object\"}".into()).unwrap(),
            allowed_hosts: vec!["api.github.com".into()],
            webhooks: false,
            secret_keys: vec!["github.token".into()],
            argument_defaults: serde_json::Map::from_iter([("branch".into(), "main".into())]),
            config_defaults: serde_json::Map::from_iter([("owner".into(), "octo".into())]),
            binding_parameters: vec![],
            required_config: vec![],
            github_installation_key: Some("installation_id".into()),
            tools: vec![Tool {
                id: "engineering.read_file".into(),
                description: "Reads".into(),
                input_schema: RawValue::from_string("{}".into()).unwrap(),
                annotations: Annotations::default(),
                argument_defaults: serde_json::Map::from_iter([("ref".into(), "main".into())]),
                backend: Backend::Http(HttpRequest {
                    method: "GET".into(),
                    url: vec![
                        Segment::Literal("https://api.github.com/".into()),
                        Segment::Ref {
                            value: Ref {
                                root: Root::Argument,
                                key: "path".into(),
                                path: vec![],
                            },
                            encoding: Encoding::Path,
                        },
                    ],
                    query: vec![],
                    headers: vec![("Authorization".into(), vec![Segment::GithubToken])],
                    body: Some(Body::Object(vec![(
                        "n".into(),
                        Body::Value(Ref {
                            root: Root::Argument,
                            key: "n".into(),
                            path: vec![],
                        }),
                    )])),
                }),
            }],
            events: vec![],
        };
        let mut ask = plan.tools[0].clone();
        ask.id = "engineering.ask".into();
        ask.argument_defaults = serde_json::Map::new();
        ask.backend = Backend::Mcp(McpCall {
            url: vec![Segment::Literal("https://mcp.example.com/mcp".into())],
            headers: vec![],
            tool: "ask".into(),
            forward: None,
        });
        plan.tools.push(ask);
        let json = serde_json::to_string(&plan).unwrap();
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert!(json.contains("\"github_token\""), "{json}");

        // Through a slot: the head, each tool on its own, and the whole plan again.
        let bytes = encode(&plan).unwrap();
        let slot = SlotPlan::read(&bytes).unwrap();
        assert_eq!(slot.head.slug, plan.slug);
        assert_eq!(slot.head.secret_keys, plan.secret_keys);
        assert_eq!(slot.head.config_defaults, plan.config_defaults);
        assert_eq!(
            slot.head.tools.iter().map(|t| &t.id).collect::<Vec<_>>(),
            ["engineering.read_file", "engineering.ask"]
        );
        for tool in &plan.tools {
            let read = slot.tool(&tool.id).unwrap().unwrap();
            assert_eq!(
                serde_json::to_string(&read).unwrap(),
                serde_json::to_string(tool).unwrap()
            );
        }
        assert!(slot.tool("engineering.nope").is_none());
        let whole = slot.into_plan().unwrap();
        assert_eq!(serde_json::to_string(&whole).unwrap(), json);
    }

    #[test]
    fn a_slot_whose_tools_lie_elsewhere_or_of_another_format_is_refused() {
        let plan = Plan::<ToolSlot> {
            format: FORMAT,
            slug: "s".into(),
            namespace: "s".into(),
            display_name: "s".into(),
            description: String::new(),
            version: "1".into(),
            config_schema: RawValue::from_string("{}".into()).unwrap(),
            allowed_hosts: vec![],
            webhooks: false,
            secret_keys: vec![],
            argument_defaults: serde_json::Map::new(),
            config_defaults: serde_json::Map::new(),
            binding_parameters: vec![],
            required_config: vec![],
            github_installation_key: None,
            tools: vec![],
            events: vec![],
        };
        let head = |tools: Vec<ToolSlot>, format: u32| {
            let mut head = plan.clone();
            head.tools = tools;
            head.format = format;
            serde_json::to_vec(&head).unwrap()
        };
        let outside = ToolSlot {
            id: "s.t".into(),
            at: 1,
            len: 10,
        };
        let mut bytes = head(vec![outside.clone()], FORMAT);
        bytes.extend_from_slice(b"\n{}");
        let slot = SlotPlan::read(&bytes).unwrap();
        let e = slot.tool("s.t").unwrap().unwrap_err();
        assert!(
            e.to_string().contains("tool `s.t` lies outside the slot"),
            "{e}"
        );
        let huge = ToolSlot {
            at: usize::MAX,
            ..outside
        };
        let bytes = head(vec![huge], FORMAT);
        assert!(SlotPlan::read(&bytes).unwrap().into_plan().is_err());
        let e = SlotPlan::read(&head(vec![], 1)).unwrap_err();
        assert!(e.to_string().contains("format 1"), "{e}");
        assert!(SlotPlan::read(b"").is_err());
    }
}
