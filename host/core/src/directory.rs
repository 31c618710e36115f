//! The directory service: units, agents, bindings, explicit grants and image tools —
//! everything an operator sets up about who may call what.
//!
//! Every change goes through [`State::write`]: the rules (the unit exists, no cycle, the
//! subject of a grant still exists) are checked under the write lock against the state
//! as it is at that moment.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::audit::Audit;
use crate::catalog::{binding_grant, Catalog, Written};
use crate::grants::{Directory, ResolvedTools};
use crate::state::{State, StateChange, Working};
use connector_model::connector::{is_namespace, is_tool_id};
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_model::ids::{now_rfc3339, truncate, AgentId, ToolId, UnitId};
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    whole_namespace, AgentRecord, BindingRecord, GrantRecord, ImageToolsRecord, Subject, UnitRecord,
};

/// The contract's `Unit` object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitView {
    /// Its id.
    pub id: String,
    /// Its parent unit, if any.
    pub parent: Option<String>,
    /// Its name for people.
    pub display_name: Option<String>,
    /// Its own bindings.
    pub bindings: Vec<BindingView>,
    /// Every tool it has, with why.
    pub effective_tools: Arc<ResolvedTools>,
}

/// The contract's `Agent` object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    /// Its id.
    pub id: String,
    /// Its units, primary first.
    pub units: Vec<String>,
    /// Its name for people.
    pub display_name: Option<String>,
    /// Every tool it has, with why.
    pub effective_tools: Arc<ResolvedTools>,
}

/// An agent as a list shows it (the contract's `AgentSummary`): no tools, no token state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSummary {
    /// Its id.
    pub id: String,
    /// Its units, primary first.
    pub units: Vec<String>,
    /// Its name for people.
    pub display_name: Option<String>,
}

/// The contract's `Grant` object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    /// The tool id or `<namespace>.*`.
    pub tool: String,
    /// The namespace it covers.
    pub namespace: String,
    /// `explicit` or `connector:<slug>`.
    pub provenance: String,
    /// When it was made (RFC 3339).
    pub created_at: String,
}

impl From<&GrantRecord> for GrantView {
    fn from(g: &GrantRecord) -> Self {
        Self {
            tool: g.tool.clone(),
            namespace: g.namespace.clone(),
            provenance: g.provenance.to_string(),
            created_at: g.created_at.clone(),
        }
    }
}

/// The contract's `Binding` object (secrets masked).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    /// The unit it binds to.
    pub unit_id: String,
    /// The connector's slug.
    pub connector: String,
    /// Its configuration, secrets masked.
    pub config: Value,
    /// When it was bound (RFC 3339).
    pub bound_at: String,
    /// The grants it wrote.
    pub grants: Vec<GrantView>,
}

/// What a secret config value is shown as.
pub const SECRET_MASK: &str = "***";

/// Whether `schema` itself marks its value secret (`writeOnly: true` or
/// `format: password`).
pub fn is_secret_schema(schema: &Value) -> bool {
    schema.get("writeOnly").and_then(Value::as_bool) == Some(true)
        || schema.get("format").and_then(Value::as_str) == Some("password")
}

/// How deep `allOf`/`anyOf`/`oneOf` are followed (a schema is operator-supplied data).
const MAX_SCHEMA_DEPTH: usize = 32;

/// `schema` and every `allOf`/`anyOf`/`oneOf` branch under it: all of them may say
/// something about the same value.
fn applicable<'a>(schema: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
    out.push(schema);
    if depth >= MAX_SCHEMA_DEPTH {
        return;
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for branch in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            applicable(branch, out, depth + 1);
        }
    }
}

/// The schemas `schema` gives member `key` of an object: its `properties` entry, every
/// `patternProperties` entry whose pattern matches (or cannot be read: failing closed),
/// and `additionalProperties` when neither applies.
fn member_schemas<'a>(schema: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    let before = out.len();
    if let Some(p) = schema.get("properties").and_then(|p| p.get(key)) {
        out.push(p);
    }
    for (pattern, p) in schema
        .get("patternProperties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if regex_lite::Regex::new(pattern).map_or(true, |r| r.is_match(key)) {
            out.push(p);
        }
    }
    if out.len() == before {
        if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            out.push(a);
        }
    }
}

