//! NodeResourcesFit and NodeResourcesBalancedAllocation.

pub mod balanced_allocation;
pub mod fit;
mod resource_allocation;

pub use balanced_allocation::BalancedAllocation;
pub use fit::Fit;
