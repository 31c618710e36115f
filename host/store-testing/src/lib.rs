//! The behaviour every connector-host [`Store`] must have, as tests any implementation can
//! run, with the fixtures they are built from and fault injection in the database itself.
//!
//! The host is written against the trait, not against a database: which store an operator
//! picks must not change what the host does. So the store-level tests live here, once, as
//! plain async functions over a [`StoreFactory`], and each store instantiates all of them
//! with one line of [`store_conformance_tests!`]. A test that only makes sense for one
//! database (its file, its migrations, its errors) stays with that store.
//!
//! Each case gets a fresh database from its own factory and may open several handles on
//! it: two handles on one database stand for two replicas, which is how the concurrency
//! cases (de-duplication, claims, foreign changes, shared secrets) are checked.
//!
//! Faults ([`faults`]) are injected by the database, not by the store: a trigger makes
//! the second write of one store call fail, so a case proves that the store's transaction
//! leaves nothing of the call behind. The production stores carry no test hooks.
//!
//! What the suite leaves open: the state version's starting value (only that it grows by
//! one with every change: the change log holds one entry per version), and the wording of
//! error messages.

pub mod faults;
pub mod sqlite;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

use connector_model::audit::{Actor, AuditAnchor, AuditEntry, AuditRecord, ChainCheck, GENESIS};
use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    BindingRecord, Claim, DeliveryRecord, DeliveryStatus, GrantRecord, ImageToolsRecord,
    MessageRecord, Snapshot, Subject,
};
use connector_store::{AuditQuery, ClaimScope, StateCheck, StateWrite, Store, StoreError};
use faults::{is_injected, Fault};
use fixtures::*;

/// Opens handles on one database, and injects faults into it.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A new handle (its own connections, its own memory of what it wrote) on this
    /// factory's database: every call opens the same database, which starts out empty.
    async fn open(&self) -> Arc<dyn Store>;
    /// From now on, every store call on this database that reaches `fault` fails there
    /// (`None`: none does); see [`faults`].
    async fn inject(&self, fault: Option<Fault>);
}

/// Defines one `#[tokio::test]` per conformance case, each on a fresh database.
///
/// `$factory` is an expression (it may `.await`) that evaluates to a new
/// [`StoreFactory`] with its own empty database;
/// it is evaluated once per test. The calling crate needs `tokio` with the `macros` and
/// `rt-multi-thread` features.
///
/// ```ignore
/// mod sqlite {
///     connector_store_testing::store_conformance_tests!(SqliteFactory::new());
/// }
/// ```
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:expr) => {
        $crate::store_conformance_tests!(@cases ($factory)
            empty_database_loads_empty_snapshot
            every_record_type_round_trips
            load_keeps_insertion_order_sorts_agents_by_id_and_keeps_their_unit_order
            upserts_replace_rows_without_duplicating
            put_binding_fault_leaves_neither_binding_nor_grant
            delete_binding_fault_keeps_binding_and_grant
            put_connector_fault_keeps_old_connector_and_grants
            a_fault_fires_only_at_its_own_step_and_can_be_disarmed
            rotation_rederives_only_that_connectors_grants
            rederiving_keeps_each_subjects_first_grant
            rotate_connector_removes_and_rebinds_in_one_step
            delete_connector_removes_its_bindings_and_grants_only
            delete_unit_removes_its_bindings_and_grants_only
            delete_agent_removes_memberships_grants_and_image_tools
            delete_grant_matches_subject_tool_and_provenance
            binding_of_a_missing_unit_is_refused_and_leaves_nothing
            concurrent_writes_through_two_handles_all_land
            deliveries_and_messages_round_trip
            insert_delivery_deduplicates_within_the_window
            concurrent_inserts_of_one_delivery_store_it_once
            complete_delivery_fault_stores_no_messages
            complete_twice_stores_messages_once
            a_routed_delivery_is_stored_done_with_its_messages_once
            complete_and_fail_release_the_claim
            sweep_skips_live_claims_and_takes_lapsed_ones
            startup_takes_own_claims_and_unheld_failed_ones
            concurrent_sweeps_never_take_the_same_delivery
            changes_since_tells_own_writes_from_foreign_ones
            the_change_log_holds_each_foreign_write_in_order
            a_change_log_pruned_past_a_handle_reads_as_reload
            every_state_write_changes_the_version
            deliveries_messages_and_secrets_keep_the_version
            load_version_matches_changes_since
            shared_secret_first_writer_wins
            nul_characters_in_free_text_do_not_fail_a_write
            deliveries_of_lists_one_connectors_newest_first
            deliveries_with_status_page_newest_first_past_any_other_status
            inboxes_read_newest_first_by_cursor
            audited_writes_and_appends_form_one_chain
            a_failed_audited_write_leaves_no_record
            a_write_failing_at_its_change_log_entry_leaves_nothing
            a_batch_commits_up_to_its_first_failing_write
            a_batch_stops_at_a_write_whose_change_log_entry_fails
            a_batch_stops_at_a_write_whose_record_fails
            a_batch_of_one_write_stores_all_of_it_or_nothing
            concurrent_appends_through_two_handles_form_one_chain
            entries_appended_one_by_one_join_the_chain_once_each
            a_failed_group_of_appended_entries_keeps_none_of_them
            audit_records_filter_and_page
            filters_over_a_long_log_find_what_a_scan_finds
            pruning_moves_the_anchor_and_keeps_the_newest_record
            a_stored_delivery_has_its_record_in_its_transaction_once
        );
    };
    (@cases ($factory:expr) $($case:ident)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let factory = $factory;
                $crate::$case(&factory).await;
            }
        )*
    };
}

/// Records the cases build from, and a populated store.
pub mod fixtures {
    use serde_json::{json, Value};

    use connector_model::ids::Slug;
    use connector_model::provenance::GrantProvenance;
    use connector_model::records::{
        AgentRecord, BindingRecord, Claim, ConnectorRecord, DeliveryRecord, DeliveryStatus,
        GrantRecord, MessageRecord, Snapshot, Subject, UnitRecord,
    };
    use connector_store::Store;

    /// The bytes the suite stores as a connector's component.
    pub const COMPONENT: &[u8] = &[0, 97, 115, 109, 1, 2, 3];

    pub fn connector(slug: &str, namespace: &str, digest: &str) -> ConnectorRecord {
        ConnectorRecord {
            slug: slug.into(),
            namespace: namespace.into(),
            digest: digest.into(),
            bundled: false,
            installed_at: "2025-01-01T00:00:00Z".into(),
            manifest: Some(json!({"slug": slug, "toolNamespace": namespace, "digest": digest})),
        }
    }

    pub fn unit(id: &str, parent: Option<&str>) -> UnitRecord {
        UnitRecord {
            id: id.into(),
            parent: parent.map(Into::into),
            display_name: Some(format!("Unit {id}")),
            created_at: "2025-01-02T00:00:00Z".into(),
        }
    }

    pub fn agent(id: &str, units: &[&str]) -> AgentRecord {
        AgentRecord {
            id: id.into(),
            units: units.iter().map(|u| u.to_string()).collect(),
            display_name: None,
            created_at: "2025-01-03T00:00:00Z".into(),
            token_epoch: format!("epoch-{id}"),
        }
    }

    pub fn binding(unit_id: &str, connector: &str, config: Value) -> BindingRecord {
        BindingRecord {
            unit_id: unit_id.into(),
            connector: connector.into(),
            config,
            routing_keys: vec![format!("{connector}:{unit_id}")],
            bound_at: "2025-01-04T00:00:00Z".into(),
        }
    }

    /// The provenance of the grants the bindings of `slug` write.
    pub fn of_connector(slug: &str) -> GrantProvenance {
        GrantProvenance::Connector(Slug::parse(slug).expect("a connector slug"))
    }

    /// The grant a binding of `slug` gives `unit_id`: `<namespace>.*`.
    pub fn connector_grant(unit_id: &str, slug: &str, namespace: &str) -> GrantRecord {
        GrantRecord {
            subject: Subject::Unit(unit_id.into()),
            tool: format!("{namespace}.*"),
            namespace: namespace.into(),
            provenance: of_connector(slug),
            created_at: "2025-01-04T00:00:00Z".into(),
        }
    }

    pub fn explicit_grant(subject: Subject, tool: &str) -> GrantRecord {
        GrantRecord {
            subject,
            tool: tool.into(),
            namespace: tool.split('.').next().unwrap_or_default().into(),
            provenance: GrantProvenance::Explicit,
            created_at: "2025-01-05T00:00:00Z".into(),
        }
    }

    /// A pending delivery of connector `acme`, never claimed.
    pub fn delivery(delivery_id: &str, received_unix: i64) -> DeliveryRecord {
        DeliveryRecord {
            connector: "acme".into(),
            delivery_id: delivery_id.into(),
            event: Some("push".into()),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-acme-delivery".into(), delivery_id.into()),
            ],
            body: format!(r#"{{"id":"{delivery_id}","bytes":"\u0000\u00ff"}}"#).into_bytes(),
            received_unix,
            received_at: "2025-01-06T00:00:00Z".into(),
            status: DeliveryStatus::Pending,
            attempts: 0,
            error: None,
            routed_to: Vec::new(),
            claimed_by: None,
            claim_until: 0,
        }
    }

    /// A message of delivery `delivery_id` for `unit_id` (cursor not assigned yet).
    pub fn message(id: &str, unit_id: &str, delivery_id: &str) -> MessageRecord {
        MessageRecord {
            seq: 0,
            id: id.into(),
            unit_id: unit_id.into(),
            connector: "acme".into(),
            kind: "acme.push".into(),
            delivery_id: delivery_id.into(),
            thread_key: Some(format!("thread-{delivery_id}")),
            payload: json!({"message": id, "nested": {"n": [1, 2.5, null, "x"]}}),
            received_at: "2025-01-06T00:00:01Z".into(),
        }
    }

    pub fn claim(owner: &str, until_unix: i64) -> Claim {
        Claim {
            owner: owner.into(),
            until_unix,
        }
    }

    /// Writes connector `acme` (namespace `acme`), units `root` and `team` (child of
    /// root), and `team` bound to `acme`.
    pub async fn populate_bound(store: &dyn Store) {
        store
            .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
            .await
            .unwrap();
        store.put_unit(&unit("root", None)).await.unwrap();
        store.put_unit(&unit("team", Some("root"))).await.unwrap();
        store
            .put_binding(
                &binding("team", "acme", json!({"k": 1})),
                &connector_grant("team", "acme", "acme"),
            )
            .await
            .unwrap();
    }

    /// Two grants of unit `root` as versions before typed provenance wrote them (the
    /// provenance as text), for a database's own test to insert beside
    /// [`populate_bound`]'s rows; [`earlier_grants_read_back`] checks them.
    pub const EARLIER_GRANT_ROWS: &str = "INSERT INTO grants \
         (subject_kind, subject_id, tool, namespace, provenance, created_at) VALUES \
         ('unit', 'root', 'acme.*', 'acme', 'connector:acme', '2024-01-01T00:00:00Z'), \
         ('unit', 'root', 'acme.echo', 'acme', 'explicit', '2024-01-02T00:00:00Z')";

    /// The rows of [`EARLIER_GRANT_ROWS`] read back with their provenance.
    pub async fn earlier_grants_read_back(store: &dyn Store) {
        let snap = store.load().await.expect("load");
        let of_root: Vec<_> = snap
            .grants
            .iter()
            .filter(|g| g.subject == Subject::Unit("root".into()))
            .map(|g| (g.tool.as_str(), g.provenance.clone()))
            .collect();
        assert_eq!(
            of_root,
            vec![
                ("acme.*", of_connector("acme")),
                ("acme.echo", GrantProvenance::Explicit),
            ]
        );
    }

    /// `snapshot` with its version zeroed, for comparing contents only.
    pub fn contents(snapshot: &Snapshot) -> Snapshot {
        Snapshot {
            version: 0,
            ..snapshot.clone()
        }
    }
}

/// A store opened and populated by [`fixtures::populate_bound`].
async fn bound_store(factory: &dyn StoreFactory) -> Arc<dyn Store> {
    let store = factory.open().await;
    populate_bound(&*store).await;
    store
}

async fn version(store: &dyn Store) -> i64 {
    store.changes_since(0).await.unwrap().version
}

