//! Reading input files (manifests, configurations, workloads) with the size bound
//! every input shares (`--max-input-bytes`).

use std::path::Path;

/// An input file that could not be read, or is over the size bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: cannot read: {message}")]
pub struct InputError {
    pub path: String,
    pub message: String,
}

/// The largest manifest file read by default: 1 GiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1 << 30;

static MAX_INPUT_BYTES: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(DEFAULT_MAX_INPUT_BYTES);

/// Sets the largest manifest or workload file this process reads (`--max-input-bytes`).
pub fn set_max_input_bytes(n: u64) {
    MAX_INPUT_BYTES.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// Reads a whole input file, refusing one over `--max-input-bytes` before reading it.
pub fn read_input(path: &Path) -> Result<String, InputError> {
    let io = |e: std::io::Error| InputError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let max = MAX_INPUT_BYTES.load(std::sync::atomic::Ordering::Relaxed);
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > max {
        return Err(InputError {
            path: path.display().to_string(),
            message: format!(
                "{len} bytes is over the limit of {max} (raise it with --max-input-bytes, or split the file)"
            ),
        });
    }
    std::fs::read_to_string(path).map_err(io)
}
