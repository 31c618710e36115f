//! OpenAPI 3.0/3.1 documents: loading (YAML or JSON), local `$ref` resolution with cycle
//! detection, and the parts of one operation a tool needs.
//!
//! Only what an operation uses is resolved, so an unrelated recursive schema elsewhere in
//! a large document does not stop a pack. OpenAPI 3.0's schema dialect (`nullable`,
//! boolean `exclusiveMinimum`) is rewritten into JSON Schema, which tool input schemas are.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::compile::HEADER_NAME;
use super::yaml::{self, Pos};

/// Why a document could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadError {
    /// Where in the document, when known.
    pub pos: Option<Pos>,
    pub message: String,
}

/// The largest OpenAPI document pack reads.
pub(crate) const MAX_DOCUMENT: u64 = 8 * 1024 * 1024;

/// Why the document a manifest's `spec` names cannot be read. Its
/// [`connector_remote_answer::error_chain`] is the problem `pack` reports.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecPathError {
    #[error(
        "`spec` is empty: give the OpenAPI document's path, relative to the manifest's folder"
    )]
    Empty,
    #[error(
        "`{0}` is an absolute path: give the OpenAPI document's path relative to the \
         manifest's folder (the document must be inside it)"
    )]
    Absolute(String),
    #[error("could not resolve the manifest's folder {}", .dir.display())]
    Folder {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not read the OpenAPI document {}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`{spec}` is outside the manifest's folder {} (after `..` and links): put the \
         OpenAPI document next to the manifest, or in a folder below it",
        .folder.display()
    )]
    Outside { spec: String, folder: PathBuf },
    #[error("`{0}` is not a regular file: give the path of the OpenAPI document")]
    NotAFile(String),
    #[error(
        "the OpenAPI document `{spec}` has {len} bytes, more than the {MAX_DOCUMENT} pack \
         reads (8 MiB); trim it to the operations the tool uses"
    )]
    TooLarge { spec: String, len: u64 },
}

/// The canonical path of the document `spec` names, relative to `base_dir` (the
/// manifest's folder): a regular file inside that folder (after links are followed) of at
/// most [`MAX_DOCUMENT`] bytes. Absolute paths and paths leading out are refused.
pub(crate) fn confine(base_dir: &Path, spec: &str) -> Result<PathBuf, SpecPathError> {
    let relative = Path::new(spec);
    if spec.trim().is_empty() {
        return Err(SpecPathError::Empty);
    }
    if relative.is_absolute() || relative.has_root() {
        return Err(SpecPathError::Absolute(spec.to_string()));
    }
    let base = base_dir
        .canonicalize()
        .map_err(|source| SpecPathError::Folder {
            dir: base_dir.to_path_buf(),
            source,
        })?;
    let joined = base.join(relative);
    let path = joined
        .canonicalize()
        .map_err(|source| SpecPathError::Unreadable {
            path: base_dir.join(relative),
            source,
        })?;
    if !path.starts_with(&base) {
        return Err(SpecPathError::Outside {
            spec: spec.to_string(),
            folder: base,
        });
    }
    let meta = std::fs::metadata(&path).map_err(|source| SpecPathError::Unreadable {
        path: path.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(SpecPathError::NotAFile(spec.to_string()));
    }
    if meta.len() > MAX_DOCUMENT {
        return Err(SpecPathError::TooLarge {
            spec: spec.to_string(),
            len: meta.len(),
        });
    }
    Ok(path)
}

/// Reads an OpenAPI document (at most [`MAX_DOCUMENT`] bytes): JSON when it parses as
/// such, else YAML. `shown` names it in messages.
pub(crate) fn load(path: &Path, shown: &str) -> Result<Value, LoadError> {
    let unreadable = |e: std::io::Error| LoadError {
        pos: None,
        message: format!("could not read the OpenAPI document {shown}: {e}"),
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_DOCUMENT + 1).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_DOCUMENT {
        return Err(LoadError {
            pos: None,
            message: format!(
                "the OpenAPI document {shown} is larger than the {MAX_DOCUMENT} bytes pack \
                 reads (8 MiB)"
            ),
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| LoadError {
        pos: None,
        message: format!("the OpenAPI document {shown} is not UTF-8 text"),
    })?;
    parse(
        &text,
        path.extension().and_then(|e| e.to_str()) == Some("json"),
    )
}

/// Parses document text (`json`: the file says it is JSON).
pub(crate) fn parse(text: &str, json: bool) -> Result<Value, LoadError> {
    let doc = if json || text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| LoadError {
            pos: Some(Pos {
                line: e.line(),
                column: e.column(),
            }),
            message: format!("not valid JSON: {e}"),
        })?
    } else {
        yaml::parse(text)
            .map_err(|e| LoadError {
                pos: Some(e.pos),
                message: format!("not valid YAML: {}", e.message),
            })?
            .to_json()
    };
    let version = doc.get("openapi").and_then(Value::as_str).unwrap_or("");
    if !(version.starts_with("3.0") || version.starts_with("3.1")) {
        return Err(LoadError {
            pos: None,
            message: format!(
                "not an OpenAPI 3.0 or 3.1 document (its `openapi` field is {}); convert a \
                 Swagger 2.0 document to OpenAPI 3 first",
                doc.get("openapi")
                    .map_or("missing".to_string(), |v| v.to_string())
            ),
        });
    }
    Ok(doc)
}

/// One parameter of an operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Param {
    pub name: String,
    pub required: bool,
    /// Its JSON Schema (with the parameter's description).
    pub schema: Value,
}

