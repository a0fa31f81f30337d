//! Reading Kubernetes manifests: multi-document YAML (or JSON) files, `kind: List`, or
//! directories of them, into `k8s-openapi` objects. Every error names the file, the
//! document (and list item) and the field.

use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::api::storage::v1 as storage;
use serde_json::Value;

/// Where an object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub file: String,
    /// 1-based document number in the file.
    pub document: usize,
    /// 0-based item index inside a `kind: List`.
    pub item: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)?;
        if let Some(i) = self.item {
            write!(f, ", items[{i}]")?;
        }
        Ok(())
    }
}

/// The kinds the scheduler reads.
#[derive(Clone, Debug)]
pub enum Object {
    Node(Box<core::Node>),
    Pod(Box<core::Pod>),
    Namespace(Box<core::Namespace>),
    PriorityClass(Box<scheduling::PriorityClass>),
    /// Read for what the API server's RuntimeClass admission does to pods.
    RuntimeClass(Box<k8s_openapi::api::node::v1::RuntimeClass>),
    PodDisruptionBudget(Box<policy::PodDisruptionBudget>),
    /// Services and workload controllers: only their selectors are read (default
    /// topology spreading).
    Service(Box<core::Service>),
    ReplicationController(Box<core::ReplicationController>),
    ReplicaSet(Box<k8s_openapi::api::apps::v1::ReplicaSet>),
    StatefulSet(Box<k8s_openapi::api::apps::v1::StatefulSet>),
    PersistentVolumeClaim(Box<core::PersistentVolumeClaim>),
    PersistentVolume(Box<core::PersistentVolume>),
    StorageClass(Box<storage::StorageClass>),
    CSINode(Box<storage::CSINode>),
    CSIDriver(Box<storage::CSIDriver>),
    CSIStorageCapacity(Box<storage::CSIStorageCapacity>),
    /// Dynamic Resource Allocation, `resource.k8s.io/v1` only.
    DeviceClass(Box<resource::DeviceClass>),
    ResourceSlice(Box<resource::ResourceSlice>),
    ResourceClaim(Box<resource::ResourceClaim>),
    ResourceClaimTemplate(Box<resource::ResourceClaimTemplate>),
}

/// The kinds a manifest may hold (others are skipped with a warning).
pub const KINDS: &[&str] = &[
    "Node",
    "Pod",
    "Namespace",
    "PriorityClass",
    "RuntimeClass",
    "PodDisruptionBudget",
    "Service",
    "ReplicationController",
    "ReplicaSet",
    "StatefulSet",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "CSIDriver",
    "CSIStorageCapacity",
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
    "ResourceClaimTemplate",
];

/// Those of [`KINDS`] that live in a namespace.
pub const NAMESPACED_KINDS: &[&str] = &[
    "Pod",
    "PodDisruptionBudget",
    "Service",
    "ReplicationController",
    "ReplicaSet",
    "StatefulSet",
    "PersistentVolumeClaim",
    "CSIStorageCapacity",
    "ResourceClaim",
    "ResourceClaimTemplate",
];

/// The kinds of `resource.k8s.io`, read in version v1 (GA since Kubernetes 1.34).
pub const DRA_KINDS: &[&str] = &[
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
    "ResourceClaimTemplate",
];

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Node(_) => "Node",
            Object::Pod(_) => "Pod",
            Object::Namespace(_) => "Namespace",
            Object::PriorityClass(_) => "PriorityClass",
            Object::RuntimeClass(_) => "RuntimeClass",
            Object::PodDisruptionBudget(_) => "PodDisruptionBudget",
            Object::Service(_) => "Service",
            Object::ReplicationController(_) => "ReplicationController",
            Object::ReplicaSet(_) => "ReplicaSet",
            Object::StatefulSet(_) => "StatefulSet",
            Object::PersistentVolumeClaim(_) => "PersistentVolumeClaim",
            Object::PersistentVolume(_) => "PersistentVolume",
            Object::StorageClass(_) => "StorageClass",
            Object::CSINode(_) => "CSINode",
            Object::CSIDriver(_) => "CSIDriver",
            Object::CSIStorageCapacity(_) => "CSIStorageCapacity",
            Object::DeviceClass(_) => "DeviceClass",
            Object::ResourceSlice(_) => "ResourceSlice",
            Object::ResourceClaim(_) => "ResourceClaim",
            Object::ResourceClaimTemplate(_) => "ResourceClaimTemplate",
        }
    }
}

#[derive(Clone, Debug)]
pub struct ManifestObject {
    pub source: Source,
    pub object: Object,
}

