//! Where a store's Pulley interpreter keeps what the signal handler reads, found off the
//! signal path.
//!
//! Pulley's PC is a local of the interpreter's dispatch loop, and its frame pointer, link
//! register and stack are private fields of a `pulley_interpreter::interp::Vm` that Wasmtime
//! keeps behind a private pointer in the store (`StoreOpaque::executor`), swapped for a
//! fiber's own while the fiber runs (`call_async`). So:
//! - [`VmLayout`]: the offsets of `fp`, `lr` and the stack in a `Vm` of this build, found by
//!   setting them on a `Vm` of our own (the same crate and version as Wasmtime's) and finding
//!   the values among its words;
//! - [`ExecutorAt`]: where in the store the pointer to its current `Vm` is, found next to the
//!   store's `VMStoreContext` (which the probe of [`super::store_contexts`] finds) as the one
//!   word that points to a `Vm` at rest (`fp` and `lr` Pulley's "return to host" marker, a
//!   stack of sane size);
//! - [`interpreter_code`]: the interpreter's own machine code in this executable, by its
//!   symbols: a signal whose PC is there interrupted Pulley running bytecode.
//!
//! Candidate pointers are read with `process_vm_readv`, which fails on unmapped memory instead
//! of faulting.

use std::ops::Range;

use anyhow::{anyhow, bail, Context, Result};
use object::{Object, ObjectSymbol};
use pulley_interpreter::interp::Vm;
use pulley_interpreter::XReg;

const WORD: usize = std::mem::size_of::<usize>();
/// Pulley's `fp` and `lr` while no bytecode runs (`HOST_RETURN_ADDR`).
const AT_REST: usize = usize::MAX;

/// Offsets, in bytes, of the fields of this build's `Vm` that the handler reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmLayout {
    pub size: usize,
    pub fp: usize,
    pub lr: usize,
    /// The stack's lowest address, and its length in 16-byte slots.
    pub stack_base: usize,
    pub stack_slots: usize,
}

impl VmLayout {
    /// Found on two `Vm`s with stacks of different sizes, which must agree.
    pub fn of_this_build() -> Result<Self> {
        let layout = Self::calibrate(0x1_2340 * 16)?;
        if layout != Self::calibrate(0x2_3450 * 16)? {
            bail!("Pulley's interpreter state has no fixed layout in this build");
        }
        Ok(layout)
    }

    fn calibrate(stack: usize) -> Result<Self> {
        const FP: usize = 0x5eed_f00d_0000_1230;
        const LR: usize = 0x5eed_ba11_0000_4560;
        let mut vm = Vm::with_stack(stack).map_err(|_| anyhow!("out of memory"))?;
        // SAFETY: no bytecode runs on this Vm; the values are only looked for.
        unsafe {
            vm.set_fp(FP as *mut u8);
            vm.set_lr(LR as *mut u8);
        }
        let top = vm.state()[XReg::sp].get_ptr::<u8>() as usize;
        let size = std::mem::size_of::<Vm>();
        let words: Vec<usize> = (0..size / WORD)
            .map(|i| read_word(&vm as *const Vm as usize + i * WORD).unwrap_or(0))
            .collect();
        let only = |value: usize, what: &str| {
            let mut at = words.iter().enumerate().filter(|&(_, &w)| w == value);
            match (at.next(), at.next()) {
                (Some((i, _)), None) => Ok(i * WORD),
                _ => Err(anyhow!(
                    "cannot find Pulley's {what} in its interpreter state"
                )),
            }
        };
        Ok(VmLayout {
            size,
            fp: only(FP, "frame pointer")?,
            lr: only(LR, "link register")?,
            stack_base: only(top - stack, "stack")?,
            stack_slots: only(stack / 16, "stack size")?,
        })
    }

    /// Whether `vm` is a `Vm` of this layout that runs no bytecode.
    fn at_rest(&self, vm: usize) -> bool {
        let word = |offset| read_word(vm.wrapping_add(offset));
        let (Some(fp), Some(lr), Some(base), Some(slots)) = (
            word(self.fp),
            word(self.lr),
            word(self.stack_base),
            word(self.stack_slots),
        ) else {
            return false;
        };
        fp == AT_REST
            && lr == AT_REST
            && base != 0
            && base.is_multiple_of(16)
            && (1..1 << 32).contains(&slots)
            && read_word(base).is_some()
    }
}

/// Where a store keeps the pointer to its current interpreter state: `from_context` bytes from
/// its `VMStoreContext`; the `Vm` is `vm_in_state` bytes into the state it points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecutorAt {
    pub from_context: isize,
    pub vm_in_state: usize,
}

/// How far from the `VMStoreContext` the store's executor is looked for: both lie in
/// Wasmtime's `StoreOpaque` (240 bytes apart in this build).
const SEARCHED: isize = 4 * 1024;
/// Where the `Vm` may lie in Wasmtime's `VmState` (a `Vm` and an `Option<usize>`).
const VM_IN_STATE: [usize; 2] = [0, 16];