/// What a tool needs of one operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Operation {
    /// Upper case.
    pub method: String,
    /// The path template, like `/repos/{owner}/{repo}`.
    pub path: String,
    pub path_params: Vec<Param>,
    pub query: Vec<Param>,
    pub headers: Vec<Param>,
    /// The JSON request body's schema, and whether it is required.
    pub body: Option<(Value, bool)>,
    /// `summary` and `description`, joined.
    pub description: Option<String>,
    /// The base URL the document gives (variables substituted), if any.
    pub server: Option<String>,
    /// Things worth telling the author that do not stop the pack.
    pub warnings: Vec<String>,
}

/// Header parameters OpenAPI says to ignore.
const IGNORED_HEADERS: &[&str] = &["Accept", "Content-Type", "Authorization"];

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Why an operation of a document cannot be made into a tool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum OperationError {
    #[error("the document has no `paths`")]
    NoPaths,
    #[error(
        "the document has no operation `{id}`; its operationIds are: {}",
        list_ids(known)
    )]
    Unknown { id: String, known: Vec<String> },
    /// Something wrong with the operation found.
    #[error("operation `{id}`: {problem}")]
    In {
        id: String,
        problem: Box<OperationError>,
    },
    #[error("`parameters` is not a list")]
    ParametersNotAList,
    #[error("a parameter has no `name`")]
    UnnamedParameter,
    #[error("header parameter `{0}` is not a valid HTTP header name")]
    HeaderName(String),
    #[error("cookie parameter `{0}` is required, and cookie parameters are not supported")]
    RequiredCookie(String),
    #[error("parameter `{name}` has an unknown `in: {location}`")]
    UnknownIn { name: String, location: String },
    #[error("the path `{path}` has `{{{name}}}` but no path parameter declares it")]
    UndeclaredPathParameter { path: String, name: String },
    #[error(
        "its request body is required but not JSON ({}); only JSON bodies are supported",
        .0.join(", ")
    )]
    RequiredNonJsonBody(Vec<String>),
    #[error(
        "`$ref: {0}` points outside the document; only local `#/…` references are \
         supported: bundle the document first"
    )]
    RefOutside(String),
    #[error("`$ref: {0}` points at nothing")]
    RefToNothing(String),
    /// A chain of `$ref`s followed to read keys that does not end.
    #[error("`$ref`s form a cycle")]
    RefChain,
    /// A schema that would contain itself (the references around the cycle).
    #[error("`$ref`s form a cycle ({}); a tool's input schema must be finite", .0.join(" → "))]
    RefCycle(Vec<String>),
    #[error("the operation's schemas are too large once their `$ref`s are expanded")]
    TooLarge,
}

