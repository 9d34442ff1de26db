//! Data segments as a reader of a module's memory image needs them.

use wasmparser::{Data, DataKind, Operator};

/// Where an active data segment of memory 0 puts its bytes, when a constant says
/// (`i32.const`): in memory from instantiation on. `None` for a passive segment, another
/// memory's, or one placed relative to an imported global (a shared library's).
pub fn constant_address(data: &Data<'_>) -> Option<u32> {
    let DataKind::Active {
        memory_index: 0,
        offset_expr,
    } = &data.kind
    else {
        return None;
    };
    match offset_expr.get_operators_reader().read() {
        Ok(Operator::I32Const { value }) => Some(value as u32),
        _ => None,
    }
}