/// Starts `n` tasks together (behind a barrier) and returns their results in order.
async fn together<T, F, Fut>(n: usize, task: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            let fut = task(i);
            tokio::spawn(async move {
                barrier.wait().await;
                fut.await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for handle in handles {
        out.push(handle.await.expect("a conformance task panicked"));
    }
    out
}

pub async fn empty_database_loads_empty_snapshot(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let snap = store.load().await.unwrap();
    assert_eq!(contents(&snap), Snapshot::default());
    assert_eq!(
        store.changes_since(snap.version).await.unwrap(),
        StateCheck {
            version: snap.version,
            foreign: false
        }
    );
    assert!(store.unfinished_deliveries().await.unwrap().is_empty());
    assert!(store.messages("team", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.delivery("acme", "d1").await.unwrap(), None);
}

pub async fn every_record_type_round_trips(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let mut gh = connector("github", "github", "sha256:01");
    gh.bundled = true;
    let acme = connector("acme", "acme", "sha256:02");
    let root = unit("root", None);
    let mut team = unit("team", Some("root"));
    team.display_name = None;
    let mut bot = agent("bot", &["team", "root"]);
    bot.display_name = Some("Bot".into());
    let b = BindingRecord {
        unit_id: "team".into(),
        connector: "github".into(),
        config: json!({"repo": "o/r", "installationId": 7, "labels": ["a", "b"], "nested": {"x": null}}),
        routing_keys: vec!["repo:o/r".into(), "installation:7".into()],
        bound_at: "2025-02-01T00:00:00Z".into(),
    };
    let g = connector_grant("team", "github", "github");
    let agent_grant = explicit_grant(Subject::Agent("bot".into()), "acme.echo");
    let unit_grant = GrantRecord {
        tool: "acme.*".into(),
        ..explicit_grant(Subject::Unit("root".into()), "acme.x")
    };
    let image = ImageToolsRecord {
        agent_id: "bot".into(),
        digest: "sha256:ff".into(),
        tools: json!([{"name": "img.run", "description": "d", "inputSchema": {"type": "object"}}]),
    };

    store.put_connector(&gh, COMPONENT).await.unwrap();
    store.put_connector(&acme, COMPONENT).await.unwrap();
    store.put_unit(&root).await.unwrap();
    store.put_unit(&team).await.unwrap();
    store.put_agent(&bot).await.unwrap();
    store.put_binding(&b, &g).await.unwrap();
    store.put_grant(&agent_grant).await.unwrap();
    store.put_grant(&unit_grant).await.unwrap();
    store.put_image_tools(&image).await.unwrap();

    let expected = Snapshot {
        connectors: vec![gh, acme],
        units: vec![root, team],
        agents: vec![bot],
        bindings: vec![b],
        grants: vec![g, agent_grant, unit_grant],
        image_tools: vec![image],
        version: 0,
    };
    let snap = store.load().await.unwrap();
    assert_eq!(contents(&snap), expected);
    // Another handle reads the same.
    assert_eq!(factory.open().await.load().await.unwrap(), snap);
}

/// Units (and every other kind but agents) come back in the order they were stored;
/// agents in id order, bytewise whatever the database's collation (`Y` before `y`, where
/// a language's order puts it after), each with its units in their order.
pub async fn load_keeps_insertion_order_sorts_agents_by_id_and_keeps_their_unit_order(
    factory: &dyn StoreFactory,
) {
    let store = factory.open().await;
    for id in ["b", "a", "c"] {
        store.put_unit(&unit(id, None)).await.unwrap();
    }
    // An upsert keeps the row's place.
    let mut a = unit("a", None);
    a.display_name = Some("renamed".into());
    store.put_unit(&a).await.unwrap();
    // Deleting and adding puts the new row last.
    store.delete_unit("b").await.unwrap();
    store.put_unit(&unit("b", None)).await.unwrap();

    store
        .put_agent(&agent("z", &["c", "a", "b"]))
        .await
        .unwrap();
    store.put_agent(&agent("y", &["b"])).await.unwrap();
    store.put_agent(&agent("Y", &["a", "c"])).await.unwrap();
    for (u, c) in [("c", "zeta"), ("a", "alpha"), ("c", "alpha")] {
        store
            .put_binding(&binding(u, c, json!({})), &connector_grant(u, c, c))
            .await
            .unwrap();
    }

    let snap = store.load().await.unwrap();
    let ids: Vec<_> = snap.units.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(ids, ["a", "c", "b"]);
    assert_eq!(snap.units[0].display_name.as_deref(), Some("renamed"));
    let agents: Vec<_> = snap
        .agents
        .iter()
        .map(|a| (a.id.as_str(), a.units.clone()))
        .collect();
    assert_eq!(
        agents,
        [
            ("Y", vec!["a".to_string(), "c".into()]),
            ("y", vec!["b".to_string()]),
            ("z", vec!["c".to_string(), "a".into(), "b".into()]),
        ]
    );
    let bindings: Vec<_> = snap
        .bindings
        .iter()
        .map(|b| (b.unit_id.as_str(), b.connector.as_str()))
        .collect();
    assert_eq!(bindings, [("c", "zeta"), ("a", "alpha"), ("c", "alpha")]);
    let grants: Vec<_> = snap
        .grants
        .iter()
        .map(|g| (g.subject.clone(), g.tool.as_str()))
        .collect();
    assert_eq!(
        grants,
        [
            (Subject::Unit("c".into()), "zeta.*"),
            (Subject::Unit("a".into()), "alpha.*"),
            (Subject::Unit("c".into()), "alpha.*"),
        ]
    );
}

pub async fn upserts_replace_rows_without_duplicating(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;

    // Connector: same slug, new digest and bytes.
    let rotated = connector("acme", "acme", "sha256:bb");
    store.put_connector(&rotated, &[9, 9]).await.unwrap();
    assert_eq!(
        store.component("acme", "sha256:bb").await.unwrap(),
        Some(vec![9, 9]),
        "the new bytes, under the new digest"
    );
    assert_eq!(
        store.component("acme", "sha256:aa").await.unwrap(),
        None,
        "the old digest is no longer stored"
    );

    // Unit: new parent and name.
    let mut team = unit("team", None);
    team.display_name = Some("Team 2".into());
    store.put_unit(&team).await.unwrap();

    // Agent: memberships replaced, fewer than before.
    store
        .put_agent(&agent("bot", &["root", "team"]))
        .await
        .unwrap();
    let mut bot = agent("bot", &["team"]);
    bot.display_name = Some("Bot".into());
    store.put_agent(&bot).await.unwrap();

    // Binding: config replaced; the grant is not duplicated and keeps its created_at.
    let rebound = BindingRecord {
        routing_keys: vec![],
        bound_at: "2025-03-01T00:00:00Z".into(),
        ..binding("team", "acme", json!({"k": 2}))
    };
    let mut regrant = connector_grant("team", "acme", "acme");
    regrant.created_at = "2025-03-01T00:00:00Z".into();
    store.put_binding(&rebound, &regrant).await.unwrap();

    // Grant: same key twice.
    let g = explicit_grant(Subject::Agent("bot".into()), "acme.echo");
    store.put_grant(&g).await.unwrap();
    store.put_grant(&g).await.unwrap();

    // Image tools: replaced.
    let mut image = ImageToolsRecord {
        agent_id: "bot".into(),
        digest: "sha256:01".into(),
        tools: json!([]),
    };
    store.put_image_tools(&image).await.unwrap();
    image.digest = "sha256:02".into();
    image.tools = json!([{"name": "img.x"}]);
    store.put_image_tools(&image).await.unwrap();

    let snap = store.load().await.unwrap();
    assert_eq!(snap.connectors, vec![rotated]);
    assert_eq!(snap.units, vec![unit("root", None), team]);
    assert_eq!(snap.agents, vec![bot]);
    assert_eq!(snap.bindings, vec![rebound]);
    assert_eq!(
        snap.grants,
        vec![connector_grant("team", "acme", "acme"), g]
    );
    assert_eq!(snap.image_tools, vec![image]);
}

pub async fn put_binding_fault_leaves_neither_binding_nor_grant(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    store
        .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    store.put_unit(&unit("team", None)).await.unwrap();
    let b = binding("team", "acme", json!({"k": 1}));
    let g = connector_grant("team", "acme", "acme");
    let before = store.load().await.unwrap();

    factory.inject(Some(Fault::AfterBindingWrite)).await;
    let err = store.put_binding(&b, &g).await.unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    // Nothing written, the version included.
    assert_eq!(store.load().await.unwrap(), before);

    // Disarmed, the retry succeeds and writes both.
    factory.inject(None).await;
    store.put_binding(&b, &g).await.unwrap();
    let snap = store.load().await.unwrap();
    assert_eq!(snap.bindings, vec![b.clone()]);
    assert_eq!(snap.grants, vec![g.clone()]);

    // A failed re-bind keeps the old config.
    factory.inject(Some(Fault::AfterBindingWrite)).await;
    let changed = binding("team", "acme", json!({"k": 2}));
    assert!(store.put_binding(&changed, &g).await.is_err());
    assert_eq!(store.load().await.unwrap(), snap);
}

pub async fn delete_binding_fault_keeps_binding_and_grant(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    let before = store.load().await.unwrap();

    factory.inject(Some(Fault::AfterBindingDelete)).await;
    let err = store.delete_binding("team", "acme").await.unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(store.load().await.unwrap(), before);

    factory.inject(None).await;
    assert!(store.delete_binding("team", "acme").await.unwrap());
    let snap = store.load().await.unwrap();
    assert!(snap.bindings.is_empty());
    assert!(snap.grants.is_empty());
    assert!(!store.delete_binding("team", "acme").await.unwrap());
}

pub async fn put_connector_fault_keeps_old_connector_and_grants(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    let before = store.load().await.unwrap();

    factory.inject(Some(Fault::AfterConnectorWrite)).await;
    let err = store
        .put_connector(&connector("acme", "acme2", "sha256:bb"), COMPONENT)
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(store.load().await.unwrap(), before);

    // The same fault in a rotation leaves the bindings it would have rewritten.
    let err = store
        .rotate_connector(
            &connector("acme", "acme2", "sha256:bb"),
            COMPONENT,
            &[],
            &["team".to_string()],
        )
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(store.load().await.unwrap(), before);

    factory.inject(None).await;
    store
        .put_connector(&connector("acme", "acme2", "sha256:bb"), COMPONENT)
        .await
        .unwrap();
    let snap = store.load().await.unwrap();
    assert_eq!(
        snap.connectors,
        vec![connector("acme", "acme2", "sha256:bb")]
    );
    assert_eq!(snap.grants, vec![connector_grant("team", "acme", "acme2")]);
}

pub async fn a_fault_fires_only_at_its_own_step_and_can_be_disarmed(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    store.put_unit(&unit("team", None)).await.unwrap();
    factory.inject(Some(Fault::AfterBindingDelete)).await;
    // Other steps pass while it stays armed.
    store
        .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    store
        .put_binding(
            &binding("team", "acme", json!({})),
            &connector_grant("team", "acme", "acme"),
        )
        .await
        .unwrap();
    // A call that never reaches the step passes too.
    assert!(!store.delete_binding("nobody", "acme").await.unwrap());
    let err = store.delete_binding("team", "acme").await.unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    // It fires for every handle on the database, until disarmed.
    let other = factory.open().await;
    let err = other.delete_binding("team", "acme").await.unwrap_err();
    assert!(is_injected(&err), "{err:?}");

    factory.inject(None).await;
    assert!(store.delete_binding("team", "acme").await.unwrap());
}

pub async fn rotation_rederives_only_that_connectors_grants(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    store
        .put_connector(&connector("other", "other", "sha256:cc"), COMPONENT)
        .await
        .unwrap();
    store
        .put_binding(
            &binding("root", "acme", json!({})),
            &connector_grant("root", "acme", "acme"),
        )
        .await
        .unwrap();
    store
        .put_binding(
            &binding("root", "other", json!({})),
            &connector_grant("root", "other", "other"),
        )
        .await
        .unwrap();
    let explicit = explicit_grant(Subject::Unit("team".into()), "acme.echo");
    store.put_grant(&explicit).await.unwrap();
    // A stale specific-tool grant of the same provenance collapses onto `<ns>.*`.
    let stale = GrantRecord {
        tool: "acme.echo".into(),
        ..connector_grant("team", "acme", "acme")
    };
    store.put_grant(&stale).await.unwrap();

    store
        .put_connector(&connector("acme", "newns", "sha256:dd"), COMPONENT)
        .await
        .unwrap();

    let snap = store.load().await.unwrap();
    let mut grants: Vec<_> = snap
        .grants
        .iter()
        .map(|g| {
            (
                g.subject.clone(),
                g.tool.clone(),
                g.namespace.clone(),
                g.provenance.to_string(),
            )
        })
        .collect();
    grants.sort();
    let s = |x: &str| x.to_string();
    assert_eq!(
        grants,
        vec![
            (
                Subject::Unit(s("root")),
                s("newns.*"),
                s("newns"),
                s("connector:acme")
            ),
            (
                Subject::Unit(s("root")),
                s("other.*"),
                s("other"),
                s("connector:other")
            ),
            (
                Subject::Unit(s("team")),
                s("acme.echo"),
                s("acme"),
                s("explicit")
            ),
            (
                Subject::Unit(s("team")),
                s("newns.*"),
                s("newns"),
                s("connector:acme")
            ),
        ]
    );
    // Bindings stay through a rotation.
    assert_eq!(snap.bindings.len(), 3);
}

/// The one rule ([`connector_model::records::rederive`]): when a connector's namespace
/// changes, each subject keeps the first grant of it that it was given (its time and its
/// place among the grants), now of the new namespace, and no other.
pub async fn rederiving_keeps_each_subjects_first_grant(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    let at = |day: u8| format!("2025-02-{day:02}T00:00:00Z");
    let made = |unit: &str, tool: &str, day: u8| GrantRecord {
        tool: tool.into(),
        created_at: at(day),
        ..connector_grant(unit, "acme", "acme")
    };
    // `team` already holds `acme.*` from its binding (made on the fixture's day); a stale
    // grant of one tool comes after it. `root` gets a stale grant first, then a second.
    for grant in [
        made("team", "acme.echo", 10),
        explicit_grant(Subject::Unit("team".into()), "acme.echo"),
        made("root", "acme.fail", 11),
        made("root", "acme.echo", 12),
    ] {
        store.put_grant(&grant).await.unwrap();
    }
    let before = store.load().await.unwrap();
    let first_of = |unit: &str| {
        before
            .grants
            .iter()
            .find(|g| g.subject == Subject::Unit(unit.into()) && g.provenance.connector().is_some())
            .cloned()
            .unwrap_or_else(|| panic!("{unit} holds a grant of acme"))
    };
    let (team_first, root_first) = (first_of("team"), first_of("root"));

    store
        .put_connector(&connector("acme", "newns", "sha256:dd"), COMPONENT)
        .await
        .unwrap();

    let after = store.load().await.unwrap();
    let of_acme: Vec<_> = after
        .grants
        .iter()
        .filter(|g| g.provenance == of_connector("acme"))
        .cloned()
        .collect();
    let moved = |first: &GrantRecord| GrantRecord {
        tool: "newns.*".into(),
        namespace: "newns".into(),
        ..first.clone()
    };
    // Each subject's first grant, in the order the grants were made.
    let mut expected = vec![moved(&team_first), moved(&root_first)];
    let place = |g: &GrantRecord| {
        before
            .grants
            .iter()
            .position(|b| b.subject == g.subject && b.created_at == g.created_at)
    };
    expected.sort_by_key(place);
    assert_eq!(of_acme, expected);
    assert_eq!(
        root_first.created_at,
        at(11),
        "root's first grant is its stale one"
    );
    // Every other grant stays as it was, in its place.
    let others = |snap: &Snapshot| -> Vec<GrantRecord> {
        snap.grants
            .iter()
            .filter(|g| g.provenance != of_connector("acme"))
            .cloned()
            .collect()
    };
    assert_eq!(others(&after), others(&before));
    assert_eq!(others(&after).len(), 1, "the explicit grant stays");
}

pub async fn rotate_connector_removes_and_rebinds_in_one_step(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    store
        .put_binding(
            &binding("root", "acme", json!({})),
            &connector_grant("root", "acme", "acme"),
        )
        .await
        .unwrap();
    let rotated = connector("acme", "acme2", "sha256:ee");
    let kept = BindingRecord {
        routing_keys: vec!["new-key".into()],
        ..binding("team", "acme", json!({"k": 1}))
    };
    let kept_grant = connector_grant("team", "acme", "acme2");
    store
        .rotate_connector(
            &rotated,
            COMPONENT,
            &[(kept.clone(), kept_grant.clone())],
            &["root".to_string()],
        )
        .await
        .unwrap();

    let snap = store.load().await.unwrap();
    assert_eq!(snap.connectors, vec![rotated]);
    assert_eq!(snap.bindings, vec![kept]);
    assert_eq!(snap.grants, vec![kept_grant]);
}

pub async fn delete_connector_removes_its_bindings_and_grants_only(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    store
        .put_connector(&connector("other", "other", "sha256:cc"), COMPONENT)
        .await
        .unwrap();
    store
        .put_binding(
            &binding("root", "acme", json!({})),
            &connector_grant("root", "acme", "acme"),
        )
        .await
        .unwrap();
    let other_binding = binding("team", "other", json!({}));
    let other_grant = connector_grant("team", "other", "other");
    store
        .put_binding(&other_binding, &other_grant)
        .await
        .unwrap();
    let explicit = explicit_grant(Subject::Unit("team".into()), "acme.echo");
    store.put_grant(&explicit).await.unwrap();

    assert!(store.delete_connector("acme").await.unwrap());
    let snap = store.load().await.unwrap();
    assert_eq!(
        snap.connectors,
        vec![connector("other", "other", "sha256:cc")]
    );
    assert_eq!(snap.bindings, vec![other_binding]);
    assert_eq!(snap.grants, vec![other_grant, explicit]);
    assert_eq!(snap.units.len(), 2);

    assert!(!store.delete_connector("acme").await.unwrap());
}

pub async fn delete_unit_removes_its_bindings_and_grants_only(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    let root_binding = binding("root", "acme", json!({}));
    let root_grant = connector_grant("root", "acme", "acme");
    store.put_binding(&root_binding, &root_grant).await.unwrap();
    store
        .put_grant(&explicit_grant(Subject::Unit("team".into()), "acme.echo"))
        .await
        .unwrap();
    store
        .put_agent(&agent("team", &["team", "root"]))
        .await
        .unwrap();
    // Same id, but an agent: untouched by deleting the unit.
    let agent_grant = explicit_grant(Subject::Agent("team".into()), "acme.echo");
    store.put_grant(&agent_grant).await.unwrap();

    assert!(store.delete_unit("team").await.unwrap());
    let snap = store.load().await.unwrap();
    assert_eq!(snap.units, vec![unit("root", None)]);
    assert_eq!(snap.bindings, vec![root_binding]);
    assert_eq!(snap.grants, vec![root_grant, agent_grant]);
    assert_eq!(snap.connectors.len(), 1);
    // Its place in agents' unit lists goes in the same transaction; children stay the
    // caller's concern.
    assert_eq!(snap.agents, vec![agent("team", &["root"])]);

    assert!(!store.delete_unit("team").await.unwrap());
}

pub async fn delete_agent_removes_memberships_grants_and_image_tools(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    store
        .put_agent(&agent("bot", &["team", "root"]))
        .await
        .unwrap();
    store.put_agent(&agent("other", &["team"])).await.unwrap();
    store
        .put_grant(&explicit_grant(Subject::Agent("bot".into()), "acme.echo"))
        .await
        .unwrap();
    let other_grant = explicit_grant(Subject::Agent("other".into()), "acme.echo");
    store.put_grant(&other_grant).await.unwrap();
    // A unit with the agent's id keeps its grants.
    store.put_unit(&unit("bot", None)).await.unwrap();
    let unit_grant = explicit_grant(Subject::Unit("bot".into()), "acme.echo");
    store.put_grant(&unit_grant).await.unwrap();
    for id in ["bot", "other"] {
        store
            .put_image_tools(&ImageToolsRecord {
                agent_id: id.into(),
                digest: "sha256:ee".into(),
                tools: json!([]),
            })
            .await
            .unwrap();
    }

    assert!(store.delete_agent("bot").await.unwrap());
    let snap = store.load().await.unwrap();
    assert_eq!(snap.agents, vec![agent("other", &["team"])]);
    assert_eq!(
        snap.grants,
        vec![
            connector_grant("team", "acme", "acme"),
            other_grant,
            unit_grant
        ]
    );
    let images: Vec<_> = snap
        .image_tools
        .iter()
        .map(|i| i.agent_id.as_str())
        .collect();
    assert_eq!(images, ["other"]);

    // Re-created, the agent starts without the old memberships.
    store.put_agent(&agent("bot", &[])).await.unwrap();
    let snap = store.load().await.unwrap();
    // Before `other`, which was stored first: agents come back in id order.
    assert_eq!(
        snap.agents,
        vec![agent("bot", &[]), agent("other", &["team"])]
    );
    assert!(!snap
        .grants
        .iter()
        .any(|g| g.subject == Subject::Agent("bot".into())));
    store.delete_agent("bot").await.unwrap();

    assert!(!store.delete_agent("bot").await.unwrap());
}

pub async fn delete_grant_matches_subject_tool_and_provenance(factory: &dyn StoreFactory) {
    let store = bound_store(factory).await;
    let explicit = explicit_grant(Subject::Unit("team".into()), "acme.*");
    store.put_grant(&explicit).await.unwrap();

    assert!(!store
        .delete_grant(
            &Subject::Agent("team".into()),
            "acme.*",
            &GrantProvenance::Explicit
        )
        .await
        .unwrap());
    assert!(store
        .delete_grant(
            &Subject::Unit("team".into()),
            "acme.*",
            &GrantProvenance::Explicit
        )
        .await
        .unwrap());
    let snap = store.load().await.unwrap();
    // The binding's grant (same subject and tool, other provenance) stays.
    assert_eq!(snap.grants, vec![connector_grant("team", "acme", "acme")]);
    assert!(!store
        .delete_grant(
            &Subject::Unit("team".into()),
            "acme.*",
            &GrantProvenance::Explicit
        )
        .await
        .unwrap());
}

pub async fn binding_of_a_missing_unit_is_refused_and_leaves_nothing(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let before = store.load().await.unwrap();
    let err = store
        .put_binding(
            &binding("ghost", "acme", json!({})),
            &connector_grant("ghost", "acme", "acme"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert_eq!(store.load().await.unwrap(), before);
    assert_eq!(contents(&before), Snapshot::default());
}

pub async fn concurrent_writes_through_two_handles_all_land(factory: &dyn StoreFactory) {
    let handles = [factory.open().await, factory.open().await];
    let start = version(&*handles[0]).await;
    let results = together(32, |i| {
        let store = Arc::clone(&handles[i % 2]);
        async move { store.put_unit(&unit(&format!("u{i}"), None)).await }
    })
    .await;
    for result in results {
        result.unwrap();
    }
    for store in &handles {
        let snap = store.load().await.unwrap();
        assert_eq!(snap.units.len(), 32);
        assert!(snap.version >= start + 32, "{} -> {}", start, snap.version);
        // Both wrote, so each sees the other's writes.
        assert!(store.changes_since(start).await.unwrap().foreign);
    }
}

pub async fn deliveries_and_messages_round_trip(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    // The claim argument decides, not the record's claim fields.
    let d = DeliveryRecord {
        claimed_by: Some("ignored".into()),
        claim_until: 5,
        ..delivery("d1", 1_000)
    };
    assert!(store
        .insert_delivery(&d, 60, &claim("a", 1_060), None)
        .await
        .unwrap());
    let held = DeliveryRecord {
        claimed_by: Some("a".into()),
        claim_until: 1_060,
        ..d.clone()
    };
    assert_eq!(
        store.delivery("acme", "d1").await.unwrap(),
        Some(held.clone())
    );
    assert_eq!(store.delivery("other", "d1").await.unwrap(), None);
    let older = delivery("d0", 900);
    assert!(store
        .insert_delivery(&older, 60, &claim("a", 960), None)
        .await
        .unwrap());
    let unfinished: Vec<_> = store
        .unfinished_deliveries()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.delivery_id)
        .collect();
    assert_eq!(unfinished, ["d0", "d1"]);

    let messages = [
        message("m1", "team", "d1"),
        message("m2", "root", "d1"),
        message("m3", "team", "d1"),
    ];
    let routed = vec!["team".to_string(), "root".to_string()];
    let stored = store
        .complete_delivery("acme", "d1", &messages, &routed, None)
        .await
        .unwrap()
        .expect("first completion stores");
    assert_eq!(stored.len(), 3);
    for (s, m) in stored.iter().zip(&messages) {
        assert!(s.seq > 0, "{s:?}");
        assert_eq!(
            MessageRecord {
                seq: 0,
                ..s.clone()
            },
            *m
        );
    }
    assert!(stored[0].seq < stored[1].seq && stored[1].seq < stored[2].seq);

    let done = store.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!(
        done,
        DeliveryRecord {
            status: DeliveryStatus::Done,
            attempts: 1,
            routed_to: routed,
            claimed_by: None,
            claim_until: 0,
            ..d.clone()
        }
    );

    // Inboxes: per unit, by cursor, limited.
    let team = store.messages("team", 0, 10).await.unwrap();
    assert_eq!(team, vec![stored[0].clone(), stored[2].clone()]);
    assert_eq!(
        store.messages("team", stored[0].seq, 10).await.unwrap(),
        vec![stored[2].clone()]
    );
    assert_eq!(
        store.messages("team", 0, 1).await.unwrap(),
        vec![stored[0].clone()]
    );
    assert!(store
        .messages("team", stored[2].seq, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.messages("root", 0, 10).await.unwrap(),
        vec![stored[1].clone()]
    );
    // Another handle reads the same.
    let other = factory.open().await;
    assert_eq!(other.messages("team", 0, 10).await.unwrap(), team);

    // Pruning drops finished deliveries received before the cut, never their messages
    // or unfinished ones.
    assert_eq!(store.prune_deliveries(1_000).await.unwrap(), 0);
    assert_eq!(store.prune_deliveries(2_000).await.unwrap(), 1);
    assert_eq!(store.delivery("acme", "d1").await.unwrap(), None);
    assert!(store.delivery("acme", "d0").await.unwrap().is_some());
    assert_eq!(store.messages("team", 0, 10).await.unwrap(), team);
}

pub async fn insert_delivery_deduplicates_within_the_window(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let first = delivery("d1", 1_000);
    assert!(store
        .insert_delivery(&first, 60, &claim("a", 1_030), None)
        .await
        .unwrap());
    store.fail_delivery("acme", "d1", "boom").await.unwrap();
    let failed = store.delivery("acme", "d1").await.unwrap().unwrap();

    // Within the window (its end included): a duplicate, the stored row untouched.
    for at in [1_000, 1_030, 1_060] {
        let again = DeliveryRecord {
            body: b"other".to_vec(),
            ..delivery("d1", at)
        };
        assert!(
            !store
                .insert_delivery(&again, 60, &claim("b", at + 30), None)
                .await
                .unwrap(),
            "received at {at}"
        );
        assert_eq!(store.delivery("acme", "d1").await.unwrap().unwrap(), failed);
    }

    // The same id of another connector is another delivery.
    let elsewhere = DeliveryRecord {
        connector: "other".into(),
        ..delivery("d1", 1_001)
    };
    assert!(store
        .insert_delivery(&elsewhere, 60, &claim("a", 1_031), None)
        .await
        .unwrap());

    // After the window: the old row is replaced, state and claim included.
    let later = DeliveryRecord {
        body: b"later".to_vec(),
        ..delivery("d1", 1_061)
    };
    assert!(store
        .insert_delivery(&later, 60, &claim("b", 1_091), None)
        .await
        .unwrap());
    assert_eq!(
        store.delivery("acme", "d1").await.unwrap().unwrap(),
        DeliveryRecord {
            claimed_by: Some("b".into()),
            claim_until: 1_091,
            ..later
        }
    );
    let unfinished = store.unfinished_deliveries().await.unwrap();
    assert_eq!(unfinished.len(), 2, "{unfinished:?}");
}

pub async fn concurrent_inserts_of_one_delivery_store_it_once(factory: &dyn StoreFactory) {
    let handles = [factory.open().await, factory.open().await];
    // Three rounds on one id: the first insert, then twice after the window has passed
    // (each round must replace the old row exactly once).
    for (round, received) in [1_000, 2_000, 3_000].into_iter().enumerate() {
        let results = together(40, |i| {
            let store = Arc::clone(&handles[i % 2]);
            let owner = format!("r{round}-{i}");
            async move {
                let d = DeliveryRecord {
                    body: owner.clone().into_bytes(),
                    ..delivery("same", received)
                };
                let inserted = store
                    .insert_delivery(&d, 60, &claim(&owner, received + 30), None)
                    .await
                    .unwrap();
                (owner, inserted)
            }
        })
        .await;
        let winners: Vec<_> = results.iter().filter(|(_, inserted)| *inserted).collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let winner = &winners[0].0;
        let stored = handles[0].delivery("acme", "same").await.unwrap().unwrap();
        assert_eq!(stored.received_unix, received);
        assert_eq!(stored.claimed_by.as_ref(), Some(winner), "round {round}");
        assert_eq!(stored.body, winner.as_bytes(), "round {round}");
    }
}

pub async fn complete_delivery_fault_stores_no_messages(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    assert!(store
        .insert_delivery(&delivery("d1", 1_000), 60, &claim("a", 1_030), None)
        .await
        .unwrap());
    let before = store.delivery("acme", "d1").await.unwrap().unwrap();
    let messages = [message("m1", "team", "d1"), message("m2", "team", "d1")];
    let routed = ["team".to_string()];

    factory.inject(Some(Fault::AfterMessagesWrite)).await;
    let err = store
        .complete_delivery("acme", "d1", &messages, &routed, None)
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    assert!(store.messages("team", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.delivery("acme", "d1").await.unwrap().unwrap(), before);
    factory.inject(None).await;

    // The retry stores the messages once.
    let stored = store
        .complete_delivery("acme", "d1", &messages, &routed, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.messages("team", 0, 10).await.unwrap(), stored);
}

pub async fn complete_twice_stores_messages_once(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    for id in ["d1", "d2"] {
        assert!(a
            .insert_delivery(&delivery(id, 1_000), 60, &claim("a", 1_030), None)
            .await
            .unwrap());
    }
    let routed = ["team".to_string()];

    // One after the other, through two handles.
    let stored = a
        .complete_delivery("acme", "d1", &[message("m1", "team", "d1")], &routed, None)
        .await
        .unwrap()
        .unwrap();
    let again = b
        .complete_delivery("acme", "d1", &[message("m1b", "team", "d1")], &routed, None)
        .await
        .unwrap();
    assert_eq!(again, None);
    let again = a
        .complete_delivery("acme", "d1", &[message("m1c", "root", "d1")], &routed, None)
        .await
        .unwrap();
    assert_eq!(again, None);
    assert_eq!(a.messages("team", 0, 10).await.unwrap(), stored);
    assert!(a.messages("root", 0, 10).await.unwrap().is_empty());
    let d1 = a.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!((d1.status, d1.attempts), (DeliveryStatus::Done, 1));

    // At the same moment, through two handles: one stores, the others see it done.
    let handles = [a, b];
    let results = together(8, |i| {
        let store = Arc::clone(&handles[i % 2]);
        async move {
            let m = message(&format!("m2-{i}"), "root", "d2");
            store
                .complete_delivery("acme", "d2", &[m], &["root".to_string()], None)
                .await
                .unwrap()
        }
    })
    .await;
    let stored: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(handles[0].messages("root", 0, 10).await.unwrap(), stored[0]);
}

pub async fn a_routed_delivery_is_stored_done_with_its_messages_once(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    let routed = ["team".to_string()];
    let messages = [message("m1", "team", "d1"), message("m2", "team", "d1")];

    // A fault after the messages leaves neither the delivery nor its messages.
    factory.inject(Some(Fault::AfterMessagesWrite)).await;
    let err = a
        .insert_routed_delivery(&delivery("d1", 1_000), &messages, &routed, 60, None)
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(a.delivery("acme", "d1").await.unwrap(), None);
    assert!(a.messages("team", 0, 10).await.unwrap().is_empty());
    factory.inject(None).await;

    // Stored done, attempted once, routed, unclaimed, with its messages in order.
    let stored = a
        .insert_routed_delivery(&delivery("d1", 1_000), &messages, &routed, 60, None)
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.len(), 2);
    assert!(stored[0].seq < stored[1].seq, "{stored:?}");
    assert_eq!(a.messages("team", 0, 10).await.unwrap(), stored);
    let d1 = a.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!(
        (
            d1.status,
            d1.attempts,
            d1.routed_to.clone(),
            d1.claimed_by.clone()
        ),
        (DeliveryStatus::Done, 1, routed.to_vec(), None)
    );
    assert_eq!(d1.body, delivery("d1", 1_000).body);
    // Nothing for a sweep or a start-up to take up again.
    let taken = a
        .claim_deliveries(&claim("a", 2_000), 1_500, ClaimScope::Startup, 10)
        .await
        .unwrap();
    assert!(taken.is_empty(), "{taken:?}");

    // Inside the window, through either handle, after `insert_delivery` too: a duplicate,
    // nothing written.
    let again = b
        .insert_routed_delivery(
            &delivery("d1", 1_030),
            &[message("m3", "team", "d1")],
            &routed,
            60,
            None,
        )
        .await
        .unwrap();
    assert_eq!(again, None);
    assert!(!a
        .insert_delivery(&delivery("d1", 1_040), 60, &claim("a", 1_070), None)
        .await
        .unwrap());
    assert!(a
        .insert_delivery(&delivery("d2", 1_000), 60, &claim("a", 1_030), None)
        .await
        .unwrap());
    let again = b
        .insert_routed_delivery(
            &delivery("d2", 1_010),
            &[message("m4", "team", "d2")],
            &routed,
            60,
            None,
        )
        .await
        .unwrap();
    assert_eq!(again, None);
    assert_eq!(a.messages("team", 0, 10).await.unwrap(), stored);

    // At the same moment through two handles: stored once.
    let handles = [a, b];
    let results = together(8, |i| {
        let store = Arc::clone(&handles[i % 2]);
        async move {
            let m = message(&format!("m5-{i}"), "root", "d3");
            store
                .insert_routed_delivery(
                    &delivery("d3", 1_000),
                    &[m],
                    &["root".to_string()],
                    60,
                    None,
                )
                .await
                .unwrap()
        }
    })
    .await;
    let stored: Vec<_> = results.into_iter().flatten().collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(handles[0].messages("root", 0, 10).await.unwrap(), stored[0]);

    // Past the window the id is a new delivery.
    let later = handles[1]
        .insert_routed_delivery(
            &delivery("d1", 1_100),
            &[message("m6", "root", "d1")],
            &routed,
            60,
            None,
        )
        .await
        .unwrap();
    assert!(later.is_some());
}

pub async fn complete_and_fail_release_the_claim(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    assert!(store
        .insert_delivery(&delivery("d1", 1_000), 60, &claim("a", 100_000), None)
        .await
        .unwrap());

    store.fail_delivery("acme", "d1", "boom").await.unwrap();
    let failed = store.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!(
        (
            failed.status,
            failed.attempts,
            failed.error.as_deref(),
            failed.claimed_by.as_deref(),
            failed.claim_until
        ),
        (DeliveryStatus::Failed, 1, Some("boom"), None, 0)
    );

    // Released, so another replica's start-up takes it at once.
    let taken = store
        .claim_deliveries(&claim("b", 2_000), 1_000, ClaimScope::Startup, 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let held = store.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!(taken[0], held);
    assert_eq!(
        (held.claimed_by.as_deref(), held.claim_until),
        (Some("b"), 2_000)
    );

    store.fail_delivery("acme", "d1", "again").await.unwrap();
    let failed = store.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!(
        (
            failed.attempts,
            failed.claimed_by.as_deref(),
            failed.claim_until
        ),
        (2, None, 0)
    );
    store
        .claim_deliveries(&claim("b", 2_000), 1_000, ClaimScope::Startup, 10)
        .await
        .unwrap();

    let routed = ["team".to_string()];
    store
        .complete_delivery("acme", "d1", &[message("m1", "team", "d1")], &routed, None)
        .await
        .unwrap()
        .unwrap();
    let done = store.delivery("acme", "d1").await.unwrap().unwrap();
    assert_eq!(
        (
            done.status,
            done.attempts,
            done.error.as_deref(),
            done.claimed_by.as_deref(),
            done.claim_until
        ),
        (DeliveryStatus::Done, 3, None, None, 0)
    );

    // A done delivery stays done.
    store.fail_delivery("acme", "d1", "late").await.unwrap();
    assert_eq!(store.delivery("acme", "d1").await.unwrap().unwrap(), done);
    assert!(store.unfinished_deliveries().await.unwrap().is_empty());
}

fn ids(deliveries: &[DeliveryRecord]) -> Vec<&str> {
    deliveries.iter().map(|d| d.delivery_id.as_str()).collect()
}

pub async fn sweep_skips_live_claims_and_takes_lapsed_ones(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let now = 10_000;
    let insert = |id: &'static str, received: i64, held: Claim| {
        let store = Arc::clone(&store);
        async move {
            assert!(store
                .insert_delivery(&delivery(id, received), 60, &held, None)
                .await
                .unwrap());
        }
    };
    insert("old-lapsed", 1, claim("c", now - 100)).await;
    insert("live", 2, claim("a", now + 60)).await;
    insert("lapsed", 3, claim("a", now - 1)).await;
    insert("failed", 4, claim("a", now + 60)).await;
    store.fail_delivery("acme", "failed", "boom").await.unwrap();
    insert("done", 5, claim("a", now - 1)).await;
    store
        .complete_delivery("acme", "done", &[], &[], None)
        .await
        .unwrap()
        .unwrap();

    // Oldest first; live claims (the sweeper's own included) and failed or done
    // deliveries are left alone.
    let taken = store
        .claim_deliveries(&claim("a", now + 30), now, ClaimScope::Sweep, 10)
        .await
        .unwrap();
    assert_eq!(ids(&taken), ["old-lapsed", "lapsed"]);
    for d in &taken {
        assert_eq!(
            (d.claimed_by.as_deref(), d.claim_until),
            (Some("a"), now + 30)
        );
        assert_eq!(
            store
                .delivery("acme", &d.delivery_id)
                .await
                .unwrap()
                .as_ref(),
            Some(d)
        );
    }

    // Nothing is left for anyone at the same moment.
    let other = factory.open().await;
    assert!(other
        .claim_deliveries(&claim("b", now + 30), now, ClaimScope::Sweep, 10)
        .await
        .unwrap()
        .is_empty());

    // Once every claim has lapsed, in order, at most `limit` at a time.
    let later = now + 61;
    let first = other
        .claim_deliveries(&claim("b", later + 30), later, ClaimScope::Sweep, 1)
        .await
        .unwrap();
    assert_eq!(ids(&first), ["old-lapsed"]);
    let rest = other
        .claim_deliveries(&claim("b", later + 30), later, ClaimScope::Sweep, 10)
        .await
        .unwrap();
    assert_eq!(ids(&rest), ["live", "lapsed"]);
    let failed = store.delivery("acme", "failed").await.unwrap().unwrap();
    assert_eq!(
        (failed.status, failed.claimed_by),
        (DeliveryStatus::Failed, None)
    );
}

pub async fn startup_takes_own_claims_and_unheld_failed_ones(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let now = 10_000;
    let insert = |id: &'static str, received: i64, held: Claim| {
        let store = Arc::clone(&store);
        async move {
            assert!(store
                .insert_delivery(&delivery(id, received), 60, &held, None)
                .await
                .unwrap());
        }
    };
    insert("a-live", 1, claim("a", now + 600)).await;
    insert("b-live", 2, claim("b", now + 600)).await;
    insert("failed", 3, claim("b", now + 600)).await;
    store.fail_delivery("acme", "failed", "boom").await.unwrap();
    insert("lapsed", 4, claim("c", now - 5)).await;
    insert("done", 5, claim("a", now + 600)).await;
    store
        .complete_delivery("acme", "done", &[], &[], None)
        .await
        .unwrap()
        .unwrap();

    // A sweep takes neither the own live claim nor the failed delivery.
    let swept = store
        .claim_deliveries(&claim("a", now + 600), now, ClaimScope::Sweep, 10)
        .await
        .unwrap();
    assert_eq!(ids(&swept), ["lapsed"]);

    // A restarted `a` takes back everything it held, whatever the expiry, and the failed
    // delivery nobody holds.
    let taken = store
        .claim_deliveries(&claim("a", now + 900), now, ClaimScope::Startup, 10)
        .await
        .unwrap();
    assert_eq!(ids(&taken), ["a-live", "failed", "lapsed"]);
    for d in &taken {
        assert_eq!(
            (d.claimed_by.as_deref(), d.claim_until),
            (Some("a"), now + 900)
        );
    }
    assert_eq!(taken[1].status, DeliveryStatus::Failed);

    // Another replica starting finds only what it held itself.
    assert!(store
        .claim_deliveries(&claim("c", now + 900), now, ClaimScope::Startup, 10)
        .await
        .unwrap()
        .is_empty());
    let b = store
        .claim_deliveries(&claim("b", now + 900), now, ClaimScope::Startup, 10)
        .await
        .unwrap();
    assert_eq!(ids(&b), ["b-live"]);

    // Restarting again, `a` gets its own failed delivery back too; at most `limit`.
    let again = store
        .claim_deliveries(&claim("a", now + 1_000), now, ClaimScope::Startup, 2)
        .await
        .unwrap();
    assert_eq!(ids(&again), ["a-live", "failed"]);
}

pub async fn concurrent_sweeps_never_take_the_same_delivery(factory: &dyn StoreFactory) {
    let handles = [factory.open().await, factory.open().await];
    let now = 10_000;
    let all: BTreeSet<String> = (0..60).map(|i| format!("d{i:02}")).collect();
    for (i, id) in all.iter().enumerate() {
        assert!(handles[i % 2]
            .insert_delivery(&delivery(id, i as i64), 60, &claim("gone", now - 1), None)
            .await
            .unwrap());
    }

    let results = together(8, |i| {
        let store = Arc::clone(&handles[i % 2]);
        let owner = format!("replica-{i}");
        async move {
            let mut mine = Vec::new();
            // 60 deliveries, 3 at a time: far fewer rounds than this unless claims
            // are handed out again.
            for _ in 0..100 {
                let batch = store
                    .claim_deliveries(&claim(&owner, now + 600), now, ClaimScope::Sweep, 3)
                    .await
                    .unwrap();
                if batch.is_empty() {
                    return mine;
                }
                for d in batch {
                    assert_eq!(d.claimed_by.as_deref(), Some(owner.as_str()));
                    mine.push(d.delivery_id);
                }
            }
            panic!("{owner} kept getting deliveries that are already claimed");
        }
    })
    .await;

    let taken: Vec<String> = results.into_iter().flatten().collect();
    let unique: BTreeSet<String> = taken.iter().cloned().collect();
    assert_eq!(taken.len(), unique.len(), "some delivery was taken twice");
    assert_eq!(unique, all);
}

/// Every kind of state write made through one handle is in the change log, in version
/// order, for another handle; a handle's own writes are never among its foreign ones; a
/// write the database refused leaves no entry.
pub async fn the_change_log_holds_each_foreign_write_in_order(factory: &dyn StoreFactory) {
    use connector_store::LoggedWrite;
    let (a, b) = (factory.open().await, factory.open().await);
    let start = b.load().await.unwrap().version;
    let acme = connector("acme", "acme", "sha256:aa");
    let bound = binding("team", "acme", json!({"k": 1}));
    let unit_grant = connector_grant("team", "acme", "acme");
    let explicit = explicit_grant(Subject::Agent("ada".into()), "acme.echo");
    let image = ImageToolsRecord {
        agent_id: "ada".into(),
        digest: "sha256:01".into(),
        tools: json!([{"name": "img.run"}]),
    };
    let writes = [
        StateWrite::PutConnector(&acme, COMPONENT),
        StateWrite::PutUnit(&unit("team", None)),
        StateWrite::PutAgent(&agent("ada", &["team"])),
        StateWrite::PutBinding(&bound, &unit_grant),
        StateWrite::PutGrant(&explicit),
        StateWrite::PutImageTools(&image),
        StateWrite::DeleteGrant {
            subject: &explicit.subject,
            tool: "acme.echo",
            provenance: &GrantProvenance::Explicit,
        },
        StateWrite::DeleteBinding {
            unit: "team",
            connector: "acme",
        },
        StateWrite::DeleteAgent("ada"),
        StateWrite::DeleteUnit("team"),
        StateWrite::DeleteConnector("acme"),
    ];
    let audit = AuditEntry::now(Actor::host(), "test.write", "unit:team".into());
    for (i, write) in writes.iter().enumerate() {
        // Half of them with their audit record, as the host writes them.
        let audit = (i % 2 == 0).then_some(&audit);
        a.write(*write, audit).await.unwrap();
    }
    let end = version(&*a).await;
    assert_eq!(end - start, writes.len() as i64, "one version per write");
    let expected: Vec<LoggedWrite> = writes.iter().map(LoggedWrite::of).collect();
    assert!(matches!(&expected[0], LoggedWrite::Connector { slug } if slug == "acme"));
    assert!(
        matches!(&expected[3], LoggedWrite::PutBinding { binding, grant }
        if *binding == bound && *grant == unit_grant)
    );
    assert_eq!(
        b.foreign_writes(start, end).await.unwrap(),
        Some(expected.clone())
    );
    // Any part of the range, for a handle that applied some of it already.
    assert_eq!(
        b.foreign_writes(start + 4, end - 1).await.unwrap(),
        Some(expected[4..expected.len() - 1].to_vec())
    );
    assert_eq!(b.foreign_writes(end, end).await.unwrap(), Some(Vec::new()));
    // The writer's own writes are not foreign to it.
    assert_eq!(
        a.foreign_writes(start, end).await.unwrap(),
        Some(Vec::new())
    );

    // Interleaved: each handle sees only the other's.
    b.put_unit(&unit("theirs", None)).await.unwrap();
    a.put_unit(&unit("ours", None)).await.unwrap();
    let now = version(&*a).await;
    assert_eq!(
        a.foreign_writes(end, now).await.unwrap(),
        Some(vec![LoggedWrite::PutUnit {
            unit: unit("theirs", None)
        }])
    );
    assert_eq!(
        b.foreign_writes(end, now).await.unwrap(),
        Some(vec![LoggedWrite::PutUnit {
            unit: unit("ours", None)
        }])
    );

    // A write the database refuses leaves no entry, and the next one follows on.
    factory.inject(Some(Fault::AfterBindingWrite)).await;
    a.put_unit(&unit("team", None)).await.unwrap();
    let refused = a
        .put_binding(&bound, &unit_grant)
        .await
        .expect_err("the fault refuses the binding");
    assert!(is_injected(&refused), "{refused}");
    factory.inject(None).await;
    a.put_unit(&unit("after", None)).await.unwrap();
    assert_eq!(
        b.foreign_writes(now, version(&*a).await).await.unwrap(),
        Some(vec![
            LoggedWrite::PutUnit {
                unit: unit("team", None)
            },
            LoggedWrite::PutUnit {
                unit: unit("after", None)
            },
        ])
    );
}

/// Once the log no longer holds a version a handle has not applied, it answers "reload"
/// (`None`) for that handle, and still answers handles that are further on.
pub async fn a_change_log_pruned_past_a_handle_reads_as_reload(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    let start = b.load().await.unwrap().version;
    for id in ["u1", "u2", "u3"] {
        a.put_unit(&unit(id, None)).await.unwrap();
    }
    let end = start + 3;
    assert_eq!(version(&*a).await, end);
    let all = b.foreign_writes(start, end).await.unwrap();
    assert_eq!(all.map(|w| w.len()), Some(3));
    assert_eq!(a.prune_changes(start + 1).await.unwrap(), 1);
    assert_eq!(b.foreign_writes(start, end).await.unwrap(), None);
    let rest = b.foreign_writes(start + 1, end).await.unwrap();
    assert_eq!(
        rest,
        Some(vec![
            connector_store::LoggedWrite::PutUnit {
                unit: unit("u2", None)
            },
            connector_store::LoggedWrite::PutUnit {
                unit: unit("u3", None)
            },
        ])
    );
}

pub async fn changes_since_tells_own_writes_from_foreign_ones(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    let va = a.load().await.unwrap().version;
    let vb = b.load().await.unwrap().version;
    assert_eq!(va, vb);

    a.put_unit(&unit("u1", None)).await.unwrap();
    let ca = a.changes_since(va).await.unwrap();
    assert!(ca.version > va && !ca.foreign, "{ca:?}");
    let cb = b.changes_since(vb).await.unwrap();
    assert_eq!(
        cb,
        StateCheck {
            version: ca.version,
            foreign: true
        }
    );

    // `b` reloads and is current again.
    let reloaded = b.load().await.unwrap();
    assert_eq!(reloaded.version, ca.version);
    assert_eq!(reloaded.units, vec![unit("u1", None)]);
    assert_eq!(
        b.changes_since(reloaded.version).await.unwrap(),
        StateCheck {
            version: ca.version,
            foreign: false
        }
    );

    // And the other way round.
    b.put_unit(&unit("u2", None)).await.unwrap();
    let cb = b.changes_since(reloaded.version).await.unwrap();
    assert!(cb.version > ca.version && !cb.foreign, "{cb:?}");
    assert_eq!(
        a.changes_since(ca.version).await.unwrap(),
        StateCheck {
            version: cb.version,
            foreign: true
        }
    );

    // Interleaved: a foreign write between two own ones is found; own writes after it
    // are not foreign.
    let v = cb.version;
    a.put_unit(&unit("u3", None)).await.unwrap();
    b.put_unit(&unit("u4", None)).await.unwrap();
    let after_b = b.changes_since(v).await.unwrap();
    assert!(after_b.foreign, "{after_b:?}");
    a.put_unit(&unit("u5", None)).await.unwrap();
    let current = a.changes_since(v).await.unwrap();
    assert!(current.foreign, "{current:?}");
    assert_eq!(
        a.changes_since(after_b.version).await.unwrap(),
        StateCheck {
            version: current.version,
            foreign: false
        }
    );
    assert_eq!(
        a.changes_since(current.version).await.unwrap(),
        StateCheck {
            version: current.version,
            foreign: false
        }
    );

    // A rolled-back write is nobody's version: the next foreign write is still foreign.
    a.put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    let before_fault = a.changes_since(current.version).await.unwrap();
    assert!(!before_fault.foreign);
    factory.inject(Some(Fault::AfterBindingWrite)).await;
    assert!(a
        .put_binding(
            &binding("u1", "acme", json!({})),
            &connector_grant("u1", "acme", "acme")
        )
        .await
        .is_err());
    factory.inject(None).await;
    assert_eq!(
        a.changes_since(before_fault.version).await.unwrap(),
        before_fault
    );
    b.put_unit(&unit("u6", None)).await.unwrap();
    let after = a.changes_since(before_fault.version).await.unwrap();
    assert!(
        after.version > before_fault.version && after.foreign,
        "{after:?}"
    );

    // A handle opened now has written nothing, so everything is foreign to it.
    let c = factory.open().await;
    assert_eq!(
        c.changes_since(va).await.unwrap(),
        StateCheck {
            version: after.version,
            foreign: true
        }
    );
    assert!(!c.changes_since(after.version).await.unwrap().foreign);
}

/// Follows the version while `writer` writes and `watcher` only reads.
struct Watch {
    writer: Arc<dyn Store>,
    watcher: Arc<dyn Store>,
    applied: i64,
}

impl Watch {
    /// Checks that the last write through `writer` made a new version, own to `writer`
    /// and foreign to `watcher`.
    async fn changed(&mut self, what: &str) {
        let own = self.writer.changes_since(self.applied).await.unwrap();
        assert!(own.version > self.applied, "{what} kept the version");
        assert!(!own.foreign, "{what} is foreign to its writer");
        let seen = self.watcher.changes_since(self.applied).await.unwrap();
        assert_eq!(
            seen,
            StateCheck {
                version: own.version,
                foreign: true
            },
            "{what} as seen by another handle"
        );
        self.applied = own.version;
    }
}

pub async fn every_state_write_changes_the_version(factory: &dyn StoreFactory) {
    let a = factory.open().await;
    let applied = a.load().await.unwrap().version;
    let mut watch = Watch {
        writer: Arc::clone(&a),
        watcher: factory.open().await,
        applied,
    };

    a.put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    watch.changed("put_connector").await;
    a.put_unit(&unit("team", None)).await.unwrap();
    watch.changed("put_unit").await;
    a.put_agent(&agent("bot", &["team"])).await.unwrap();
    watch.changed("put_agent").await;
    let b = binding("team", "acme", json!({}));
    let g = connector_grant("team", "acme", "acme");
    a.put_binding(&b, &g).await.unwrap();
    watch.changed("put_binding").await;
    let explicit = explicit_grant(Subject::Agent("bot".into()), "acme.echo");
    a.put_grant(&explicit).await.unwrap();
    watch.changed("put_grant").await;
    a.put_image_tools(&ImageToolsRecord {
        agent_id: "bot".into(),
        digest: "sha256:ee".into(),
        tools: json!([]),
    })
    .await
    .unwrap();
    watch.changed("put_image_tools").await;
    a.rotate_connector(
        &connector("acme", "acme", "sha256:bb"),
        COMPONENT,
        &[(b, g)],
        &[],
    )
    .await
    .unwrap();
    watch.changed("rotate_connector").await;
    assert!(a
        .delete_grant(&explicit.subject, &explicit.tool, &explicit.provenance)
        .await
        .unwrap());
    watch.changed("delete_grant").await;
    assert!(a.delete_binding("team", "acme").await.unwrap());
    watch.changed("delete_binding").await;
    assert!(a.delete_agent("bot").await.unwrap());
    watch.changed("delete_agent").await;
    assert!(a.delete_unit("team").await.unwrap());
    watch.changed("delete_unit").await;
    assert!(a.delete_connector("acme").await.unwrap());
    watch.changed("delete_connector").await;
}

pub async fn deliveries_messages_and_secrets_keep_the_version(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    a.put_unit(&unit("team", None)).await.unwrap();
    let v = b.load().await.unwrap().version;

    for id in ["d1", "d2", "d3"] {
        a.insert_delivery(&delivery(id, 1_000), 60, &claim("a", 1_030), None)
            .await
            .unwrap();
    }
    a.insert_delivery(&delivery("d1", 1_000), 60, &claim("a", 1_030), None)
        .await
        .unwrap();
    a.claim_deliveries(&claim("a", 2_000), 1_500, ClaimScope::Sweep, 10)
        .await
        .unwrap();
    a.claim_deliveries(&claim("a", 2_000), 1_500, ClaimScope::Startup, 10)
        .await
        .unwrap();
    a.fail_delivery("acme", "d2", "boom").await.unwrap();
    a.complete_delivery("acme", "d1", &[message("m1", "team", "d1")], &[], None)
        .await
        .unwrap()
        .unwrap();
    a.prune_deliveries(5_000).await.unwrap();
    a.shared_secret("key", "value").await.unwrap();
    a.messages("team", 0, 10).await.unwrap();
    a.unfinished_deliveries().await.unwrap();

    let unchanged = StateCheck {
        version: v,
        foreign: false,
    };
    assert_eq!(a.changes_since(v).await.unwrap(), unchanged);
    assert_eq!(b.changes_since(v).await.unwrap(), unchanged);
    assert_eq!(a.load().await.unwrap().version, v);
}

pub async fn load_version_matches_changes_since(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    let mut applied = a.load().await.unwrap().version;
    for i in 0..4 {
        let writer = if i % 2 == 0 { &a } else { &b };
        writer
            .put_unit(&unit(&format!("u{i}"), None))
            .await
            .unwrap();
        for store in [&a, &b] {
            let check = store.changes_since(applied).await.unwrap();
            let snap = store.load().await.unwrap();
            assert_eq!(snap.version, check.version, "after write {i}");
            assert_eq!(snap.units.len(), i + 1);
            // Loading changes nothing.
            assert_eq!(store.changes_since(applied).await.unwrap(), check);
        }
        applied = a.changes_since(applied).await.unwrap().version;
    }
}

pub async fn shared_secret_first_writer_wins(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    assert_eq!(
        a.shared_secret("token-key", "first").await.unwrap(),
        "first"
    );
    assert_eq!(
        b.shared_secret("token-key", "second").await.unwrap(),
        "first"
    );
    assert_eq!(
        a.shared_secret("token-key", "third").await.unwrap(),
        "first"
    );
    // Names are independent.
    assert_eq!(b.shared_secret("other", "b's").await.unwrap(), "b's");
    assert_eq!(a.shared_secret("other", "a's").await.unwrap(), "b's");

    // At the same moment through two handles: everyone gets the same, one of theirs.
    let handles = [a, b];
    let results = together(20, |i| {
        let store = Arc::clone(&handles[i % 2]);
        async move {
            let candidate = format!("candidate-{i}");
            let got = store.shared_secret("race", &candidate).await.unwrap();
            (candidate, got)
        }
    })
    .await;
    let winners: BTreeSet<&str> = results.iter().map(|(_, got)| got.as_str()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = *winners.first().unwrap();
    assert!(results.iter().any(|(candidate, _)| candidate == winner));
    // A handle opened later reads it too.
    let c = factory.open().await;
    assert_eq!(c.shared_secret("race", "late").await.unwrap(), winner);
}

/// A NUL in text a guest or user supplies (a display name, a message kind or thread key,
/// an error) is stored — as is, or replaced where the database cannot hold it — rather
/// than failing the write (a failing completion would be retried forever).
pub async fn nul_characters_in_free_text_do_not_fail_a_write(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let same_but_nul =
        |stored: &str, given: &str| stored == given || stored == given.replace('\0', "\u{fffd}");
    let mut u = unit("team", None);
    u.display_name = Some("Team\0X".into());
    store.put_unit(&u).await.unwrap();
    let snap = store.load().await.unwrap();
    let name = snap.units[0].display_name.clone().unwrap_or_default();
    assert!(same_but_nul(&name, "Team\0X"), "{name:?}");

    let d = delivery("nul-1", 1_000);
    assert!(store
        .insert_delivery(&d, 100, &claim("r1", 2_000), None)
        .await
        .unwrap());
    let mut m = message("m-nul", "team", "nul-1");
    m.kind = "acme.\0push".into();
    m.thread_key = Some("t\0".into());
    let stored = store
        .complete_delivery("acme", "nul-1", &[m], &["team".to_string()], None)
        .await
        .unwrap()
        .expect("first completion stores");
    assert_eq!(stored.len(), 1);
    let read = store.messages("team", 0, 10).await.unwrap();
    assert_eq!(read.len(), 1);
    assert!(
        same_but_nul(&read[0].kind, "acme.\0push"),
        "{:?}",
        read[0].kind
    );

    let d = delivery("nul-2", 1_000);
    assert!(store
        .insert_delivery(&d, 100, &claim("r1", 2_000), None)
        .await
        .unwrap());
    store
        .fail_delivery("acme", "nul-2", "guest said \0 no")
        .await
        .unwrap();
    let failed = store.delivery("acme", "nul-2").await.unwrap().unwrap();
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert!(same_but_nul(
        failed.error.as_deref().unwrap_or(""),
        "guest said \0 no"
    ));
}

/// An operator's list of one connector's deliveries: newest first, bounded, that
/// connector's only, with status, attempts and error as stored and without bodies.
pub async fn deliveries_of_lists_one_connectors_newest_first(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    for (id, at) in [("d1", 1_000), ("d2", 1_002), ("d3", 1_001)] {
        assert!(store
            .insert_delivery(&delivery(id, at), 60, &claim("a", at + 30), None)
            .await
            .unwrap());
    }
    let elsewhere = DeliveryRecord {
        connector: "other".into(),
        ..delivery("d9", 1_005)
    };
    assert!(store
        .insert_delivery(&elsewhere, 60, &claim("a", 1_035), None)
        .await
        .unwrap());
    store.fail_delivery("acme", "d3", "boom").await.unwrap();

    let listed = store.deliveries_of("acme", 10).await.unwrap();
    assert_eq!(ids(&listed), ["d2", "d3", "d1"]);
    let failed = &listed[1];
    assert_eq!(failed.status, DeliveryStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("boom"));
    let stored = store.delivery("acme", "d3").await.unwrap().unwrap();
    assert!(!stored.body.is_empty(), "the fixture has a body");
    assert_eq!(
        *failed,
        DeliveryRecord {
            body: Vec::new(),
            ..stored
        }
    );
    assert_eq!(
        ids(&store.deliveries_of("acme", 2).await.unwrap()),
        ["d2", "d3"]
    );
    assert!(store.deliveries_of("nobody", 10).await.unwrap().is_empty());
}

pub async fn deliveries_with_status_page_newest_first_past_any_other_status(
    factory: &dyn StoreFactory,
) {
    let store = factory.open().await;
    // Failed ones among many newer pending ones; d7 and d8 at the same second.
    let failed = [
        ("d2", 1_002),
        ("d4", 1_004),
        ("d5", 1_005),
        ("d7", 1_007),
        ("d8", 1_007),
    ];
    for (id, at) in failed {
        assert!(store
            .insert_delivery(&delivery(id, at), 60, &claim("a", at + 30), None)
            .await
            .unwrap());
        store.fail_delivery("acme", id, "boom").await.unwrap();
    }
    for n in 0..20 {
        let id = format!("p{n:02}");
        assert!(store
            .insert_delivery(&delivery(&id, 2_000 + n), 60, &claim("a", 3_000), None)
            .await
            .unwrap());
    }
    let elsewhere = DeliveryRecord {
        connector: "other".into(),
        ..delivery("d9", 1_006)
    };
    assert!(store
        .insert_delivery(&elsewhere, 60, &claim("a", 1_036), None)
        .await
        .unwrap());
    store.fail_delivery("other", "d9", "boom").await.unwrap();

    let all = store
        .deliveries_with_status("acme", DeliveryStatus::Failed, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&all), ["d8", "d7", "d5", "d4", "d2"]);
    assert!(all
        .iter()
        .all(|d| d.body.is_empty() && d.status == DeliveryStatus::Failed));
    assert_eq!(all[0].error.as_deref(), Some("boom"));
    // Page by page, the same order, the tie included.
    let first = store
        .deliveries_with_status("acme", DeliveryStatus::Failed, None, 1)
        .await
        .unwrap();
    assert_eq!(ids(&first), ["d8"]);
    let second = store
        .deliveries_with_status("acme", DeliveryStatus::Failed, Some((1_007, "d8")), 2)
        .await
        .unwrap();
    assert_eq!(ids(&second), ["d7", "d5"]);
    let last = store
        .deliveries_with_status("acme", DeliveryStatus::Failed, Some((1_005, "d5")), 10)
        .await
        .unwrap();
    assert_eq!(ids(&last), ["d4", "d2"]);
    assert!(store
        .deliveries_with_status("acme", DeliveryStatus::Failed, Some((1_002, "d2")), 10)
        .await
        .unwrap()
        .is_empty());
    let pending = store
        .deliveries_with_status("acme", DeliveryStatus::Pending, None, 3)
        .await
        .unwrap();
    assert_eq!(ids(&pending), ["p19", "p18", "p17"]);
    assert!(store
        .deliveries_with_status("acme", DeliveryStatus::Done, None, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(&store
            .deliveries_with_status("other", DeliveryStatus::Failed, None, 10)
            .await
            .unwrap()),
        ["d9"]
    );
}

pub async fn inboxes_read_newest_first_by_cursor(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    assert!(store
        .insert_delivery(&delivery("d1", 1_000), 60, &claim("a", 1_060), None)
        .await
        .unwrap());
    let messages: Vec<MessageRecord> = ["m1", "m2", "m3", "m4", "m5"]
        .iter()
        .map(|id| message(id, "team", "d1"))
        .chain([message("r1", "root", "d1")])
        .collect();
    let stored = store
        .complete_delivery(
            "acme",
            "d1",
            &messages,
            &["team".into(), "root".into()],
            None,
        )
        .await
        .unwrap()
        .expect("stored");
    let team: Vec<i64> = stored
        .iter()
        .filter(|m| m.unit_id == "team")
        .map(|m| m.seq)
        .rev()
        .collect();
    let seqs = |page: &[MessageRecord]| page.iter().map(|m| m.seq).collect::<Vec<_>>();

    let newest = store.messages_newest_first("team", None, 10).await.unwrap();
    assert_eq!(seqs(&newest), team);
    assert_eq!(newest[0].id, "m5");
    assert_eq!(newest[0], stored[4]);
    let first = store.messages_newest_first("team", None, 2).await.unwrap();
    assert_eq!(seqs(&first), team[..2]);
    let next = store
        .messages_newest_first("team", Some(first[1].seq), 2)
        .await
        .unwrap();
    assert_eq!(seqs(&next), team[2..4]);
    let rest = store
        .messages_newest_first("team", Some(next[1].seq), 2)
        .await
        .unwrap();
    assert_eq!(seqs(&rest), team[4..]);
    assert!(store
        .messages_newest_first("team", Some(team[4]), 10)
        .await
        .unwrap()
        .is_empty());
    let root = store.messages_newest_first("root", None, 10).await.unwrap();
    assert_eq!(
        root.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["r1"]
    );
    assert!(store
        .messages_newest_first("nobody", None, 10)
        .await
        .unwrap()
        .is_empty());
}

// ----- the audit log ------------------------------------------------------------------

fn audit_entry(actor: Actor, action: &str, target: &str, at: &str) -> AuditEntry {
    AuditEntry {
        at: at.into(),
        actor,
        action: action.into(),
        target: target.into(),
        outcome: "ok".into(),
        details: json!({"n": 1}),
        trace_id: None,
    }
}

fn every_record(limit: u32) -> AuditQuery {
    AuditQuery {
        limit,
        ..AuditQuery::default()
    }
}

/// The targets of the (first 100) records kept, in order.
async fn audit_targets(store: &dyn Store) -> Vec<String> {
    let records = store.audit_records(&every_record(100)).await.unwrap();
    records.into_iter().map(|r| r.target).collect()
}

/// `(checked, first broken)` of the records kept, from the anchor.
async fn check_chain(store: &dyn Store) -> (u64, Option<i64>) {
    let anchor = store.audit_anchor().await.unwrap();
    let mut check = ChainCheck::from(&anchor);
    for record in store.audit_records(&every_record(10_000)).await.unwrap() {
        check.next(&record);
    }
    (check.checked(), check.first_broken())
}

/// Asserts that a batch of three writes stopped at its second, failed by an injected
/// fault: the first committed, the third not run.
fn assert_stopped_at_the_second(outcomes: &[connector_store::BatchedWrite]) {
    use connector_store::BatchedWrite;
    assert!(
        matches!(
            outcomes,
            [
                BatchedWrite::Committed,
                BatchedWrite::Failed(e),
                BatchedWrite::NotRun
            ] if is_injected(e)
        ),
        "{outcomes:?}"
    );
}

/// A batch writes each write as its own version with its record, in order; the first
/// write that fails stops it: those before it commit, it and those after it leave nothing.
pub async fn a_batch_commits_up_to_its_first_failing_write(factory: &dyn StoreFactory) {
    use connector_store::BatchedWrite;
    let store = factory.open().await;
    let at = "2026-01-01T00:00:00.000Z";
    store.put_unit(&unit("team", None)).await.unwrap();
    let before = store.load().await.unwrap().version;
    let (a, b, c) = (unit("a", None), unit("b", None), unit("c", None));
    let record = |target: &str| audit_entry(Actor::operator(), "unit.put", target, at);
    let (ra, rb, rc) = (record("unit:a"), record("unit:b"), record("unit:c"));
    let outcomes = store
        .write_batch(&[
            (StateWrite::PutUnit(&a), &ra),
            (StateWrite::PutUnit(&b), &rb),
        ])
        .await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, BatchedWrite::Committed)),
        "{outcomes:?}"
    );
    let stored = store.load().await.unwrap();
    assert_eq!(stored.version, before + 2, "one version per write");
    assert_eq!(stored.units.len(), 3);

    factory.inject(Some(Fault::AfterBindingWrite)).await;
    let bound = binding("team", "acme", json!({}));
    let grant = connector_grant("team", "acme", "acme");
    let rbind = audit_entry(Actor::operator(), "binding.put", "binding:team/acme", at);
    let outcomes = store
        .write_batch(&[
            (StateWrite::PutUnit(&c), &rc),
            (StateWrite::PutBinding(&bound, &grant), &rbind),
            (StateWrite::PutUnit(&unit("d", None)), &record("unit:d")),
        ])
        .await;
    assert_stopped_at_the_second(&outcomes);
    let stored = store.load().await.unwrap();
    assert_eq!(
        stored.version,
        before + 3,
        "only the write before the failure"
    );
    let mut units: Vec<&str> = stored.units.iter().map(|u| u.id.as_str()).collect();
    units.sort_unstable();
    assert_eq!(units, vec!["a", "b", "c", "team"]);
    assert!(stored.bindings.is_empty() && stored.grants.is_empty());
    assert_eq!(
        audit_targets(&*store).await,
        vec!["unit:a", "unit:b", "unit:c"]
    );
    assert_eq!(check_chain(store.as_ref()).await, (3, None));
}

/// A batch stops at a write whose change succeeds but whose change-log entry (its state
/// version's bump) fails, as at one whose change fails.
pub async fn a_batch_stops_at_a_write_whose_change_log_entry_fails(factory: &dyn StoreFactory) {
    let at = "2026-01-01T00:00:00.000Z";
    let entry = audit_entry(Actor::operator(), "unit.delete", "unit:x", at);
    a_batch_stops_at(
        factory,
        Fault::AfterUnitDelete,
        StateWrite::DeleteUnit("x"),
        &entry,
    )
    .await;
}

/// A batch stops at a write whose change succeeds but whose audit record fails, as at
/// one whose change fails.
pub async fn a_batch_stops_at_a_write_whose_record_fails(factory: &dyn StoreFactory) {
    let at = "2026-01-01T00:00:00.000Z";
    let refused = audit_entry(Actor::operator(), "secret.read", "unit:y", at);
    let y = unit("y", None);
    a_batch_stops_at(
        factory,
        Fault::CredentialRecord,
        StateWrite::PutUnit(&y),
        &refused,
    )
    .await;
}

/// The batch [put `a`, `failing`, put `b`], with `fault` armed, on a store holding unit
/// `x`: `failing` fails there, so `a` commits with its version, change-log entry and
/// record, `failing` leaves nothing, `b` is not run, and the chain goes on from `a`'s
/// record.
async fn a_batch_stops_at(
    factory: &dyn StoreFactory,
    fault: Fault,
    failing: StateWrite<'_>,
    record: &AuditEntry,
) {
    use connector_store::LoggedWrite;
    let (store, other) = (factory.open().await, factory.open().await);
    let x = unit("x", None);
    store.put_unit(&x).await.unwrap();
    let before = version(&*store).await;
    let (a, b) = (unit("a", None), unit("b", None));
    let at = "2026-01-01T00:00:00.000Z";
    let ra = audit_entry(Actor::operator(), "unit.put", "unit:a", at);
    let rb = audit_entry(Actor::operator(), "unit.put", "unit:b", at);
    factory.inject(Some(fault)).await;
    let outcomes = store
        .write_batch(&[
            (StateWrite::PutUnit(&a), &ra),
            (failing, record),
            (StateWrite::PutUnit(&b), &rb),
        ])
        .await;
    assert_stopped_at_the_second(&outcomes);
    assert_eq!(
        version(&*store).await,
        before + 1,
        "a version for `a` alone"
    );
    assert_eq!(
        other.foreign_writes(before, before + 1).await.unwrap(),
        Some(vec![LoggedWrite::PutUnit { unit: a.clone() }]),
        "the change-log entry of `a` alone"
    );
    assert_eq!(
        store.load().await.unwrap().units,
        vec![x.clone(), a.clone()]
    );
    assert_eq!(audit_targets(&*store).await, vec!["unit:a"]);
    assert_eq!(check_chain(&*store).await, (1, None));
    // The next record follows `a`'s.
    factory.inject(None).await;
    store
        .write_audited(StateWrite::PutUnit(&b), &rb)
        .await
        .unwrap();
    assert_eq!(audit_targets(&*store).await, vec!["unit:a", "unit:b"]);
    assert_eq!(check_chain(&*store).await, (2, None));
}

/// A batch of one write is that write alone: committed with its own version, change-log
/// entry and record; or, when its change or its record fails, `Failed`, with nothing of
/// it stored (no row, no version, no change-log entry, no record), and the next write
/// goes through.
pub async fn a_batch_of_one_write_stores_all_of_it_or_nothing(factory: &dyn StoreFactory) {
    use connector_store::{BatchedWrite, LoggedWrite};
    let (store, other) = (factory.open().await, factory.open().await);
    let at = "2026-01-01T00:00:00.000Z";
    store
        .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    let before = version(&*store).await;
    let team = unit("team", None);
    let put = audit_entry(Actor::operator(), "unit.put", "unit:team", at);
    let outcomes = store
        .write_batch(&[(StateWrite::PutUnit(&team), &put)])
        .await;
    assert!(
        matches!(outcomes.as_slice(), [BatchedWrite::Committed]),
        "{outcomes:?}"
    );
    assert_eq!(version(&*store).await, before + 1, "one version");
    assert_eq!(
        other.foreign_writes(before, before + 1).await.unwrap(),
        Some(vec![LoggedWrite::PutUnit { unit: team.clone() }]),
        "its change-log entry, foreign to another handle"
    );
    assert_eq!(
        store.foreign_writes(before, before + 1).await.unwrap(),
        Some(Vec::new()),
        "and its own to the handle that wrote it"
    );
    assert_eq!(store.load().await.unwrap().units, vec![team.clone()]);

    // Its change fails half-way: neither the binding nor its grant is stored.
    let bound = binding("team", "acme", json!({}));
    let grant = connector_grant("team", "acme", "acme");
    let bind = audit_entry(Actor::operator(), "binding.put", "binding:team/acme", at);
    factory.inject(Some(Fault::AfterBindingWrite)).await;
    let outcomes = store
        .write_batch(&[(StateWrite::PutBinding(&bound, &grant), &bind)])
        .await;
    assert!(
        matches!(outcomes.as_slice(), [BatchedWrite::Failed(e)] if is_injected(e)),
        "{outcomes:?}"
    );
    // Its record fails: the change it came with is not stored either.
    factory.inject(Some(Fault::CredentialRecord)).await;
    let other_unit = unit("other", None);
    let refused = audit_entry(Actor::operator(), "secret.read", "unit:other", at);
    let outcomes = store
        .write_batch(&[(StateWrite::PutUnit(&other_unit), &refused)])
        .await;
    assert!(
        matches!(outcomes.as_slice(), [BatchedWrite::Failed(e)] if is_injected(e)),
        "{outcomes:?}"
    );
    factory.inject(None).await;
    assert_eq!(version(&*store).await, before + 1, "no version for either");
    let stored = store.load().await.unwrap();
    assert_eq!(stored.units, vec![team]);
    assert!(stored.bindings.is_empty() && stored.grants.is_empty());
    assert_eq!(
        audit_targets(&*store).await,
        vec!["unit:team"],
        "no record of either"
    );

    let outcomes = store
        .write_batch(&[(StateWrite::PutBinding(&bound, &grant), &bind)])
        .await;
    assert!(
        matches!(outcomes.as_slice(), [BatchedWrite::Committed]),
        "{outcomes:?}"
    );
    assert_eq!(store.load().await.unwrap().bindings, vec![bound]);
    assert_eq!(check_chain(&*store).await, (2, None));
}

pub async fn audited_writes_and_appends_form_one_chain(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let at = "2026-01-01T00:00:00.000Z";
    store
        .write_audited(
            StateWrite::PutUnit(&unit("team", None)),
            &audit_entry(Actor::operator(), "unit.put", "unit:team", at),
        )
        .await
        .unwrap();
    let appended = store
        .append_audit(vec![
            audit_entry(Actor::agent("ada"), "tool.call", "tool:acme.echo", at),
            audit_entry(
                Actor::webhook("acme"),
                "delivery.routed",
                "delivery:acme/d1",
                at,
            ),
        ])
        .await
        .unwrap();
    assert_eq!(
        appended.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![2, 3]
    );
    store
        .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    let b = binding("team", "acme", json!({}));
    let g = connector_grant("team", "acme", "acme");
    store
        .write_audited(
            StateWrite::PutBinding(&b, &g),
            &audit_entry(Actor::console(None), "binding.put", "binding:team/acme", at),
        )
        .await
        .unwrap();
    // The change landed with its record.
    assert_eq!(store.load().await.unwrap().bindings, vec![b]);
    let records = store.audit_records(&every_record(100)).await.unwrap();
    let summary: Vec<(i64, &str, &str)> = records
        .iter()
        .map(|r| (r.seq, r.action.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, "unit.put", "unit:team"),
            (2, "tool.call", "tool:acme.echo"),
            (3, "delivery.routed", "delivery:acme/d1"),
            (4, "binding.put", "binding:team/acme"),
        ]
    );
    assert_eq!(records[0].prev, GENESIS);
    assert_eq!(records[1..3], appended[..]);
    assert_eq!(records[3].actor, Actor::console(None));
    assert_eq!(records[3].details, json!({"n": 1}));
    assert_eq!(check_chain(&*store).await, (4, None));
    assert_eq!(store.audit_anchor().await.unwrap(), AuditAnchor::default());
    // The head names the last record appended, by every way of appending.
    assert_eq!(
        store.audit_head().await.unwrap(),
        AuditAnchor {
            seq: 4,
            hash: records[3].hash.clone()
        }
    );
}

pub async fn a_failed_audited_write_leaves_no_record(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let at = "2026-01-01T00:00:00.000Z";
    store
        .put_connector(&connector("acme", "acme", "sha256:aa"), COMPONENT)
        .await
        .unwrap();
    store
        .write_audited(
            StateWrite::PutUnit(&unit("team", None)),
            &audit_entry(Actor::operator(), "unit.put", "unit:team", at),
        )
        .await
        .unwrap();
    let b = binding("team", "acme", json!({}));
    let g = connector_grant("team", "acme", "acme");
    factory.inject(Some(Fault::AfterBindingWrite)).await;
    let entry = audit_entry(Actor::operator(), "binding.put", "binding:team/acme", at);
    let err = store
        .write_audited(StateWrite::PutBinding(&b, &g), &entry)
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(check_chain(&*store).await, (1, None));
    factory.inject(None).await;
    store
        .write_audited(StateWrite::PutBinding(&b, &g), &entry)
        .await
        .unwrap();
    let records = store.audit_records(&every_record(100)).await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].seq, 2);
    assert_eq!(check_chain(&*store).await, (2, None));
}