/// The first 20 operation ids (`(none)` for none, `…` after the 20th).
fn list_ids(known: &[String]) -> String {
    let shown: Vec<&str> = known.iter().take(20).map(String::as_str).collect();
    format!(
        "{}{}",
        if shown.is_empty() {
            "(none)".to_string()
        } else {
            shown.join(", ")
        },
        if known.len() > shown.len() {
            ", …"
        } else {
            ""
        }
    )
}

/// Finds the operation `operation_id` and resolves what it uses.
pub(crate) fn operation(doc: &Value, operation_id: &str) -> Result<Operation, OperationError> {
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .ok_or(OperationError::NoPaths)?;
    let mut known = Vec::new();
    for (path, item) in paths {
        let item = follow(doc, item)?;
        for method in METHODS {
            let Some(op) = item.get(*method) else {
                continue;
            };
            let id = op.get("operationId").and_then(Value::as_str);
            if let Some(id) = id {
                known.push(id.to_string());
            }
            if id == Some(operation_id) {
                return compile(doc, path, method, item, follow(doc, op)?).map_err(|problem| {
                    OperationError::In {
                        id: operation_id.to_string(),
                        problem: Box::new(problem),
                    }
                });
            }
        }
    }
    known.sort();
    Err(OperationError::Unknown {
        id: operation_id.to_string(),
        known,
    })
}

fn compile(
    doc: &Value,
    path: &str,
    method: &str,
    item: &Value,
    op: &Value,
) -> Result<Operation, OperationError> {
    let mut warnings = Vec::new();
    // Path-level parameters, overridden by operation-level ones with the same name and `in`.
    let mut params: Vec<Value> = Vec::new();
    for list in [item.get("parameters"), op.get("parameters")]
        .into_iter()
        .flatten()
    {
        let list = list.as_array().ok_or(OperationError::ParametersNotAList)?;
        for p in list {
            let p = resolve(doc, p)?;
            let key = |v: &Value| {
                (
                    v.get("name").and_then(Value::as_str).map(str::to_string),
                    v.get("in").and_then(Value::as_str).map(str::to_string),
                )
            };
            params.retain(|q| key(q) != key(&p));
            params.push(p);
        }
    }
    let mut out = Operation {
        method: method.to_ascii_uppercase(),
        path: path.to_string(),
        path_params: Vec::new(),
        query: Vec::new(),
        headers: Vec::new(),
        body: None,
        description: None,
        server: None,
        warnings: Vec::new(),
    };
    for p in params {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or(OperationError::UnnamedParameter)?
            .to_string();
        let location = p.get("in").and_then(Value::as_str).unwrap_or("");
        let mut schema = p
            .get("schema")
            .cloned()
            .or_else(|| {
                // `content` instead of `schema`: the first media type's schema.
                p.get("content")
                    .and_then(Value::as_object)
                    .and_then(|c| c.values().next())
                    .and_then(|m| m.get("schema"))
                    .cloned()
            })
            .unwrap_or_else(|| serde_json::json!({"type": "string"}));
        to_json_schema(&mut schema);
        if let (Some(description), Value::Object(map)) = (p.get("description"), &mut schema) {
            map.entry("description").or_insert(description.clone());
        }
        let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
        let param = Param {
            name: name.clone(),
            required,
            schema,
        };
        match location {
            "path" => out.path_params.push(Param {
                required: true,
                ..param
            }),
            "query" => {
                if matches!(
                    param.schema.get("type").and_then(Value::as_str),
                    Some("array" | "object")
                ) {
                    warnings.push(format!(
                        "query parameter `{name}` is an {}: it is sent as JSON text, not in the \
                         document's `style`",
                        param.schema["type"].as_str().unwrap_or("object")
                    ));
                }
                out.query.push(param)
            }
            "header" => {
                if IGNORED_HEADERS
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case(&name))
                {
                    // OpenAPI: "If `in` is "header" and the `name` field is "Accept",
                    // "Content-Type" or "Authorization", the parameter definition SHALL be
                    // ignored."
                    warnings.push(format!(
                        "header parameter `{name}` is ignored, as OpenAPI says; to send it, \
                         set it in the `openapi` block's `headers`"
                    ));
                    continue;
                }
                if !HEADER_NAME.is_match(&name) {
                    return Err(OperationError::HeaderName(name));
                }
                out.headers.push(param)
            }
            "cookie" => {
                if required {
                    return Err(OperationError::RequiredCookie(name));
                }
                warnings.push(format!("optional cookie parameter `{name}` is left out"));
            }
            other => {
                return Err(OperationError::UnknownIn {
                    name,
                    location: other.to_string(),
                })
            }
        }
    }
    for segment in path.split('{').skip(1) {
        let name = segment.split('}').next().unwrap_or("");
        if !out.path_params.iter().any(|p| p.name == name) {
            return Err(OperationError::UndeclaredPathParameter {
                path: path.to_string(),
                name: name.to_string(),
            });
        }
    }
    if let Some(body) = op.get("requestBody") {
        let body = resolve(doc, body)?;
        let required = body
            .get("required")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let content = body.get("content").and_then(Value::as_object);
        let json = content.and_then(|c| {
            c.iter()
                .find(|(t, _)| is_json(t))
                .map(|(_, media)| media.get("schema").cloned().unwrap_or(Value::Bool(true)))
        });
        match json {
            Some(mut schema) => {
                to_json_schema(&mut schema);
                out.body = Some((schema, required));
            }
            None if required => {
                return Err(OperationError::RequiredNonJsonBody(
                    content
                        .map(|c| c.keys().cloned().collect())
                        .unwrap_or_default(),
                ))
            }
            None => warnings.push("its optional non-JSON request body is left out".into()),
        }
    }
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    out.description = match (text(op, "summary"), text(op, "description")) {
        (Some(s), Some(d)) if s != d => Some(format!("{s}\n\n{d}")),
        (Some(s), _) => Some(s),
        (None, d) => d,
    };
    // The most specific `servers`: the operation's, the path's, then the document's.
    out.server = [op.get("servers"), item.get("servers"), doc.get("servers")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .find_map(|list| list.first())
        .map(server_url);
    out.warnings = warnings;
    Ok(out)
}

