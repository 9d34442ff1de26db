//! A frame of a sample resolved to a registered module's code, before symbolization: what
//! the resolver makes of captured addresses, what a language runtime splices its own frames
//! into, and what the recorder interns.

crate::profile::ids! {
    /// A module registered with the [`Resolver`](crate::resolve::Resolver), in the order of registration (each core
    /// module of a component is one).
    ModuleId;
}

/// A frame of a sample, resolved to a registered module's code, before symbolization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RawFrame {
    /// An instruction of a Wasm function: the sampled one for the leaf, the call for callers.
    Wasm {
        /// Index in the resolver's registry; `None` for a module nobody registered.
        module: Option<ModuleId>,
        /// Index in the module's function index space (imports first).
        func_index: u32,
        /// Offset of the instruction in the module's bytes.
        offset: u32,
    },
    /// Inside the host function that import `func_index` resolved to.
    HostCall {
        module: Option<ModuleId>,
        func_index: u32,
    },
    /// Inside the host function a component's shim reaches with the `call_indirect` at
    /// `offset` (see [`crate::wasm::component`]).
    LoweredCall { module: ModuleId, offset: u32 },
    /// Inside a host function the guest reached other than by a direct call.
    UnknownHostCall,
    /// Inside Wasmtime's own code: trampolines, libcalls such as `memory.grow`.
    Runtime,
    /// A host function's code (see [`crate::shared::loaded_objects`]): the sampled
    /// instruction's address for the leaf, an address inside the call for callers.
    Host { address: u64 },
    /// The root of a sample of the host's own work, outside any guest call (its frames
    /// above).
    HostRoot,
    /// A frame of the interpreted language of a runtime (see [`crate::runtimes`]) in module
    /// `module`: its code, as the runtime numbers it, and its line (0: unknown).
    Interpreted {
        module: ModuleId,
        code: u32,
        line: u32,
    },
}
