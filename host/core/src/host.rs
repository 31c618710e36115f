//! [`Host`]: everything the host does, as a Rust API.
//!
//! The HTTP API, the CLI and an embedding platform all go through this one type. It owns
//! nothing itself: [`crate::startup`] opens the host's parts in order, and each call goes
//! to the part that owns the rule. Ids enter here: a method takes a unit or agent id as
//! its type or as text ([`IntoId`]), checks text once (inside the call's audit record, so
//! a refused id is recorded like any refusal) and hands the parts the typed id.
//!
//! | part | owns |
//! |---|---|
//! | `State` | what is served from memory, and the one write path |
//! | `Catalog` | installed connectors, install and rotation, sandboxes |
//! | `DirectoryService` | units, agents, bindings, grants, image tools |
//! | `ToolDispatcher` | tool calls, platform tools, call metrics |
//! | `Webhooks` | webhook ingest and the delivery worker |
//! | `Inbox` | units' inboxes |
//! | `ReplicaSync` | keeping memory in step with a shared database |
//! | `Credentials` | the operator token and agent tokens |

use std::sync::Arc;

use futures::Stream;
use serde_json::Value;

use crate::audit::Audit;
pub use crate::audit::{AuditPage, AuditVerdict};
pub use crate::auth::IssuedToken;
pub use crate::catalog::{InstallOptions, Installed, Written};
use crate::config::HostConfig;
pub use crate::context::RuntimeContext;
pub use crate::directory::{
    mask_secrets, AgentSummary, AgentView, BindingView, GrantView, UnitView,
};
use crate::directory::{AgentUnits, GrantTarget};
pub use crate::dispatch::{Metrics, PlatformToolHandler};
use crate::grants::ResolvedTools;
pub use crate::inbox::{Message, MessagePage, MessageWatch};
use crate::registry::InstalledConnector;
pub use crate::sources::{ComponentSource, InstallRequest};
pub use crate::startup::{open_store, StartupReport};
use crate::startup::{Parts, Role};
use crate::webhooks::{DeliveryAudit, WebhookStatus};
pub use crate::webhooks::{DeliveryView, WebhookOutcome};
/// The attribute a [`PlatformToolHandler`] implementation is written under.
pub use async_trait::async_trait;
use connector_model::audit::{target, Actor};
use connector_model::connector::{Connector, ToolInfo};
/// How a [`PlatformToolHandler`] reports a failure.
pub use connector_model::error::HandlerError;
use connector_model::error::HostResult;
use connector_model::ids::{truncate, AgentId, IntoId, UnitId};
use connector_model::records::{
    BindingRecord, DeliveryRecord, DeliveryStatus, Subject, UnitRecord,
};
use connector_runtime::Sandbox;
pub use connector_store::AuditQuery;
use connector_store::Store;

/// The connector host. Cheap to clone; all clones share one state.
///
/// A `Host` acts for someone: what it changes is recorded in the audit log under that
/// actor ([`Host::acting_as`]; the host itself unless said otherwise).
#[derive(Clone)]
pub struct Host {
    parts: Arc<Parts>,
    actor: Actor,
}

impl Host {
    /// Opens a host on `config`: the store, the runtime, the bundled connectors, the
    /// connectors directory and everything persisted.
    pub async fn open(config: HostConfig) -> anyhow::Result<(Host, StartupReport)> {
        let store = open_store(&config).await?;
        Self::open_with_store(config, store).await
    }

    /// Like [`Host::open`] with a store of the caller's choosing.
    pub async fn open_with_store(
        config: HostConfig,
        store: Arc<dyn Store>,
    ) -> anyhow::Result<(Host, StartupReport)> {
        let (parts, report) = Parts::open(config, store, Role::Server).await?;
        Ok((
            Host {
                parts,
                actor: Actor::host(),
            },
            report,
        ))
    }

