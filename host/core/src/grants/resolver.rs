//! The effective-tool resolver: which tools a unit or an agent has, and why.
//!
//! Four tiers feed a subject's tool set, highest precedence first: explicit grants (its
//! own only), connector grants (written by bindings on its units and their ancestors),
//! the platform's `sv.*` tools (everyone), and the tools of an agent's container image.
//! Each tool appears once, at its highest tier, sorted by namespace then name.
//!
//! Grants are namespace-wide for connectors, so the resolver works namespace by
//! namespace: a namespace with one source (the common case) is copied from the
//! connector's pre-sorted tool list without hashing, and only namespaces with several
//! sources are merged tool by tool. Results are cached per subject and the whole cache is
//! dropped on every write, tagged with a generation so a result computed before a write
//! is never cached after it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use super::directory::Directory;

use crate::registry::InstalledConnector;
use connector_model::connector::ToolInfo;
use connector_model::provenance::{GrantProvenance, Provenance};
use connector_model::records::Subject;

/// Where a group of tools comes from.
#[derive(Clone)]
pub enum Provider {
    /// An installed connector (tool indices refer to `info().tools`).
    Connector(Arc<InstalledConnector>),
    /// The platform tools (sorted by name).
    Platform(Arc<[Arc<ToolInfo>]>),
    /// An agent's image tools of one namespace (sorted by name).
    Image(Arc<[Arc<ToolInfo>]>),
}

impl Provider {
    fn tool(&self, index: usize) -> &ToolInfo {
        match self {
            Provider::Connector(c) => &c.info().tools[index],
            Provider::Platform(t) | Provider::Image(t) => &t[index],
        }
    }

    /// Tool indices in name order.
    fn sorted(&self) -> Box<dyn Iterator<Item = usize> + '_> {
        match self {
            Provider::Connector(c) => Box::new(c.sorted_tool_indices().iter().copied()),
            Provider::Platform(t) | Provider::Image(t) => Box::new(0..t.len()),
        }
    }
}

/// Tools that reach a subject the same way (one binding, one grant, one image).
#[derive(Clone)]
pub struct Group {
    /// Why the subject has these tools.
    pub provenance: Provenance,
    /// The unit whose binding granted the tools (connector tier), as the contract reports it.
    pub inherited_from_unit: Option<Arc<str>>,
    /// The unit of the closest binding of the tools' connector (whose config a call gets).
    pub binding_unit: Option<Arc<str>>,
    /// What runs the tools.
    pub provider: Provider,
}

/// One tool of a subject's effective set: a view into a [`ResolvedTools`].
#[derive(Clone, Copy)]
pub struct EffectiveTool<'a> {
    /// The tool's definition.
    pub info: &'a ToolInfo,
    /// How the subject has it.
    pub group: &'a Group,
}

impl<'a> EffectiveTool<'a> {
    /// Its canonical id (`namespace.tool`, or `sv.*`).
    pub fn name(&self) -> &'a str {
        &self.info.name
    }

    /// The connector the tool belongs to, if it is a connector tool.
    pub fn connector(&self) -> Option<&'a Arc<InstalledConnector>> {
        match &self.group.provider {
            Provider::Connector(c) => Some(c),
            _ => None,
        }
    }
}

impl std::fmt::Debug for EffectiveTool<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectiveTool")
            .field("name", &self.name())
            .field("provenance", &self.group.provenance.to_string())
            .field("inherited_from_unit", &self.group.inherited_from_unit)
            .finish()
    }
}

impl Serialize for EffectiveTool<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let info = self.info;
        let namespace = info.name.split('.').next().unwrap_or_default();
        let mut s = serializer.serialize_struct("EffectiveTool", 8)?;
        s.serialize_field("name", &info.name)?;
        s.serialize_field("namespace", namespace)?;
        s.serialize_field("description", &info.description)?;
        s.serialize_field("provenance", &self.group.provenance.to_string())?;
        s.serialize_field(
            "inheritedFromUnit",
            &self.group.inherited_from_unit.as_deref(),
        )?;
        s.serialize_field("inputSchema", &info.input_schema)?;
        s.serialize_field("annotations", &info.annotations)?;
        match &info.output_schema {
            Some(schema) => s.serialize_field("outputSchema", schema)?,
            None => s.skip_field("outputSchema")?,
        }
        s.end()
    }
}

/// A subject's effective tools, sorted by name (which is namespace-then-name order,
/// since `.` sorts before every character a segment may contain). Stored as groups plus
/// a flat (group, tool) index, so building it costs no allocation per tool.
#[derive(Clone, Default)]
pub struct ResolvedTools {
    groups: Vec<Group>,
    entries: Vec<(u32, u32)>,
}