/// The schemas `schema` gives entry `index` of an array: `prefixItems[index]` (or the
/// older tuple form `items[index]`), else `items`.
fn item_schemas<'a>(schema: &'a Value, index: usize, out: &mut Vec<&'a Value>) {
    let tuple = schema
        .get("prefixItems")
        .or_else(|| schema.get("items").filter(|i| i.is_array()))
        .and_then(Value::as_array);
    match tuple {
        Some(t) if index < t.len() => out.push(&t[index]),
        Some(_) => {
            if let Some(rest) = schema
                .get("items")
                .filter(|i| i.is_object())
                .or_else(|| schema.get("additionalItems").filter(|i| i.is_object()))
            {
                out.push(rest);
            }
        }
        None => {
            if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
                out.push(items);
            }
        }
    }
}

/// `config` with every value the schema marks secret replaced by [`SECRET_MASK`], at any
/// depth: object `properties`, `patternProperties` and `additionalProperties`, array
/// `items` and `prefixItems`, and inside `allOf`/`anyOf`/`oneOf` branches. The one
/// masking of binding configs, for every view of a binding (API and console).
pub fn mask_secrets(schema: &Value, config: &Value) -> Value {
    mask_with(&[schema], config, 0)
}

fn mask_with(schemas: &[&Value], config: &Value, depth: usize) -> Value {
    let mut all = Vec::new();
    for schema in schemas {
        applicable(schema, &mut all, 0);
    }
    if all.iter().any(|s| is_secret_schema(s)) && !config.is_null() {
        return Value::String(SECRET_MASK.into());
    }
    if depth >= MAX_SCHEMA_DEPTH {
        // Deeper than any schema is read: nothing is shown rather than a secret.
        return Value::String(SECRET_MASK.into());
    }
    match config {
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| {
                    let mut subs = Vec::new();
                    for s in &all {
                        member_schemas(s, k, &mut subs);
                    }
                    let shown = if subs.is_empty() {
                        v.clone()
                    } else {
                        mask_with(&subs, v, depth + 1)
                    };
                    (k.clone(), shown)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let mut subs = Vec::new();
                    for s in &all {
                        item_schemas(s, i, &mut subs);
                    }
                    if subs.is_empty() {
                        v.clone()
                    } else {
                        mask_with(&subs, v, depth + 1)
                    }
                })
                .collect(),
        ),
        _ => config.clone(),
    }
}

/// How many times a bind validates its config when the connector keeps being rotated
/// meanwhile.
const BIND_ATTEMPTS: u32 = 3;

/// An agent's units as a request names them, checked where they enter: at least one,
/// each a unit id, none twice (first = primary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentUnits(Vec<UnitId>);

impl AgentUnits {
    /// `units` checked in order (so the first problem found is the one told).
    pub(crate) fn parse(units: &[impl AsRef<str>]) -> HostResult<Self> {
        if units.is_empty() {
            return Err(HostError::invalid_request(
                "an agent must belong to at least one unit (`units` is empty)",
            ));
        }
        let mut checked: Vec<UnitId> = Vec::with_capacity(units.len());
        let mut seen = std::collections::HashSet::with_capacity(units.len());
        for unit in units {
            let unit = UnitId::parse(unit.as_ref())?;
            if !seen.insert(unit.clone()) {
                return Err(HostError::invalid_request(format!(
                    "unit `{unit}` is listed twice in `units`"
                )));
            }
            checked.push(unit);
        }
        Ok(Self(checked))
    }

    fn as_slice(&self) -> &[UnitId] {
        &self.0
    }
}

/// Units, agents, bindings, grants and image tools.
pub(crate) struct DirectoryService {
    state: Arc<State>,
    catalog: Arc<Catalog>,
    /// For fetching image tool lists.
    http: reqwest::Client,
}

