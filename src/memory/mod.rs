//! Memory profiles, from the guest's own allocator (work in progress, issue 5): the module
//! rewriting that makes each allocator call reach the host ([`rewrite`]), and heap accounting
//! with Go's sampling by bytes ([`heap`]). Not yet wired into `record`.

pub mod heap;
pub mod rewrite;
