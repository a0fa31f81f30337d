//! The scheduler's own compact model of cluster objects. Parsed once at ingest by
//! [`convert`]; cheap to clone (`Arc`); no YAML or JSON types past this module.

pub mod convert;
pub mod dra;
pub mod features;
pub mod input;
pub mod labels;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod resource;
pub mod storage;
pub mod taint;

pub use labels::{
    LabelSelector, Labels, NodeSelector, NodeSelectorTerm, Operator, Requirement, RequirementError,
};
pub use node::{Namespace, Node, NodeImage, PodDisruptionBudget, PriorityClass};
pub use pod::{Pod, PodSpec, Uid};
pub use resource::Resource;
pub use taint::{Taint, TaintEffect, Toleration};