/// A write whose change-log entry fails, after its own statements succeeded, leaves
/// nothing behind: not its change, not its record, not a state version.
pub async fn a_write_failing_at_its_change_log_entry_leaves_nothing(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let at = "2026-01-01T00:00:00.000Z";
    store.put_unit(&unit("team", None)).await.unwrap();
    factory.inject(Some(Fault::AfterUnitDelete)).await;
    let before = store.load().await.unwrap().version;
    let entry = audit_entry(Actor::operator(), "unit.delete", "unit:team", at);
    let err = store
        .write_audited(StateWrite::DeleteUnit("team"), &entry)
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    let stored = store.load().await.unwrap();
    assert_eq!(stored.version, before);
    assert_eq!(stored.units.len(), 1);
    assert!(store
        .audit_records(&every_record(10))
        .await
        .unwrap()
        .is_empty());
    // Every other write's entry is written.
    store.put_unit(&unit("other", None)).await.unwrap();
    assert_eq!(store.load().await.unwrap().version, before + 1);
}

pub async fn concurrent_appends_through_two_handles_form_one_chain(factory: &dyn StoreFactory) {
    let handles = [factory.open().await, factory.open().await];
    let results = together(32, |i| {
        let store = Arc::clone(&handles[i % 2]);
        async move {
            let at = "2026-01-01T00:00:00.000Z";
            if i % 4 == 0 {
                let u = unit(&format!("u{i}"), None);
                let entry = audit_entry(Actor::operator(), "unit.put", &format!("unit:u{i}"), at);
                store
                    .write_audited(StateWrite::PutUnit(&u), &entry)
                    .await
                    .map(|()| 1)
            } else {
                let entries = (0..3)
                    .map(|k| {
                        audit_entry(
                            Actor::agent("ada"),
                            "tool.call",
                            &format!("tool:t{i}.{k}"),
                            at,
                        )
                    })
                    .collect();
                store.append_audit(entries).await.map(|r| r.len())
            }
        }
    })
    .await;
    let written: usize = results.into_iter().map(|r| r.unwrap()).sum();
    assert_eq!(written, 8 + 24 * 3);
    for store in &handles {
        let records = store.audit_records(&every_record(1000)).await.unwrap();
        let seqs: Vec<i64> = records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=written as i64).collect::<Vec<_>>());
        assert_eq!(check_chain(&**store).await, (written as u64, None));
    }
}

