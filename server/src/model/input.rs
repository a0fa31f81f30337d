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

/// Reads a whole input file, refusing one over `max_bytes` (`--max-input-bytes`)
/// before reading it.
pub fn read_input(path: &Path, max_bytes: u64) -> Result<String, InputError> {
    let io = |e: std::io::Error| InputError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let max = max_bytes;
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
