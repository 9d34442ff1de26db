//! The host's own code: the executable and the shared libraries loaded in this process, as
//! `dl_iterate_phdr` lists them, with the unwind tables each keeps mapped (`.eh_frame_hdr`,
//! `.eh_frame`). The signal handler unwinds host frames with those tables
//! ([`crate::capture`]); the resolver names the frames from each object's file
//! ([`crate::resolve`]). Listed once, the first time asked: wasmspy loads no library later,
//! and an object loaded later (`dlopen`) is not listed, so its frames are unwound by frame
//! pointer and named by its address.

use std::ops::Range;
use std::sync::OnceLock;

use super::hex::hex;

/// One object's code in memory.
#[derive(Debug)]
pub struct LoadedObject {
    /// Its file: the executable's path, a library's as the loader found it, or `[vdso]`
    /// for the kernel's, which has no file.
    pub path: String,
    /// Whether it is the running executable, whose file is `/proc/self/exe` whatever
    /// replaced its path since it started.
    pub executable: bool,
    /// The GNU build id its notes carry, in hex; empty where it has none.
    pub build_id: String,
    /// The addresses its loadable segments span.
    pub range: Range<u64>,
    /// What its addresses in the file are moved by (`dlpi_addr`): an address in memory less
    /// the bias is the address its symbols and DWARF name.
    pub bias: u64,
    /// Its `.eh_frame_hdr` (the index of its unwind table) and the `.eh_frame` it points at,
    /// to the end of the segment that holds it (the table's own terminator ends it sooner),
    /// with their addresses in memory; `None` for an object without them.
    pub unwind: Option<UnwindTables>,
}

/// An object's unwind tables, mapped with the object for as long as it stays loaded: never
/// unloaded here (see the module's documentation), so `'static`.
#[derive(Debug)]
pub struct UnwindTables {
    pub eh_frame_hdr: &'static [u8],
    pub eh_frame_hdr_at: u64,
    pub eh_frame: &'static [u8],
    pub eh_frame_at: u64,
}

/// The object whose segments hold `address`, and its index in [`loaded_objects`].
pub fn object_at(address: u64) -> Option<(usize, &'static LoadedObject)> {
    loaded_objects()
        .iter()
        .enumerate()
        .find(|(_, o)| o.range.contains(&address))
}

/// The objects loaded in this process, listed once.
pub fn loaded_objects() -> &'static [LoadedObject] {
    static OBJECTS: OnceLock<Vec<LoadedObject>> = OnceLock::new();
    OBJECTS.get_or_init(list)
}

fn list() -> Vec<LoadedObject> {
    let mut objects: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback gets a valid dl_phdr_info for each object for the length of the
    // call, and `data` is the vector above, which outlives `dl_iterate_phdr`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(one_object),
            &mut objects as *mut Vec<LoadedObject> as *mut libc::c_void,
        );
    }
    objects
}

unsafe extern "C" fn one_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: as `list` says.
    let (info, objects) = unsafe { (&*info, &mut *(data as *mut Vec<LoadedObject>)) };
    // SAFETY: the loader's program headers of the object, `dlpi_phnum` of them.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let loads: Vec<Range<u64>> = headers
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD)
        .map(|h| bias + h.p_vaddr..bias + h.p_vaddr + h.p_memsz)
        .collect();
    let (Some(start), Some(end)) = (
        loads.iter().map(|r| r.start).min(),
        loads.iter().map(|r| r.end).max(),
    ) else {
        return 0;
    };
    // SAFETY: the loader's name of the object, a C string; empty for the executable.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
    let path = match name.as_ref() {
        "" => std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "/proc/self/exe".into()),
        vdso if vdso.starts_with("linux-vdso") || vdso.starts_with("linux-gate") => "[vdso]".into(),
        named => named.to_string(),
    };
    let unwind = headers
        .iter()
        .find(|h| h.p_type == libc::PT_GNU_EH_FRAME)
        .and_then(|h| unwind_tables(bias + h.p_vaddr, h.p_memsz, &loads));
    let build_id = headers
        .iter()
        .filter(|h| h.p_type == libc::PT_NOTE)
        .map(|h| bias + h.p_vaddr..bias + h.p_vaddr + h.p_memsz)
        .filter(|notes| loaded(notes, &loads))
        .find_map(|notes| {
            // SAFETY: inside a loadable segment of a loaded object (checked).
            let notes = unsafe {
                std::slice::from_raw_parts(
                    notes.start as *const u8,
                    (notes.end - notes.start) as usize,
                )
            };
            gnu_build_id(notes)
        })
        .unwrap_or_default();
    objects.push(LoadedObject {
        path,
        executable: name.is_empty(),
        build_id,
        range: start..end,
        bias,
        unwind,
    });
    0
}

