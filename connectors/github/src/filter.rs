//! The per-binding filter (`accept`).

use connector_sdk::{Binding, Message};
use serde_json::Value;

use crate::config::{eq_ignore_case, label_matches, GithubConfig};

/// Whether `message` reaches the unit of `binding`: it must be about the binding's
/// repository (or installation), then pass `excludeLabels`, `includeLabels` and
/// `includeAuthors`, in that order.
pub fn accept(binding: &Binding, message: &Message) -> bool {
    let config = match GithubConfig::from_value(&binding.config) {
        Ok(config) => config,
        Err(e) => {
            connector_sdk::log::warn(format!("message not accepted: {e}"));
            return false;
        }
    };
    belongs_to(&config, message) && passes_filters(&config, &message.payload)
}

/// Defence in depth (the host routes by the same keys): a repository event must be about
/// the binding's `repo`, an installation event about its `installationId`.
pub fn belongs_to(config: &GithubConfig, message: &Message) -> bool {
    if let Some(id) = message.route.strip_prefix("installation:") {
        return config
            .installation_id
            .is_some_and(|own| id.parse::<u64>() == Ok(own));
    }
    message
        .payload
        .get("repository")
        .and_then(Value::as_str)
        .is_some_and(|repo| repo.eq_ignore_ascii_case(&config.repo))
}

/// The label and author filters over a message payload (`labels`: array of names,
/// `author`: login). A payload without labels (push, installation) passes the label
/// filters only when `includeLabels` is absent or empty; one without an author passes
/// only when `includeAuthors` is absent or empty.
pub fn passes_filters(config: &GithubConfig, payload: &Value) -> bool {
    let labels = || {
        payload
            .get("labels")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
    };

    if let Some(exclude) = &config.exclude_labels {
        if labels().any(|label| exclude.iter().any(|p| label_matches(p, label))) {
            return false;
        }
    }
    if let Some(include) = config.include_labels.as_ref().filter(|l| !l.is_empty()) {
        if !labels().any(|label| include.iter().any(|p| label_matches(p, label))) {
            return false;
        }
    }
    if let Some(authors) = config.include_authors.as_ref().filter(|l| !l.is_empty()) {
        let author = payload.get("author").and_then(Value::as_str);
        if !author.is_some_and(|a| authors.iter().any(|x| eq_ignore_case(x, a))) {
            return false;
        }
    }
    true
}