    /// Opens a host that only serves tools beside a running `serve` on the same database
    /// (`connector-host mcp --local`): it writes nothing at start, starts no webhook work,
    /// and catches up with the other process's writes before each request, SQLite
    /// included. On SQLite its own writes (the records of its tool calls) commit on the
    /// calling thread ([`Writes::OnCaller`](connector_store::sqlite::Writes::OnCaller)):
    /// it serves one client.
    pub async fn open_tool_server(mut config: HostConfig) -> anyhow::Result<Host> {
        // It listens nowhere, so it accepts no operator token: one only it knows, rather
        // than reading (or creating) the server's `operator-token` file.
        if config.operator_token.is_none() {
            config.operator_token = Some(crate::auth::random_secret(32));
        }
        let store =
            crate::startup::open_store_with(&config, connector_store::sqlite::Writes::OnCaller)
                .await?;
        let (parts, _) = Parts::open(config, store, Role::ToolServer).await?;
        Ok(Host {
            parts,
            actor: Actor::host(),
        })
    }

    // ----- configuration, credentials, replicas ----------------------------------------

    /// The configuration in force.
    pub fn config(&self) -> &HostConfig {
        &self.parts.config
    }

    /// How many transactions the store committed and how many writes they carried
    /// (for `/metrics`; zero for a store that does not count).
    pub fn commit_counts(&self) -> connector_store::CommitCounts {
        self.parts.store.commit_counts()
    }

