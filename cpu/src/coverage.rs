//! Which operation runs in which operand type, and which of those the unit tests execute: the
//! table of `docs/operations.md` and `nnaccelctl info --ops`, made from the code so it cannot
//! drift.
//!
//! *Supported* comes from the operation tables (an operation's primary operand types, the type
//! of its input 0). *Tested* comes from `cpu/tested-operations.txt`, which
//! `scripts/gen-operations.sh` writes from a run of this crate's unit tests: every operation
//! the tests execute to completion records its type and its input 0's operand type (only in
//! test builds, only when `NNACCEL_OP_COVERAGE` names a file). `scripts/test.sh` regenerates
//! both files and fails when they differ from the checked-in ones.

use crate::model::{OperandType, OperationType};

/// The `OPERATION OPERAND_TYPE` lines the unit tests execute (scripts/gen-operations.sh).
const TESTED: &str = include_str!("../tested-operations.txt");

/// The tensor operand types, in the table's column order, and SUBGRAPH (WHILE's input 0).
pub const TENSOR_TYPES: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
    OperandType::TensorQuant8Symm,
    OperandType::TensorQuant8SymmPerChannel,
    OperandType::TensorQuant16Asymm,
    OperandType::TensorQuant16Symm,
    OperandType::TensorInt32,
    OperandType::TensorBool8,
    OperandType::Subgraph,
];

/// One operation type: the operand types it runs in, and those the unit tests execute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationCoverage {
    /// The operation type.
    pub op: OperationType,
    /// Operand types of input 0 the executor implements (empty: no kernel).
    pub supported: Vec<OperandType>,
    /// Of those, the ones the unit tests execute.
    pub tested: Vec<OperandType>,
}

/// Every NNAPI operation type (0..=101), in code order.
pub fn operation_coverage() -> Vec<OperationCoverage> {
    let tested: Vec<(OperationType, OperandType)> = TESTED
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((
                OperationType::from_name(w.next()?)?,
                OperandType::from_name(w.next()?)?,
            ))
        })
        .collect();
    OperationType::ALL
        .iter()
        .map(|&op| {
            let supported: Vec<OperandType> = crate::supported_operation_types()
                .iter()
                .find(|(o, _)| *o == op)
                .map(|(_, t)| t.to_vec())
                .unwrap_or_default();
            let tested = supported
                .iter()
                .copied()
                .filter(|t| tested.contains(&(op, *t)))
                .collect();
            OperationCoverage {
                op,
                supported,
                tested,
            }
        })
        .collect()
}

/// Short column names for the table.
fn short(t: OperandType) -> &'static str {
    use OperandType as T;
    match t {
        T::TensorFloat32 => "F32",
        T::TensorFloat16 => "F16",
        T::TensorQuant8Asymm => "Q8A",
        T::TensorQuant8AsymmSigned => "Q8AS",
        T::TensorQuant8Symm => "Q8S",
        T::TensorQuant8SymmPerChannel => "Q8PC",
        T::TensorQuant16Asymm => "Q16A",
        T::TensorQuant16Symm => "Q16S",
        T::TensorInt32 => "I32",
        T::TensorBool8 => "B8",
        T::Subgraph => "SG",
        other => other.name(),
    }
}

/// The counts under the table: operations with a kernel, (operation, type) pairs supported
/// and tested.
pub fn summary(rows: &[OperationCoverage]) -> String {
    let ops = rows.iter().filter(|r| !r.supported.is_empty()).count();
    let pairs: usize = rows.iter().map(|r| r.supported.len()).sum();
    let tested: usize = rows.iter().map(|r| r.tested.len()).sum();
    format!(
        "{ops} of {} operation types have a CPU kernel; {pairs} (operation, operand type) pairs \
         are supported, {tested} of them executed by the unit tests",
        rows.len()
    )
}

/// The table as Markdown: a row per operation, a column per tensor type; `✓` supported and
/// tested, `s` supported but not executed by a test, blank not supported.
pub fn markdown_table(rows: &[OperationCoverage]) -> String {
    let mut s = String::from("| code | operation |");
    for t in TENSOR_TYPES {
        s.push_str(&format!(" {} |", short(*t)));
    }
    s.push_str("\n|---:|---|");
    for _ in TENSOR_TYPES {
        s.push_str(":-:|");
    }
    s.push('\n');
    for r in rows {
        s.push_str(&format!("| {} | {} |", r.op.code(), r.op.name()));
        for t in TENSOR_TYPES {
            s.push_str(match (r.supported.contains(t), r.tested.contains(t)) {
                (true, true) => " ✓ |",
                (true, false) => " s |",
                _ => " |",
            });
        }
        s.push('\n');
    }
    s
}

/// The table as aligned text (`nnaccelctl info --ops`): the same cells as [`markdown_table`].
pub fn text_table(rows: &[OperationCoverage]) -> String {
    let mut s = format!("{:>4} {:<32}", "code", "operation");
    for t in TENSOR_TYPES {
        s.push_str(&format!(" {:>4}", short(*t)));
    }
    s.push('\n');
    for r in rows {
        s.push_str(&format!("{:>4} {:<32}", r.op.code(), r.op.name()));
        for t in TENSOR_TYPES {
            let cell = match (r.supported.contains(t), r.tested.contains(t)) {
                (true, true) => "✓",
                (true, false) => "s",
                _ => ".",
            };
            s.push_str(&format!(" {cell:>4}"));
        }
        s.push('\n');
    }
    s
}

/// In test builds: appends `OPERATION OPERAND_TYPE` to the file `NNACCEL_OP_COVERAGE` names,
/// for an operation the tests just executed (scripts/gen-operations.sh).
#[cfg(test)]
pub(crate) fn record(op: OperationType, input0: OperandType) {
    use std::io::Write;
    let Some(path) = std::env::var_os("NNACCEL_OP_COVERAGE") else {
        return;
    };
    // One short write per line on an O_APPEND file: lines from parallel tests do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(format!("{} {}\n", op.name(), input0.name()).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_type_has_a_row_and_tested_types_are_supported_ones() {
        let rows = operation_coverage();
        assert_eq!(rows.len(), 102);
        assert_eq!(rows[101].op, OperationType::Rank);
        for r in &rows {
            assert!(r.tested.iter().all(|t| r.supported.contains(t)), "{r:?}");
        }
        let add = &rows[0];
        assert!(add.supported.contains(&OperandType::TensorFloat32));
    }

    #[test]
    fn tables_mark_supported_and_tested_cells() {
        let rows = vec![OperationCoverage {
            op: OperationType::Add,
            supported: vec![OperandType::TensorFloat32, OperandType::TensorInt32],
            tested: vec![OperandType::TensorFloat32],
        }];
        let md = markdown_table(&rows);
        assert!(md.contains("| 0 | ADD | ✓ |"), "{md}");
        assert!(
            md.lines().nth(2).is_some_and(|l| l.contains(" s |")),
            "{md}"
        );
        assert!(summary(&rows).starts_with("1 of 1 operation types"));
        assert!(text_table(&rows).contains("ADD"));
    }
}
