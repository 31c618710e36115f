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

use super::directory::{Directory, EXPLICIT};
use crate::registry::{InstalledConnector, ToolInfo};
use crate::store::Subject;

/// Why a subject has a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provenance {
    /// An operator granted it to this subject.
    Explicit,
    /// A binding of this connector (slug) on one of the subject's units granted it.
    Connector(String),
    /// A platform tool; every subject has them.
    Platform,
    /// The agent's container image declares it (image digest).
    Image(String),
}

impl Provenance {
    fn rank(&self) -> u8 {
        match self {
            Provenance::Explicit => 3,
            Provenance::Connector(_) => 2,
            Provenance::Platform => 1,
            Provenance::Image(_) => 0,
        }
    }
}

impl std::fmt::Display for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Provenance::Explicit => f.write_str("explicit"),
            Provenance::Connector(slug) => write!(f, "connector:{slug}"),
            Provenance::Platform => f.write_str("platform"),
            Provenance::Image(digest) => write!(f, "image:{digest}"),
        }
    }
}

/// Where a tool's definition (description, schema) comes from.
#[derive(Clone)]
pub enum ToolDefinition {
    /// Tool `index` of an installed connector.
    Connector(Arc<InstalledConnector>, usize),
    /// A platform tool.
    Platform(Arc<ToolInfo>),
    /// A tool of the agent's image.
    Image(Arc<ToolInfo>),
}

impl ToolDefinition {
    /// The tool's description.
    pub fn info(&self) -> &ToolInfo {
        match self {
            ToolDefinition::Connector(c, i) => &c.info().tools[*i],
            ToolDefinition::Platform(t) | ToolDefinition::Image(t) => t,
        }
    }
}

/// One tool of a subject's effective set.
#[derive(Clone)]
pub struct EffectiveTool {
    pub definition: ToolDefinition,
    pub provenance: Provenance,
    /// The unit whose binding granted it (connector tier), as the contract reports it.
    pub inherited_from_unit: Option<Arc<str>>,
    /// The unit of the closest binding of the tool's connector (whose config a call gets).
    pub binding_unit: Option<Arc<str>>,
}

impl EffectiveTool {
    pub fn name(&self) -> &str {
        &self.definition.info().name
    }
}

impl std::fmt::Debug for EffectiveTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EffectiveTool")
            .field("name", &self.name())
            .field("provenance", &self.provenance.to_string())
            .field("inherited_from_unit", &self.inherited_from_unit)
            .finish()
    }
}

impl Serialize for EffectiveTool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let info = self.definition.info();
        let namespace = info.name.split('.').next().unwrap_or_default();
        let mut s = serializer.serialize_struct("EffectiveTool", 7)?;
        s.serialize_field("name", &info.name)?;
        s.serialize_field("namespace", namespace)?;
        s.serialize_field("description", &info.description)?;
        s.serialize_field("provenance", &self.provenance.to_string())?;
        s.serialize_field("inheritedFromUnit", &self.inherited_from_unit.as_deref())?;
        s.serialize_field("inputSchema", &info.input_schema)?;
        s.serialize_field("annotations", &info.annotations)?;
        s.end()
    }
}

/// A subject's effective tools, sorted by name (which is namespace-then-name order,
/// since `.` sorts before every character a segment may contain).
#[derive(Debug, Clone, Default)]
pub struct ResolvedTools {
    pub tools: Vec<EffectiveTool>,
}

impl ResolvedTools {
    /// The tool with canonical id `name`.
    pub fn get(&self, name: &str) -> Option<&EffectiveTool> {
        self.tools
            .binary_search_by(|t| t.name().cmp(name))
            .ok()
            .map(|i| &self.tools[i])
    }
}

impl Serialize for ResolvedTools {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.tools.serialize(serializer)
    }
}

/// What the resolver reads besides the directory.
pub struct ToolCatalog<'a> {
    /// Installed connectors by tool namespace.
    pub connectors: &'a BTreeMap<String, Arc<InstalledConnector>>,
    /// Platform tools (all in namespace `sv`), sorted by name.
    pub platform: &'a [Arc<ToolInfo>],
}

/// One way a namespace reaches the subject.
struct Source {
    provenance: Provenance,
    inherited: Option<Arc<str>>,
    binding_unit: Option<Arc<str>>,
    /// `None`: the whole namespace; `Some`: one tool id.
    only: Option<String>,
    /// Where the namespace's tools come from.
    provider: Provider,
}

#[derive(Clone)]
enum Provider {
    Connector(Arc<InstalledConnector>),
    Platform,
    Image(Arc<[Arc<ToolInfo>]>),
}

/// Computes and caches effective tool sets.
#[derive(Default)]
pub struct EffectiveToolResolver {
    cache: Mutex<(u64, HashMap<Subject, Arc<ResolvedTools>>)>,
}

