//! What every stage shares and none owns, below them all: the bounded reader of a guest's
//! linear memory ([`guest_memory`]), what wasmspy reads of Wasmtime's instances ([`vmctx`]), a
//! stack taken on the guest's thread ([`guest_stack`]), a frame resolved to a module's code
//! ([`raw_frame`]), the host's executable and libraries in memory ([`loaded_objects`]), a
//! source file's path as every view shows it ([`source_path`]), bytes as hex ([`hex`]), the
//! reading of a file that an untrusted path names ([`regular_file`]) and a value computed on
//! a thread of its own ([`background`]). The language runtimes'
//! walks, the samplers, the resolver, the recorder and the report all speak it; it uses none
//! of them.

pub mod background;
pub mod guest_memory;
pub mod guest_stack;
pub mod hex;
pub mod loaded_objects;
pub mod raw_frame;
pub mod regular_file;
pub mod source_path;
pub mod vmctx;

pub use guest_memory::{LinearMemory, Memory};
pub use guest_stack::{GuestStack, Spliced, MAX_STACK_DEPTH};
pub use raw_frame::{ModuleId, RawFrame};