/// Records appended one at a time ([`connector_store::AuditStore::append_audit_entry`],
/// committed in groups) from two handles, among audited state writes: every caller is
/// answered once its record is committed, and the records form one chain, each once.
pub async fn entries_appended_one_by_one_join_the_chain_once_each(factory: &dyn StoreFactory) {
    let handles = [factory.open().await, factory.open().await];
    let results = together(48, |i| {
        let store = Arc::clone(&handles[i % 2]);
        async move {
            let at = "2026-01-01T00:00:00.000Z";
            let target = format!("tool:t{i}");
            if i % 8 == 0 {
                let u = unit(&format!("u{i}"), None);
                let entry = audit_entry(Actor::operator(), "unit.put", &format!("unit:u{i}"), at);
                store.write_audited(StateWrite::PutUnit(&u), &entry).await?;
                Ok::<_, StoreError>(format!("unit:u{i}"))
            } else {
                let entry = audit_entry(Actor::agent("ada"), "tool.call", &target, at);
                store.append_audit_entry(entry).await?;
                // Answered: the record is committed, so every handle reads it.
                let other = Arc::clone(&store);
                let found = other
                    .audit_records(&AuditQuery {
                        target: Some(target.clone()),
                        ..every_record(10)
                    })
                    .await?;
                assert_eq!(found.len(), 1, "{target} answered before it was readable");
                Ok(target)
            }
        }
    })
    .await;
    let mut written: Vec<String> = results.into_iter().map(|r| r.unwrap()).collect();
    written.sort();
    for store in &handles {
        let records = store.audit_records(&every_record(1000)).await.unwrap();
        let seqs: Vec<i64> = records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=48).collect::<Vec<_>>());
        let mut targets: Vec<String> = records.iter().map(|r| r.target.clone()).collect();
        targets.sort();
        assert_eq!(targets, written);
        assert_eq!(check_chain(&**store).await, (48, None));
        assert_eq!(store.audit_head().await.unwrap().seq, 48);
    }
}

