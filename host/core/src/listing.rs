//! Paged lists of units and agents (CONTRACT §3 `GET /units`, `GET /agents`).
//!
//! Both lists are read from the in-memory directory's sorted id indexes, from the cursor
//! on and only as far as one page: the cursor is the id of the last entry a page
//! returned, so a page stays correct while entries are added or removed between
//! requests (nothing is skipped or shown twice that existed throughout). Agent counts
//! come from the directory's per-unit count, not a pass over every agent.

use serde::Serialize;

use crate::directory::AgentSummary;
use crate::grants::Directory;
use connector_model::error::{HostError, HostResult};
use connector_model::ids::{truncate, AgentId, UnitId};

/// The page size when a request names none.
pub const DEFAULT_PAGE: u32 = 100;
/// The largest page a request may ask for.
pub const MAX_PAGE: u32 = 500;

/// A unit as a list shows it (the contract's `UnitSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitSummary {
    /// Its id.
    pub id: String,
    /// Its parent unit, if any.
    pub parent: Option<String>,
    /// Its name for people.
    pub display_name: Option<String>,
    /// Slugs of its own bindings (not inherited ones), sorted.
    pub bindings: Vec<String>,
    /// How many agents have it among their units.
    pub agents: usize,
}

/// One page of a list: its entries and the cursor of the next page (none past the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// This page's entries, sorted by id.
    pub entries: Vec<T>,
    /// The `after` of the next page (`None`: this is the last).
    pub next: Option<String>,
}

/// Which units `GET /units` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentFilter {
    /// Every unit.
    Any,
    /// Units without a parent.
    Roots,
    /// The children of this unit.
    Of(String),
}

/// Checks `limit` and `after` as a request gave them; the cursor is an id of the listed
/// kind (`Id`), the last of the page before.
fn bounds<Id: std::str::FromStr>(after: Option<&str>, limit: Option<u32>) -> HostResult<usize> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(HostError::invalid_request(format!(
            "`limit` must be between 1 and {MAX_PAGE}, not {limit}"
        )));
    }
    if let Some(after) = after {
        after.parse::<Id>().map_err(|_| {
            HostError::invalid_request(format!(
                "`after` must be a cursor a previous page returned as `next`, not `{}`",
                truncate(after, 80)
            ))
        })?;
    }
    Ok(limit as usize)
}

/// The first `limit` entries of `sorted` (an iterator in id order, already past the
/// cursor), and the cursor of the next page when there is more: one entry past the
/// page is read to know, never the rest.
fn page_of<T>(sorted: impl Iterator<Item = T>, id: impl Fn(&T) -> &str, limit: usize) -> Page<T> {
    let mut entries: Vec<T> = sorted.take(limit + 1).collect();
    let next = if entries.len() > limit {
        entries.truncate(limit);
        entries.last().map(|e| id(e).to_string())
    } else {
        None
    };
    Page { entries, next }
}

/// A page of units, sorted by id.
pub fn units(
    directory: &Directory,
    parent: &ParentFilter,
    after: Option<&str>,
    limit: Option<u32>,
) -> HostResult<Page<UnitSummary>> {
    let limit = bounds::<UnitId>(after, limit)?;
    if let ParentFilter::Of(p) = parent {
        UnitId::parse(p)?;
        if directory.unit(p).is_none() {
            return Err(HostError::not_found(format!("unit `{p}` does not exist")));
        }
    }
    // The directory's sorted index from the cursor on, as far as one page (and one
    // more) of matching units.
    let chosen = directory.units_after(after).filter(|u| match parent {
        ParentFilter::Any => true,
        ParentFilter::Roots => u.parent.is_none(),
        ParentFilter::Of(p) => u.parent.as_deref() == Some(p.as_str()),
    });
    let page = page_of(chosen, |u| u.id.as_str(), limit);
    let entries = page
        .entries
        .iter()
        .map(|u| UnitSummary {
            id: u.id.clone(),
            parent: u.parent.clone(),
            display_name: u.display_name.clone(),
            bindings: directory
                .bindings_of(&u.id)
                .map(|b| b.connector.clone())
                .collect(),
            agents: directory.member_count(&u.id),
        })
        .collect();
    Ok(Page {
        entries,
        next: page.next,
    })
}

/// A page of agents (all, or those with `unit` among their units), sorted by id.
pub fn agents(
    directory: &Directory,
    unit: Option<&str>,
    after: Option<&str>,
    limit: Option<u32>,
) -> HostResult<Page<AgentSummary>> {
    let limit = bounds::<AgentId>(after, limit)?;
    if let Some(u) = unit {
        UnitId::parse(u)?;
        if directory.unit(u).is_none() {
            return Err(HostError::not_found(format!("unit `{u}` does not exist")));
        }
    }
    let chosen = directory
        .agents_after(after)
        .filter(|a| unit.is_none_or(|u| a.units.iter().any(|x| x == u)));
    let page = page_of(chosen, |a| a.id.as_str(), limit);
    Ok(Page {
        entries: page
            .entries
            .iter()
            .map(|a| AgentSummary {
                id: a.id.clone(),
                units: a.units.clone(),
                display_name: a.display_name.clone(),
            })
            .collect(),
        next: page.next,
    })
}