impl DirectoryService {
    pub(crate) fn new(state: Arc<State>, catalog: Arc<Catalog>, http: reqwest::Client) -> Self {
        Self {
            state,
            catalog,
            http,
        }
    }

    /// The token epoch of agent `id` (see [`AgentRecord::token_epoch`]); `404` unless it
    /// exists.
    pub(crate) fn token_epoch(&self, id: &AgentId) -> HostResult<String> {
        self.state
            .directory()
            .agent(id)
            .map(|a| a.token_epoch.clone())
            .ok_or_else(|| HostError::not_found(format!("agent `{id}` does not exist")))
    }

    /// Whether agent `id` exists with token epoch `epoch` (checked on every request that
    /// carries an agent token).
    pub(crate) fn has_token_epoch(&self, id: &str, epoch: &str) -> bool {
        self.state
            .directory()
            .agent(id)
            .is_some_and(|a| a.token_epoch == epoch)
    }

    /// Revokes every token minted for agent `id` so far: it gets a new token epoch.
    pub(crate) async fn revoke_agent_tokens(&self, audit: &Audit, id: &AgentId) -> HostResult<()> {
        self.state
            .write(audit, |dir| {
                let Some(agent) = dir.agent(id).cloned() else {
                    return Err(HostError::not_found(format!("agent `{id}` does not exist")));
                };
                let record = AgentRecord {
                    token_epoch: crate::auth::random_secret(16),
                    ..agent
                };
                Ok((StateChange::PutAgent(record), ()))
            })
            .await
    }

    // ----- units and agents ------------------------------------------------------

    /// Creates or updates a unit.
    pub(crate) async fn put_unit(
        &self,
        audit: &Audit,
        id: &UnitId,
        parent: Option<&UnitId>,
        display_name: Option<&str>,
    ) -> HostResult<(UnitView, Written)> {
        let written = self
            .state
            .write(audit, |dir| {
                if let Some(p) = parent {
                    if dir.unit(p).is_none() {
                        return Err(HostError::not_found(format!(
                            "parent unit `{p}` does not exist; create it first"
                        )));
                    }
                    if p == id || dir.would_cycle(id, p) {
                        return Err(HostError::new(
                            ErrorCode::Cycle,
                            format!("making `{p}` the parent of `{id}` would create a cycle"),
                        ));
                    }
                }
                let existing = dir.unit(id);
                let record = UnitRecord {
                    id: id.to_string(),
                    parent: parent.map(UnitId::to_string),
                    display_name: display_name.map(str::to_string),
                    created_at: existing
                        .map(|u| u.created_at.clone())
                        .unwrap_or_else(now_rfc3339),
                };
                Ok((
                    StateChange::PutUnit(record),
                    Written::from_existing(existing),
                ))
            })
            .await?;
        Ok((self.unit(id)?, written))
    }

    /// A unit with its bindings and effective tools.
    pub(crate) fn unit(&self, id: &UnitId) -> HostResult<UnitView> {
        let dir = self.state.directory();
        let unit = dir
            .unit(id)
            .ok_or_else(|| HostError::not_found(format!("unit `{id}` does not exist")))?;
        let bindings = self.binding_views(&dir, id);
        let tools = self
            .state
            .resolve(&dir, &Subject::Unit(id.to_string()))
            .unwrap_or_default();
        Ok(UnitView {
            id: unit.id.clone(),
            parent: unit.parent.clone(),
            display_name: unit.display_name.clone(),
            bindings,
            effective_tools: tools,
        })
    }

    /// Every unit, sorted by id.
    pub(crate) fn list_units(&self) -> Vec<UnitRecord> {
        let mut units: Vec<UnitRecord> = self.state.directory().units().cloned().collect();
        units.sort_by(|a, b| a.id.cmp(&b.id));
        units
    }

