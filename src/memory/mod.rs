//! Memory profiles, from the guest's own allocator: the module rewriting that makes sampled
//! allocator calls reach the host ([`rewrite`]), the same for a component's core modules
//! ([`component`]), and heap accounting with Go's sampling by bytes ([`heap`]).

pub mod component;
pub mod heap;
pub mod rewrite;
