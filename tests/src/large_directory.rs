//! A platform-sized directory written through the host's Rust API ([`Host`]), for the
//! scale benchmark and for tests that need many units, agents, bindings and connectors.
//!
//! The shape (issue 37's platform size by default, [`Shape::platform`]):
//! - units `u0` … in one tree 8 deep: unit `i`'s parent is `(i - 1) / 6`, so `u0` is the
//!   root above every other unit and 100,000 units fill levels 1 to 8;
//! - agents `a0` …, each a member of one unit of the deepest level (spread evenly), so
//!   every agent's effective tools walk a chain of 8 units;
//! - connectors `c000` …: the bundled `acme` component with its name (4 letters in its
//!   data) replaced by the connector's slug, so each is a distinct, valid component with
//!   its own slug, namespace and tools (`c000.echo`, …), compiled on install like any
//!   upload;
//! - bindings spread over the whole tree (binding `j` on unit `j * units / bindings`,
//!   connector `j % connectors`).
//!
//! Writes go through the same calls an operator's requests do (`put_unit`, `put_agent`,
//! `bind`, `install`), many at once, so the store and the write path are what is measured.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use connector_host::Host;
use futures::{StreamExt, TryStreamExt};

/// Children per unit.
pub const BRANCHING: usize = 6;
/// Levels of the unit tree (the root is level 1).
pub const DEPTH: usize = 8;
/// The name inside the bundled `acme` component that each generated connector replaces.
const TEMPLATE_NAME: &[u8] = b"acme";

/// How large a directory to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Units, in one tree.
    pub units: usize,
    /// Agents.
    pub agents: usize,
    /// Bindings.
    pub bindings: usize,
    /// Installed connectors (besides the bundled ones), at most 1,000.
    pub connectors: usize,
}

impl Shape {
    /// Issue 37's platform size: 100,000 units 8 deep, 1,000,000 agents, 10,000 bindings,
    /// 500 connectors.
    pub fn platform() -> Shape {
        Shape {
            units: 100_000,
            agents: 1_000_000,
            bindings: 10_000,
            connectors: 500,
        }
    }

    /// [`Shape::platform`] with any of `SCALE_UNITS`, `SCALE_AGENTS`, `SCALE_BINDINGS`,
    /// `SCALE_CONNECTORS` from the environment instead.
    pub fn from_env() -> anyhow::Result<Shape> {
        let get = |name: &str, default: usize| -> anyhow::Result<usize> {
            match std::env::var(name) {
                Ok(v) => v
                    .parse()
                    .with_context(|| format!("{name}={v} is not a count")),
                Err(_) => Ok(default),
            }
        };
        let p = Shape::platform();
        let shape = Shape {
            units: get("SCALE_UNITS", p.units)?,
            agents: get("SCALE_AGENTS", p.agents)?,
            bindings: get("SCALE_BINDINGS", p.bindings)?,
            connectors: get("SCALE_CONNECTORS", p.connectors)?,
        };
        shape.check()?;
        Ok(shape)
    }

    fn check(&self) -> anyhow::Result<()> {
        let deepest_start = level_start(DEPTH - 1);
        if self.units <= deepest_start {
            bail!(
                "{} units do not reach level {DEPTH} of the tree: at least {} are needed",
                self.units,
                deepest_start + 1
            );
        }
        if self.units > level_start(DEPTH) {
            bail!("{} units do not fit in {DEPTH} levels", self.units);
        }
        if self.connectors == 0 || self.connectors > 1000 {
            bail!("connectors: 1 to 1,000");
        }
        if self.bindings > self.units {
            bail!("at most one binding per unit: no more bindings than units");
        }
        Ok(())
    }

    /// The units of the deepest level (where the agents are).
    pub fn deepest(&self) -> std::ops::Range<usize> {
        level_start(DEPTH - 1)..self.units
    }
}

/// The index of the first unit of level `level` (0-based: the root's level is 0).
fn level_start(level: usize) -> usize {
    (0..level).map(|l| BRANCHING.pow(l as u32)).sum()
}

/// Unit `i`'s id.
pub fn unit_id(i: usize) -> String {
    format!("u{i}")
}

/// Unit `i`'s parent's index (`None` for the root).
pub fn parent_of(i: usize) -> Option<usize> {
    (i > 0).then(|| (i - 1) / BRANCHING)
}

/// Agent `i`'s id.
pub fn agent_id(i: usize) -> String {
    format!("a{i}")
}

/// The index of agent `i`'s unit.
pub fn unit_of_agent(shape: &Shape, i: usize) -> usize {
    let deepest = shape.deepest();
    deepest.start + i % deepest.len()
}

/// Connector `i`'s slug (also its namespace).
pub fn connector_slug(i: usize) -> String {
    format!("c{i:03}")
}

/// The component of connector `i`: the bundled `acme` with every occurrence of its name
/// replaced by the connector's slug (same length, so nothing else moves).
pub fn connector_component(i: usize) -> anyhow::Result<Vec<u8>> {
    let template = connector_bundled::component("acme")
        .ok_or_else(|| anyhow!("the bundled acme component is missing"))?;
    let slug = connector_slug(i);
    if slug.len() != TEMPLATE_NAME.len() {
        bail!(
            "connector slug {slug} is not {} letters",
            TEMPLATE_NAME.len()
        );
    }
    let mut bytes = template.to_vec();
    let mut at = 0;
    let mut replaced = 0;
    while let Some(found) = bytes[at..]
        .windows(TEMPLATE_NAME.len())
        .position(|w| w == TEMPLATE_NAME)
    {
        let start = at + found;
        bytes[start..start + TEMPLATE_NAME.len()].copy_from_slice(slug.as_bytes());
        at = start + TEMPLATE_NAME.len();
        replaced += 1;
    }
    if replaced == 0 {
        bail!("the bundled acme component no longer holds its name");
    }
    Ok(bytes)
}