    /// Every agent (id, units, display name), sorted by id.
    pub(crate) fn list_agents(&self) -> Vec<AgentSummary> {
        let mut agents: Vec<AgentSummary> = self
            .state
            .directory()
            .agents()
            .map(|a| AgentSummary {
                id: a.id.clone(),
                units: a.units.clone(),
                display_name: a.display_name.clone(),
            })
            .collect();
        agents.sort_by(|a, b| a.id.cmp(&b.id));
        agents
    }

    /// Deletes a unit (its bindings are unbound and grants revoked); refused while it has
    /// children (`409 has_children`).
    pub(crate) async fn delete_unit(&self, audit: &Audit, id: &UnitId) -> HostResult<()> {
        self.state
            .write(audit, |dir| {
                if dir.unit(id).is_none() {
                    return Err(HostError::not_found(format!("unit `{id}` does not exist")));
                }
                if dir.has_children(id) {
                    return Err(HostError::new(
                        ErrorCode::HasChildren,
                        format!("unit `{id}` has child units; delete or move them first"),
                    ));
                }
                // Bindings, grants and agents' memberships go in the same transaction.
                Ok((StateChange::DeleteUnit(id.to_string()), ()))
            })
            .await
    }

    /// Creates or updates an agent (`units`: first = primary).
    pub(crate) async fn put_agent(
        &self,
        audit: &Audit,
        id: &AgentId,
        units: &AgentUnits,
        display_name: Option<&str>,
    ) -> HostResult<(AgentView, Written)> {
        let units = units.as_slice();
        let written = self
            .state
            .write(audit, |dir| {
                if let Some(u) = units.iter().find(|u| dir.unit(u).is_none()) {
                    return Err(HostError::not_found(format!(
                        "unit `{u}` does not exist; create it first"
                    )));
                }
                let existing = dir.agent(id);
                let record = AgentRecord {
                    id: id.to_string(),
                    units: units.iter().map(UnitId::to_string).collect(),
                    display_name: display_name.map(str::to_string),
                    created_at: existing
                        .map(|a| a.created_at.clone())
                        .unwrap_or_else(now_rfc3339),
                    // A new agent never inherits the tokens of one deleted before it.
                    token_epoch: existing
                        .map(|a| a.token_epoch.clone())
                        .unwrap_or_else(|| crate::auth::random_secret(16)),
                };
                Ok((
                    StateChange::PutAgent(record),
                    Written::from_existing(existing),
                ))
            })
            .await?;
        Ok((self.agent(id)?, written))
    }

    /// An agent with its effective tools.
    pub(crate) fn agent(&self, id: &AgentId) -> HostResult<AgentView> {
        let dir = self.state.directory();
        let agent = dir
            .agent(id)
            .ok_or_else(|| HostError::not_found(format!("agent `{id}` does not exist")))?;
        let tools = self
            .state
            .resolve(&dir, &Subject::Agent(id.to_string()))
            .unwrap_or_default();
        Ok(AgentView {
            id: agent.id.clone(),
            units: agent.units.clone(),
            display_name: agent.display_name.clone(),
            effective_tools: tools,
        })
    }

    /// Deletes an agent with its explicit grants and image tools.
    pub(crate) async fn delete_agent(&self, audit: &Audit, id: &AgentId) -> HostResult<()> {
        self.state
            .write(audit, |dir| {
                if dir.agent(id).is_none() {
                    return Err(HostError::not_found(format!("agent `{id}` does not exist")));
                }
                Ok((StateChange::DeleteAgent(id.to_string()), ()))
            })
            .await
    }

    // ----- bindings -------------------------------------------------------------

    fn binding_views(&self, dir: &Directory, unit: &str) -> Vec<BindingView> {
        dir.bindings_of(unit)
            .map(|b| self.binding_view(dir, b))
            .collect()
    }