/// Whether `range` lies inside one of the loadable segments `loads`: mapped, while the object
/// stays loaded.
fn loaded(range: &Range<u64>, loads: &[Range<u64>]) -> bool {
    loads
        .iter()
        .any(|l| l.start <= range.start && range.end <= l.end)
}

/// The GNU build id among ELF notes (`NT_GNU_BUILD_ID`, named `GNU`), in hex.
fn gnu_build_id(mut notes: &[u8]) -> Option<String> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |b: &[u8], at: usize| Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let aligned = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (name_size, desc_size, kind) = (
            word(notes, 0)? as usize,
            word(notes, 4)? as usize,
            word(notes, 8)?,
        );
        let name = notes.get(12..12 + name_size)?;
        let desc_at = 12 + aligned(name_size);
        let desc = notes.get(desc_at..desc_at + desc_size)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(hex(desc));
        }
        notes = notes.get(desc_at + aligned(desc_size)..)?;
    }
    None
}

/// The tables of an object whose `.eh_frame_hdr` is the `len` bytes at `at`, within its
/// loadable segments `loads`.
fn unwind_tables(at: u64, len: u64, loads: &[Range<u64>]) -> Option<UnwindTables> {
    if !loaded(&(at..at + len), loads) {
        return None;
    }
    let within = |a: u64| loads.iter().find(|r| r.contains(&a)).map(|r| r.end);
    // SAFETY: inside a loadable segment of a loaded object, mapped while it stays loaded.
    let eh_frame_hdr = unsafe { std::slice::from_raw_parts(at as *const u8, len as usize) };
    let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(at);
    let parsed = gimli::EhFrameHdr::new(eh_frame_hdr, gimli::NativeEndian)
        .parse(&bases, std::mem::size_of::<usize>() as u8)
        .ok()?;
    let gimli::Pointer::Direct(eh_frame_at) = parsed.eh_frame_ptr() else {
        return None;
    };
    let end = within(eh_frame_at)?;
    // SAFETY: as above: from the table's start to the end of the segment holding it.
    let eh_frame = unsafe {
        std::slice::from_raw_parts(eh_frame_at as *const u8, (end - eh_frame_at) as usize)
    };
    Some(UnwindTables {
        eh_frame_hdr,
        eh_frame_hdr_at: at,
        eh_frame,
        eh_frame_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_is_in_a_listed_object_with_unwind_tables() {
        let here = this_test_is_in_a_listed_object_with_unwind_tables as *const () as usize as u64;
        let (_, object) = object_at(here).expect("the test's own code is listed");
        assert!(object.bias <= here && object.range.contains(&here));
        let tables = object.unwind.as_ref().expect("Rust code has .eh_frame");
        assert!(object.range.contains(&tables.eh_frame_at));
        // The C library's code is listed too, from its own file.
        let libc_code = libc::getpid as *const () as usize as u64;
        let (_, libc_object) = object_at(libc_code).expect("libc is listed");
        assert!(libc_object.path.contains("libc"), "{libc_object:?}");
    }
}
