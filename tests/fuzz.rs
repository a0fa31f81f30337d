//! The fuzzer in the test command: every saved finding replays clean (a fixed crasher
//! fails here again if its fix is reverted), and a short pass over every surface finds
//! nothing. The long pass is `switchyard fuzz` (see docs/reliability.md).

use std::process::Command;

use switchyard_e2e::{binary, workspace_root};

#[test]
fn saved_findings_replay_clean() {
    let corpus = workspace_root().join("tests/fuzz-corpus");
    let bad = switchyard::fuzz::replay(&corpus);
    assert!(bad.is_empty(), "regressions: {bad:#?}");
    let count = walk(&corpus);
    assert!(count > 0, "the corpus has findings to replay");
}

fn walk(d: &std::path::Path) -> usize {
    std::fs::read_dir(d)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    if e.path().is_dir() {
                        walk(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn short_pass_over_every_surface_finds_nothing() {
    let findings =
        std::env::temp_dir().join(format!("switchyard-fuzz-test-{}", std::process::id()));
    let out = Command::new(binary("switchyard"))
        .args([
            "fuzz",
            "--seconds",
            "3",
            "--inputs",
            "20000",
            "-o",
            "json",
            "--findings-dir",
        ])
        .arg(&findings)
        .current_dir(workspace_root())
        .output()
        .expect("run switchyard fuzz");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let surfaces = v.as_array().expect("one report per surface");
    assert_eq!(surfaces.len(), 6, "{v}");
    for s in surfaces {
        assert!(s["inputs"].as_u64().unwrap_or(0) > 100, "{s}");
        assert!(s["seeds"].as_u64().unwrap_or(0) > 0, "{s}");
        for k in ["panics", "hangs", "invariantViolations"] {
            assert_eq!(s[k], 0, "{k}: {s}");
        }
    }
    assert!(out.status.success(), "{stdout}");
    let _ = std::fs::remove_dir_all(&findings);
}
