//! The sidecars the demo and the benchmark start from the build and the source tree.

use std::path::PathBuf;

use anyhow::Context;

use switchyard::remote::sidecar::exec_command;

/// The demo's sidecars: gang scheduling (Rust, built next to this binary) and
/// EnergyAware (Python, from the source tree; `SWITCHYARD_PYTHON` names the
/// interpreter that has grpcio, as `scripts/demo.sh` sets up).
pub fn demo_sidecars() -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("cannot locate this binary")?;
    let cosched = exe.with_file_name("switchyard-coscheduling");
    let fix = "run scripts/demo.sh (it builds the sidecars and installs grpcio), or pass --cluster/--config to run without them";
    if !cosched.exists() {
        anyhow::bail!(
            "the demo starts the sidecar {}, which is not built: {fix}",
            cosched.display()
        );
    }
    let energy = energy_sidecar_command()?;
    Ok(vec![
        exec_command(
            &cosched.display().to_string(),
            &[
                "--permit-timeout-seconds",
                "2",
                "--denied-backoff-seconds",
                "1",
            ],
        ),
        energy,
    ])
}

/// The command that starts the Python EnergyAware sidecar from the source tree, with
/// the interpreter `SWITCHYARD_PYTHON` names (checked for grpcio).
pub fn energy_sidecar_command() -> anyhow::Result<String> {
    let script = [
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins/python-energy/sidecar.py"),
        PathBuf::from("plugins/python-energy/sidecar.py"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .context("plugins/python-energy/sidecar.py is not here: run from the repository root")?;
    let python = std::env::var("SWITCHYARD_PYTHON").unwrap_or_else(|_| "python3".into());
    check_python_grpc(&python)?;
    Ok(exec_command(&python, &[&script.display().to_string()]))
}

/// Checks before starting the Python sidecar that its interpreter exists and has the
/// Python plugin SDK (and so grpcio and protobuf), so a missing module is one clear
/// line, not a child's traceback.
pub fn check_python_grpc(python: &str) -> anyhow::Result<()> {
    let fix = format!(
        "run scripts/demo.sh (it creates target/pyenv with them), or: {python} -m pip install ./plugin-sdk/python; \
         SWITCHYARD_PYTHON names another interpreter"
    );
    let out = std::process::Command::new(python)
        .args(["-c", "import grpc, google.protobuf, switchyard_plugin"])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Err(e) => anyhow::bail!(
            "the demo's EnergyAware sidecar needs Python, and {python:?} cannot be started ({e}): {fix}"
        ),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let missing = err
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("ModuleNotFoundError: "))
                .unwrap_or("the Python plugin SDK (switchyard_plugin), grpcio or protobuf is missing");
            anyhow::bail!(
                "the demo's EnergyAware sidecar needs the Python plugin SDK in {python:?} ({missing}): {fix}"
            )
        }
        Ok(_) => Ok(()),
    }
}
