//! The in-memory model of units, agents, bindings and grants.
//!
//! This is the working copy the resolver reads; the store holds the durable copy and is
//! written first. Keeping it in memory makes resolving an agent's tools a walk over a
//! few maps instead of a dozen queries, and lets every change bump one generation
//! counter that invalidates the resolver's cache.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use connector_model::provenance::GrantProvenance;
use connector_model::records::{
    rederive, AgentRecord, BindingRecord, GrantRecord, ImageToolsRecord, Snapshot, Subject,
    UnitRecord,
};

/// Units, agents, bindings, grants and image tools.
#[derive(Debug, Default, Clone)]
pub struct Directory {
    units: HashMap<String, UnitRecord>,
    /// Unit ids, sorted: list pages read a range of it instead of sorting every unit.
    unit_ids: BTreeSet<String>,
    children: HashMap<String, usize>,
    /// Sorted by id, for list pages, and in one ordered set: at a million agents a hash
    /// map beside a sorted index of ids held twice the memory (a hash table sized to a
    /// power of two is up to half empty) for lookups that are hardly faster, and a map
    /// keyed by id held each id twice.
    agents: BTreeSet<AgentById>,
    /// unit → how many agents have it among their units.
    members: HashMap<String, usize>,
    /// unit → connector slug → binding (a unit's bindings in slug order).
    bindings: HashMap<String, BTreeMap<String, BindingRecord>>,
    grants: HashMap<Subject, Vec<GrantRecord>>,
    image_tools: HashMap<String, ImageToolsRecord>,
    /// connector slug → routing key → units whose binding returned that key.
    routes: HashMap<String, HashMap<String, BTreeSet<String>>>,
}

impl Directory {
    /// The directory described by a store snapshot. Its units, agents, bindings and grants
    /// are taken out of `snapshot`, not copied: at a platform's size (a million agents) a
    /// copy would double the memory a start needs, and the time it takes to fill it. Its
    /// connectors, image tools and version stay for the caller.
    pub fn from_snapshot(snapshot: &mut Snapshot) -> Self {
        let mut d = Directory::default();
        for u in std::mem::take(&mut snapshot.units) {
            d.put_unit(u);
        }
        let agents = std::mem::take(&mut snapshot.agents);
        for a in &agents {
            d.count_members(a, true);
        }
        // Built at once (ids are unique in a snapshot): full nodes, where inserting one at
        // a time leaves them partly empty. The records stay where the snapshot put them
        // until the set takes them (the same layout), and stores read them in id order, so
        // sorting them finds them sorted and writes nothing.
        d.agents = agents.into_iter().map(AgentById).collect();
        for b in std::mem::take(&mut snapshot.bindings) {
            d.index_routes(&b);
            d.bindings
                .entry(b.unit_id.clone())
                .or_default()
                .insert(b.connector.clone(), b);
        }
        for g in std::mem::take(&mut snapshot.grants) {
            d.put_grant(g);
        }
        for i in &snapshot.image_tools {
            d.image_tools.insert(i.agent_id.clone(), i.clone());
        }
        d
    }

    /// Unit `id`, if it exists.
    pub fn unit(&self, id: &str) -> Option<&UnitRecord> {
        self.units.get(id)
    }

    /// Agent `id`, if it exists.
    pub fn agent(&self, id: &str) -> Option<&AgentRecord> {
        self.agents.get(id).map(|a| &a.0)
    }

    /// How many units have `id` as their parent.
    pub fn child_count(&self, id: &str) -> usize {
        self.children.get(id).copied().unwrap_or(0)
    }

