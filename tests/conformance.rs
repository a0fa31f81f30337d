//! `switchyard conformance` against real sidecars: every sidecar the project ships
//! passes; sidecars broken on purpose (tests/conformance/broken_sidecar.py, the
//! faulty Rust sidecar) fail the clause they break; an endpoint nobody serves fails
//! with one clear error and the rest marked not checked.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use switchyard::remote::sidecar::{exec_command, Listen, SidecarProcess};
use switchyard_e2e::{
    binary, python, run_with_deadline, sidecar_socket, start_sidecar, workspace_root,
};

/// Runs the kit against `socket` (JSON output); returns the exit code and the report.
fn conformance(socket: &std::path::Path, extra: &[&str]) -> (i32, Value) {
    let out = run_with_deadline(
        Command::new(binary("switchyard"))
            .arg("conformance")
            .arg(format!("unix://{}", socket.display()))
            .args(["--output-format", "json"])
            .args(extra),
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn verdict<'a>(report: &'a Value, clause: &str) -> &'a str {
    report["outcomes"]
        .as_array()
        .and_then(|o| o.iter().find(|x| x["clause"] == clause))
        .and_then(|x| x["verdict"].as_str())
        .unwrap_or_else(|| panic!("no clause {clause} in {report:#}"))
}

fn failed(report: &Value) -> Vec<String> {
    report["outcomes"]
        .as_array()
        .map(|o| {
            o.iter()
                .filter(|x| x["verdict"] == "fail")
                .map(|x| format!("{}: {}", x["clause"], x["detail"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that the sidecar passes every clause, and that `exercised` were checked
/// (not skipped).
fn passes(socket: &std::path::Path, extra: &[&str], exercised: &[&str]) {
    let (code, report) = conformance(socket, extra);
    assert!(failed(&report).is_empty(), "{:#?}", failed(&report));
    assert_eq!(code, 0, "{report:#}");
    for c in exercised {
        assert_eq!(verdict(&report, c), "pass", "{c} not exercised: {report:#}");
    }
}

const CORE: &[&str] = &[
    "H1", "H2", "H3", "S1", "S2", "R1", "R2", "R3", "R4", "R6", "F2", "L2", "HL1",
];

#[test]
fn the_rust_sidecars_pass() {
    let _tt = start_sidecar("switchyard-tainttoleration", "conf-tt", &[]);
    let node_local = [
        CORE,
        &[
            "R5", "F1", "F3", "F4", "F5", "F6", "F7", "SC1", "SC2", "SC3",
        ],
    ]
    .concat();
    passes(&sidecar_socket("conf-tt"), &[], &node_local);

    let _co = start_sidecar("switchyard-coscheduling", "conf-co", &[]);
    passes(
        &sidecar_socket("conf-co"),
        &[],
        &[CORE, &["P1", "Q1", "E1", "X1"]].concat(),
    );

    // The Rust SDK's Accelerator example (built by `cargo build --examples`).
    let _acc = start_sidecar("examples/accelerator", "conf-rs-acc", &[]);
    let accelerators = workspace_root().join("examples/conformance/accelerator.yaml");
    passes(
        &sidecar_socket("conf-rs-acc"),
        &["--cluster", &accelerators.display().to_string()],
        &[&node_local[..], &["F8"]].concat(),
    );

    let _q = start_sidecar("switchyard-quota", "conf-quota", &[]);
    let fixture = workspace_root().join("examples/conformance/tenant-quota.yaml");
    let fixture = fixture.display().to_string();
    passes(
        &sidecar_socket("conf-quota"),
        &["--cluster", &fixture],
        &[CORE, &["P1", "P2", "F1", "F4", "F5"]].concat(),
    );
}

fn python_sidecar(script: &str, socket_name: &str, broken: Option<&str>) -> SidecarProcess {
    let script = workspace_root().join(script).display().to_string();
    let env = broken.map(|b| format!("BROKEN='{b}' ")).unwrap_or_default();
    let cmd = format!("{env}{}", exec_command(&python(), &[&script]));
    SidecarProcess::start(
        &cmd,
        Listen::Unix(sidecar_socket(socket_name)),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_python_sidecar_passes() {
    let _py = python_sidecar("plugins/python-energy/sidecar.py", "conf-py", None);
    passes(
        &sidecar_socket("conf-py"),
        &[],
        &[
            CORE,
            &["R5", "F1", "F3", "F4", "F5", "F6", "F7", "F8", "SC1", "SC3"],
        ]
        .concat(),
    );
}

/// The Python SDK's one-file example and its every-extension-point test plugin.
#[test]
fn the_python_sdk_plugins_pass() {
    let fixture = |f: &str| workspace_root().join(f).display().to_string();
    let _acc = python_sidecar(
        "plugin-sdk/python/examples/accelerator.py",
        "conf-py-acc",
        None,
    );
    passes(
        &sidecar_socket("conf-py-acc"),
        &[
            "--cluster",
            &fixture("examples/conformance/accelerator.yaml"),
        ],
        &[
            CORE,
            &[
                "R5", "F1", "F3", "F4", "F5", "F6", "F7", "F8", "SC1", "SC2", "SC3",
            ],
        ]
        .concat(),
    );
    let _all = python_sidecar(
        "plugin-sdk/python/tests/quota_plugin.py",
        "conf-py-all",
        None,
    );
    passes(
        &sidecar_socket("conf-py-all"),
        &[
            "--cluster",
            &fixture("examples/conformance/tenant-quota.yaml"),
        ],
        &[
            CORE,
            &[
                "P1", "F1", "F4", "F5", "F8", "SC1", "SC2", "Q1", "E1", "X1", "X2",
            ],
        ]
        .concat(),
    );
}

#[test]
fn broken_sidecars_fail_the_clause_they_break() {
    for (mode, clause) in [
        ("ignores-gaps", "R2"),
        ("keeps-ended-cycles", "F4"),
        ("no-generation-wait", "F3"),
        ("scores-out-of-range", "SC1"),
        ("flaky-filter", "F2"),
        ("status-per-node", "F8"),
        ("stray-replies", "S2"),
        ("pre-filter-reads-nodes", "P2"),
    ] {
        let name = format!("conf-broken-{mode}");
        let _s = python_sidecar("tests/conformance/broken_sidecar.py", &name, Some(mode));
        let (code, report) = conformance(&sidecar_socket(&name), &[]);
        assert_eq!(code, 1, "{mode}: {report:#}");
        assert_eq!(verdict(&report, clause), "fail", "{mode}: {report:#}");
        let detail = report["outcomes"]
            .as_array()
            .and_then(|o| o.iter().find(|x| x["clause"] == clause))
            .map(|x| x["detail"].to_string())
            .unwrap_or_default();
        assert!(
            detail.contains("fix:"),
            "{mode}: the failure says what to fix: {detail}"
        );
    }
    // The Rust SDK's faulty sidecar scoring 1000.
    let _f = start_sidecar(
        "switchyard-faulty-sidecar",
        "conf-faulty",
        &[("FAULTY_MODE", "bad-score")],
    );
    let (code, report) = conformance(&sidecar_socket("conf-faulty"), &[]);
    assert_eq!(code, 1);
    assert_eq!(verdict(&report, "SC1"), "fail", "{report:#}");
}

#[test]
fn an_endpoint_nobody_serves_fails_once_and_says_so() {
    let socket = std::env::temp_dir().join(format!("sy-conf-none-{}.sock", std::process::id()));
    let out = run_with_deadline(
        Command::new(binary("switchyard"))
            .arg("conformance")
            .arg(&socket),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAIL H1") && text.contains("cannot connect"),
        "{text}"
    );
    assert!(
        text.contains("not checked: the sidecar could not be reached"),
        "{text}"
    );
    assert!(
        !text.contains("FAIL H2"),
        "one failure, not one per clause: {text}"
    );
}

/// T1 with the kit's OTLP receiver: the Rust and Python SDKs' Accelerator, exporting
/// to it, start each call's span under the call's traceparent; the same sidecar not
/// exporting fails T1 naming the call and the receiver.
#[test]
fn trace_context_reaches_the_sidecars_spans() {
    let Ok(Listen::Tcp(port)) = Listen::free_tcp() else {
        panic!("no free port");
    };
    let otlp = format!("127.0.0.1:{port}");
    let endpoint = format!("http://{otlp}");
    let export = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ];
    let fixture = workspace_root()
        .join("examples/conformance/accelerator.yaml")
        .display()
        .to_string();
    let args = ["--cluster", &fixture, "--otlp-listen", &otlp];

    let _rs = start_sidecar("examples/accelerator", "conf-t1-rs", &export);
    passes(&sidecar_socket("conf-t1-rs"), &args, &["T1"]);

    let script = workspace_root()
        .join("plugin-sdk/python/examples/accelerator.py")
        .display()
        .to_string();
    let env: String = export.iter().map(|(k, v)| format!("{k}='{v}' ")).collect();
    let _py = SidecarProcess::start(
        &format!("{env}{}", exec_command(&python(), &[&script])),
        Listen::Unix(sidecar_socket("conf-t1-py")),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    passes(&sidecar_socket("conf-t1-py"), &args, &["T1"]);

    let _quiet = start_sidecar("examples/accelerator", "conf-t1-quiet", &[]);
    let (code, report) = conformance(&sidecar_socket("conf-t1-quiet"), &args);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(verdict(&report, "T1"), "fail", "{report:#}");
    assert!(
        failed(&report)
            .iter()
            .any(|f| f.contains("traceparent 00-") && f.contains(&otlp)),
        "{report:#}"
    );
}
