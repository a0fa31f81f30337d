//! `switchyard-k8s-bench`: SchedulingBasic through a real API server, kube-scheduler
//! and Switchyard side by side (`scripts/bench-k8s.sh` builds and runs it).
//!
//! For each scheduler: a fresh control plane (etcd + kube-apiserver from
//! `$K8S_CONTROL_PLANE_DIR`), N nodes and P pending pods created before the scheduler
//! starts, a pod watch that timestamps each binding, then the scheduler process. It
//! reports throughput first to last bind, the time from the scheduler's start to its
//! first bind, and the CPU seconds per pod of the API server, etcd and the scheduler.
//! A benchmark, not a test: nothing here asserts a speed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use switchyard_e2e::controlplane::{Components, ControlPlane};

struct Args {
    nodes: usize,
    pods: usize,
    schedulers: Vec<String>,
    repeat: usize,
    json: bool,
    timeout: Duration,
    /// Both schedulers authenticate with the control plane's static bearer token
    /// (`token`, as a scheduler pod's ServiceAccount token does) or with the admin
    /// client certificate (`cert`).
    token: bool,
}

const USAGE: &str = "usage: switchyard-k8s-bench [--nodes N (5000)] [--pods N (10000)] \
[--schedulers kube-scheduler,switchyard] [--repeat N (1)] [--timeout SECONDS (600)] [--auth token|cert (token)]
[--output-format table|json]

Runs SchedulingBasic through a fresh real control plane per run (scripts/control-plane.sh,
from $SWITCHYARD_K8S_BIN or $KUBEBUILDER_ASSETS): the nodes and pending pods are created first, then the scheduler
starts; a pod watch times each binding. Prints pods/s first to last bind, the time from
the scheduler's start to its first bind, and the CPU seconds per 1000 pods of the API
server, etcd and the scheduler. Both schedulers get the same credential: the control
plane's static bearer token (--auth token, as an in-cluster pod's ServiceAccount token
authenticates) or the admin client certificate (--auth cert), which the API server
verifies on every request. Build first: cargo build --release --workspace.";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        nodes: 5000,
        pods: 10000,
        schedulers: vec!["kube-scheduler".into(), "switchyard".into()],
        repeat: 1,
        json: false,
        timeout: Duration::from_secs(600),
        token: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        let num = |name: &str, v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or(format!("{name} {v:?}: expected a positive whole number"))
        };
        match flag.as_str() {
            "--nodes" => a.nodes = num("--nodes", value("--nodes")?)?,
            "--pods" => a.pods = num("--pods", value("--pods")?)?,
            "--repeat" => a.repeat = num("--repeat", value("--repeat")?)?,
            "--timeout" => {
                a.timeout = Duration::from_secs(num("--timeout", value("--timeout")?)? as u64)
            }
            "--schedulers" => {
                a.schedulers = value("--schedulers")?
                    .split(',')
                    .map(str::to_string)
                    .collect();
                for s in &a.schedulers {
                    if s != "kube-scheduler" && s != "switchyard" {
                        return Err(format!(
                            "--schedulers: unknown {s:?}; expected kube-scheduler or switchyard"
                        ));
                    }
                }
            }
            "--auth" => {
                a.token = match value("--auth")?.as_str() {
                    "token" => true,
                    "cert" => false,
                    other => return Err(format!("--auth {other:?}: token or cert")),
                }
            }
            "--output-format" => {
                a.json = match value("--output-format")?.as_str() {
                    "json" => true,
                    "table" => false,
                    other => return Err(format!("--output-format {other:?}: table or json")),
                }
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(a)
}

/// user+system CPU seconds of a process (Linux), from /proc/PID/stat; 0 when gone.
fn cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|l| switchyard::remote::procfs::parse(&l).map(|s| s.cpu_seconds))
        .unwrap_or(0.0)
}

