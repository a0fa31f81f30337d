//! The cluster backends behind the [`crate::client`] boundary: [`embedded`] (in
//! memory: simulations, demos, tests) and [`kubernetes`] (the `kube` crate against an
//! API server), with manifest loading and Lease leader election.

pub mod admission;
pub mod embedded;
pub mod embedded_dra;
pub mod embedded_volumes;
pub mod kubeproto;
pub mod kubernetes;
pub mod leaderelection;
pub mod manifest;
