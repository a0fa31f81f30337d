//! Op fields turned into the workload's model: `$params`, counts within bounds,
//! templates read from the config's folder (confined to it) and rendered per index.

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

pub(super) fn read_template<T: serde::de::DeserializeOwned>(
    base: &Path,
    rel: &str,
    params: BTreeMap<String, Value>,
    file: &Path,
    field: &str,
    max_bytes: u64,
) -> Result<Template<T>, WorkloadError> {
    let path = confined(base, Path::new(rel), file, field)?;
    let text = read_template_text(&path, file, field, max_bytes)?;
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
        });
    }
    let obj: T = decode_yaml(&text).map_err(|m| werr(&path, "<template>", m))?;
    Ok(Template::Fixed(Box::new(obj)))
}

/// `rel` resolved against the workload's folder, refused if it leaves it (through `..`,
/// an absolute path or a symlink): a workload file must not be a way to read any file
/// the scheduler can. Templates that live elsewhere are copied or linked into the folder.
pub(super) fn confined(
    base: &Path,
    rel: &Path,
    file: &Path,
    field: &str,
) -> Result<PathBuf, WorkloadError> {
    let path = base.join(rel);
    let outside = || {
        werr(
            file,
            field,
            format!(
                "template {} is outside the workload's folder {}: templates must live in it or below it",
                rel.display(),
                base.display()
            ),
        )
    };
    let root = std::fs::canonicalize(if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    })
    .map_err(|e| {
        werr(
            file,
            field,
            format!("cannot resolve {}: {e}", base.display()),
        )
    })?;
    match std::fs::canonicalize(&path) {
        Ok(real) if real.starts_with(&root) => Ok(real),
        Ok(_) => Err(outside()),
        Err(e) => {
            if rel.is_absolute()
                || rel
                    .components()
                    .any(|c| c == std::path::Component::ParentDir)
            {
                return Err(outside());
            }
            Err(werr(
                file,
                field,
                format!("cannot read template {}: {e}", path.display()),
            ))
        }
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
/// [`super::gotemplate`]): values, integers and scheduler_perf's integer functions.
pub fn render_template(
    text: &str,
    index: usize,
    count: usize,
    params: &BTreeMap<String, Value>,
) -> Result<String, String> {
    let scope = super::gotemplate::Scope {
        index,
        count,
        params,
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| "unterminated {{ in template".to_string())?;
        out.push_str(&super::gotemplate::eval_action(
            after[..end].trim(),
            &scope,
        )?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

impl<T: serde::de::DeserializeOwned + Clone> Template<T> {
    /// The object for the i-th of `count` instances.
    pub fn instantiate(&self, index: usize, count: usize) -> Result<T, String> {
        match self {
            Template::Fixed(t) => Ok((**t).clone()),
            Template::PerIndex { text, params, file } => {
                let r = render_template(text, index, count, params)?;
                decode_yaml(&r).map_err(|e| format!("{}: index {index}: {e}", file.display()))
            }
        }
    }
}

/// A churn template: a plain object whose kind says what to create.
pub(super) fn read_churn_object(
    base: &Path,
    rel: &Path,
    file: &Path,
    field: &str,
    max_bytes: u64,
) -> Result<ChurnObject, WorkloadError> {
    let path = confined(base, rel, file, field)?;
    let t = path.as_path();
    let text = read_template_text(t, file, field, max_bytes)?;
    let v: Value =
        crate::yaml::from_str(&text).map_err(|e| werr(t, "<template>", e.to_string()))?;
    let kind = v
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let obj = match kind.as_str() {
        "Pod" => ChurnObject::Pod(Box::new(
            decode_yaml(&text).map_err(|m| werr(t, "<template>", m))?,
        )),
        "Node" => ChurnObject::Node(Box::new(
            decode_yaml(&text).map_err(|m| werr(t, "<template>", m))?,
        )),
        "Service" => ChurnObject::Service(Box::new(
            decode_yaml(&text).map_err(|m| werr(t, "<template>", m))?,
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