/// A group of appended records whose transaction fails keeps none of them: each of its
/// callers gets the error, the other groups' records are kept, and the chain holds.
pub async fn a_failed_group_of_appended_entries_keeps_none_of_them(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let at = "2026-01-01T00:00:00.000Z";
    factory.inject(Some(Fault::CredentialRecord)).await;
    let results = together(24, |i| {
        let store = Arc::clone(&store);
        async move {
            // One record in eight is refused by the database: its group fails.
            let action = if i % 8 == 0 {
                "secret.read"
            } else {
                "tool.call"
            };
            let target = format!("tool:t{i}");
            let entry = audit_entry(Actor::agent("ada"), action, &target, at);
            (target, action, store.append_audit_entry(entry).await)
        }
    })
    .await;
    let mut kept = Vec::new();
    for (target, action, result) in results {
        match result {
            Ok(()) => {
                assert_eq!(action, "tool.call");
                kept.push(target);
            }
            Err(e) => assert!(is_injected(&e), "{target}: {e:?}"),
        }
    }
    let records = store.audit_records(&every_record(1000)).await.unwrap();
    let mut targets: Vec<String> = records.iter().map(|r| r.target.clone()).collect();
    targets.sort();
    kept.sort();
    assert_eq!(targets, kept, "exactly the answered records are kept");
    assert_eq!(check_chain(&*store).await, (kept.len() as u64, None));

    factory.inject(None).await;
    let entry = audit_entry(Actor::agent("ada"), "secret.read", "connector:acme", at);
    store.append_audit_entry(entry).await.unwrap();
    assert_eq!(check_chain(&*store).await, (kept.len() as u64 + 1, None));
}

