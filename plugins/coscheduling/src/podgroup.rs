//! PodGroup manifests (`scheduling.x-k8s.io/v1alpha1`, kind `PodGroup`), read from
//! files at start: the sidecar has no API server to watch, so the groups are fixed
//! for its lifetime.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
pub const KIND: &str = "PodGroup";

/// What the plugin needs of a PodGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodGroup {
    pub namespace: String,
    pub name: String,
    pub min_member: u32,
    /// `spec.scheduleTimeoutSeconds`; `None` (or 0 in the manifest) means the
    /// sidecar's default Permit timeout, as upstream's `GetWaitTimeDuration`.
    pub schedule_timeout: Option<Duration>,
}

impl PodGroup {
    /// The key pods name the group by: `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A manifest that cannot be used, naming the file, the document and the field.
#[derive(Debug, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ManifestError {}

/// Every PodGroup found, by key, and how many other documents were skipped.
#[derive(Debug, Default)]
pub struct Loaded {
    pub groups: HashMap<String, PodGroup>,
    /// Where each group was defined, to name both places on a duplicate.
    sources: HashMap<String, String>,
    pub skipped: usize,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

/// Unknown spec fields are errors: a misspelt `minMember` must not silently become a
/// group of none.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    min_member: Option<u32>,
    /// Accepted so upstream manifests load; this plugin does not check it.
    #[serde(default)]
    #[allow(dead_code)]
    min_resources: Option<Value>,
    #[serde(default)]
    schedule_timeout_seconds: Option<u32>,
}

/// Loads every PodGroup under `paths`: files, or directories read recursively in
/// name order (`*.yaml`, `*.yml`, `*.json`).
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, ManifestError> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, &mut files)?;
    }
    let mut loaded = Loaded::default();
    for f in files {
        let text = std::fs::read_to_string(&f)
            .map_err(|e| ManifestError(format!("{}: {e}", f.display())))?;
        parse_str(&text, &f.display().to_string(), &mut loaded)?;
    }
    Ok(loaded)
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let io = |e: std::io::Error| ManifestError(format!("{}: {e}", p.display()));
    if !std::fs::metadata(p).map_err(io)?.is_dir() {
        out.push(p.to_path_buf());
        return Ok(());
    }
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
    Ok(())
}

/// Splits a YAML stream at `---` lines, keeping empty documents so the numbers in
/// errors match what a reader counts. Each document comes with its first line.
fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut separated = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("---") {
            if rest.is_empty() || rest.starts_with([' ', '\t']) {
                if separated || !current.trim().is_empty() {
                    docs.push((start, std::mem::take(&mut current)));
                }
                separated = true;
                start = i + 2;
                if !rest.trim().is_empty() {
                    // `--- {inline: document}`
                    current.push_str(rest);
                    current.push('\n');
                    start = i + 1;
                }
                continue;
            }
        }
        if line != "..." {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.trim().is_empty() {
        docs.push((start, current));
    }
    docs
}

/// Reads one file's documents into `loaded`; `file` names it in errors.
pub fn parse_str(text: &str, file: &str, loaded: &mut Loaded) -> Result<(), ManifestError> {
    for (i, (line, doc)) in split_documents(text).into_iter().enumerate() {
        let at = format!("{file}: document {}", i + 1);
        if doc.trim().is_empty() {
            continue;
        }
        let mut options = serde_saphyr::Options::default();
        // YAML 1.2 booleans, as the scheduler reads its manifests.
        options.strict_booleans = true;
        let value: Value = serde_saphyr::from_str_with_options(&doc, options)
            .map_err(|e| ManifestError(format!("{at} (from line {line}): {e}")))?;
        parse_value(value, &at, loaded)?;
    }
    Ok(())
}

fn field_error(at: &str, field: &str, message: impl fmt::Display) -> ManifestError {
    ManifestError(format!("{at}: {field}: {message}"))
}