/// What went wrong in which manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: cannot read: {message}")]
    Io { path: String, message: String },
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{origin}: {field}: {message}")]
    Field {
        origin: Source,
        field: String,
        message: String,
    },
}

impl From<crate::model::input::InputError> for ManifestError {
    fn from(e: crate::model::input::InputError) -> Self {
        ManifestError::Io {
            path: e.path,
            message: e.message,
        }
    }
}

impl ManifestError {
    pub fn field(source: &Source, field: impl Into<String>, message: impl Into<String>) -> Self {
        ManifestError::Field {
            origin: source.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Kinds that are valid Kubernetes objects but mean nothing to the scheduler; they are
/// reported, not loaded.
#[derive(Default, Debug)]
pub struct Skipped(pub Vec<(Source, String)>);

pub use crate::model::input::{read_input, DEFAULT_MAX_INPUT_BYTES};

/// Loads every manifest under `paths` (files, or directories read recursively in name
/// order, taking `*.yaml`, `*.yml` and `*.json`), each file at most `max_bytes`.
pub fn load_paths(
    paths: &[PathBuf],
    max_bytes: u64,
) -> Result<(Vec<ManifestObject>, Skipped), ManifestError> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, &mut files)?;
    }
    let mut out = Vec::new();
    let mut skipped = Skipped::default();
    for f in files {
        let text = read_input(&f, max_bytes)?;
        parse_str(&text, &f.display().to_string(), &mut out, &mut skipped)?;
    }
    Ok((out, skipped))
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let io = |e: std::io::Error| ManifestError::Io {
        path: p.display().to_string(),
        message: e.to_string(),
    };
    let meta = std::fs::metadata(p).map_err(io)?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            if e.is_dir() {
                collect_files(&e, out)?;
            } else if matches!(
                e.extension().and_then(|x| x.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                out.push(e);
            }
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(())
}

/// Splits a YAML stream into documents at `---` lines (as kubectl's reader does),
/// keeping empty documents so numbering matches what a reader counts. Returns each
/// document with its first line number (1-based).
fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1usize;
    let mut seen_separator = false;
    for (i, line) in text.lines().enumerate() {
        let is_sep = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if is_sep {
            if seen_separator || !current.trim().is_empty() {
                docs.push((start, std::mem::take(&mut current)));
            }
            seen_separator = true;
            start = i + 2;
            // `--- {inline}` carries content on the separator line.
            if let Some(rest) = line.strip_prefix("---") {
                if !rest.trim().is_empty() {
                    current.push_str(rest);
                    current.push('\n');
                    start = i + 1;
                }
            }
            continue;
        }
        if line == "..." {
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.trim().is_empty() || docs.is_empty() {
        docs.push((start, current));
    }
    docs
}

/// Parses one file's text (any number of documents).
pub fn parse_str(
    text: &str,
    file: &str,
    out: &mut Vec<ManifestObject>,
    skipped: &mut Skipped,
) -> Result<(), ManifestError> {
    for (i, (line, doc_text)) in split_documents(text).into_iter().enumerate() {
        let source = Source {
            file: file.to_string(),
            document: i + 1,
            item: None,
        };
        if doc_text.trim().is_empty() {
            continue;
        }
        let doc: Value = crate::yaml::from_str(&doc_text).map_err(|e| ManifestError::Syntax {
            file: file.to_string(),
            message: format!("document {} (from line {line}): {e}", i + 1),
        })?;
        if doc.is_null() {
            continue;
        }
        parse_value(doc, source, out, skipped)?;
    }
    Ok(())
}

/// One object (or a `List` of them) already parsed from YAML or JSON.
pub fn parse_value(
    doc: Value,
    source: Source,
    out: &mut Vec<ManifestObject>,
    skipped: &mut Skipped,
) -> Result<(), ManifestError> {
    let Value::Object(map) = &doc else {
        return Err(ManifestError::field(
            &source,
            "<document>",
            "expected a Kubernetes object (a mapping with apiVersion and kind)",
        ));
    };
    let kind = match map.get("kind") {
        Some(Value::String(k)) => k.clone(),
        Some(_) => return Err(ManifestError::field(&source, "kind", "must be a string")),
        None => {
            return Err(ManifestError::field(
                &source,
                "kind",
                "Required value: every object needs a kind",
            ))
        }
    };
    if kind == "List" || kind.ends_with("List") && map.contains_key("items") {
        let items = match map.get("items") {
            Some(Value::Array(a)) => a.clone(),
            None => Vec::new(),
            Some(_) => return Err(ManifestError::field(&source, "items", "must be a list")),
        };
        for (j, item) in items.into_iter().enumerate() {
            let s = Source {
                item: Some(j),
                ..source.clone()
            };
            parse_value(item, s, out, skipped)?;
        }
        return Ok(());
    }
    let mut doc = doc;
    if DRA_KINDS.contains(&kind.as_str()) {
        match doc.get("apiVersion") {
            Some(Value::String(v)) if v == "resource.k8s.io/v1" => {}
            // v1beta2 has v1's schema (v1 was made from it): read as v1. v1beta1 differs.
            Some(Value::String(v)) if v == "resource.k8s.io/v1beta2" => {
                doc["apiVersion"] = Value::String("resource.k8s.io/v1".into());
            }
            other => {
                let got = match other {
                    Some(Value::String(v)) => format!("{v:?}"),
                    _ => "none".to_string(),
                };
                return Err(ManifestError::field(
                    &source,
                    "apiVersion",
                    format!("Unsupported value: {got}: {kind} is read as resource.k8s.io/v1 (GA since Kubernetes 1.34) or v1beta2 (the same schema); convert v1beta1 objects to v1"),
                ));
            }
        }
    }
    let object = match kind.as_str() {
        "Node" => Object::Node(Box::new(decode(doc, &source)?)),
        "Pod" => Object::Pod(Box::new(decode(doc, &source)?)),
        "Namespace" => Object::Namespace(Box::new(decode(doc, &source)?)),
        "PriorityClass" => Object::PriorityClass(Box::new(decode(doc, &source)?)),
        "RuntimeClass" => Object::RuntimeClass(Box::new(decode(doc, &source)?)),
        "PodDisruptionBudget" => Object::PodDisruptionBudget(Box::new(decode(doc, &source)?)),
        "Service" => Object::Service(Box::new(decode(doc, &source)?)),
        "ReplicationController" => Object::ReplicationController(Box::new(decode(doc, &source)?)),
        "ReplicaSet" => Object::ReplicaSet(Box::new(decode(doc, &source)?)),
        "StatefulSet" => Object::StatefulSet(Box::new(decode(doc, &source)?)),
        "PersistentVolumeClaim" => Object::PersistentVolumeClaim(Box::new(decode(doc, &source)?)),
        "PersistentVolume" => Object::PersistentVolume(Box::new(decode(doc, &source)?)),
        "StorageClass" => Object::StorageClass(Box::new(decode(doc, &source)?)),
        "CSINode" => Object::CSINode(Box::new(decode(doc, &source)?)),
        "CSIDriver" => Object::CSIDriver(Box::new(decode(doc, &source)?)),
        "CSIStorageCapacity" => Object::CSIStorageCapacity(Box::new(decode(doc, &source)?)),
        "DeviceClass" => Object::DeviceClass(Box::new(decode(doc, &source)?)),
        "ResourceSlice" => Object::ResourceSlice(Box::new(decode(doc, &source)?)),
        "ResourceClaim" => Object::ResourceClaim(Box::new(decode(doc, &source)?)),
        "ResourceClaimTemplate" => Object::ResourceClaimTemplate(Box::new(decode(doc, &source)?)),
        other => {
            skipped.0.push((source, other.to_string()));
            return Ok(());
        }
    };
    out.push(ManifestObject { source, object });
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(doc: Value, source: &Source) -> Result<T, ManifestError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "<document>".to_string()
        } else {
            path
        };
        ManifestError::field(source, field, e.inner().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Vec<ManifestObject>, Skipped), ManifestError> {
        let mut out = Vec::new();
        let mut skipped = Skipped::default();
        parse_str(text, "f.yaml", &mut out, &mut skipped)?;
        Ok((out, skipped))
    }

    #[test]
    fn multi_document_and_lists() {
        let (objs, skipped) = parse(
            "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}\n- {apiVersion: apps/v1, kind: Deployment, metadata: {name: d}}\n",
        )
        .unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].source.to_string(), "f.yaml: document 3, items[0]");
        assert_eq!(skipped.0.len(), 1);
    }

    #[test]
    fn errors_name_file_document_and_field() {
        let e = parse("kind: Node\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, ports: [{containerPort: eighty}]}]}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("f.yaml: document 2: spec.containers[0].ports[0].containerPort: "),
            "{e}"
        );
        let e = parse("metadata: {name: a}\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "f.yaml: document 1: kind: Required value: every object needs a kind"
        );
        let e = parse("kind: Node\n---\nkind: [\n").unwrap_err().to_string();
        assert!(e.starts_with("f.yaml: document 2 (from line 3): "), "{e}");
    }
}