fn component_pid(cp: &ControlPlane, name: &str) -> u32 {
    std::fs::read_to_string(cp.state_dir().join(format!("run/{name}.pid")))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn node(i: usize) -> Value {
    let res = json!({"pods": "110", "cpu": "4", "memory": "32Gi"});
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": format!("scheduler-perf-{i}"),
                        "labels": {"kubernetes.io/hostname": format!("scheduler-perf-{i}")}},
           "status": {"capacity": res, "allocatable": res,
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// scheduler_perf's default pod (100m, 500Mi), for the default profile.
fn pod(i: usize) -> Value {
    let r = json!({"cpu": "100m", "memory": "500Mi"});
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("pod-{i}"), "namespace": "default"},
           "spec": {"schedulerName": "default-scheduler",
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                    "ports": [{"containerPort": 80}],
                                    "resources": {"limits": r, "requests": r}}]}})
}

#[derive(Deserialize, Clone)]
struct MiniMeta {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
}

#[derive(Deserialize, Clone)]
struct MiniSpec {
    #[serde(default, rename = "nodeName")]
    node_name: Option<String>,
}

/// The two fields of a pod the watch needs.
#[derive(Deserialize, Clone)]
struct MiniPod {
    metadata: MiniMeta,
    spec: MiniSpec,
}

#[derive(Deserialize)]
struct MiniList {
    metadata: MiniMeta,
}

#[derive(Default, Clone)]
struct RunResult {
    scheduler: String,
    bound: usize,
    first_bind_s: f64,
    last_bind_s: f64,
    pods_per_second: f64,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    scheduler_cpu: f64,
    /// Bindings in each half second after the scheduler started.
    timeline: Vec<usize>,
}

/// The kubeconfig both schedulers use: the admin certificate's, or one with the
/// control plane's static bearer token (same user group, system:masters).
fn scheduler_kubeconfig(cp: &ControlPlane, dir: &std::path::Path, token: bool) -> PathBuf {
    if !token {
        return cp.kubeconfig.clone();
    }
    let path = dir.join("token.kubeconfig");
    let token = std::fs::read_to_string(cp.state_dir().join("pki/admin.token"))
        .expect("the control plane's pki/admin.token");
    cp.write_token_kubeconfig(&path, token.trim());
    path
}