    /// `unit` and its ancestors, closest first.
    pub fn chain<'a>(&'a self, unit: &str) -> impl Iterator<Item = &'a UnitRecord> + 'a {
        ancestry(self.units.get(unit), move |p| self.units.get(p))
    }

    /// Adds or replaces a unit (its child counts kept right).
    pub fn put_unit(&mut self, unit: UnitRecord) {
        if let Some(old) = self.units.get(&unit.id) {
            if let Some(p) = &old.parent {
                if let Some(n) = self.children.get_mut(p) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if let Some(p) = &unit.parent {
            *self.children.entry(p.clone()).or_default() += 1;
        }
        self.unit_ids.insert(unit.id.clone());
        self.units.insert(unit.id.clone(), unit);
    }

    /// Removes a unit with its bindings, the grants whose subject it is and its place in
    /// every agent's unit list.
    pub fn remove_unit(&mut self, id: &str) {
        // Members leave the set while their record changes (its id, the set's order, does
        // not), then go back.
        let members: Vec<AgentById> = self
            .agents
            .extract_if(.., |a| a.0.units.iter().any(|u| u == id))
            .collect();
        for mut agent in members {
            agent.0.units.retain(|u| u != id);
            self.agents.insert(agent);
        }
        self.members.remove(id);
        self.unit_ids.remove(id);
        if let Some(old) = self.units.remove(id) {
            if let Some(p) = &old.parent {
                if let Some(n) = self.children.get_mut(p) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if let Some(bindings) = self.bindings.remove(id) {
            for b in bindings.values() {
                self.unindex_routes(b);
            }
        }
        self.grants.remove(&Subject::Unit(id.to_string()));
    }

    /// Every unit, in no order.
    pub fn units(&self) -> impl Iterator<Item = &UnitRecord> {
        self.units.values()
    }

    /// The units whose id sorts after `after` (every unit when `None`), in id order,
    /// read from the sorted index as far as the caller takes.
    pub fn units_after<'a>(
        &'a self,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a UnitRecord> + 'a {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.unit_ids
            .range::<str, _>((from, Bound::Unbounded))
            .filter_map(|id| self.units.get(id))
    }

    /// The agents whose id sorts after `after` (every agent when `None`), in id order.
    pub fn agents_after<'a>(
        &'a self,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a AgentRecord> + 'a {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.agents
            .range::<str, _>((from, Bound::Unbounded))
            .map(|agent| &agent.0)
    }

    /// How many agents have `unit` among their units.
    pub fn member_count(&self, unit: &str) -> usize {
        self.members.get(unit).copied().unwrap_or(0)
    }

    /// Counts `agent`'s units in or out of [`Directory::member_count`].
    fn count_members(&mut self, agent: &AgentRecord, counted: bool) {
        for u in &agent.units {
            if counted {
                *self.members.entry(u.clone()).or_default() += 1;
            } else if let Some(n) = self.members.get_mut(u) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.members.remove(u);
                }
            }
        }
    }

    /// Every agent, in id order.
    pub fn agents(&self) -> impl Iterator<Item = &AgentRecord> {
        self.agents.iter().map(|a| &a.0)
    }

    /// Adds or replaces an agent.
    pub fn put_agent(&mut self, agent: AgentRecord) {
        if let Some(old) = self.agents.take(agent.id.as_str()) {
            self.count_members(&old.0, false);
        }
        self.count_members(&agent, true);
        self.agents.insert(AgentById(agent));
    }

    /// Removes an agent with its grants and image tools.
    pub fn remove_agent(&mut self, id: &str) {
        if let Some(old) = self.agents.take(id) {
            self.count_members(&old.0, false);
        }
        self.grants.remove(&Subject::Agent(id.to_string()));
        self.image_tools.remove(id);
    }

    /// The bindings of a unit, by connector slug.
    pub fn bindings_of(&self, unit: &str) -> impl Iterator<Item = &BindingRecord> {
        self.bindings.get(unit).into_iter().flat_map(|m| m.values())
    }

    /// The binding of `connector` on `unit`, if bound.
    pub fn binding(&self, unit: &str, connector: &str) -> Option<&BindingRecord> {
        self.bindings.get(unit)?.get(connector)
    }

    /// Every binding of a connector.
    pub fn bindings_of_connector<'a, 'c>(
        &'a self,
        connector: &'c str,
    ) -> impl Iterator<Item = &'a BindingRecord> + use<'a, 'c> {
        self.bindings.values().filter_map(move |m| m.get(connector))
    }

    /// Every binding.
    pub fn all_bindings(&self) -> impl Iterator<Item = &BindingRecord> {
        self.bindings.values().flat_map(|m| m.values())
    }

    /// Stores a binding and its grant.
    pub fn put_binding(&mut self, binding: BindingRecord, grant: GrantRecord) {
        self.index_routes(&binding);
        let new_keys = binding.routing_keys.clone();
        let old = self
            .bindings
            .entry(binding.unit_id.clone())
            .or_default()
            .insert(binding.connector.clone(), binding);
        if let Some(old) = old {
            // Keys the old config named but the new one does not must stop routing here.
            let stale = BindingRecord {
                routing_keys: old
                    .routing_keys
                    .iter()
                    .filter(|k| !new_keys.contains(k))
                    .cloned()
                    .collect(),
                ..old
            };
            self.unindex_routes(&stale);
        }
        self.put_grant(grant);
    }

    fn index_routes(&mut self, b: &BindingRecord) {
        let by_key = self.routes.entry(b.connector.clone()).or_default();
        for key in &b.routing_keys {
            by_key
                .entry(key.clone())
                .or_default()
                .insert(b.unit_id.clone());
        }
    }

    fn unindex_routes(&mut self, b: &BindingRecord) {
        if let Some(by_key) = self.routes.get_mut(&b.connector) {
            for key in &b.routing_keys {
                if let Some(units) = by_key.get_mut(key) {
                    units.remove(&b.unit_id);
                    if units.is_empty() {
                        by_key.remove(key);
                    }
                }
            }
        }
    }

    /// The bindings of `connector` whose `bind` returned routing key `key`: one lookup,
    /// whatever the number of bindings.
    pub fn route<'a>(
        &'a self,
        connector: &'a str,
        key: &str,
    ) -> impl Iterator<Item = &'a BindingRecord> + 'a {
        self.routes
            .get(connector)
            .and_then(|by_key| by_key.get(key))
            .into_iter()
            .flatten()
            .filter_map(move |unit| self.binding(unit, connector))
    }

    /// Removes a binding and the unit's grants it wrote.
    pub fn remove_binding(&mut self, unit: &str, connector: &str) -> bool {
        let old = self
            .bindings
            .get_mut(unit)
            .and_then(|m| m.remove(connector));
        if let Some(b) = &old {
            self.unindex_routes(b);
        }
        let removed = old.is_some();
        if let Some(grants) = self.grants.get_mut(&Subject::Unit(unit.to_string())) {
            grants.retain(|g| g.provenance.connector() != Some(connector));
        }
        removed
    }

    /// Removes a connector's bindings and grants everywhere.
    pub fn remove_connector(&mut self, connector: &str) {
        for m in self.bindings.values_mut() {
            m.remove(connector);
        }
        self.routes.remove(connector);
        for grants in self.grants.values_mut() {
            grants.retain(|g| g.provenance.connector() != Some(connector));
        }
    }

    /// Re-derives a connector's grants to a (possibly new) namespace, by the rule every
    /// store applies ([`rederive`]).
    pub fn rename_connector_namespace(&mut self, connector: &str, namespace: &str) {
        for grants in self.grants.values_mut() {
            // A subject's grants are in the order they were made.
            let of_connector = grants
                .iter()
                .enumerate()
                .filter(|(_, g)| g.provenance.connector() == Some(connector))
                .map(|(i, g)| (i, g.subject.clone()));
            let rederived = rederive(namespace, of_connector.collect::<Vec<_>>());
            let mut index = 0;
            grants.retain(|_| {
                let keep = !rederived.dropped.contains(&index);
                index += 1;
                keep
            });
            for g in grants
                .iter_mut()
                .filter(|g| g.provenance.connector() == Some(connector))
            {
                g.tool.clone_from(&rederived.tool);
                g.namespace.clone_from(&rederived.namespace);
            }
        }
    }

    /// The grants made to `subject` (explicit and by bindings).
    pub fn grants_of(&self, subject: &Subject) -> &[GrantRecord] {
        self.grants.get(subject).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Upserts a grant keyed by subject, tool and provenance.
    pub fn put_grant(&mut self, grant: GrantRecord) {
        upsert_grant(self.grants.entry(grant.subject.clone()).or_default(), grant);
    }

    /// Removes the grant keyed by subject, tool and provenance; whether there was one.
    pub fn remove_grant(
        &mut self,
        subject: &Subject,
        tool: &str,
        provenance: &GrantProvenance,
    ) -> bool {
        let Some(list) = self.grants.get_mut(subject) else {
            return false;
        };
        let before = list.len();
        list.retain(|g| !(g.tool == tool && &g.provenance == provenance));
        before != list.len()
    }

    /// The tools agent `agent`'s image declares, if set.
    pub fn image_tools(&self, agent: &str) -> Option<&ImageToolsRecord> {
        self.image_tools.get(agent)
    }

    /// Sets an agent's image tools.
    pub fn put_image_tools(&mut self, record: ImageToolsRecord) {
        self.image_tools.insert(record.agent_id.clone(), record);
    }
}