/// Finds where the store whose `VMStoreContext` is at `context` keeps its interpreter, while
/// it runs no bytecode; `known` (another store's finding, the same in every store of this
/// build) is checked first.
pub fn find_executor(
    context: usize,
    vm: &VmLayout,
    known: Option<ExecutorAt>,
) -> Result<ExecutorAt> {
    let holds_vm = |at: ExecutorAt| {
        read_word(context.wrapping_add_signed(at.from_context))
            .filter(|&state| may_point_to_state(state))
            .is_some_and(|state| vm.at_rest(state + at.vm_in_state))
    };
    if let Some(at) = known.filter(|&at| holds_vm(at)) {
        return Ok(at);
    }
    // The words around the context; only those that may point to a state are followed.
    let mut pointers: Vec<isize> = (-SEARCHED..SEARCHED)
        .step_by(WORD)
        .filter(|&from| {
            read_word(context.wrapping_add_signed(from)).is_some_and(may_point_to_state)
        })
        .collect();
    // Other words may point to the state too (copies in the heap objects past the store): the
    // store's field is the one nearest its context.
    pointers.sort_by_key(|from| from.unsigned_abs());
    pointers
        .into_iter()
        .flat_map(|from_context| {
            VM_IN_STATE.map(|vm_in_state| ExecutorAt {
                from_context,
                vm_in_state,
            })
        })
        .find(|&at| holds_vm(at))
        .context("cannot find the store's Pulley interpreter")
}

/// Whether `word` may be the address of Wasmtime's `VmState`: a heap address, aligned as the
/// `Vm` in it is.
fn may_point_to_state(word: usize) -> bool {
    word >= 1 << 16 && word.is_multiple_of(16)
}

/// The address ranges of the interpreter's machine code that runs bytecode (its dispatch
/// loop and the opcode handlers it calls), from the symbols of the file it is linked into.
pub fn interpreter_code() -> Result<Vec<Range<usize>>> {
    // A function of the interpreter's, whose runtime address gives the file's load bias.
    let anchor = Vm::with_stack as fn(usize) -> _ as usize;
    let path = file_of(anchor)?;
    let data = Mapped::open(&path).with_context(|| format!("cannot read {path}"))?;
    let file = object::File::parse(data.bytes()).with_context(|| format!("cannot parse {path}"))?;
    let mut bias = None;
    let mut code = Vec::new();
    for symbol in file.symbols() {
        let Ok(name) = symbol.name() else { continue };
        if !name.contains("pulley_interpreter") {
            continue;
        }
        let name = format!("{:#}", rustc_demangle::demangle(name));
        if name == "pulley_interpreter::interp::Vm::with_stack" {
            bias = Some(anchor.wrapping_sub(symbol.address() as usize));
        }
        // The entry and exit (`Vm::call_*`), with no bytecode PC at hand, are not running it.
        let runs_bytecode = (name.contains("pulley_interpreter::interp")
            || name.contains("pulley_interpreter::decode"))
            && !name.contains("interp::Vm::")
            && !name.contains("drop_in_place");
        if runs_bytecode && symbol.size() > 0 {
            let start = symbol.address() as usize;
            code.push(start..start + symbol.size() as usize);
        }
    }
    let bias = bias.with_context(|| format!("{path} has no symbols of Pulley's interpreter"))?;
    let mut code: Vec<Range<usize>> = code
        .into_iter()
        .map(|r| r.start.wrapping_add(bias)..r.end.wrapping_add(bias))
        .collect();
    code.sort_by_key(|r| r.start);
    code.dedup_by(|next, prev| {
        let adjacent = next.start <= prev.end;
        if adjacent {
            prev.end = prev.end.max(next.end);
        }
        adjacent
    });
    Ok(code)
}

/// A file mapped read-only: of an executable with debug info (a hundred megabytes), only the
/// pages parsing touches (its symbols) are read.
struct Mapped {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn open(path: &str) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        // SAFETY: a private read-only mapping of a file we opened; the mapping outlives the
        // descriptor by design.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { addr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes until dropped.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps what `open` mapped, once.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// The path of the executable or shared library that holds `address`.
fn file_of(address: usize) -> Result<String> {
    // SAFETY: a zeroed Dl_info is valid; dladdr only writes it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr accepts any address.
    let found = unsafe { libc::dladdr(address as *const libc::c_void, &mut info) } != 0;
    if found && !info.dli_fname.is_null() {
        // SAFETY: dladdr's file name is a NUL-terminated string that lives with the mapping.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        let name = name.to_string_lossy();
        // The main executable may be named as it was started, relative to a directory since left.
        if name.starts_with('/') {
            return Ok(name.into_owned());
        }
    }
    Ok("/proc/self/exe".to_string())
}

/// The word at `addr`, or `None` where it is not mapped.
fn read_word(addr: usize) -> Option<usize> {
    let mut word = 0usize;
    let local = libc::iovec {
        iov_base: &mut word as *mut usize as *mut libc::c_void,
        iov_len: WORD,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: WORD,
    };
    // SAFETY: reads this process's memory into `word` through the kernel, which fails on
    // unmapped memory rather than faulting.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (read == WORD as isize).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_found_and_read_back_from_a_vm() {
        let layout = VmLayout::of_this_build().unwrap();
        let mut vm = Vm::with_stack(1 << 16).unwrap();
        let at = &vm as *const Vm as usize;
        assert!(!layout.at_rest(at + 8));
        assert!(layout.at_rest(at), "a new Vm is at rest");
        // SAFETY: no bytecode runs on this Vm.
        unsafe { vm.set_fp(0x1000 as *mut u8) };
        assert_eq!(read_word(at + layout.fp), Some(0x1000));
        assert!(!layout.at_rest(at));
        let base = read_word(at + layout.stack_base).unwrap();
        let top = vm.state()[XReg::sp].get_ptr::<u8>() as usize;
        assert_eq!(base + read_word(at + layout.stack_slots).unwrap() * 16, top);
    }

    #[test]
    fn the_interpreter_loop_is_in_its_code() {
        let code = interpreter_code().unwrap();
        assert!(!code.is_empty());
        let total: usize = code.iter().map(|r| r.len()).sum();
        assert!(total > 4096, "{total} bytes");
        let not_running = Vm::with_stack as fn(usize) -> _ as usize;
        assert!(!code.iter().any(|r| r.contains(&not_running)));
    }
}
