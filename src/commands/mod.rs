//! The subcommands: `record` runs and profiles a guest (with [`interrupt`] handling Ctrl-C and
//! SIGTERM), `report` and `convert` read profiles back.

pub mod interrupt;
pub mod record;
pub mod report;
