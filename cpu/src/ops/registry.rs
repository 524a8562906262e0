//! The table of operations: for each operation type the executor runs, the primary operand
//! types it implements, its static check and its kernel ([`OpDef`]). Each family of kernels
//! (a file under `ops/`) lists its operations in a `DEFS` table, and [`FAMILIES`] lists the
//! families: adding an operation is one file (or one function in its family's file) and one
//! table row, never another arm of a match.
//!
//! Validation (`validate::check_op`) and execution (`ops::run`) both look an operation up here
//! and nowhere else: an operation without a row has no kernel.

use crate::check::{Ck, Issue};
use crate::model::{Graph, Operation, OperationType};

pub(crate) use super::opdef::OpDef;

/// Every family's table.
static FAMILIES: &[&[OpDef]] = &[
    super::movement::DEFS,
    super::reduce::DEFS,
    super::compare::DEFS,
    super::normalization::DEFS,
    super::conv_variants::DEFS,
    super::resize::DEFS,
    super::minmax::DEFS,
    super::lstm::DEFS,
    super::detection::DEFS,
    super::lookup::DEFS,
    super::rnn::DEFS,
    super::elementwise::DEFS,
    super::softmax::DEFS,
    super::conv::DEFS,
    super::pool::DEFS,
    super::shape::DEFS,
];

/// Every operation in the tables.
pub(crate) fn all() -> impl Iterator<Item = &'static OpDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// The table row of `op`, if a family defines it. Execution asks for every operation it runs,
/// so the rows are indexed by operation code once rather than searched each time.
pub(crate) fn find(op: OperationType) -> Option<&'static OpDef> {
    static BY_CODE: std::sync::OnceLock<Vec<Option<&'static OpDef>>> = std::sync::OnceLock::new();
    let index = BY_CODE.get_or_init(|| {
        let mut v = vec![None; OperationType::ALL.len()];
        for d in all() {
            if let Some(slot) = usize::try_from(d.op.code()).ok().and_then(|i| v.get_mut(i)) {
                // The first family to define an operation wins, as the search did.
                slot.get_or_insert(d);
            }
        }
        v
    });
    usize::try_from(op.code())
        .ok()
        .and_then(|i| index.get(i).copied().flatten())
}

/// Runs `def`'s check on `op` of `g`, then checks that input 0's type is one `def`
/// implements.
pub(crate) fn check(def: &OpDef, g: &Graph, op: &Operation) -> Result<(), Issue> {
    let c = Ck {
        g,
        ins: &op.inputs,
        outs: &op.outputs,
    };
    (def.check)(&c)?;
    c.implemented(def.op, def.types)
}
