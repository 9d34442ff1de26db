//! File formats, each a consumer of the [`Profile`](crate::profile::Profile) model.

pub mod pprof;
pub mod pprof_proto;