    fn binding_view(&self, dir: &Directory, b: &BindingRecord) -> BindingView {
        let grants = dir
            .grants_of(&Subject::Unit(b.unit_id.clone()))
            .iter()
            .filter(|g| g.provenance.connector() == Some(b.connector.as_str()))
            .map(GrantView::from)
            .collect();
        let config = match self.state.registry().get(&b.connector) {
            Some(c) => mask_secrets(&c.info().config_schema, &b.config),
            None => Value::String("***".into()),
        };
        BindingView {
            unit_id: b.unit_id.clone(),
            connector: b.connector.clone(),
            config,
            bound_at: b.bound_at.clone(),
            grants,
        }
    }

    /// Binds a connector to a unit (or replaces the binding's config): validates the
    /// config against the connector's schema and its own `bind` (before the write lock:
    /// `bind` is a guest call), then writes the binding and its `<namespace>.*` grant in
    /// one transaction, provided the version that validated it is still the one
    /// installed. A rotation in between makes the new version validate it again (a few
    /// times, then `409 state_changed`), so the routing keys stored are always those of
    /// the installed version.
    pub(crate) async fn bind(
        &self,
        audit: &Audit,
        unit: &UnitId,
        slug: &str,
        config: Value,
    ) -> HostResult<(BindingView, Written)> {
        if self.state.directory().unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        for _ in 0..BIND_ATTEMPTS {
            let checked = self.catalog.check_binding(slug, &config).await?;
            let written = self
                .state
                .write(audit, |dir| {
                    // Checked again under the write lock: the unit or the connector may
                    // have gone meanwhile, or another version replaced it.
                    if dir.unit(unit).is_none() {
                        return Err(HostError::not_found(format!(
                            "unit `{unit}` does not exist"
                        )));
                    }
                    let connector = self.catalog.get(slug)?;
                    if connector.info().digest != checked.digest {
                        return Ok((StateChange::CheckAgain, None));
                    }
                    let namespace = connector.info().tool_namespace.clone();
                    let existing = dir.binding(unit, slug);
                    let record = BindingRecord {
                        unit_id: unit.to_string(),
                        connector: slug.to_string(),
                        config: config.clone(),
                        routing_keys: checked.routing_keys.clone(),
                        bound_at: existing
                            .map(|b| b.bound_at.clone())
                            .unwrap_or_else(now_rfc3339),
                    };
                    let held = dir.grants_of(&Subject::Unit(unit.to_string()));
                    let grant = binding_grant(held, unit, &connector.info().slug, &namespace);
                    Ok((
                        StateChange::PutBinding(record, grant),
                        Some(Written::from_existing(existing)),
                    ))
                })
                .await?;
            let Some(written) = written else { continue };
            let dir = self.state.directory();
            let record = dir
                .binding(unit, slug)
                .ok_or_else(|| HostError::not_found(format!("unit `{unit}` does not exist")))?;
            return Ok((self.binding_view(&dir, record), written));
        }
        Err(HostError::new(
            ErrorCode::StateChanged,
            format!(
                "connector `{slug}` was replaced by another version each time this binding was checked ({BIND_ATTEMPTS} times); nothing was written: try again"
            ),
        ))
    }

    /// The bindings of a unit.
    pub(crate) fn bindings(&self, unit: &UnitId) -> HostResult<Vec<BindingView>> {
        let dir = self.state.directory();
        if dir.unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        Ok(self.binding_views(&dir, unit))
    }

    /// Every binding of every unit (for webhook routing and runtime context).
    pub(crate) fn all_bindings(&self) -> Vec<BindingRecord> {
        self.state.directory().all_bindings().cloned().collect()
    }

    /// Unbinds: deletes the binding and exactly its grants in one transaction.
    pub(crate) async fn unbind(&self, audit: &Audit, unit: &UnitId, slug: &str) -> HostResult<()> {
        self.state
            .write(audit, |dir| {
                if dir.binding(unit, slug).is_none() {
                    return Err(HostError::not_found(format!(
                        "connector `{}` is not bound to unit `{unit}`",
                        truncate(slug, 80)
                    )));
                }
                let change = StateChange::DeleteBinding {
                    unit: unit.to_string(),
                    connector: slug.to_string(),
                };
                Ok((change, ()))
            })
            .await
    }