pub async fn audit_records_filter_and_page(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let entries = vec![
        audit_entry(
            Actor::operator(),
            "unit.put",
            "unit:a",
            "2026-01-01T00:00:00.000Z",
        ),
        audit_entry(
            Actor::agent("ada"),
            "tool.call",
            "tool:acme.echo",
            "2026-01-02T00:00:00.000Z",
        ),
        audit_entry(
            Actor::agent("bob"),
            "tool.call",
            "tool:acme.echo",
            "2026-01-03T00:00:00.000Z",
        ),
        audit_entry(
            Actor::operator(),
            "unit.delete",
            "unit:a",
            "2026-01-04T00:00:00.000Z",
        ),
    ];
    store.append_audit(entries).await.unwrap();
    let seqs = |records: Vec<AuditRecord>| records.iter().map(|r| r.seq).collect::<Vec<_>>();
    let query = |f: fn(&mut AuditQuery)| {
        let mut q = every_record(100);
        f(&mut q);
        q
    };
    let cases: Vec<(AuditQuery, Vec<i64>)> = vec![
        (query(|q| q.action = Some("tool.call".into())), vec![2, 3]),
        (
            query(|q| q.actor_kind = Some("operator".into())),
            vec![1, 4],
        ),
        (query(|q| q.actor_id = Some("bob".into())), vec![3]),
        (query(|q| q.target = Some("unit:a".into())), vec![1, 4]),
        (
            query(|q| q.since = Some("2026-01-02T00:00:00.000Z".into())),
            vec![2, 3, 4],
        ),
        (
            query(|q| q.until = Some("2026-01-02T00:00:00.000Z".into())),
            vec![1],
        ),
        (
            query(|q| {
                q.after = 1;
                q.limit = 2;
            }),
            vec![2, 3],
        ),
        (
            query(|q| {
                q.action = Some("tool.call".into());
                q.actor_id = Some("ada".into());
            }),
            vec![2],
        ),
    ];
    for (q, expected) in cases {
        assert_eq!(
            seqs(store.audit_records(&q).await.unwrap()),
            expected,
            "{q:?}"
        );
    }
}

