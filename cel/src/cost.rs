//! Runtime cost accounting.
//!
//! Modelled on cel-go's runtime cost: one unit per operation, call, field
//! selection, index and comprehension step, plus size-proportional charges.
//! Unlike cel-go, every allocation is charged *before* it is made, so the
//! cost limit bounds memory as well as time:
//! - strings and bytes: `ceil(len / 10)` per produced value,
//! - lists and maps: one unit per element (cel-go charges a tenth, but its
//!   list concatenation does not copy; ours does).

use crate::error::EvalError;

/// cel-go's `StringTraversalCostFactor`.
const BYTES_PER_UNIT: u64 = 10;

pub(crate) struct Cost {
    used: u64,
    limit: u64,
}

impl Cost {
    pub(crate) fn new(limit: u64) -> Cost {
        Cost { used: 0, limit }
    }

    /// Adds `n` units; fails once the total exceeds the limit.
    pub(crate) fn charge(&mut self, n: u64) -> Result<(), EvalError> {
        self.used = self.used.saturating_add(n);
        if self.used > self.limit {
            Err(EvalError::CostLimitExceeded)
        } else {
            Ok(())
        }
    }

    /// Charge for traversing or producing `len` bytes of string data.
    pub(crate) fn bytes(&mut self, len: usize) -> Result<(), EvalError> {
        self.charge((len as u64).div_ceil(BYTES_PER_UNIT))
    }

    /// Charge for producing or visiting `n` list/map elements.
    pub(crate) fn items(&mut self, n: usize) -> Result<(), EvalError> {
        self.charge(n as u64)
    }
}