    // ----- grants and effective tools ------------------------------------------------

    fn subject_exists(dir: &Working<'_>, subject: &Subject) -> HostResult<()> {
        let (kind, id, exists) = match subject {
            Subject::Unit(id) => ("unit", id, dir.unit(id).is_some()),
            Subject::Agent(id) => ("agent", id, dir.agent(id).is_some()),
        };
        if exists {
            Ok(())
        } else {
            Err(HostError::not_found(format!(
                "{kind} `{id}` does not exist"
            )))
        }
    }

    /// Grants a tool id or a whole namespace to a subject explicitly.
    pub(crate) async fn grant(
        &self,
        audit: &Audit,
        subject: Subject,
        target: GrantTarget,
    ) -> HostResult<GrantView> {
        let GrantTarget { tool, namespace } = target;
        self.state
            .write(audit, |dir| {
                // The subject is checked under the write lock: a unit or agent deleted
                // concurrently cannot be left with a grant.
                Self::subject_exists(dir, &subject)?;
                let record = GrantRecord {
                    subject: subject.clone(),
                    tool: tool.clone(),
                    namespace: namespace.clone(),
                    provenance: GrantProvenance::Explicit,
                    created_at: now_rfc3339(),
                };
                let view = GrantView::from(&record);
                Ok((StateChange::PutGrant(record), view))
            })
            .await
    }

    /// Revokes an explicit grant.
    pub(crate) async fn revoke(
        &self,
        audit: &Audit,
        subject: Subject,
        target: GrantTarget,
    ) -> HostResult<()> {
        let GrantTarget { tool, .. } = target;
        self.state
            .write(audit, |dir| {
                Self::subject_exists(dir, &subject)?;
                let present = dir
                    .grants_of(&subject)
                    .iter()
                    .any(|g| g.tool == tool && g.provenance == GrantProvenance::Explicit);
                if !present {
                    return Err(HostError::not_found(format!(
                        "no explicit grant of `{tool}` exists on this subject"
                    )));
                }
                let change = StateChange::DeleteGrant {
                    subject: subject.clone(),
                    tool: tool.clone(),
                    provenance: GrantProvenance::Explicit,
                };
                Ok((change, ()))
            })
            .await
    }

    /// Stores the tools an agent's image declares.
    pub(crate) async fn put_image_tools(
        &self,
        audit: &Audit,
        agent: &AgentId,
        digest: &str,
        tools: Value,
    ) -> HostResult<Value> {
        if self.state.directory().agent(agent).is_none() {
            return Err(HostError::not_found(format!(
                "agent `{agent}` does not exist"
            )));
        }
        let tools = validate_image_tools(tools)?;
        if digest.is_empty() || digest.len() > 200 {
            return Err(HostError::invalid_request(
                "`digest` must be a non-empty string such as sha256:<hex>",
            ));
        }
        let record = ImageToolsRecord {
            agent_id: agent.to_string(),
            digest: digest.to_string(),
            tools: tools.clone(),
        };
        self.state
            .write(audit, |dir| {
                if dir.agent(agent).is_none() {
                    return Err(HostError::not_found(format!(
                        "agent `{agent}` does not exist"
                    )));
                }
                Ok((StateChange::PutImageTools(record.clone()), ()))
            })
            .await?;
        Ok(json!({"digest": digest, "tools": tools}))
    }