impl std::fmt::Debug for ResolvedTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl ResolvedTools {
    fn entry(&self, (g, i): (u32, u32)) -> EffectiveTool<'_> {
        let group = &self.groups[g as usize];
        EffectiveTool {
            info: group.provider.tool(i as usize),
            group,
        }
    }

    /// The tools, sorted.
    pub fn iter(&self) -> impl Iterator<Item = EffectiveTool<'_>> {
        self.entries.iter().map(|e| self.entry(*e))
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tool with canonical id `name`.
    pub fn get(&self, name: &str) -> Option<EffectiveTool<'_>> {
        self.entries
            .binary_search_by(|e| self.entry(*e).name().cmp(name))
            .ok()
            .map(|i| self.entry(self.entries[i]))
    }
}

impl Serialize for ResolvedTools {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

/// What the resolver reads besides the directory.
pub struct ToolCatalog<'a> {
    /// Installed connectors by tool namespace.
    pub connectors: &'a BTreeMap<String, Arc<InstalledConnector>>,
    /// Platform tools (all in namespace `sv`), sorted by name.
    pub platform: &'a Arc<[Arc<ToolInfo>]>,
}

/// One way a namespace reaches the subject.
struct Source {
    group: Group,
    /// `None`: the whole namespace; `Some`: one tool id.
    only: Option<String>,
}

/// Computes and caches effective tool sets.
pub struct EffectiveToolResolver {
    cache: Mutex<(u64, HashMap<Subject, Arc<ResolvedTools>>)>,
    /// The generation, announced to whoever watches for changes (MCP change
    /// notifications are pushed from here, not polled).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for EffectiveToolResolver {
    fn default() -> Self {
        Self {
            cache: Mutex::new((0, HashMap::new())),
            changes: tokio::sync::watch::channel(0).0,
        }
    }
}

impl EffectiveToolResolver {
    /// Drops every cached result and tells the watchers. Call with the directory's write
    /// lock held, after the change.
    pub fn invalidate(&self) {
        let mut cache = self.cache.lock();
        cache.0 += 1;
        cache.1.clear();
        self.changes.send_replace(cache.0);
    }

    /// Changes (to the generation) each time any subject's effective tools may have
    /// changed: a write, a reload from the shared store, a connector installed or gone.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The cached result for `subject`, if any.
    pub fn cached(&self, subject: &Subject) -> Option<Arc<ResolvedTools>> {
        self.cache.lock().1.get(subject).cloned()
    }

    /// The effective tools of `subject` (`None` if it does not exist). Call with the
    /// directory's read lock held.
    pub fn resolve(
        &self,
        directory: &Directory,
        catalog: &ToolCatalog<'_>,
        image: Option<Arc<[Arc<ToolInfo>]>>,
        subject: &Subject,
    ) -> Option<Arc<ResolvedTools>> {
        let generation = {
            let cache = self.cache.lock();
            if let Some(hit) = cache.1.get(subject) {
                return Some(hit.clone());
            }
            cache.0
        };
        let resolved = Arc::new(compute(directory, catalog, image, subject)?);
        let mut cache = self.cache.lock();
        if cache.0 == generation {
            cache.1.insert(subject.clone(), resolved.clone());
        }
        Some(resolved)
    }
}

/// The units whose bindings reach `subject`, closest first, each once.
pub fn unit_order(directory: &Directory, subject: &Subject) -> Option<Vec<Arc<str>>> {
    let starts: Vec<&str> = match subject {
        Subject::Unit(u) => {
            directory.unit(u)?;
            vec![u.as_str()]
        }
        Subject::Agent(a) => directory
            .agent(a)?
            .units
            .iter()
            .map(String::as_str)
            .collect(),
    };
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    for start in starts {
        for unit in directory.chain(start) {
            if seen.insert(unit.id.as_str()) {
                order.push(Arc::from(unit.id.as_str()));
            }
        }
    }
    Some(order)
}