/// Over a log of thousands of records, appended in groups and one by one (the way a
/// store may summarise it for its filters), every filter and page finds exactly what a
/// scan of all records finds, also after a prune that ends mid-way.
pub async fn filters_over_a_long_log_find_what_a_scan_finds(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    // Times mostly rising, some out of order; a frequent target, a rare one, one of its
    // own per record now and then, and a few actions.
    let entry = |i: u32| {
        let minute = if i.is_multiple_of(37) { i / 2 } else { i };
        let at = format!(
            "2026-02-{:02}T{:02}:{:02}:00.000Z",
            1 + minute / 1440,
            minute / 60 % 24,
            minute % 60
        );
        let (action, target) = match i {
            _ if i % 401 == 7 => ("tool.call", "tool:rare.one".to_string()),
            _ if i % 10 == 3 => ("delivery.routed", format!("delivery:acme/d{i}")),
            _ if i % 10 == 5 => ("unit.put", "unit:team".to_string()),
            _ => ("tool.call", "tool:acme.echo".to_string()),
        };
        let actor = if i.is_multiple_of(3) { "ada" } else { "bob" };
        audit_entry(Actor::agent(actor), action, &target, &at)
    };
    let mut i = 0;
    while i < 2600 {
        let n = 1 + i % 97;
        store
            .append_audit((i..(i + n).min(2600)).map(entry).collect())
            .await
            .unwrap();
        i += n;
        store.append_audit_entry(entry(i)).await.unwrap();
        i += 1;
    }
    let all = store.audit_records(&every_record(10_000)).await.unwrap();
    assert_eq!(all.len(), 2601);

    let check = |all: Vec<AuditRecord>| {
        let store = Arc::clone(&store);
        async move {
            let queries: Vec<AuditQuery> = vec![
                AuditQuery {
                    target: Some("tool:acme.echo".into()),
                    ..every_record(1000)
                },
                AuditQuery {
                    target: Some("tool:rare.one".into()),
                    ..every_record(3)
                },
                AuditQuery {
                    target: Some("delivery:acme/d1503".into()),
                    ..every_record(10)
                },
                AuditQuery {
                    target: Some("unit:nobody".into()),
                    ..every_record(10)
                },
                AuditQuery {
                    since: Some("2026-02-02T06:00:00.000Z".into()),
                    ..every_record(700)
                },
                AuditQuery {
                    until: Some("2026-02-01T07:00:00.000Z".into()),
                    ..every_record(1000)
                },
                AuditQuery {
                    since: Some("2026-02-01T10:00:00.000Z".into()),
                    until: Some("2026-02-01T20:00:00.000Z".into()),
                    ..every_record(250)
                },
                AuditQuery {
                    target: Some("unit:team".into()),
                    since: Some("2026-02-01T12:00:00.000Z".into()),
                    until: Some("2026-02-02T12:00:00.000Z".into()),
                    ..every_record(40)
                },
                AuditQuery {
                    target: Some("tool:acme.echo".into()),
                    actor_id: Some("ada".into()),
                    after: 1000,
                    ..every_record(100)
                },
                AuditQuery {
                    action: Some("unit.put".into()),
                    ..every_record(100)
                },
            ];
            for query in queries {
                let takes = |r: &AuditRecord| {
                    let is = |want: &Option<String>, have: &str| {
                        want.as_deref().is_none_or(|w| w == have)
                    };
                    r.seq > query.after
                        && is(&query.target, &r.target)
                        && is(&query.action, &r.action)
                        && is(&query.actor_id, r.actor.id.as_deref().unwrap_or(""))
                        && query.since.as_deref().is_none_or(|t| r.at.as_str() >= t)
                        && query.until.as_deref().is_none_or(|t| r.at.as_str() < t)
                };
                let expected: Vec<i64> = all.iter().filter(|r| takes(r)).map(|r| r.seq).collect();
                // Page through with `after`, as `GET /audit` does.
                let mut got = Vec::new();
                let mut page = query.clone();
                loop {
                    let records = store.audit_records(&page).await.unwrap();
                    assert!(records.len() <= page.limit as usize);
                    got.extend(records.iter().map(|r| r.seq));
                    match records.last() {
                        Some(last) if records.len() == page.limit as usize => page.after = last.seq,
                        _ => break,
                    }
                }
                assert_eq!(got, expected, "{query:?}");
            }
        }
    };
    check(all.clone()).await;
    // Pruned up to a seq that ends no bucket of any size a store may use.
    let cutoff = all[1300].at.clone();
    let pruned = store.prune_audit(&cutoff, 1289).await.unwrap();
    assert_eq!(pruned, 1289);
    let kept = store.audit_records(&every_record(10_000)).await.unwrap();
    assert_eq!(kept.first().map(|r| r.seq), Some(1290));
    check(kept).await;
    assert_eq!(check_chain(&*store).await, (2601 - 1289, None));
}

