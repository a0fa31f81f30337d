//! Op fields turned into the workload's model: `$params`, counts within bounds,
//! templates read relative to the config (confined to the template tree) and
//! rendered per index.

use super::*;

/// The node scheduler_perf creates when an op names no template: 4 CPUs, 32Gi, 110 pods.
pub(super) fn base_node(op_index: usize) -> core::Node {
    let text = format!(
        "metadata: {{generateName: node-{op_index}-}}\nstatus: {{capacity: {{pods: '110', cpu: '4', memory: 32Gi}}}}\n"
    );
    crate::yaml::from_str(&text).unwrap_or_default()
}

/// The pod scheduler_perf creates when there is no template: one pause container
/// requesting 100m CPU and 500Mi.
pub(super) fn base_pod() -> core::Pod {
    let text = "metadata: {generateName: pod-}\nspec:\n  containers:\n  - name: pause\n    image: registry.k8s.io/pause:3.10\n    ports: [{containerPort: 80}]\n    resources:\n      limits: {cpu: 100m, memory: 500Mi}\n      requests: {cpu: 100m, memory: 500Mi}\n";
    crate::yaml::from_str(text).unwrap_or_default()
}

pub(super) fn decode_op<T: serde::de::DeserializeOwned>(
    v: &Value,
    file: &Path,
    field: &str,
) -> Result<T, WorkloadError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let p = e.path().to_string();
        let f = if p == "." {
            field.to_string()
        } else {
            format!("{field}.{p}")
        };
        werr(file, f, e.inner().to_string())
    })
}

pub(super) fn param_usize(
    count: Option<usize>,
    param: Option<&String>,
    params: &BTreeMap<String, Value>,
    used: &mut Vec<String>,
    file: &Path,
    field: &str,
) -> Result<usize, WorkloadError> {
    let bounded = |n: usize, f: String| {
        if n > MAX_OBJECTS_PER_OP {
            Err(werr(
                file,
                f,
                format!("{n} is over the limit of {MAX_OBJECTS_PER_OP} objects per op"),
            ))
        } else {
            Ok(n)
        }
    };
    if let Some(p) = param {
        let f = format!("{field}.countParam");
        let key = p
            .strip_prefix('$')
            .ok_or_else(|| werr(file, &f, format!("{p:?} must start with '$'")))?;
        used.push(key.to_string());
        let v = params
            .get(key)
            .ok_or_else(|| werr(file, &f, format!("parameter {key} is undefined")))?;
        let n = v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= u64::MAX as f64)
                    .map(|x| x as u64)
            })
            .ok_or_else(|| {
                werr(
                    file,
                    &f,
                    format!("parameter {key} must be a non-negative integer, got {v}"),
                )
            })?;
        return bounded(usize::try_from(n).unwrap_or(usize::MAX), f);
    }
    let n = count.ok_or_else(|| werr(file, field, "count or countParam is required"))?;
    bounded(n, format!("{field}.count"))
}

/// Where a workload's templates come from: paths are resolved against the
/// config's folder (`base`), as upstream resolves them (`../templates/...`
/// included), and must stay inside `root` (see [`template_root`]).
pub(super) struct Files<'a> {
    pub base: &'a Path,
    pub root: &'a Path,
    /// The workload file, for errors.
    pub file: &'a Path,
    pub max_bytes: u64,
}

/// The tree a workload's templates may come from: `explicit` (`--workload-root`),
/// else the nearest folder named `scheduler_perf` above the file (upstream's layout,
/// whose areas share `scheduler_perf/templates/`), else the file's own folder.
pub fn template_root(file: &Path, explicit: Option<&Path>) -> PathBuf {
    if let Some(r) = explicit {
        return r.to_path_buf();
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let real = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    real.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "scheduler_perf"))
        .map(Path::to_path_buf)
        .unwrap_or(real)
}

impl Files<'_> {
    pub(super) fn template<T: serde::de::DeserializeOwned>(
        &self,
        rel: &str,
        params: BTreeMap<String, Value>,
        field: &str,
    ) -> Result<Template<T>, WorkloadError> {
        let path = self.confined(Path::new(rel), field)?;
        let text = read_template_text(&path, self.file, field, self.max_bytes)?;
        if text.contains("{{") {
            // Check it renders and parses for index 0 now, so errors surface up front.
            let rendered =
                render_template(&text, 0, 1, &params).map_err(|m| werr(&path, "<template>", m))?;
            crate::yaml::from_str::<T>(&rendered)
                .map_err(|e| werr(&path, "<template>", e.to_string()))?;
            return Ok(Template::PerIndex {
                text,
                params,
                file: path,
                last: Default::default(),
            });
        }
        let obj: T = decode_yaml(&text).map_err(|m| werr(&path, "<template>", m))?;
        Ok(Template::Fixed(Box::new(obj)))
    }

    /// `rel` resolved against the workload's folder, refused if it leaves the
    /// template tree (through `..`, an absolute path or a symlink): a workload file
    /// must not be a way to read any file the scheduler can.
    pub(super) fn confined(&self, rel: &Path, field: &str) -> Result<PathBuf, WorkloadError> {
        let path = self.base.join(rel);
        let root = std::fs::canonicalize(self.root).map_err(|e| {
            werr(
                self.file,
                field,
                format!(
                    "cannot resolve the template tree {}: {e}",
                    self.root.display()
                ),
            )
        })?;
        let outside = |real: &Path| {
            werr(
                self.file,
                field,
                format!(
                    "template {} ({}) is outside the template tree {}: templates must live under it (--workload-root names another tree)",
                    rel.display(),
                    real.display(),
                    root.display()
                ),
            )
        };
        match std::fs::canonicalize(&path) {
            Ok(real) if real.starts_with(&root) => Ok(real),
            Ok(real) => Err(outside(&real)),
            Err(e) => Err(werr(
                self.file,
                field,
                format!("cannot read template {}: {e}", path.display()),
            )),
        }
    }

    /// A plain object (no template actions), such as createPods' volume templates.
    pub(super) fn object<T: serde::de::DeserializeOwned>(
        &self,
        rel: &str,
        field: &str,
    ) -> Result<T, WorkloadError> {
        let path = self.confined(Path::new(rel), field)?;
        let text = read_template_text(&path, self.file, field, self.max_bytes)?;
        decode_yaml(&text).map_err(|m| werr(&path, "<template>", m))
    }

    /// A churn template: a plain object whose kind says what to create.
    pub(super) fn churn_object(
        &self,
        rel: &Path,
        field: &str,
    ) -> Result<ChurnObject, WorkloadError> {
        let path = self.confined(rel, field)?;
        let t = path.as_path();
        let text = read_template_text(t, self.file, field, self.max_bytes)?;
        churn_object_from(t, &text)
    }
}