/// Binding `j`'s (unit index, connector index).
pub fn binding_of(shape: &Shape, j: usize) -> (usize, usize) {
    (
        j * shape.units / shape.bindings.max(1),
        j % shape.connectors,
    )
}

/// How a phase of the generation went.
#[derive(Debug, Clone)]
pub struct Phase {
    /// What was written (`units`, `agents`, ...).
    pub what: &'static str,
    /// How many writes.
    pub count: usize,
    /// How long they took.
    pub took: Duration,
}

impl Phase {
    /// Writes per second.
    pub fn rate(&self) -> f64 {
        self.count as f64 / self.took.as_secs_f64().max(1e-9)
    }
}

/// Runs `count` writes made by `write(i)`, `concurrency` at a time, reporting progress
/// every few seconds on stderr.
async fn phase<F, Fut>(
    what: &'static str,
    count: usize,
    concurrency: usize,
    write: F,
) -> anyhow::Result<Phase>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    let mut last = started;
    let mut done = 0usize;
    let mut writes = futures::stream::iter(0..count)
        .map(&write)
        .buffer_unordered(concurrency.max(1));
    while writes.try_next().await?.is_some() {
        done += 1;
        if last.elapsed() >= Duration::from_secs(5) {
            last = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "  {what}: {done}/{count} ({:.0}/s, {:.0} s)",
                done as f64 / secs,
                secs
            );
        }
    }
    let took = started.elapsed();
    eprintln!(
        "  {what}: {count} in {:.1} s ({:.0}/s)",
        took.as_secs_f64(),
        count as f64 / took.as_secs_f64().max(1e-9)
    );
    Ok(Phase { what, count, took })
}

/// Writes the directory `shape` describes through `host`, `concurrency` writes at a time
/// (connectors: two at a time, each install compiles), and returns each phase's figures.
/// Units go level by level (a unit's parent exists before it is written).
pub async fn generate(
    host: &Host,
    shape: &Shape,
    concurrency: usize,
) -> anyhow::Result<Vec<Phase>> {
    shape.check()?;
    eprintln!("generating {shape:?} with {concurrency} writes at a time");
    let mut phases = Vec::new();
    phases.push(
        phase("connectors", shape.connectors, 2, |i| async move {
            let bytes = connector_component(i)?;
            host.install_connector(&bytes, false)
                .await
                .with_context(|| format!("installing {}", connector_slug(i)))?;
            Ok(())
        })
        .await?,
    );
    let started = Instant::now();
    for level in 0..DEPTH {
        let first = level_start(level);
        let end = level_start(level + 1).min(shape.units);
        if first >= end {
            break;
        }
        phase("units", end - first, concurrency, |k| async move {
            let i = first + k;
            let parent = parent_of(i).map(unit_id);
            host.put_unit(&unit_id(i), parent.as_deref(), None)
                .await
                .with_context(|| format!("writing unit {i}"))?;
            Ok(())
        })
        .await?;
        eprintln!("  (level {} of {DEPTH} done)", level + 1);
    }
    phases.push(Phase {
        what: "units",
        count: shape.units,
        took: started.elapsed(),
    });
    phases.push(
        phase("agents", shape.agents, concurrency, |i| async move {
            let unit = unit_id(unit_of_agent(shape, i));
            host.put_agent(&agent_id(i), &[unit], None)
                .await
                .with_context(|| format!("writing agent {i}"))?;
            Ok(())
        })
        .await?,
    );
    phases.push(
        phase("bindings", shape.bindings, concurrency, |j| async move {
            let (unit, connector) = binding_of(shape, j);
            host.bind(
                &unit_id(unit),
                &connector_slug(connector),
                serde_json::json!({}),
            )
            .await
            .with_context(|| format!("binding {j}"))?;
            Ok(())
        })
        .await?,
    );
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_tree_is_eight_deep_with_every_unit_under_the_root() {
        let shape = Shape::platform();
        shape.check().unwrap();
        let depth = |mut i: usize| {
            let mut d = 1;
            while let Some(p) = parent_of(i) {
                i = p;
                d += 1;
            }
            d
        };
        assert_eq!(depth(shape.units - 1), DEPTH);
        assert_eq!(depth(shape.deepest().start), DEPTH);
        assert_eq!(depth(shape.deepest().start - 1), DEPTH - 1);
        let bindings: std::collections::BTreeSet<_> =
            (0..shape.bindings).map(|j| binding_of(&shape, j)).collect();
        assert_eq!(
            bindings.len(),
            shape.bindings,
            "a (unit, connector) pair twice"
        );
    }

    #[test]
    fn each_connector_component_differs_and_names_its_slug() {
        let (a, b) = (
            connector_component(0).unwrap(),
            connector_component(499).unwrap(),
        );
        assert_ne!(a, b);
        assert!(a.windows(4).any(|w| w == b"c000"));
        assert!(!a.windows(4).any(|w| w == TEMPLATE_NAME));
    }
}