    /// Fetches `GET {url}/a2a/tools` from an agent's image and stores the tools. The
    /// image is whatever the agent's URL points at: its answer is read within 10 s and at
    /// most 8 MiB (CONTRACT §12), piece by piece, so a server streaming without end costs
    /// 8 MiB, not the host's memory.
    pub(crate) async fn introspect_image_tools(
        &self,
        audit: &Audit,
        agent: &AgentId,
        url: &str,
    ) -> HostResult<Value> {
        /// The most of an image's answer that is read.
        const INTROSPECTION_MAX_BYTES: u64 = 8 * 1024 * 1024;
        /// How long the whole fetch (connect, answer, body) may take.
        const INTROSPECTION_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
        if self.state.directory().agent(agent).is_none() {
            return Err(HostError::not_found(format!(
                "agent `{agent}` does not exist"
            )));
        }
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| HostError::invalid_request(format!("`url` is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(HostError::invalid_request(
                "`url` must be http:// or https://",
            ));
        }
        let target = format!("{}/a2a/tools", url.trim_end_matches('/'));
        let failed = |msg: String| HostError::new(ErrorCode::IntrospectionFailed, msg);
        let fetch = async {
            let response = self
                .http
                .get(&target)
                .send()
                .await
                .map_err(|e| failed(format!("GET {target} failed: {e}")))?;
            if !response.status().is_success() {
                return Err(failed(format!(
                    "GET {target} answered {}",
                    response.status()
                )));
            }
            let header_digest = response
                .headers()
                .get("x-image-digest")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = connector_remote_answer::read_at_most(response, INTROSPECTION_MAX_BYTES)
                .await
                .map_err(|e| match e {
                    connector_remote_answer::AnswerError::TooLarge { .. } => failed(format!(
                        "{target} answered more than 8 MiB: an image's tool list must be smaller"
                    )),
                    e => failed(format!("reading {target} failed: {e}")),
                })?;
            Ok((header_digest, body))
        };
        let (header_digest, body) = tokio::time::timeout(INTROSPECTION_DEADLINE, fetch)
            .await
            .map_err(|_| {
                failed(format!(
                    "{target} did not answer within {} s",
                    INTROSPECTION_DEADLINE.as_secs()
                ))
            })??;
        let tools: Value = serde_json::from_slice(&body)
            .map_err(|e| failed(format!("{target} did not answer JSON: {e}")))?;
        let digest = header_digest.unwrap_or_else(|| {
            use sha2::Digest;
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)))
        });
        self.put_image_tools(audit, agent, &digest, tools)
            .await
            .map_err(|e| {
                if e.code == ErrorCode::InvalidRequest {
                    failed(format!(
                        "{target} answered an invalid tool list: {}",
                        e.message
                    ))
                } else {
                    e
                }
            })
    }
}

/// What an explicit grant covers: one tool or a whole namespace, as a request names it
/// (`github.create_issue`, `github`, `github.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantTarget {
    /// The tool id, or `<namespace>.*`.
    tool: String,
    /// The namespace it is in.
    namespace: String,
}

impl GrantTarget {
    /// `target` as a tool id or a namespace, or `400 invalid_request`.
    pub(crate) fn parse(target: &str) -> HostResult<Self> {
        let of = |tool: String, namespace: &str| {
            Ok(GrantTarget {
                tool,
                namespace: namespace.to_string(),
            })
        };
        if let Some(ns) = target.strip_suffix(".*") {
            if is_namespace(ns) {
                return of(target.to_string(), ns);
            }
        } else if is_namespace(target) {
            return of(whole_namespace(target), target);
        } else if let Ok(tool) = ToolId::parse(target) {
            let ns = tool.split('.').next().unwrap_or_default().to_string();
            return of(tool.into_string(), &ns);
        }
        Err(HostError::invalid_request(format!(
            "`{}` is neither a tool id (^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$) nor a namespace",
            truncate(target, 80)
        )))
    }
}