/// A template's text, bounded like any input file. Its content never goes into errors
/// beyond what the YAML parser quotes at the failing spot.
pub(super) fn read_template_text(
    path: &Path,
    file: &Path,
    field: &str,
    max_bytes: u64,
) -> Result<String, WorkloadError> {
    crate::model::input::read_input(path, max_bytes)
        .map_err(|e| werr(file, field, format!("template: {e}")))
}

pub(super) fn decode_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let v: Value = crate::yaml::from_str(text).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize(v).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

/// Renders the subset of Go templates scheduler_perf templates use (see
/// [`super::gotemplate`]).
pub fn render_template(
    text: &str,
    index: usize,
    count: usize,
    params: &BTreeMap<String, Value>,
) -> Result<String, String> {
    super::gotemplate::render(
        text,
        &super::gotemplate::Scope {
            index,
            count,
            params,
        },
    )
}

impl<T: serde::de::DeserializeOwned + Clone> Template<T> {
    /// The object for the i-th of `count` instances.
    pub fn instantiate(&self, index: usize, count: usize) -> Result<T, String> {
        match self {
            Template::Fixed(t) => Ok((**t).clone()),
            Template::PerIndex {
                text,
                params,
                file,
                last,
            } => {
                let r = render_template(text, index, count, params)?;
                last.get_or_parse(r, |r| {
                    decode_yaml(r).map_err(|e| format!("{}: index {index}: {e}", file.display()))
                })
            }
        }
    }
}

fn churn_object_from(t: &Path, text: &str) -> Result<ChurnObject, WorkloadError> {
    let v: Value = crate::yaml::from_str(text).map_err(|e| werr(t, "<template>", e.to_string()))?;
    let kind = v
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let obj = match kind.as_str() {
        "Pod" => ChurnObject::Pod(Box::new(
            decode_yaml(text).map_err(|m| werr(t, "<template>", m))?,
        )),
        "Node" => ChurnObject::Node(Box::new(
            decode_yaml(text).map_err(|m| werr(t, "<template>", m))?,
        )),
        "Service" => ChurnObject::Service(Box::new(
            decode_yaml(text).map_err(|m| werr(t, "<template>", m))?,
        )),
        "" => {
            return Err(werr(
                t,
                "kind",
                "Required value: churn templates must name their kind (Pod, Node or Service)",
            ))
        }
        other => {
            return Err(werr(
                t,
                "kind",
                format!("churn of {other} objects is not supported; use Pod, Node or Service"),
            ))
        }
    };
    Ok(obj)
}

/// An op's `templateParams` with `$name` values taken from the workload's params
/// (upstream `resolveTemplateParams`; `$name|default` falls back to the YAML
/// `default` when the workload has no such param, without counting it as used).
pub(super) fn resolve_template_params(
    template_params: &BTreeMap<String, Value>,
    params: &BTreeMap<String, Value>,
    used: &mut Vec<String>,
    file: &Path,
    field: &str,
) -> Result<BTreeMap<String, Value>, WorkloadError> {
    let mut out = BTreeMap::new();
    for (k, v) in template_params {
        let resolved = match v.as_str().and_then(|s| s.strip_prefix('$')) {
            Some(reference) => {
                let (name, default) = match reference.split_once('|') {
                    Some((n, d)) => (n, Some(d)),
                    None => (reference, None),
                };
                match (params.get(name), default) {
                    (Some(p), _) => {
                        used.push(name.to_string());
                        p.clone()
                    }
                    (None, Some(d)) => crate::yaml::from_str::<Value>(d).map_err(|e| {
                        werr(file, format!("{field}.{k}"), format!("default {d:?}: {e}"))
                    })?,
                    (None, None) => {
                        return Err(werr(
                            file,
                            format!("{field}.{k}"),
                            format!("parameter {name} is undefined"),
                        ))
                    }
                }
            }
            None => v.clone(),
        };
        out.insert(k.clone(), resolved);
    }
    Ok(out)
}