fn parse_value(value: Value, at: &str, loaded: &mut Loaded) -> Result<(), ManifestError> {
    let Value::Object(map) = &value else {
        if !value.is_null() {
            loaded.skipped += 1;
        }
        return Ok(());
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.ends_with("List") {
        if let Some(Value::Array(items)) = map.get("items") {
            for (j, item) in items.iter().enumerate() {
                parse_value(item.clone(), &format!("{at}, items[{j}]"), loaded)?;
            }
            return Ok(());
        }
    }
    // Other kinds, and PodGroups of other API groups (Volcano has one), are not ours.
    if kind != KIND || api_version != API_VERSION {
        loaded.skipped += 1;
        return Ok(());
    }
    let m: Manifest = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "<document>" } else { &path };
        field_error(at, field, e.inner())
    })?;
    if m.metadata.name.is_empty() {
        return Err(field_error(at, "metadata.name", "Required value"));
    }
    let Some(spec) = m.spec else {
        return Err(field_error(at, "spec.minMember", "Required value"));
    };
    let Some(min_member) = spec.min_member else {
        return Err(field_error(at, "spec.minMember", "Required value"));
    };
    let group = PodGroup {
        namespace: m
            .metadata
            .namespace
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string()),
        name: m.metadata.name,
        min_member,
        schedule_timeout: spec
            .schedule_timeout_seconds
            .filter(|&s| s > 0)
            .map(|s| Duration::from_secs(u64::from(s))),
    };
    let key = group.key();
    if let Some(first) = loaded.sources.get(&key) {
        return Err(field_error(
            at,
            "metadata.name",
            format!("PodGroup {key} is already defined at {first}"),
        ));
    }
    loaded.sources.insert(key.clone(), at.to_string());
    loaded.groups.insert(key, group);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Loaded, ManifestError> {
        let mut loaded = Loaded::default();
        parse_str(text, "pg.yaml", &mut loaded)?;
        Ok(loaded)
    }

    #[test]
    fn reads_pod_groups_and_skips_other_kinds() {
        let l = parse(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n\
             ---\n\
             apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n\
             metadata: {name: job, namespace: team}\n\
             spec: {minMember: 3, scheduleTimeoutSeconds: 30, minResources: {cpu: 3}}\n\
             ---\n\
             apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: b}\n\
             spec: {minMember: 2, scheduleTimeoutSeconds: 0}\n\
             ---\n\
             apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: v}\n\
             spec: {minMember: 9}\n",
        )
        .unwrap();
        assert_eq!(l.skipped, 2);
        assert_eq!(
            l.groups["team/job"],
            PodGroup {
                namespace: "team".into(),
                name: "job".into(),
                min_member: 3,
                schedule_timeout: Some(Duration::from_secs(30)),
            }
        );
        // No namespace means `default`; a zero timeout means the sidecar's default.
        assert_eq!(l.groups["default/b"].min_member, 2);
        assert_eq!(l.groups["default/b"].schedule_timeout, None);
    }

    #[test]
    fn lists_are_read_item_by_item() {
        let l = parse(
            "apiVersion: v1\nkind: List\nitems:\n\
             - {apiVersion: scheduling.x-k8s.io/v1alpha1, kind: PodGroup, metadata: {name: a}, spec: {minMember: 1}}\n",
        )
        .unwrap();
        assert!(l.groups.contains_key("default/a"));
    }

    #[test]
    fn errors_name_file_document_and_field() {
        let pg = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n";
        let e = parse(&format!(
            "{pg}metadata: {{name: a}}\nspec: {{minMember: 1}}\n---\n{pg}metadata: {{name: b}}\nspec: {{minMember: three}}\n"
        ))
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("pg.yaml: document 2: spec.minMember: "),
            "{e}"
        );

        let e = parse(&format!(
            "{pg}metadata: {{name: a}}\nspec: {{minMembers: 2}}\n"
        ))
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("pg.yaml: document 1: spec.minMembers: "),
            "{e}"
        );

        let e = parse(&format!("{pg}metadata: {{name: a}}\nspec: {{}}\n"))
            .unwrap_err()
            .0;
        assert_eq!(e, "pg.yaml: document 1: spec.minMember: Required value");

        let e = parse(&format!(
            "{pg}metadata: {{namespace: x}}\nspec: {{minMember: 1}}\n"
        ))
        .unwrap_err()
        .0;
        assert_eq!(e, "pg.yaml: document 1: metadata.name: Required value");

        let e = parse(&format!(
            "{pg}metadata: {{name: a}}\nspec: {{minMember: -1}}\n"
        ))
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("pg.yaml: document 1: spec.minMember: "),
            "{e}"
        );

        let e = parse(&format!(
            "{pg}metadata: {{name: a}}\nspec: {{minMember: 1}}\n---\n---\n{pg}metadata: {{name: a, namespace: default}}\nspec: {{minMember: 2}}\n"
        ))
        .unwrap_err()
        .0;
        assert_eq!(
            e,
            "pg.yaml: document 3: metadata.name: PodGroup default/a is already defined at pg.yaml: document 1"
        );

        let e = parse("kind: [\n").unwrap_err().0;
        assert!(e.starts_with("pg.yaml: document 1 (from line 1): "), "{e}");
    }

    #[test]
    fn directories_are_read_recursively() {
        let dir = std::env::temp_dir().join(format!("coscheduling-test-{}", std::process::id()));
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        let pg = |name: &str| {
            format!("apiVersion: {API_VERSION}\nkind: PodGroup\nmetadata: {{name: {name}}}\nspec: {{minMember: 2}}\n")
        };
        std::fs::write(dir.join("a.yaml"), pg("a")).unwrap();
        std::fs::write(sub.join("b.yml"), pg("b")).unwrap();
        std::fs::write(dir.join("notes.txt"), "not yaml: [").unwrap();
        let l = load_paths(std::slice::from_ref(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        let l = l.unwrap();
        assert_eq!(l.groups.len(), 2);

        let e = load_paths(&[PathBuf::from("/nonexistent/pg.yaml")]).unwrap_err();
        assert!(e.0.starts_with("/nonexistent/pg.yaml: "), "{e}");
    }
}
