//! The scheduling framework: extension-point traits, `Status`, `CycleState`, node
//! infos, cluster events and the runtime that runs a profile's plugins.

pub mod cycle_state;
pub mod derived;
pub mod diagnosis;
pub mod domains;
pub mod dra;
pub mod events;
pub mod interface;
pub mod interned;
pub mod node_info;
pub mod pod_list;
pub mod runtime;
pub mod snapshot;
pub mod status;
pub mod unsettled_permit;
pub mod volumes;
pub mod waiting_pods;

pub use cycle_state::CycleState;
pub use interface::*;
pub use interned::PluginName;
pub use node_info::NodeInfo;
pub use runtime::{
    Framework, Handle, InvalidArgs, PluginFactory, ProfileError, Registry, ScoreBuffer,
};
pub use snapshot::Snapshot;
pub use status::{Code, Status};