impl EffectiveToolResolver {
    /// Drops every cached result. Call with the directory's write lock held, after the
    /// change.
    pub fn invalidate(&self) {
        let mut cache = self.cache.lock();
        cache.0 += 1;
        cache.1.clear();
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
            if grant.provenance == EXPLICIT {
                continue;
            }
            let Some((ns, connector)) = catalog.connectors.get_key_value(&grant.namespace) else {
                continue;
            };
            if grant.provenance != crate::grants::connector_provenance(connector.slug()) {
                continue;
            }
            closest_binding
                .entry(ns.as_str())
                .or_insert_with(|| unit.clone());
            let inherited = match subject {
                Subject::Unit(own) if own.as_str() == &**unit => None,
                _ => Some(unit.clone()),
            };
            let sources = namespaces.entry(ns.as_str()).or_default();
            if sources
                .iter()
                .any(|s| matches!(s.provenance, Provenance::Connector(_)))
            {
                continue; // a closer binding already brought this namespace
            }
            sources.push(Source {
                provenance: Provenance::Connector(connector.slug().to_string()),
                inherited,
                binding_unit: Some(unit.clone()),
                only: None,
                provider: Provider::Connector(connector.clone()),
            });
        }
    }

    // Image tier, grouped by namespace.
    let mut image_by_ns: BTreeMap<String, Vec<Arc<ToolInfo>>> = BTreeMap::new();
    let image_digest = match subject {
        Subject::Agent(a) => directory.image_tools(a).map(|r| r.digest.clone()),
        Subject::Unit(_) => None,
    };
    if let (Some(tools), Some(_)) = (&image, &image_digest) {
        for t in tools.iter() {
            if let Some((ns, _)) = t.name.split_once('.') {
                image_by_ns
                    .entry(ns.to_string())
                    .or_default()
                    .push(t.clone());
            }
        }
    }
    let image_providers: BTreeMap<String, Provider> = image_by_ns
        .into_iter()
        .map(|(ns, mut tools)| {
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            (ns, Provider::Image(Arc::from(tools)))
        })
        .collect();
    let image_digest = image_digest.unwrap_or_default();
    for (ns, provider) in &image_providers {
        namespaces.entry(ns.as_str()).or_default().push(Source {
            provenance: Provenance::Image(image_digest.clone()),
            inherited: None,
            binding_unit: None,
            only: None,
            provider: provider.clone(),
        });
    }

    // Platform tier.
    if !catalog.platform.is_empty() {
        namespaces.entry("sv").or_default().push(Source {
            provenance: Provenance::Platform,
            inherited: None,
            binding_unit: None,
            only: None,
            provider: Provider::Platform,
        });
    }

    // Explicit tier: the subject's own grants of a tool or a namespace.
    for grant in directory.grants_of(subject) {
        if grant.provenance != EXPLICIT {
            continue;
        }
        let ns = grant.namespace.as_str();
        let provider = if ns == "sv" {
            Provider::Platform
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
            provenance: Provenance::Explicit,
            inherited: None,
            binding_unit: closest_binding.get(ns).cloned(),
            only,
            provider,
        });
    }

    let mut tools = Vec::new();
    for (ns, sources) in namespaces {
        emit_namespace(ns, sources, catalog, &closest_binding, &mut tools);
    }
    Some(ResolvedTools { tools })
}

fn definitions(provider: &Provider, catalog: &ToolCatalog<'_>) -> Vec<ToolDefinition> {
    match provider {
        Provider::Connector(c) => c
            .sorted_tool_indices()
            .iter()
            .map(|&i| ToolDefinition::Connector(c.clone(), i))
            .collect(),
        Provider::Platform => catalog
            .platform
            .iter()
            .map(|t| ToolDefinition::Platform(t.clone()))
            .collect(),
        Provider::Image(tools) => tools
            .iter()
            .map(|t| ToolDefinition::Image(t.clone()))
            .collect(),
    }
}

fn emit_namespace(
    ns: &str,
    mut sources: Vec<Source>,
    catalog: &ToolCatalog<'_>,
    closest: &HashMap<&str, Arc<str>>,
    out: &mut Vec<EffectiveTool>,
) {
    if sources.len() == 1 && sources[0].only.is_none() {
        let s = sources.pop().unwrap_or_else(|| unreachable!());
        match &s.provider {
            Provider::Connector(c) => {
                out.extend(c.sorted_tool_indices().iter().map(|&i| EffectiveTool {
                    definition: ToolDefinition::Connector(c.clone(), i),
                    provenance: s.provenance.clone(),
                    inherited_from_unit: s.inherited.clone(),
                    binding_unit: s.binding_unit.clone(),
                }));
            }
            other => {
                out.extend(definitions(other, catalog).into_iter().map(|definition| {
                    EffectiveTool {
                        definition,
                        provenance: s.provenance.clone(),
                        inherited_from_unit: s.inherited.clone(),
                        binding_unit: s.binding_unit.clone(),
                    }
                }));
            }
        }
        return;
    }
    // Several sources: highest tier wins per tool; within a tier, the first source.
    sources.sort_by_key(|s| std::cmp::Reverse(s.provenance.rank()));
    let mut merged: BTreeMap<String, EffectiveTool> = BTreeMap::new();
    for s in &sources {
        for definition in definitions(&s.provider, catalog) {
            let name = definition.info().name.clone();
            if s.only.as_ref().is_some_and(|only| *only != name) || merged.contains_key(&name) {
                continue;
            }
            let binding_unit = match &definition {
                ToolDefinition::Connector(..) => {
                    s.binding_unit.clone().or_else(|| closest.get(ns).cloned())
                }
                _ => None,
            };
            merged.insert(
                name,
                EffectiveTool {
                    definition,
                    provenance: s.provenance.clone(),
                    inherited_from_unit: s.inherited.clone(),
                    binding_unit,
                },
            );
        }
    }
    out.extend(merged.into_values());
}
