//! A registered module's build id, the hex SHA-256 of its bytes, hashed on a thread of its
//! own from registration on: the profile needs it when written, the guest's start need not
//! wait for it (10 ms for a 16 MB component's core module here). A command that has them from
//! an earlier run (wasmspy's compile cache) gives them as known.

use sha2::{Digest, Sha256};

use crate::shared::background::Background;
use crate::shared::hex::hex;
use crate::wasm::module_bytes::ModuleBytes;

pub struct BuildId(Background<String>);

impl BuildId {
    /// Starts hashing `wasm`.
    pub fn of(wasm: ModuleBytes) -> Self {
        BuildId(Background::spawn("wasmspy-build-id", move || {
            hex(&Sha256::digest(&*wasm))
        }))
    }

    /// An id known already (kept from an earlier run of the same bytes): nothing to hash.
    pub fn known(id: String) -> Self {
        BuildId(Background::ready(id))
    }

    /// The id, once hashed. A hashing thread cannot panic short of running out of memory; an
    /// id left empty then is what a profile without build ids has.
    pub fn get(&self) -> &str {
        self.0.get().map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_sha256_of_the_bytes() {
        let id = BuildId::of(ModuleBytes::whole(std::sync::Arc::from(&b"abc"[..])));
        assert_eq!(
            id.get(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(id.get(), id.get());
    }
}
