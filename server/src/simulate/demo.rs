//! The built-in demo cluster, compiled into the binary so `switchyard simulate` works
//! from anywhere with no arguments.

pub const DEMO_NAME: &str = "<built-in demo: examples/demo/cluster.yaml>";
pub const DEMO_CLUSTER: &str = include_str!("../../../examples/demo/cluster.yaml");