    /// Counters for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        self.parts.tools.metrics()
    }

    /// This host, acting for `actor`: the audit records of what it does name them.
    pub fn acting_as(&self, actor: Actor) -> Host {
        Host {
            parts: self.parts.clone(),
            actor,
        }
    }

    /// Who this host acts for.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// Runs `change` with the audit record `audit` describes, recording its refusal if it
    /// is refused.
    async fn audited<T>(
        &self,
        audit: Audit,
        change: impl std::future::Future<Output = HostResult<T>>,
    ) -> HostResult<T> {
        let result = change.await;
        self.parts.audit.outcome_of(&audit, result).await
    }

    fn audit(&self, action: &'static str, target: String) -> Audit {
        Audit::new(&self.actor, action, target)
    }

    // ----- the audit log --------------------------------------------------------------

    /// A page of audit records (`query.limit` at most; see [`AuditQuery`]).
    pub async fn audit_records(&self, query: AuditQuery) -> HostResult<AuditPage> {
        self.parts.audit.records(query).await
    }

    /// Recomputes the audit chain from its oldest kept record.
    pub async fn verify_audit(&self) -> HostResult<AuditVerdict> {
        self.parts.audit.verify().await
    }

    /// Records a console sign-in (`signed_in`) or sign-out of the session named
    /// `session` (a name derived from it, never its cookie), once committed.
    pub async fn record_console_session(&self, session: &str, signed_in: bool) -> HostResult<()> {
        let action = if signed_in {
            "console.sign_in"
        } else {
            "console.sign_out"
        };
        let actor = Actor::console(Some(session.to_string()));
        let audit = Audit::new(&actor, action, format!("console:{session}"));
        self.parts.audit.append(audit.entry("ok")).await
    }

    /// Prunes audit records older than `audit.retention_days` now (the host also does it
    /// hourly); returns how many went.
    pub async fn prune_audit(&self) -> HostResult<u64> {
        self.parts.audit.prune().await
    }

    /// Whether `token` is the operator token (constant time).
    pub fn is_operator_token(&self, token: &str) -> bool {
        self.parts.credentials.is_operator(token)
    }

    /// The agent an agent token was issued for.
    /// Only while the agent exists and has not had its tokens revoked since.
    pub fn agent_of_token(&self, token: &str) -> Option<String> {
        let (agent, epoch) = self.parts.credentials.agent_of(token)?;
        self.parts
            .directory
            .has_token_epoch(&agent, &epoch)
            .then_some(agent)
    }

    /// Who a bearer token authenticates: the operator ([`Host::is_operator_token`]), an
    /// agent ([`Host::agent_of_token`]), or nobody (`None`); both checks for the cost of
    /// one.
    pub fn caller_of_token(&self, token: &str) -> Option<crate::auth::Caller> {
        match self.parts.credentials.presented(token)? {
            crate::auth::Presented::Operator => Some(crate::auth::Caller::Operator),
            crate::auth::Presented::Agent { agent, epoch } => self
                .parts
                .directory
                .has_token_epoch(&agent, &epoch)
                .then_some(crate::auth::Caller::Agent(agent)),
        }
    }

    /// Issues an agent token (default one hour, at most 30 days).
    /// The token is answered only once its audit record (never the token) is committed.
    pub async fn issue_agent_token(
        &self,
        id: impl IntoId<AgentId>,
        ttl_seconds: Option<u64>,
    ) -> HostResult<IssuedToken> {
        let audit = self.audit("token.mint", target::agent(&truncate(id.as_ref(), 128)));
        let issued = id.into_id().and_then(|id| {
            let epoch = self.parts.directory.token_epoch(&id)?;
            self.parts.credentials.issue(&id, &epoch, ttl_seconds)
        });
        let issued = self.parts.audit.outcome_of(&audit, issued).await?;
        let audit = audit.with_details(serde_json::json!({"expiresAt": issued.expires_at}));
        self.parts.audit.append(audit.entry("ok")).await?;
        Ok(issued)
    }

    /// Revokes every token minted for agent `id` so far, on every replica.
    pub async fn revoke_agent_tokens(&self, id: impl IntoId<AgentId>) -> HostResult<()> {
        let audit = self.audit("token.revoke", target::agent(&truncate(id.as_ref(), 128)));
        self.audited(audit.clone(), async {
            let id = id.into_id()?;
            self.parts.directory.revoke_agent_tokens(&audit, &id).await
        })
        .await
    }

    /// Brings this replica's in-memory state up to date with the shared database: every
    /// change committed (through any replica) before this call started is visible after
    /// it returns. A no-op on a store only this process writes.
    pub async fn refresh(&self) -> HostResult<()> {
        self.parts.replicas.refresh().await
    }

    /// The state version this host's memory reflects: a database whose state version
    /// is still this one holds nothing [`Host::refresh`] would catch up with.
    pub fn applied_state_version(&self) -> i64 {
        self.parts.replicas.applied()
    }

    /// Whether other processes write this host's database (a shared store, or a tool
    /// server beside the process that writes it): only then does [`Host::refresh`] have
    /// anything to do.
    pub fn follows_other_writers(&self) -> bool {
        self.parts.replicas.follows_other_writers()
    }

    /// How this replica has caught up with other processes' writes since it started
    /// (from the change log, or by reloading everything).
    pub fn catch_ups(&self) -> crate::replicas::CatchUps {
        self.parts.replicas.catch_ups()
    }

    // ----- connectors ---------------------------------------------------------------

    /// Installs (new slug) or rotates (same slug) uploaded bytes; see [`Host::install`].
    pub async fn install_connector(&self, bytes: &[u8], force: bool) -> HostResult<Installed> {
        self.install(InstallRequest::upload(bytes, force)).await
    }

    /// Installs or rotates from uploaded bytes or an OCI registry (CONTRACT.md §10).
    pub async fn install(&self, request: InstallRequest) -> HostResult<Installed> {
        self.parts.install_from(&self.actor, request).await
    }

    /// Every installed connector, sorted by slug.
    pub fn list_connectors(&self) -> Vec<Connector> {
        self.parts.catalog.list()
    }

    /// One installed connector.
    pub fn connector(&self, slug: &str) -> HostResult<Arc<InstalledConnector>> {
        self.parts.catalog.get(slug)
    }

    /// Removes a connector; while bound it is refused (`409 connector_in_use`) unless
    /// `force`, which unbinds it everywhere first.
    pub async fn remove_connector(&self, slug: &str, force: bool) -> HostResult<()> {
        let audit = self
            .audit("connector.delete", target::connector(&truncate(slug, 128)))
            .with_details(serde_json::json!({"force": force}));
        self.audited(
            audit.clone(),
            self.parts.catalog.remove(&audit, slug, force),
        )
        .await
    }

    /// The sandbox a call of connector `slug` runs in on behalf of `binding` (if any).
    pub fn sandbox(&self, slug: &str, binding: Option<&BindingRecord>) -> Sandbox {
        self.parts.catalog.sandbox(slug, binding)
    }

    // ----- units, agents, bindings, grants --------------------------------------------

    /// Creates or updates a unit.
    pub async fn put_unit(
        &self,
        id: impl IntoId<UnitId>,
        parent: Option<&str>,
        display_name: Option<&str>,
    ) -> HostResult<(UnitView, Written)> {
        let audit = self.audit("unit.put", target::unit(&truncate(id.as_ref(), 128)));
        self.audited(audit.clone(), async {
            let id = id.into_id()?;
            let parent = parent.map(UnitId::parse).transpose()?;
            self.parts
                .directory
                .put_unit(&audit, &id, parent.as_ref(), display_name)
                .await
        })
        .await
    }

    /// A unit with its bindings and effective tools.
    pub fn unit(&self, id: impl IntoId<UnitId>) -> HostResult<UnitView> {
        self.parts.directory.unit(&id.into_id()?)
    }

    /// Deletes a unit with its bindings, grants and agent memberships; refused while it
    /// has children (`409 has_children`).
    pub async fn delete_unit(&self, id: impl IntoId<UnitId>) -> HostResult<()> {
        let audit = self.audit("unit.delete", target::unit(&truncate(id.as_ref(), 128)));
        self.audited(audit.clone(), async {
            let id = id.into_id()?;
            self.parts.directory.delete_unit(&audit, &id).await
        })
        .await
    }

    /// Creates or updates an agent (`units`: first = primary).
    pub async fn put_agent(
        &self,
        id: impl IntoId<AgentId>,
        units: &[impl AsRef<str>],
        display_name: Option<&str>,
    ) -> HostResult<(AgentView, Written)> {
        let listed: Vec<&str> = units.iter().map(AsRef::as_ref).collect();
        let audit = self
            .audit("agent.put", target::agent(&truncate(id.as_ref(), 128)))
            .with_details(serde_json::json!({"units": listed}));
        self.audited(audit.clone(), async {
            let id = id.into_id()?;
            let units = AgentUnits::parse(units)?;
            self.parts
                .directory
                .put_agent(&audit, &id, &units, display_name)
                .await
        })
        .await
    }

    /// An agent with its effective tools.
    pub fn agent(&self, id: impl IntoId<AgentId>) -> HostResult<AgentView> {
        self.parts.directory.agent(&id.into_id()?)
    }

    /// Deletes an agent with its explicit grants and image tools.
    pub async fn delete_agent(&self, id: impl IntoId<AgentId>) -> HostResult<()> {
        let audit = self.audit("agent.delete", target::agent(&truncate(id.as_ref(), 128)));
        self.audited(audit.clone(), async {
            let id = id.into_id()?;
            self.parts.directory.delete_agent(&audit, &id).await
        })
        .await
    }

    /// Binds a connector to a unit (or replaces the binding's config).
    pub async fn bind(
        &self,
        unit: impl IntoId<UnitId>,
        slug: &str,
        config: Value,
    ) -> HostResult<(BindingView, Written)> {
        let audit = self.audit(
            "binding.put",
            target::binding(&truncate(unit.as_ref(), 128), &truncate(slug, 128)),
        );
        self.audited(audit.clone(), async {
            let unit = unit.into_id()?;
            self.parts.directory.bind(&audit, &unit, slug, config).await
        })
        .await
    }

    /// The bindings of a unit.
    pub fn bindings(&self, unit: impl IntoId<UnitId>) -> HostResult<Vec<BindingView>> {
        self.parts.directory.bindings(&unit.into_id()?)
    }

    /// Every binding of every unit.
    pub fn all_bindings(&self) -> Vec<BindingRecord> {
        self.parts.directory.all_bindings()
    }

    /// Every unit, sorted by id: what an operator browses.
    pub fn list_units(&self) -> Vec<UnitRecord> {
        self.parts.directory.list_units()
    }

    /// Every agent (without tools or token state), sorted by id.
    pub fn list_agents(&self) -> Vec<AgentSummary> {
        self.parts.directory.list_agents()
    }

    /// A page of units (all, roots only, or one unit's children), sorted by id, with
    /// their own bindings and agent counts.
    pub fn units_page(
        &self,
        parent: &crate::listing::ParentFilter,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> HostResult<crate::listing::Page<crate::listing::UnitSummary>> {
        crate::listing::units(&self.parts.state.directory(), parent, after, limit)
    }

    /// A page of agents (all, or the members of `unit`), sorted by id.
    pub fn agents_page(
        &self,
        unit: Option<&str>,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> HostResult<crate::listing::Page<AgentSummary>> {
        crate::listing::agents(&self.parts.state.directory(), unit, after, limit)
    }

    /// Unbinds: deletes the binding and exactly its grants in one transaction.
    pub async fn unbind(&self, unit: impl IntoId<UnitId>, slug: &str) -> HostResult<()> {
        let audit = self.audit(
            "binding.delete",
            target::binding(&truncate(unit.as_ref(), 128), &truncate(slug, 128)),
        );
        self.audited(audit.clone(), async {
            let unit = unit.into_id()?;
            self.parts.directory.unbind(&audit, &unit, slug).await
        })
        .await
    }

    /// The effective tools of a unit or agent.
    pub fn effective_tools(&self, subject: &Subject) -> HostResult<Arc<ResolvedTools>> {
        check_subject(subject)?;
        self.parts.state.effective_tools(subject)
    }

    /// Changes each time any subject's effective tools may have changed (a bind, a
    /// grant, a rotation, a change another replica made): wait on it, then compare
    /// [`Host::effective_tools`] with what you last saw.
    pub fn watch_tools(&self) -> tokio::sync::watch::Receiver<u64> {
        self.parts.state.watch_tools()
    }

    /// Grants a tool id or a whole namespace to a subject explicitly.
    pub async fn grant(&self, subject: Subject, tool_or_namespace: &str) -> HostResult<GrantView> {
        let audit = self.audit("grant.put", grant_target(&subject, tool_or_namespace));
        self.audited(audit.clone(), async {
            let target = GrantTarget::parse(tool_or_namespace)?;
            check_subject(&subject)?;
            self.parts.directory.grant(&audit, subject, target).await
        })
        .await
    }

    /// Revokes an explicit grant.
    pub async fn revoke(&self, subject: Subject, tool_or_namespace: &str) -> HostResult<()> {
        let audit = self.audit("grant.delete", grant_target(&subject, tool_or_namespace));
        self.audited(audit.clone(), async {
            let target = GrantTarget::parse(tool_or_namespace)?;
            check_subject(&subject)?;
            self.parts.directory.revoke(&audit, subject, target).await
        })
        .await
    }

    /// The explicit grants of a subject (`<namespace>.*` or a tool id each), sorted by
    /// what they grant; empty for a subject that does not exist.
    pub fn explicit_grants(&self, subject: &Subject) -> Vec<GrantView> {
        let mut grants: Vec<GrantView> = self
            .parts
            .state
            .directory()
            .grants_of(subject)
            .iter()
            .filter(|g| g.provenance == connector_model::provenance::GrantProvenance::Explicit)
            .map(GrantView::from)
            .collect();
        grants.sort_by(|a, b| a.tool.cmp(&b.tool));
        grants
    }

    /// Stores the tools an agent's image declares.
    pub async fn put_image_tools(
        &self,
        agent: impl IntoId<AgentId>,
        digest: &str,
        tools: Value,
    ) -> HostResult<Value> {
        let audit = self
            .audit(
                "image_tools.put",
                target::agent(&truncate(agent.as_ref(), 128)),
            )
            .with_details(serde_json::json!({"digest": truncate(digest, 128)}));
        self.audited(audit.clone(), async {
            let agent = agent.into_id()?;
            self.parts
                .directory
                .put_image_tools(&audit, &agent, digest, tools)
                .await
        })
        .await
    }

    /// Fetches `GET {url}/a2a/tools` from an agent's image and stores the tools.
    pub async fn introspect_image_tools(
        &self,
        agent: impl IntoId<AgentId>,
        url: &str,
    ) -> HostResult<Value> {
        let audit = self.audit(
            "image_tools.put",
            target::agent(&truncate(agent.as_ref(), 128)),
        );
        self.audited(audit.clone(), async {
            let agent = agent.into_id()?;
            self.parts
                .directory
                .introspect_image_tools(&audit, &agent, url)
                .await
        })
        .await
    }

    /// The env vars and files the container of `agent` starts with.
    pub async fn runtime_context(&self, agent: impl IntoId<AgentId>) -> HostResult<RuntimeContext> {
        let agent = agent.into_id()?;
        crate::context::build(&self.parts.state, &self.parts.catalog, &agent).await
    }

    // ----- tool calls ---------------------------------------------------------------

    /// Registers a platform tool (`sv.*`) every subject gets.
    pub fn register_platform_tool(
        &self,
        info: ToolInfo,
        handler: Arc<dyn PlatformToolHandler>,
    ) -> HostResult<()> {
        self.parts.tools.register_platform_tool(info, handler)
    }

    /// Calls a tool on behalf of an agent: its structured result and content blocks.
    pub async fn call_tool(
        &self,
        agent: impl IntoId<AgentId>,
        tool: &str,
        arguments: Value,
    ) -> HostResult<crate::ToolOutput> {
        self.parts
            .tools
            .call_tool(&self.actor, agent, tool, arguments)
            .await
    }

    // ----- webhooks and inboxes -------------------------------------------------------

    /// Admits a webhook delivery's body to be read (see `Webhooks::admit`): refuses one
    /// whose slug, headers or size cannot lead to a delivery before any of it is
    /// buffered; its body is then read within its sender's share of the reading budget
    /// (`peer`: the sender's remote address as `crate::http::Peer::addr` gives it, an
    /// IPv6 one by its /64; `None` when unknown). Hold the admission until the body is
    /// handled.
    pub fn admit_webhook(
        &self,
        slug: &str,
        headers: &http::HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> HostResult<crate::webhooks::BodyAdmission> {
        self.parts.webhooks.admit(slug, headers, peer)
    }

    /// Receives one webhook delivery for connector `slug`.
    pub async fn receive_webhook(
        &self,
        slug: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> HostResult<WebhookOutcome> {
        // A delivery the host refused (no such connector, a signature that does not
        // verify) came from no one the host knows: recording it would let anybody
        // write to the audit log. What was accepted is recorded before it is answered.
        // A routed delivery was recorded with its messages, a queued one with its row;
        // a duplicate or an ignored one stores nothing and is recorded here.
        let outcome = self.parts.webhooks.receive(slug, headers, body).await?;
        if matches!(
            outcome.status,
            WebhookStatus::Duplicate | WebhookStatus::Ignored
        ) {
            let entry = DeliveryAudit::by(Actor::webhook(slug)).entry(
                slug,
                &outcome.delivery,
                outcome.status,
                &outcome.routed_to,
            );
            self.parts.audit.append(entry).await?;
        }
        Ok(outcome)
    }

    /// Retries one stored delivery now.
    pub async fn retry_delivery(
        &self,
        slug: &str,
        delivery_id: &str,
    ) -> HostResult<WebhookOutcome> {
        let audit = self.audit(
            "delivery.retry",
            target::delivery(&truncate(slug, 128), &truncate(delivery_id, 128)),
        );
        let recorded = DeliveryAudit::retry_by(self.actor.clone());
        let outcome = self
            .audited(
                audit,
                self.parts
                    .webhooks
                    .retry(slug, delivery_id, recorded.clone()),
            )
            .await?;
        // Routed, it was recorded with its messages.
        if outcome.status != WebhookStatus::Accepted {
            let entry = recorded.entry(slug, delivery_id, outcome.status, &outcome.routed_to);
            self.parts.audit.append(entry).await?;
        }
        Ok(outcome)
    }

    /// What the operator sees of one delivery.
    pub async fn delivery(&self, slug: &str, delivery_id: &str) -> HostResult<DeliveryView> {
        self.parts.webhooks.delivery(slug, delivery_id).await
    }

    /// One stored delivery as it was received: its stored headers and raw body (empty
    /// once pruned) with where it stands.
    pub async fn delivery_record(
        &self,
        slug: &str,
        delivery_id: &str,
    ) -> HostResult<DeliveryRecord> {
        self.parts.webhooks.stored_delivery(slug, delivery_id).await
    }

    /// The deliveries stored for connector `slug`, newest first, at most `limit`, without
    /// their bodies.
    pub async fn deliveries(&self, slug: &str, limit: u32) -> HostResult<Vec<DeliveryRecord>> {
        Ok(self.parts.store.deliveries_of(slug, limit).await?)
    }

    /// The deliveries stored for connector `slug` with `status`, newest first, at most
    /// `limit`, without their bodies; `after` is the `(received_unix, delivery_id)` of
    /// the previous page's last one. Read by status in the store: none is missed behind
    /// deliveries of other statuses.
    pub async fn deliveries_with_status(
        &self,
        slug: &str,
        status: DeliveryStatus,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> HostResult<Vec<DeliveryRecord>> {
        Ok(self
            .parts
            .store
            .deliveries_with_status(slug, status, after, limit)
            .await?)
    }

    /// Deletes finished deliveries older than the de-duplication window.
    pub async fn prune_deliveries(&self) -> HostResult<u64> {
        self.parts.webhooks.prune().await
    }

    /// A page of a unit's inbox after `cursor`.
    pub async fn messages(
        &self,
        unit: impl IntoId<UnitId>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> HostResult<MessagePage> {
        let unit = unit.into_id()?;
        self.parts.inbox.page(&unit, cursor, limit).await
    }

    /// A unit's messages with a cursor below `before` (the newest when `None`), newest
    /// first, at most `limit` (1 to 500).
    pub async fn newest_messages(
        &self,
        unit: impl IntoId<UnitId>,
        before: Option<i64>,
        limit: u32,
    ) -> HostResult<Vec<Message>> {
        let unit = unit.into_id()?;
        self.parts.inbox.newest(&unit, before, limit).await
    }

    /// A live subscription to a unit's inbox: every message after `cursor`, each exactly
    /// once, in order.
    pub fn subscribe(
        &self,
        unit: impl IntoId<UnitId>,
        cursor: Option<&str>,
    ) -> HostResult<impl Stream<Item = Message> + Send + 'static> {
        self.parts.inbox.subscribe(&unit.into_id()?, cursor)
    }

    /// Watches the inboxes of `units` for messages stored from now on (here, or by
    /// another replica): what MCP resource subscriptions are pushed from.
    pub async fn watch_messages(&self, units: Vec<UnitId>) -> HostResult<MessageWatch> {
        self.parts.inbox.watch(units).await
    }
}

/// Checks the id a [`Subject`] names (`400 invalid_request` as for any id).
fn check_subject(subject: &Subject) -> HostResult<()> {
    match subject {
        Subject::Unit(id) => UnitId::parse(id).map(drop),
        Subject::Agent(id) => AgentId::parse(id).map(drop),
    }
}

/// The record target of a grant of `tool_or_namespace` to `subject`.
fn grant_target(subject: &Subject, tool_or_namespace: &str) -> String {
    let subject = match subject {
        Subject::Unit(id) => target::unit(&truncate(id, 128)),
        Subject::Agent(id) => target::agent(&truncate(id, 128)),
    };
    target::grant(&subject, &truncate(tool_or_namespace, 256))
}
