//! One trace per scheduling attempt, across processes: `switchyard simulate` with a
//! Rust sidecar (TenantQuota, preemption over the wire) and the Python sidecar
//! (EnergyAware) exports to a real OTLP receiver on 127.0.0.1, and so do both
//! sidecars. The test rebuilds the span tree:
//! attempt -> extension point -> remote call -> the sidecar's span, one trace id,
//! correct parents; and a preemption span with its victims.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use switchyard_e2e::otlp::{Receiver, Span};
use switchyard_e2e::{binary, run_with_deadline, workspace_root};

fn by_id(spans: &[Span]) -> HashMap<String, &Span> {
    spans.iter().map(|s| (s.span_id.clone(), s)).collect()
}

#[test]
fn attempt_spans_reach_into_the_sidecar() {
    let receiver = Receiver::start();
    let scenario = workspace_root().join("tests/scenarios/remote/quota-preemption.yaml");
    let quota = binary("switchyard-quota").display().to_string();
    let python = switchyard::remote::sidecar::exec_command(
        &switchyard_e2e::python(),
        &[&workspace_root()
            .join("plugins/python-energy/sidecar.py")
            .display()
            .to_string()],
    );
    let out = run_with_deadline(
        Command::new(binary("switchyard"))
            .current_dir(workspace_root())
            .args([
                "--log-format",
                "json",
                "--log-level",
                "switchyard::scheduler=debug",
                "simulate",
                "--output-format",
                "json",
                "--cluster",
            ])
            .arg(&scenario)
            .args(["--sidecar", &quota, "--sidecar", &python])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
            .env("OTEL_TRACES_SAMPLER", "always_on")
            .env_remove("OTEL_SERVICE_NAME"),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "simulate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Spans are flushed at exit, the sidecar's when it is stopped.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while [
        "switchyard-sidecar-tenantquota",
        "switchyard-sidecar-energyaware",
    ]
    .iter()
    .any(|svc| !receiver.spans().iter().any(|s| s.service == *svc))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no sidecar spans within 15s; received: {:#?}\nstderr: {}",
            names(&receiver.spans()),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let spans = receiver.spans();
    let ids = by_id(&spans);

    // The preemptor's attempts: roots named after the pod.
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            s.service == "switchyard"
                && s.name == "scheduling_attempt"
                && s.attr("pod.name") == Some("preemptor")
        })
        .collect();
    assert!(
        !roots.is_empty(),
        "no attempt span for the preemptor: {:#?}",
        names(&spans)
    );
    let first = roots
        .iter()
        .find(|r| r.attr("result") == Some("unschedulable"))
        .expect("the preemptor's first attempt is unschedulable");
    assert_eq!(first.parent_span_id, "", "an attempt is a root span");
    assert!(first.attr("pod.uid").is_some_and(|u| !u.is_empty()));
    let children = |p: &Span| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.parent_span_id == p.span_id && s.trace_id == p.trace_id)
            .collect()
    };
    let filter = children(first)
        .into_iter()
        .find(|s| s.name == "Filter")
        .expect("a Filter extension-point span under the attempt");
    // The remote Filter call is under the Filter span, or, sent right behind the
    // plugin's PreFilter (filter-after-pre-filter), under the PreFilter's.
    let pre_filter = children(first)
        .into_iter()
        .find(|s| s.name == "PreFilter")
        .expect("a PreFilter extension-point span under the attempt");
    let under = |p: &Span| -> Vec<&Span> {
        let mut out = children(p);
        let mut i = 0;
        while i < out.len() {
            let more = children(out[i]);
            out.extend(more);
            i += 1;
        }
        out
    };
    let remote = under(filter)
        .into_iter()
        .chain(under(pre_filter))
        .find(|s| s.name == "Filter TenantQuota (remote)")
        .expect("the remote Filter call under the Filter or PreFilter span");
    assert!(remote
        .attr("endpoint")
        .is_some_and(|e| e.starts_with("unix://")));
    let sidecar = spans
        .iter()
        .find(|s| s.parent_span_id == remote.span_id)
        .expect("the sidecar's span under the remote call");
    assert!(
        sidecar.service.starts_with("switchyard-sidecar"),
        "{sidecar:?}"
    );
    assert_eq!(sidecar.name, "Filter TenantQuota");
    assert_eq!(
        sidecar.trace_id, first.trace_id,
        "one trace id across processes"
    );

    // JSON log lines written inside an attempt carry its trace id.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("unable to schedule pod") && l.contains("default/preemptor"))
        .unwrap_or_else(|| {
            panic!("no JSON log line for the preemptor's failed attempt:\n{stderr}")
        });
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
    assert_eq!(
        v["span"]["trace_id"].as_str(),
        Some(first.trace_id.as_str()),
        "{line}"
    );

    // Preemption: a span under PostFilter with the victims.
    let post = children(first)
        .into_iter()
        .find(|s| s.name == "PostFilter")
        .expect("a PostFilter span");
    let preemption = spans
        .iter()
        .find(|s| s.name == "preemption" && s.trace_id == first.trace_id)
        .expect("a preemption span");
    let mut p = preemption;
    while p.parent_span_id != post.span_id {
        p = ids
            .get(&p.parent_span_id)
            .unwrap_or_else(|| panic!("preemption not under PostFilter"));
    }
    assert_eq!(preemption.attr("victims"), Some("default/acme-10"));
    assert_eq!(preemption.attr("node"), Some("node-c"));
    // The second attempt binds: a binding-cycle span ends the story.
    let bound = roots
        .iter()
        .find(|r| r.attr("result") == Some("scheduled"))
        .expect("a scheduled attempt");
    assert_eq!(bound.attr("node"), Some("node-c"));
    let binding = children(bound)
        .into_iter()
        .find(|s| s.name == "binding_cycle")
        .expect("a binding-cycle span under the scheduled attempt");
    assert_eq!(binding.attr("result"), Some("bound"));
    // Plugins have spans too: the remote PreFilter call sits under its plugin span.
    let pre_filter = children(bound)
        .into_iter()
        .find(|s| s.name == "PreFilter")
        .expect("PreFilter span");
    let plugin = children(pre_filter)
        .into_iter()
        .find(|s| s.name == "PreFilter TenantQuota")
        .expect("the TenantQuota plugin span under PreFilter");
    assert!(children(plugin)
        .iter()
        .any(|s| s.name == "PreFilter TenantQuota (remote)"));
}

fn names(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|s| format!("{}: {}", s.service, s.name))
        .collect()
}

/// A collector that is not there costs nothing but the export attempts: the run
/// schedules as without tracing and ends promptly.
#[test]
fn unreachable_collector_changes_nothing() {
    let scenario = workspace_root().join("tests/scenarios/queuesort/priority-first.yaml");
    let run = |traced: bool| {
        let mut cmd = Command::new(binary("switchyard"));
        cmd.current_dir(workspace_root())
            .args(["simulate", "--output-format", "json", "--cluster"])
            .arg(&scenario);
        if traced {
            cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
                .env("OTEL_TRACES_SAMPLER", "always_on");
        }
        let start = std::time::Instant::now();
        let out = run_with_deadline(&mut cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
        (v["pods"].clone(), start.elapsed())
    };
    let (plain, _) = run(false);
    let (traced, took) = run(true);
    assert_eq!(
        plain, traced,
        "same placements and messages with tracing on"
    );
    assert!(took < Duration::from_secs(10), "ended promptly: {took:?}");
}