pub async fn pruning_moves_the_anchor_and_keeps_the_newest_record(factory: &dyn StoreFactory) {
    let store = factory.open().await;
    let entries = (1..=5)
        .map(|day| {
            audit_entry(
                Actor::operator(),
                "unit.put",
                "unit:a",
                &format!("2026-01-0{day}T00:00:00.000Z"),
            )
        })
        .collect();
    let sealed = store.append_audit(entries).await.unwrap();
    assert_eq!(
        store
            .prune_audit("2026-01-03T00:00:00.000Z", 1000)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store.audit_anchor().await.unwrap(),
        AuditAnchor {
            seq: 2,
            hash: sealed[1].hash.clone()
        }
    );
    assert_eq!(check_chain(&*store).await, (3, None));
    // Everything is older than the cutoff: all but the newest go, at most `max` at a
    // time.
    assert_eq!(
        store
            .prune_audit("2027-01-01T00:00:00.000Z", 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store.audit_anchor().await.unwrap(),
        AuditAnchor {
            seq: 3,
            hash: sealed[2].hash.clone()
        }
    );
    assert_eq!(check_chain(&*store).await, (2, None));
    assert_eq!(
        store
            .prune_audit("2027-01-01T00:00:00.000Z", 1000)
            .await
            .unwrap(),
        1
    );
    let kept = store.audit_records(&every_record(100)).await.unwrap();
    assert_eq!(kept, vec![sealed[4].clone()]);
    assert_eq!(check_chain(&*store).await, (1, None));
    // The chain goes on from the kept head.
    let next = store
        .append_audit(vec![audit_entry(
            Actor::host(),
            "audit.pruned",
            "unit:a",
            "2027-01-01T00:00:00.000Z",
        )])
        .await
        .unwrap();
    assert_eq!(
        (next[0].seq, next[0].prev.clone()),
        (6, sealed[4].hash.clone())
    );
    assert_eq!(check_chain(&*store).await, (2, None));
    assert_eq!(
        store
            .prune_audit("2000-01-01T00:00:00.000Z", 1000)
            .await
            .unwrap(),
        0
    );
}

pub async fn a_stored_delivery_has_its_record_in_its_transaction_once(factory: &dyn StoreFactory) {
    let (a, b) = (factory.open().await, factory.open().await);
    let at = "2026-01-01T00:00:00.000Z";
    let routed = ["team".to_string()];
    let record = |id: &str| {
        audit_entry(
            Actor::webhook("acme"),
            "delivery.routed",
            &format!("delivery:acme/{id}"),
            at,
        )
    };
    let targets = |records: Vec<AuditRecord>| -> Vec<String> {
        records.into_iter().map(|r| r.target).collect()
    };

    // A routed delivery whose record cannot be written is not stored, nor are its
    // messages; one that fails to store leaves no record.
    for fault in [Fault::DeliveryRecord, Fault::InboxWrite] {
        factory.inject(Some(fault)).await;
        let err = a
            .insert_routed_delivery(
                &delivery("d1", 1_000),
                &[message("m1", "team", "d1")],
                &routed,
                60,
                Some(&record("d1")),
            )
            .await
            .unwrap_err();
        assert!(is_injected(&err), "{fault:?}: {err:?}");
        factory.inject(None).await;
        assert_eq!(a.delivery("acme", "d1").await.unwrap(), None, "{fault:?}");
        assert!(a.messages("team", 0, 10).await.unwrap().is_empty());
        assert!(a.audit_records(&every_record(10)).await.unwrap().is_empty());
    }

    // Stored: its record with it; a duplicate stores neither.
    for expected in [true, false] {
        let stored = a
            .insert_routed_delivery(
                &delivery("d1", 1_000),
                &[message("m1", "team", "d1")],
                &routed,
                60,
                Some(&record("d1")),
            )
            .await
            .unwrap();
        assert_eq!(stored.is_some(), expected);
    }
    assert_eq!(
        targets(a.audit_records(&every_record(10)).await.unwrap()),
        ["delivery:acme/d1"]
    );

    // A delivery stored pending has its record with its row, a duplicate none.
    let queued = audit_entry(
        Actor::webhook("acme"),
        "delivery.queued",
        "delivery:acme/d2",
        at,
    );
    factory.inject(Some(Fault::DeliveryRecord)).await;
    let err = a
        .insert_delivery(
            &delivery("d2", 1_001),
            60,
            &claim("a", 2_000),
            Some(&queued),
        )
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    factory.inject(None).await;
    assert_eq!(a.delivery("acme", "d2").await.unwrap(), None);
    for expected in [true, false] {
        let stored = a
            .insert_delivery(
                &delivery("d2", 1_001),
                60,
                &claim("a", 2_000),
                Some(&queued),
            )
            .await
            .unwrap();
        assert_eq!(stored, expected);
    }
    assert_eq!(
        targets(a.audit_records(&every_record(10)).await.unwrap()),
        ["delivery:acme/d1", "delivery:acme/d2"]
    );

    // A stored delivery completed by two handles at once: one completion, one record.
    let (m, r) = ([message("m2", "team", "d2")], record("d2"));
    factory.inject(Some(Fault::DeliveryRecord)).await;
    let err = a
        .complete_delivery("acme", "d2", &m, &routed, Some(&r))
        .await
        .unwrap_err();
    assert!(is_injected(&err), "{err:?}");
    factory.inject(None).await;
    let d2 = a
        .delivery("acme", "d2")
        .await
        .unwrap()
        .expect("still stored");
    assert_eq!(d2.status, DeliveryStatus::Pending);
    assert_eq!(a.messages("team", 0, 10).await.unwrap().len(), 1);
    let (first, second) = tokio::join!(
        a.complete_delivery("acme", "d2", &m, &routed, Some(&r)),
        b.complete_delivery("acme", "d2", &m, &routed, Some(&r)),
    );
    let completed = [first.unwrap(), second.unwrap()];
    assert_eq!(completed.iter().filter(|c| c.is_some()).count(), 1);
    let records = b.audit_records(&every_record(10)).await.unwrap();
    let actions: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.action.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("delivery.routed", "delivery:acme/d1"),
            ("delivery.queued", "delivery:acme/d2"),
            ("delivery.routed", "delivery:acme/d2"),
        ]
    );
    assert_eq!(check_chain(&*b).await, (3, None));
}