fn validate_image_tools(tools: Value) -> HostResult<Value> {
    let Some(list) = tools.as_array() else {
        return Err(HostError::invalid_request(
            "`tools` must be an array of {name, description, inputSchema}",
        ));
    };
    let mut seen = std::collections::HashSet::new();
    for (i, t) in list.iter().enumerate() {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
        if !is_tool_id(name) {
            return Err(HostError::invalid_request(format!(
                "tools[{i}].name `{}` is not a tool id",
                truncate(name, 80)
            )));
        }
        if !seen.insert(name.to_string()) {
            return Err(HostError::invalid_request(format!(
                "tools[{i}].name `{name}` is listed twice"
            )));
        }
        if let Some(schema) = t.get("inputSchema") {
            if jsonschema::meta::validate(schema).is_err() {
                return Err(HostError::invalid_request(format!(
                    "tools[{i}].inputSchema is not a valid JSON Schema"
                )));
            }
        }
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_wherever_the_schema_declares_them() {
        use serde_json::json;
        let schema = json!({
            "type": "object",
            "properties": {
                "apiKey": {"type": "string", "writeOnly": true},
                "plain": {"type": "string"},
                "endpoints": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"url": {"type": "string"}, "token": {"type": "string", "format": "password"}}
                }},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string", "writeOnly": true}]},
                "headers": {"type": "object", "additionalProperties": {"type": "string", "writeOnly": true}},
                "byPattern": {"type": "object", "patternProperties": {"^secret_": {"writeOnly": true}}},
                "unset": {"type": ["string", "null"], "writeOnly": true}
            },
            "allOf": [{"properties": {"viaAllOf": {"writeOnly": true}}}]
        });
        let config = json!({
            "apiKey": "k-1", "plain": "p",
            "endpoints": [{"url": "https://a", "token": "t-1"}, {"url": "https://b", "token": "t-2"}],
            "pair": ["visible", "p-2"],
            "headers": {"X-Key": "h-1"},
            "byPattern": {"secret_a": "s-1", "other": "o"},
            "viaAllOf": "v-1",
            "unset": null
        });
        let shown = mask_secrets(&schema, &config);
        assert_eq!(
            shown,
            json!({
                "apiKey": "***", "plain": "p",
                "endpoints": [{"url": "https://a", "token": "***"}, {"url": "https://b", "token": "***"}],
                "pair": ["visible", "***"],
                "headers": {"X-Key": "***"},
                "byPattern": {"secret_a": "***", "other": "o"},
                "viaAllOf": "***",
                "unset": null
            })
        );
        let text = shown.to_string();
        for secret in ["k-1", "t-1", "t-2", "p-2", "h-1", "s-1", "v-1"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
    }

    #[test]
    fn grant_targets_are_tools_or_namespaces() {
        let parse = |t: &str| {
            GrantTarget::parse(t)
                .map(|t| (t.tool, t.namespace))
                .map_err(|e| e.code)
        };
        assert_eq!(
            parse("github.create_issue"),
            Ok(("github.create_issue".into(), "github".into()))
        );
        assert_eq!(parse("github"), Ok(("github.*".into(), "github".into())));
        assert_eq!(parse("github.*"), Ok(("github.*".into(), "github".into())));
        for bad in ["", "GitHub", "github.", ".x", "a.*.b", "a b", "*"] {
            assert_eq!(parse(bad), Err(ErrorCode::InvalidRequest), "{bad}");
        }
    }

    #[test]
    fn image_tool_lists_are_checked() {
        let ok = json!([{"name": "img.run", "inputSchema": {"type": "object"}}]);
        assert!(validate_image_tools(ok).is_ok());
        for bad in [
            json!({"name": "img.run"}),
            json!([{"name": "Not A Tool"}]),
            json!([{"name": "img.run"}, {"name": "img.run"}]),
            json!([{"name": "img.run", "inputSchema": {"type": 12}}]),
        ] {
            let err = validate_image_tools(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.code, ErrorCode::InvalidRequest);
        }
    }

    #[test]
    fn secrets_are_masked_at_any_depth() {
        let schema = json!({"type": "object", "properties": {
            "token": {"type": "string", "writeOnly": true},
            "nested": {"type": "object", "properties": {"password": {"type": "string", "format": "password"}}},
            "repo": {"type": "string"}
        }});
        let config = json!({"token": "t0p", "nested": {"password": "pw", "other": 1}, "repo": "a/b", "extra": "x"});
        assert_eq!(
            mask_secrets(&schema, &config),
            json!({"token": "***", "nested": {"password": "***", "other": 1}, "repo": "a/b", "extra": "x"})
        );
    }
}
