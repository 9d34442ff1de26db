//! Memory profiles, from the guest's own allocator: the module rewriting that makes sampled
//! allocator calls reach the host ([`rewrite`]), and the same for a component's core modules
//! ([`component`]). Heap accounting is the recorder's (`record/heap.rs`).

pub mod component;
pub mod rewrite;