/// `first` and its ancestors, closest first, each parent found by `unit`: the one walk up
/// a unit tree, over the directory or over a view of it with writes not yet applied.
pub(crate) fn ancestry<'a>(
    first: Option<&'a UnitRecord>,
    unit: impl Fn(&str) -> Option<&'a UnitRecord> + 'a,
) -> impl Iterator<Item = &'a UnitRecord> + 'a {
    let mut next = first;
    let mut steps = 0usize;
    std::iter::from_fn(move || {
        let current = next?;
        steps += 1;
        // A cycle cannot be stored (writes refuse it); the bound only guards the walk.
        if steps > 10_000 {
            return None;
        }
        next = current.parent.as_deref().and_then(&unit);
        Some(current)
    })
}

/// Upserts `grant` into `list`, a subject's grants, keyed by tool and provenance.
pub fn upsert_grant(list: &mut Vec<GrantRecord>, grant: GrantRecord) {
    if let Some(existing) = list
        .iter_mut()
        .find(|g| g.tool == grant.tool && g.provenance == grant.provenance)
    {
        existing.namespace = grant.namespace;
    } else {
        list.push(grant);
    }
}

/// An agent ordered, compared and looked up by its id: the key of
/// [`Directory`]'s agents is the record's own id, not a copy of it.
#[derive(Debug, Clone)]
#[repr(transparent)]
struct AgentById(AgentRecord);