fn start_scheduler(cp: &ControlPlane, which: &str, dir: &std::path::Path, token: bool) -> Child {
    let log = std::fs::File::create(dir.join(format!("{which}.log"))).expect("log file");
    let kubeconfig = scheduler_kubeconfig(cp, dir, token);
    match which {
        "kube-scheduler" => {
            let bin = switchyard_e2e::controlplane::k8s_binary("kube-scheduler")
                .expect("kube-scheduler not found: set SWITCHYARD_K8S_BIN to a folder holding it");
            // The control plane's scheduler-config.yaml (qps and burst 5000, no leader
            // election), with the chosen kubeconfig.
            let config = dir.join("kube-scheduler-config.yaml");
            std::fs::write(
                &config,
                format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {:?}\n  qps: 5000\n  burst: 5000\nleaderElection:\n  leaderElect: false\n", kubeconfig.display().to_string()),
            )
            .expect("config");
            let port = switchyard_e2e::process::free_port();
            Command::new(bin)
                .arg(format!("--config={}", config.display()))
                .args(["--bind-address=127.0.0.1", &format!("--secure-port={port}")])
                .arg(format!(
                    "--authentication-kubeconfig={}",
                    cp.kubeconfig.display()
                ))
                .arg(format!(
                    "--authorization-kubeconfig={}",
                    cp.kubeconfig.display()
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start kube-scheduler")
        }
        _ => {
            let config = dir.join("switchyard.yaml");
            // The same client limits as the control plane's kube-scheduler config.
            std::fs::write(
                &config,
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  qps: 5000\n  burst: 5000\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: default-scheduler\n",
            )
            .expect("config");
            let port = switchyard_e2e::process::free_port();
            Command::new(switchyard_e2e::binary("switchyard"))
                .args(["run", "--log-level", "info"])
                .arg("--config")
                .arg(&config)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--health-address")
                .arg(format!("127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start switchyard run")
        }
    }
}

fn one_run(args: &Args, which: &str, round: usize) -> RunResult {
    let name = format!("bench-{which}-{round}");
    let cp = ControlPlane::start(&name, Components::default());
    let dir = cp.state_dir().to_path_buf();
    eprintln!(
        "[{which}] creating {} nodes and {} pods",
        args.nodes, args.pods
    );
    let t = Instant::now();
    cp.create_many((0..args.nodes).map(node).collect(), 32);
    cp.create_many((0..args.pods).map(pod).collect(), 32);
    eprintln!("[{which}] created in {:.1}s", t.elapsed().as_secs_f64());

    // The pod watch: when each pod was first seen with a node. It decodes only the
    // name and node of each pod, so that its own CPU takes as little as possible from
    // the API server and the scheduler on this machine's two cores.
    let bound_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let client = cp.client();
        let bound_at = bound_at.clone();
        let list: MiniList = cp
            .block_on(
                client.request(
                    http::Request::get("/api/v1/namespaces/default/pods")
                        .body(Vec::new())
                        .expect("request"),
                ),
            )
            .expect("list pods");
        let mut rv = list.metadata.resource_version;
        cp.spawn(async move {
                loop {
                    let req = http::Request::get(format!(
                        "/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}&timeoutSeconds=3600"
                    ))
                    .body(Vec::new())
                    .expect("request");
                    let Ok(stream) = client.request_events::<MiniPod>(req).await else {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    };
                    let mut stream = std::pin::pin!(stream);
                    while let Some(Ok(ev)) = stream.next().await {
                        let now = Instant::now();
                        if let kube::api::WatchEvent::Added(p) | kube::api::WatchEvent::Modified(p) = ev {
                            rv = p.metadata.resource_version.clone();
                            if p.spec.node_name.is_some() {
                                if let Ok(mut m) = bound_at.lock() {
                                    m.entry(p.metadata.name).or_insert(now);
                                }
                            }
                        }
                    }
                }
        })
    };

    let api_pid = component_pid(&cp, "kube-apiserver");
    let etcd_pid = component_pid(&cp, "etcd");
    let (api0, etcd0) = (cpu_seconds(api_pid), cpu_seconds(etcd_pid));
    let start = Instant::now();
    let mut child = start_scheduler(&cp, which, &dir, args.token);
    let pid = child.id();
    let mut last_cpu = 0.0;
    let mut last_progress = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let n = bound_at.lock().map(|m| m.len()).unwrap_or(0);
        let c = cpu_seconds(pid);
        if c > 0.0 {
            last_cpu = c;
        }
        if last_progress.elapsed() >= Duration::from_secs(5) {
            last_progress = Instant::now();
            eprintln!(
                "[{which}] {:>5.1}s: {n}/{} bound",
                start.elapsed().as_secs_f64(),
                args.pods
            );
        }
        if n >= args.pods {
            break;
        }
        if start.elapsed() > args.timeout {
            eprintln!("[{which}] timed out with {n}/{} bound", args.pods);
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            eprintln!(
                "[{which}] exited early ({st}); log in {}",
                dir.join(format!("{which}.log")).display()
            );
            break;
        }
    }
    let scheduler_cpu = cpu_seconds(pid).max(last_cpu);
    let (api1, etcd1) = (cpu_seconds(api_pid), cpu_seconds(etcd_pid));
    let _ = child.kill();
    let _ = child.wait();
    watch.abort();

    let times: Vec<Instant> = bound_at
        .lock()
        .map(|m| m.values().copied().collect())
        .unwrap_or_default();
    let first = times.iter().min().copied().unwrap_or(start);
    let last = times.iter().max().copied().unwrap_or(start);
    let bound = times.len();
    let mut timeline = Vec::new();
    for t in &times {
        let slot = (t.duration_since(start).as_secs_f64() * 2.0) as usize;
        if timeline.len() <= slot {
            timeline.resize(slot + 1, 0);
        }
        timeline[slot] += 1;
    }
    let span = last.duration_since(first).as_secs_f64();
    RunResult {
        scheduler: which.to_string(),
        bound,
        first_bind_s: first.duration_since(start).as_secs_f64(),
        last_bind_s: last.duration_since(start).as_secs_f64(),
        pods_per_second: if span > 0.0 {
            (bound.saturating_sub(1)) as f64 / span
        } else {
            0.0
        },
        apiserver_cpu: api1 - api0,
        etcd_cpu: etcd1 - etcd0,
        scheduler_cpu,
        timeline,
    }
}

fn median(mut v: Vec<RunResult>) -> RunResult {
    v.sort_by(|a, b| a.pods_per_second.total_cmp(&b.pods_per_second));
    v.get(v.len() / 2).cloned().unwrap_or_default()
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let dir = switchyard_e2e::controlplane::control_plane_dir();
    if !dir.join("control-plane.sh").is_file() {
        eprintln!(
            "no Kubernetes control plane at {} (set K8S_CONTROL_PLANE_DIR to the folder holding control-plane.sh)",
            dir.display()
        );
        std::process::exit(2);
    }
    let mut all: HashMap<String, Vec<RunResult>> = HashMap::new();
    for round in 0..args.repeat {
        for s in &args.schedulers {
            let r = one_run(&args, s, round);
            eprintln!(
                "[{s}] round {}: {} bound, {:.0} pods/s first to last bind, first bind after {:.2}s",
                round + 1,
                r.bound,
                r.pods_per_second,
                r.first_bind_s
            );
            eprintln!(
                "[{s}] bindings per half second from the scheduler's start: {:?}",
                r.timeline
            );
            all.entry(s.clone()).or_default().push(r);
        }
    }
    let results: Vec<RunResult> = args
        .schedulers
        .iter()
        .map(|s| median(all.remove(s).unwrap_or_default()))
        .collect();
    let base = results
        .iter()
        .find(|r| r.scheduler == "kube-scheduler")
        .map(|r| r.pods_per_second);
    let per_k = |cpu: f64, r: &RunResult| cpu / r.bound.max(1) as f64 * 1000.0;
    if args.json {
        let runs: Vec<Value> = results
            .iter()
            .map(|r| {
                json!({
                    "scheduler": r.scheduler, "bound": r.bound,
                    "pods_per_second": r.pods_per_second,
                    "vs_kube_scheduler": base.map(|b| r.pods_per_second / b),
                    "binds_per_half_second": r.timeline,
                    "first_bind_seconds": r.first_bind_s, "last_bind_seconds": r.last_bind_s,
                    "cpu_seconds_per_1000_pods": {"apiserver": per_k(r.apiserver_cpu, r),
                        "etcd": per_k(r.etcd_cpu, r), "scheduler": per_k(r.scheduler_cpu, r)},
                })
            })
            .collect();
        println!(
            "{}",
            json!({"nodes": args.nodes, "pods": args.pods, "repeat": args.repeat,
                   "auth": if args.token { "token" } else { "cert" }, "runs": runs})
        );
        return;
    }
    println!(
        "SchedulingBasic through a real API server: {} nodes, {} pods created before the scheduler started, both schedulers authenticated by {}{}",
        args.nodes,
        args.pods,
        if args.token { "bearer token" } else { "client certificate" },
        if args.repeat > 1 {
            format!(" (median of {} rounds)", args.repeat)
        } else {
            String::new()
        }
    );
    println!("| scheduler | bound | pods/s first→last bind | vs kube-scheduler | start→first bind | start→last bind | CPU s/1000 pods: apiserver | etcd | scheduler |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        println!(
            "| {} | {} | {:.0} | {} | {:.2} s | {:.2} s | {:.2} | {:.2} | {:.2} |",
            r.scheduler,
            r.bound,
            r.pods_per_second,
            base.map_or("—".into(), |b| format!("{:.2}×", r.pods_per_second / b)),
            r.first_bind_s,
            r.last_bind_s,
            per_k(r.apiserver_cpu, r),
            per_k(r.etcd_cpu, r),
            per_k(r.scheduler_cpu, r),
        );
    }
}
