//! [`OpDef`], one row of the operation table: a leaf that the family files and the table
//! (`registry`) both import, so the table can list the families without a circle.

use crate::check::{Ck, Issue};
use crate::model::{OperandType, OperationType};
use crate::tensor::Tensor;

use super::{KResult, OpCtx};

/// One operation type the executor runs.
pub(crate) struct OpDef {
    /// The operation type.
    pub(crate) op: OperationType,
    /// The primary tensor types implemented (of input 0, unless the check says otherwise):
    /// what the coverage table and `getSupportedOperations` report.
    pub(crate) types: &'static [OperandType],
    /// The static check of one operation as written: argument count and types, fixed output
    /// quantization, shapes known before execution. `Issue::Invalid` when it breaks the
    /// operation's NNAPI definition, `Issue::Unsupported` when it is valid but not implemented.
    pub(crate) check: fn(&Ck<'_>) -> Result<(), Issue>,
    /// The kernel: the outputs in order.
    pub(crate) run: fn(&OpCtx<'_>) -> KResult<Vec<Tensor>>,
}

impl OpDef {
    /// The row for `op` on `types`, with its `check` and `run`.
    pub(crate) const fn new(
        op: OperationType,
        types: &'static [OperandType],
        check: fn(&Ck<'_>) -> Result<(), Issue>,
        run: fn(&OpCtx<'_>) -> KResult<Vec<Tensor>>,
    ) -> OpDef {
        OpDef {
            op,
            types,
            check,
            run,
        }
    }
}
