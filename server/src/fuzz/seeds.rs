//! The seeds of each surface: `examples/`, `tests/scenarios/` and the crash corpus.

use super::*;

pub(super) fn files_under(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(&p, exts, out);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
        {
            out.push(p);
        }
    }
}

/// The seed texts of a surface.
pub(super) fn seeds(surface: Surface, root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    match surface {
        Surface::Manifest | Surface::Watch => {
            files_under(&root.join("examples/demo"), &["yaml", "json"], &mut files);
            files_under(&root.join("tests/scenarios"), &["yaml", "json"], &mut files);
            files.retain(|f| !f.to_string_lossy().contains("/config"));
        }
        Surface::Config => {
            files_under(&root.join("tests/scenarios/config"), &["yaml"], &mut files);
            files_under(&root.join("examples"), &["yaml"], &mut files);
            files.retain(|f| {
                std::fs::read_to_string(f).is_ok_and(|t| t.contains("KubeSchedulerConfiguration"))
            });
        }
        Surface::Workload => {
            files_under(&root.join("examples/workloads"), &["yaml"], &mut files);
            files.retain(|f| !f.to_string_lossy().contains("templates"));
        }
        Surface::Sidecar | Surface::Cel => {}
    }
    files_under(
        &root.join("tests/fuzz-corpus").join(surface.name()),
        &["txt", "yaml", "json"],
        &mut files,
    );
    let mut out: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    if surface == Surface::Watch {
        // Watch objects arrive one at a time as JSON.
        let mut objs = Vec::new();
        for t in &out {
            let mut parsed = Vec::new();
            let mut skipped = crate::cluster::manifest::Skipped::default();
            if crate::cluster::manifest::parse_str(t, "seed", &mut parsed, &mut skipped).is_ok() {
                use crate::cluster::manifest::Object;
                objs.extend(parsed.iter().filter_map(|o| match &o.object {
                    Object::Pod(p) => serde_json::to_string(p).ok(),
                    Object::Node(n) => serde_json::to_string(n).ok(),
                    _ => None,
                }));
            }
        }
        out = objs;
    }
    if surface == Surface::Sidecar {
        out = sidecar::seeds();
    }
    if surface == Surface::Cel {
        out.extend(CEL_SEEDS.iter().map(|s| s.to_string()));
        // Every selector the scenarios use.
        let mut files = Vec::new();
        files_under(&root.join("tests/scenarios"), &["yaml"], &mut files);
        for f in files {
            let Ok(t) = std::fs::read_to_string(&f) else {
                continue;
            };
            for line in t.lines() {
                if let Some((_, rest)) = line.split_once("expression: ") {
                    let e = rest.trim().trim_end_matches('}').trim();
                    let e = e.trim_matches('\'').trim_matches('"');
                    if !e.is_empty() {
                        out.push(e.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Expressions covering the CEL subset's functions (cel/README.md), as DRA selectors
/// use them.
const CEL_SEEDS: &[&str] = &[
    "device.driver == \"gpu.example.com\"",
    "device.attributes[\"gpu.example.com\"].model == \"a100\" && device.capacity[\"gpu.example.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0",
    "has(device.attributes.x.y) || device.attributes[\"d\"].?v.orValue(1) > 0",
    "cel.bind(m, device.attributes[\"d\"], m.a + m.b == 3)",
    "[1, 2, 3].all(x, x > 0) && [1, 2].exists(x, x == 2) && [1].exists_one(x, x == 1)",
    "[1, 2, 3].map(x, x * 2).filter(x, x > 2).size() == 2",
    "\"abc\".startsWith(\"a\") && \"ABC\".lowerAscii() == \"abc\" && \"a,b\".split(\",\").size() == 2",
    "\"x1\".matches(\"^x[0-9]$\")",
    "semver(\"1.2.3\").isGreaterThan(semver(\"1.0.0\"))",
    "quantity(\"1Gi\").add(quantity(\"1Mi\")).isLessThan(quantity(\"2Gi\"))",
    "sets.contains([1, 2, 3], [1, 2]) && sets.intersects([1], [1, 2])",
    "device.allowMultipleAllocations == false",
    "[1, 2].map(x, [1, 2].map(y, x * y)).size() == 2",
    "size(\"abc\") + 1 == 4 ? true : false",
];