fn is_json(media_type: &str) -> bool {
    let t = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    t == "application/json" || t.ends_with("+json")
}

/// A server's URL with its variables replaced by their defaults.
fn server_url(server: &Value) -> String {
    let mut url = server
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(vars) = server.get("variables").and_then(Value::as_object) {
        for (name, var) in vars {
            if let Some(default) = var.get("default").and_then(Value::as_str) {
                url = url.replace(&format!("{{{name}}}"), default);
            }
        }
    }
    url
}

/// `value`, or what its `$ref` (chain) points at: only as deep as needed to read its
/// keys, so unrelated parts of a large document are never expanded.
fn follow<'a>(doc: &'a Value, value: &'a Value) -> Result<&'a Value, OperationError> {
    let mut current = value;
    for _ in 0..32 {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return Ok(current);
        };
        let pointer = reference
            .strip_prefix('#')
            .ok_or_else(|| OperationError::RefOutside(reference.to_string()))?;
        current = doc
            .pointer(&percent_decode(pointer))
            .ok_or_else(|| OperationError::RefToNothing(reference.to_string()))?;
    }
    Err(OperationError::RefChain)
}

/// The most values one resolution may produce (shared `$ref`s are copied).
const MAX_VALUES: usize = 200_000;

/// Replaces every local `$ref` in `value` by what it points at; refuses cycles and
/// references outside the document.
pub(crate) fn resolve(doc: &Value, value: &Value) -> Result<Value, OperationError> {
    let mut budget = MAX_VALUES;
    resolve_in(doc, value, &mut Vec::new(), &mut budget)
}