fn compute(
    directory: &Directory,
    catalog: &ToolCatalog<'_>,
    image: Option<Arc<[Arc<ToolInfo>]>>,
    subject: &Subject,
) -> Option<ResolvedTools> {
    let units = unit_order(directory, subject)?;
    let mut namespaces: BTreeMap<&str, Vec<Source>> = BTreeMap::new();
    // The closest binding of each connector namespace (whose config a call gets).
    let mut closest_binding: HashMap<&str, Arc<str>> = HashMap::new();

    // Connector tier: grants written by bindings, closest unit first.
    for unit in &units {
        let unit_subject = Subject::Unit(unit.to_string());
        for grant in directory.grants_of(&unit_subject) {
            let Some(slug) = grant.provenance.connector() else {
                continue;
            };
            let Some((ns, connector)) = catalog.connectors.get_key_value(&grant.namespace) else {
                continue;
            };
            if slug != connector.slug() {
                continue;
            }
            closest_binding
                .entry(ns.as_str())
                .or_insert_with(|| unit.clone());
            let sources = namespaces.entry(ns.as_str()).or_default();
            if sources
                .iter()
                .any(|s| matches!(s.group.provenance, Provenance::Connector(_)))
            {
                continue; // a closer binding already brought this namespace
            }
            let inherited = match subject {
                Subject::Unit(own) if own.as_str() == &**unit => None,
                _ => Some(unit.clone()),
            };
            sources.push(Source {
                group: Group {
                    provenance: Provenance::Connector(connector.slug().to_string()),
                    inherited_from_unit: inherited,
                    binding_unit: Some(unit.clone()),
                    provider: Provider::Connector(connector.clone()),
                },
                only: None,
            });
        }
    }

    // Image tier, grouped by namespace.
    let image_digest = match subject {
        Subject::Agent(a) => directory.image_tools(a).map(|r| r.digest.clone()),
        Subject::Unit(_) => None,
    };
    let mut image_providers: BTreeMap<String, Provider> = BTreeMap::new();
    if let (Some(tools), Some(_)) = (&image, &image_digest) {
        let mut by_ns: BTreeMap<String, Vec<Arc<ToolInfo>>> = BTreeMap::new();
        for t in tools.iter() {
            if let Some((ns, _)) = t.name.split_once('.') {
                by_ns.entry(ns.to_string()).or_default().push(t.clone());
            }
        }
        for (ns, mut tools) in by_ns {
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            image_providers.insert(ns, Provider::Image(Arc::from(tools)));
        }
    }
    let image_digest = image_digest.unwrap_or_default();
    for (ns, provider) in &image_providers {
        namespaces.entry(ns.as_str()).or_default().push(Source {
            group: Group {
                provenance: Provenance::Image(image_digest.clone()),
                inherited_from_unit: None,
                binding_unit: None,
                provider: provider.clone(),
            },
            only: None,
        });
    }

    // Platform tier.
    if !catalog.platform.is_empty() {
        namespaces.entry("sv").or_default().push(Source {
            group: Group {
                provenance: Provenance::Platform,
                inherited_from_unit: None,
                binding_unit: None,
                provider: Provider::Platform(catalog.platform.clone()),
            },
            only: None,
        });
    }

    // Explicit tier: the subject's own grants of a tool or a namespace.
    for grant in directory.grants_of(subject) {
        if grant.provenance != GrantProvenance::Explicit {
            continue;
        }
        let ns = grant.namespace.as_str();
        let provider = if ns == "sv" {
            Provider::Platform(catalog.platform.clone())
        } else if let Some(c) = catalog.connectors.get(ns) {
            Provider::Connector(c.clone())
        } else if let Some(p) = image_providers.get(ns) {
            p.clone()
        } else {
            continue;
        };
        let only = grant
            .tool
            .strip_suffix(".*")
            .is_none()
            .then(|| grant.tool.clone());
        namespaces.entry(ns).or_default().push(Source {
            group: Group {
                provenance: Provenance::Explicit,
                inherited_from_unit: None,
                binding_unit: closest_binding.get(ns).cloned(),
                provider,
            },
            only,
        });
    }

    let mut resolved = ResolvedTools::default();
    for (_, sources) in namespaces {
        emit_namespace(sources, &mut resolved);
    }
    Some(resolved)
}

fn emit_namespace(mut sources: Vec<Source>, out: &mut ResolvedTools) {
    if sources.len() == 1 && sources[0].only.is_none() {
        let Some(source) = sources.pop() else {
            return;
        };
        let g = out.groups.len() as u32;
        out.entries
            .extend(source.group.provider.sorted().map(|i| (g, i as u32)));
        out.groups.push(source.group);
        return;
    }
    // Several sources: the highest tier wins per tool; within a tier, the first source.
    sources.sort_by_key(|s| std::cmp::Reverse(s.group.provenance.rank()));
    let mut merged: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for source in sources {
        let g = out.groups.len() as u32;
        let mut used = false;
        for i in source.group.provider.sorted() {
            let name = &source.group.provider.tool(i).name;
            if source.only.as_ref().is_some_and(|only| only != name) || merged.contains_key(name) {
                continue;
            }
            merged.insert(name.clone(), (g, i as u32));
            used = true;
        }
        if used {
            out.groups.push(source.group);
        }
    }
    out.entries.extend(merged.into_values());
}
