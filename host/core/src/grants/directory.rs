//! The in-memory model of units, agents, bindings and grants.
//!
//! This is the working copy the resolver reads; the store holds the durable copy and is
//! written first. Keeping it in memory makes resolving an agent's tools a walk over a
//! few maps instead of a dozen queries, and lets every change bump one generation
//! counter that invalidates the resolver's cache.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use connector_model::provenance::connector_provenance;
use connector_model::records::{
    AgentRecord, BindingRecord, GrantRecord, ImageToolsRecord, Snapshot, Subject, UnitRecord,
};

/// Units, agents, bindings, grants and image tools.
#[derive(Debug, Default, Clone)]
pub struct Directory {
    units: HashMap<String, UnitRecord>,
    children: HashMap<String, usize>,
    agents: HashMap<String, AgentRecord>,
    /// unit → connector slug → binding (a unit's bindings in slug order).
    bindings: HashMap<String, BTreeMap<String, BindingRecord>>,
    grants: HashMap<Subject, Vec<GrantRecord>>,
    image_tools: HashMap<String, ImageToolsRecord>,
    /// connector slug → routing key → units whose binding returned that key.
    routes: HashMap<String, HashMap<String, BTreeSet<String>>>,
}

impl Directory {
    /// The directory described by a store snapshot.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        let mut d = Directory::default();
        for u in &snapshot.units {
            d.put_unit(u.clone());
        }
        for a in &snapshot.agents {
            d.put_agent(a.clone());
        }
        for b in &snapshot.bindings {
            d.index_routes(b);
            d.bindings
                .entry(b.unit_id.clone())
                .or_default()
                .insert(b.connector.clone(), b.clone());
        }
        for g in &snapshot.grants {
            d.put_grant(g.clone());
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
        self.agents.get(id)
    }

    /// Whether some unit has `id` as its parent.
    pub fn has_children(&self, id: &str) -> bool {
        self.children.get(id).copied().unwrap_or(0) > 0
    }

    /// Whether making `parent` the parent of `unit` would close a cycle.
    pub fn would_cycle(&self, unit: &str, parent: &str) -> bool {
        self.chain(parent).any(|u| u.id == unit)
    }

    /// `unit` and its ancestors, closest first.
    pub fn chain<'a>(&'a self, unit: &str) -> impl Iterator<Item = &'a UnitRecord> + 'a {
        let mut next = self.units.get(unit);
        let mut steps = 0usize;
        std::iter::from_fn(move || {
            let current = next?;
            steps += 1;
            // A cycle cannot be stored (writes refuse it); the bound only guards the walk.
            if steps > 10_000 {
                return None;
            }
            next = current.parent.as_deref().and_then(|p| self.units.get(p));
            Some(current)
        })
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
        self.units.insert(unit.id.clone(), unit);
    }

    /// Removes a unit with its bindings, the grants whose subject it is and its place in
    /// every agent's unit list.
    pub fn remove_unit(&mut self, id: &str) {
        for agent in self.agents.values_mut() {
            agent.units.retain(|u| u != id);
        }
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

    /// Every agent (unordered).
    pub fn units(&self) -> impl Iterator<Item = &UnitRecord> {
        self.units.values()
    }

    /// Every agent, in no order.
    pub fn agents(&self) -> impl Iterator<Item = &AgentRecord> {
        self.agents.values()
    }

    /// Adds or replaces an agent.
    pub fn put_agent(&mut self, agent: AgentRecord) {
        self.agents.insert(agent.id.clone(), agent);
    }

    /// Removes an agent with its grants and image tools.
    pub fn remove_agent(&mut self, id: &str) {
        self.agents.remove(id);
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
    pub fn bindings_of_connector<'a>(
        &'a self,
        connector: &'a str,
    ) -> impl Iterator<Item = &'a BindingRecord> + 'a {
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
        let provenance = connector_provenance(connector);
        if let Some(grants) = self.grants.get_mut(&Subject::Unit(unit.to_string())) {
            grants.retain(|g| g.provenance != provenance);
        }
        removed
    }

    /// Removes a connector's bindings and grants everywhere.
    pub fn remove_connector(&mut self, connector: &str) {
        for m in self.bindings.values_mut() {
            m.remove(connector);
        }
        self.routes.remove(connector);
        let provenance = connector_provenance(connector);
        for grants in self.grants.values_mut() {
            grants.retain(|g| g.provenance != provenance);
        }
    }

    /// Re-derives a connector's grants to a (possibly new) namespace.
    pub fn rename_connector_namespace(&mut self, connector: &str, namespace: &str) {
        let provenance = connector_provenance(connector);
        for grants in self.grants.values_mut() {
            for g in grants.iter_mut().filter(|g| g.provenance == provenance) {
                g.namespace = namespace.to_string();
                g.tool = format!("{namespace}.*");
            }
        }
    }

    /// The grants made to `subject` (explicit and by bindings).
    pub fn grants_of(&self, subject: &Subject) -> &[GrantRecord] {
        self.grants.get(subject).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Upserts a grant keyed by subject, tool and provenance.
    pub fn put_grant(&mut self, grant: GrantRecord) {
        let list = self.grants.entry(grant.subject.clone()).or_default();
        if let Some(existing) = list
            .iter_mut()
            .find(|g| g.tool == grant.tool && g.provenance == grant.provenance)
        {
            existing.namespace = grant.namespace;
        } else {
            list.push(grant);
        }
    }

    /// Removes the grant keyed by subject, tool and provenance; whether there was one.
    pub fn remove_grant(&mut self, subject: &Subject, tool: &str, provenance: &str) -> bool {
        let Some(list) = self.grants.get_mut(subject) else {
            return false;
        };
        let before = list.len();
        list.retain(|g| !(g.tool == tool && g.provenance == provenance));
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
