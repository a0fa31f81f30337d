//! `switchyard snapshot`: manifests converted into the plugin contract's messages,
//! for the SDKs' test harnesses.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use prost::Message;

#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// Cluster manifests (files or directories, as `simulate --cluster` reads them):
    /// Nodes, Pods and PriorityClasses. Pods with spec.nodeName are placed; the
    /// others are the pods a harness schedules.
    #[arg(long, value_name = "PATH", num_args = 1.., required = true)]
    cluster: Vec<PathBuf>,
    /// Where to write the message (binary protobuf); `-` for stdout, which must not
    /// be a terminal.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

pub fn snapshot(args: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let req = switchyard::conformance::Fixture::harness_snapshot(&args.cluster)?;
    let bytes = req.encode_to_vec();
    if args.output.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        if out.is_terminal() {
            anyhow::bail!("--output -: stdout is a terminal; the message is binary (redirect it, or name a file)");
        }
        out.write_all(&bytes)
            .context("writing the message to stdout")?;
        out.flush().context("writing the message to stdout")?;
    } else {
        std::fs::write(&args.output, &bytes)
            .with_context(|| format!("cannot write {}", args.output.display()))?;
    }
    let pending = req.more.len();
    let (nodes, placed) = match &req.kind {
        Some(switchyard_proto::v1::replicate_request::Kind::Delta(d)) => {
            (d.upsert_nodes.len(), d.upsert_pods.len())
        }
        _ => (0, 0),
    };
    tracing::info!(
        nodes,
        placed,
        pending,
        bytes = bytes.len(),
        "snapshot written"
    );
    Ok(ExitCode::SUCCESS)
}