impl PartialEq for AgentById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for AgentById {}

impl PartialOrd for AgentById {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for AgentById {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

/// Compares as the id does (what `Borrow` asks of `Ord` and `Eq`).
impl Borrow<str> for AgentById {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(id: &str) -> UnitRecord {
        UnitRecord {
            id: id.into(),
            parent: None,
            display_name: None,
            created_at: String::new(),
        }
    }

    fn agent(id: &str, units: &[String]) -> AgentRecord {
        AgentRecord {
            id: id.into(),
            units: units.to_vec(),
            display_name: None,
            created_at: String::new(),
            token_epoch: String::new(),
        }
    }

    /// After any mix of puts and removes, the sorted indexes and member counts say what
    /// sorting and counting the maps would.
    #[test]
    fn sorted_indexes_and_member_counts_follow_every_change() {
        let mut d = Directory::default();
        // A fixed pseudo-random walk (an LCG): reproducible, many orders of changes.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for _ in 0..2_000 {
            let u = format!("u{:02}", next(30));
            let a = format!("a{:02}", next(30));
            match next(5) {
                0 | 1 => d.put_unit(unit(&u)),
                2 => d.remove_unit(&u),
                3 => {
                    let units: Vec<String> = d
                        .units()
                        .map(|u| u.id.clone())
                        .filter(|_| next(3) == 0)
                        .collect();
                    d.put_agent(agent(&a, &units));
                }
                _ => d.remove_agent(&a),
            }
        }
        let mut units: Vec<&str> = d.units().map(|u| u.id.as_str()).collect();
        units.sort_unstable();
        let listed: Vec<&str> = d.units_after(None).map(|u| u.id.as_str()).collect();
        assert_eq!(listed, units);
        let cut = units[units.len() / 2];
        let after: Vec<&str> = d.units_after(Some(cut)).map(|u| u.id.as_str()).collect();
        assert_eq!(after, units[units.len() / 2 + 1..]);
        let mut agents: Vec<&str> = d.agents().map(|a| a.id.as_str()).collect();
        agents.sort_unstable();
        let listed: Vec<&str> = d.agents_after(None).map(|a| a.id.as_str()).collect();
        assert_eq!(listed, agents);
        assert!(d.units_after(Some("u99")).next().is_none());
        for u in &units {
            let counted = d
                .agents()
                .filter(|a| a.units.iter().any(|x| x == u))
                .count();
            assert_eq!(d.member_count(u), counted, "{u}");
        }
        assert_eq!(d.member_count("gone"), 0);
        // A removed unit leaves every agent's list (agents are only given units that
        // exist), and each agent is found by its id.
        for a in d.agents() {
            assert!(a.units.iter().all(|u| d.unit(u).is_some()), "{}", a.id);
            assert_eq!(d.agent(&a.id).map(|found| &found.id), Some(&a.id));
        }
    }

    /// The directory re-derives a connector's grants as the stores do: the same writes
    /// leave the same grants in memory as the database holds afterwards.
    #[tokio::test]
    async fn a_namespace_change_leaves_the_grants_the_store_keeps() {
        use connector_store_testing::fixtures::{self, COMPONENT};
        use connector_store_testing::sqlite::SqliteFactory;
        use connector_store_testing::StoreFactory;

        let factory = SqliteFactory::new();
        let store = factory.open().await;
        fixtures::populate_bound(&*store).await;
        let made = |unit: &str, tool: &str, day: u8| GrantRecord {
            tool: tool.into(),
            created_at: format!("2025-02-{day:02}T00:00:00Z"),
            ..fixtures::connector_grant(unit, "acme", "acme")
        };
        for grant in [
            made("team", "acme.echo", 10),
            fixtures::explicit_grant(Subject::Unit("team".into()), "acme.echo"),
            made("root", "acme.fail", 11),
            made("root", "acme.echo", 12),
        ] {
            store.put_grant(&grant).await.expect("grant");
        }
        let mut memory = Directory::from_snapshot(&mut store.load().await.expect("load"));

        store
            .put_connector(
                &fixtures::connector("acme", "newns", "sha256:dd"),
                COMPONENT,
            )
            .await
            .expect("rotate");
        memory.rename_connector_namespace("acme", "newns");

        let stored = Directory::from_snapshot(&mut store.load().await.expect("load"));
        for unit in ["team", "root"] {
            let subject = Subject::Unit(unit.into());
            assert_eq!(
                memory.grants_of(&subject),
                stored.grants_of(&subject),
                "{unit}"
            );
            assert_eq!(
                memory
                    .grants_of(&subject)
                    .iter()
                    .filter(|g| g.tool == "newns.*")
                    .count(),
                1,
                "{unit}"
            );
        }
    }
}