fn resolve_in(
    doc: &Value,
    value: &Value,
    stack: &mut Vec<String>,
    budget: &mut usize,
) -> Result<Value, OperationError> {
    *budget = budget.checked_sub(1).ok_or(OperationError::TooLarge)?;
    match value {
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                let Some(pointer) = reference.strip_prefix('#') else {
                    return Err(OperationError::RefOutside(reference.to_string()));
                };
                if stack.iter().any(|r| r == reference) {
                    let mut cycle = stack.clone();
                    cycle.push(reference.to_string());
                    let start = cycle.iter().position(|r| r == reference).unwrap_or(0);
                    return Err(OperationError::RefCycle(cycle.split_off(start)));
                }
                let pointer = percent_decode(pointer);
                let target = doc
                    .pointer(&pointer)
                    .ok_or_else(|| OperationError::RefToNothing(reference.to_string()))?;
                stack.push(reference.to_string());
                let resolved = resolve_in(doc, target, stack, budget);
                stack.pop();
                let mut resolved = resolved?;
                // OpenAPI 3.1 allows keywords beside `$ref`: they apply too.
                if let Value::Object(target) = &mut resolved {
                    for (k, v) in map {
                        if k != "$ref" {
                            target.insert(k.clone(), resolve_in(doc, v, stack, budget)?);
                        }
                    }
                }
                return Ok(resolved);
            }
            let mut out = Map::new();
            for (k, v) in map {
                out.insert(k.clone(), resolve_in(doc, v, stack, budget)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(|v| resolve_in(doc, v, stack, budget))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

/// A `$ref` pointer with its `%XX` escapes decoded (an incomplete escape stays as is).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Rewrites OpenAPI 3.0 schema idioms into JSON Schema, recursively.
pub(crate) fn to_json_schema(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if map.remove("nullable") == Some(Value::Bool(true)) {
        match map.get_mut("type") {
            Some(Value::String(t)) => {
                let t = t.clone();
                map.insert("type".into(), serde_json::json!([t, "null"]));
            }
            Some(Value::Array(types)) if !types.contains(&Value::from("null")) => {
                types.push("null".into());
            }
            _ => {}
        }
    }
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match map.get(exclusive) {
            Some(Value::Bool(true)) => {
                if let Some(b) = map.remove(bound) {
                    map.insert(exclusive.into(), b);
                } else {
                    map.remove(exclusive);
                }
            }
            Some(Value::Bool(false)) => {
                map.remove(exclusive);
            }
            _ => {}
        }
    }
    for key in ["items", "additionalProperties", "not", "contains"] {
        if let Some(v) = map.get_mut(key) {
            to_json_schema(v);
        }
    }
    for key in ["properties", "patternProperties", "$defs", "definitions"] {
        if let Some(Value::Object(props)) = map.get_mut(key) {
            props.values_mut().for_each(to_json_schema);
        }
    }
    for key in ["allOf", "anyOf", "oneOf", "prefixItems"] {
        if let Some(Value::Array(list)) = map.get_mut(key) {
            list.iter_mut().for_each(to_json_schema);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refs_resolve_and_cycles_are_refused() {
        let doc = json!({
            "components": {"schemas": {
                "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
                "B": {"type": "string"},
                "Loop": {"properties": {"next": {"$ref": "#/components/schemas/Loop"}}},
            }}
        });
        assert_eq!(
            resolve(&doc, &json!({"$ref": "#/components/schemas/A"})).expect("resolves"),
            json!({"type": "object", "properties": {"b": {"type": "string"}}})
        );
        let e = resolve(&doc, &json!({"$ref": "#/components/schemas/Loop"})).expect_err("cycle");
        assert_eq!(
            e.to_string(),
            "`$ref`s form a cycle (#/components/schemas/Loop → #/components/schemas/Loop); a \
             tool's input schema must be finite"
        );
        let e = resolve(&doc, &json!({"$ref": "other.yaml#/x"})).expect_err("external");
        assert!(e.to_string().contains("outside the document"), "{e}");
        let e = resolve(&doc, &json!({"$ref": "#/nope"})).expect_err("missing");
        assert_eq!(e, OperationError::RefToNothing("#/nope".into()));
    }

    #[test]
    fn openapi_30_idioms_become_json_schema() {
        let mut s = json!({"type": "integer", "nullable": true, "minimum": 1, "exclusiveMinimum": true,
                           "properties": {"x": {"type": "string", "nullable": true}}});
        to_json_schema(&mut s);
        assert_eq!(
            s,
            json!({"type": ["integer", "null"], "exclusiveMinimum": 1,
                   "properties": {"x": {"type": ["string", "null"]}}})
        );
    }
}
