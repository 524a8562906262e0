//! Graph validation and per-operation support checks.

pub(crate) use crate::check::Issue;
use crate::check::*;
use crate::control_flow;
use crate::error::GraphError;
use crate::model::{Graph, Lifetime, Operand, OperandType, OperationType};
use crate::ops::registry;
use crate::order::execution_order;

use OperandType as T;
use OperationType as O;

/// Operation types with kernels and the primary tensor types each supports.
static SUPPORTED: &[(OperationType, &[OperandType])] = &[
    (O::Add, ARITH),
    (O::Sub, ARITH),
    (O::Mul, ARITH),
    (
        O::Div,
        &[T::TensorFloat32, T::TensorFloat16, T::TensorInt32],
    ),
    (O::Relu, F32_Q8),
    (O::Relu1, F32_Q8),
    (O::Relu6, F32_Q8),
    (O::Logistic, F32_Q8),
    (O::Tanh, F32_Q8),
    (O::Floor, FLOAT),
    (O::Reshape, ANY_TENSOR),
    (O::FullyConnected, F32_Q8),
    (O::Conv2d, F32_Q8),
    (O::DepthwiseConv2d, F32_Q8),
    (O::AveragePool2d, F32_Q8),
    (O::MaxPool2d, F32_Q8),
    (O::L2Pool2d, FLOAT),
    (O::Softmax, F32_Q8),
    (O::Concatenation, MOVE_TENSOR),
    (O::L2Normalization, F32_Q8),
    (O::Squeeze, MOVE_TENSOR),
    (O::Transpose, MOVE_TENSOR),
    (O::Pad, MOVE_TENSOR),
    (O::Mean, F32_Q8),
    (O::SpaceToDepth, MOVE_TENSOR),
    (O::DepthToSpace, MOVE_TENSOR),
    (O::Dequantize, DEQUANT_IN),
    (O::Quantize, FLOAT),
    (O::Abs, FLOAT_INT32),
    (O::Exp, FLOAT),
    (O::Log, FLOAT),
    (O::Neg, FLOAT_INT32),
    (O::Rsqrt, FLOAT),
    (O::Sin, FLOAT),
    (O::Sqrt, FLOAT),
    (O::HardSwish, FLOAT),
    (O::Elu, FLOAT),
];

// The public entry points of validation are defined here rather than in model.rs, so that
// validation depends on the model and not the other way round.
impl Graph {
    /// Structural and per-operation validation: operand types and quantization parameters,
    /// constant locations and lengths, graph input/output lists against lifetimes, operand
    /// indexes in range, every temporary/output written exactly once, no cycles, and the
    /// argument count, types and fixed quantization of every operation this executor knows.
    /// Operations without a kernel are only checked structurally.
    ///
    /// The graphs of `referenced` (IF and WHILE subgraphs) are validated by the same rules,
    /// with the control-flow rules (no recursion, nesting at most [`crate::MAX_NESTING_DEPTH`]).
    pub fn validate(&self) -> Result<(), GraphError> {
        validate_model(self).map(|_| ())
    }

    /// Whether this executor implements operation `index` as written (op type + operand types).
    pub fn is_operation_supported(&self, index: usize) -> bool {
        match self.operations.get(index) {
            Some(_) => check_operation(self, index).is_ok(),
            None => false,
        }
    }

    /// Why operation `index` cannot run on this executor, or None when it can.
    pub fn unsupported_reason(&self, index: usize) -> Option<String> {
        if index >= self.operations.len() {
            return Some(format!("operation {index} does not exist"));
        }
        match check_operation(self, index) {
            Ok(()) => None,
            Err(Issue::Invalid(r) | Issue::Unsupported(r)) => Some(format!(
                "operation {index} ({}): {r}",
                operation_label(self, index)
            )),
        }
    }
}

/// Operation types with kernels, and for each the primary tensor types implemented, in code
/// order.
pub fn supported_operation_types() -> &'static [(OperationType, &'static [OperandType])] {
    static ALL: std::sync::OnceLock<Vec<(OperationType, &'static [OperandType])>> =
        std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut all: Vec<_> = SUPPORTED
            .iter()
            .copied()
            .filter(|(op, _)| registry::find(*op).is_none())
            .chain(registry::all().map(|d| (d.op, d.types)))
            .chain(control_flow::SUPPORTED.iter().copied())
            .collect();
        all.sort_by_key(|(op, _)| op.code());
        all
    })
}

fn operand_err(index: usize, reason: impl Into<String>) -> GraphError {
    GraphError::InvalidOperand {
        index,
        reason: reason.into(),
    }
}

fn check_operand(g: &Graph, i: usize, o: &Operand) -> Result<(), GraphError> {
    let ty = o.ty;
    if ty.is_scalar() && !o.dimensions.is_empty() {
        return Err(operand_err(
            i,
            format!("scalar {} with dimensions", ty.name()),
        ));
    }
    let (zp_lo, zp_hi) = match ty {
        T::TensorQuant8Asymm => (0, 255),
        T::TensorQuant8AsymmSigned => (-128, 127),
        T::TensorQuant16Asymm => (0, 65535),
        _ => (0, 0),
    };
    match ty {
        T::TensorQuant8Asymm
        | T::TensorQuant8AsymmSigned
        | T::TensorQuant16Asymm
        | T::TensorQuant8Symm
        | T::TensorQuant16Symm => {
            if !(o.scale > 0.0 && o.scale.is_finite()) {
                return Err(operand_err(i, format!("{} needs a scale > 0", ty.name())));
            }
            if o.zero_point < zp_lo || o.zero_point > zp_hi {
                return Err(operand_err(
                    i,
                    format!(
                        "{} zero point {} outside [{zp_lo}, {zp_hi}]",
                        ty.name(),
                        o.zero_point
                    ),
                ));
            }
        }
        T::TensorInt32 => {
            if !(o.scale >= 0.0 && o.scale.is_finite()) {
                return Err(operand_err(i, "TENSOR_INT32 scale must be >= 0"));
            }
        }
        T::TensorQuant8SymmPerChannel => {
            if o.zero_point != 0 || o.scale != 0.0 {
                return Err(operand_err(
                    i,
                    "TENSOR_QUANT8_SYMM_PER_CHANNEL must have scale 0 and zero point 0",
                ));
            }
            let Some(cq) = &o.channel_quant else {
                return Err(operand_err(
                    i,
                    "per-channel operand without channel quantization",
                ));
            };
            let Some(&extent) = o.dimensions.get(cq.channel_dim as usize) else {
                return Err(operand_err(i, "channel_dim outside the operand's rank"));
            };
            if extent != 0 && cq.scales.len() != extent as usize {
                return Err(operand_err(
                    i,
                    format!(
                        "{} scales for a channel extent of {extent}",
                        cq.scales.len()
                    ),
                ));
            }
            if cq.scales.iter().any(|s| !(*s > 0.0 && s.is_finite())) {
                return Err(operand_err(i, "per-channel scales must be > 0"));
            }
        }
        _ => {
            if o.zero_point != 0 || o.scale != 0.0 {
                return Err(operand_err(
                    i,
                    format!("{} must have scale 0 and zero point 0", ty.name()),
                ));
            }
        }
    }
    if ty != T::TensorQuant8SymmPerChannel && o.channel_quant.is_some() {
        return Err(operand_err(
            i,
            "channel quantization on a non-per-channel type",
        ));
    }
    match &o.lifetime {
        Lifetime::ConstantCopy { offset, length } => {
            let size = o
                .byte_size()
                .ok_or_else(|| operand_err(i, "constant with unknown or too large dimensions"))?;
            if *length != size {
                return Err(operand_err(
                    i,
                    format!("CONSTANT_COPY length {length} but the value needs {size} bytes"),
                ));
            }
            let end = offset
                .checked_add(*length)
                .ok_or_else(|| operand_err(i, "CONSTANT_COPY location overflows"))?;
            if end > g.operand_values.len() {
                return Err(operand_err(
                    i,
                    format!(
                        "CONSTANT_COPY [{offset}, {end}) outside operand_values ({} bytes)",
                        g.operand_values.len()
                    ),
                ));
            }
        }
        Lifetime::ConstantReference { offset, length, .. } => {
            let size = o
                .byte_size()
                .ok_or_else(|| operand_err(i, "constant with unknown or too large dimensions"))?;
            if *length != size {
                return Err(operand_err(
                    i,
                    format!("CONSTANT_REFERENCE length {length} but the value needs {size} bytes"),
                ));
            }
            if offset.checked_add(*length).is_none() {
                return Err(operand_err(i, "CONSTANT_REFERENCE location overflows"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Execution orders of a valid model: the root graph's, and each referenced graph's.
pub(crate) struct ModelOrder {
    pub(crate) root: Vec<usize>,
    pub(crate) referenced: Vec<Vec<usize>>,
}

/// Validates the model: the root graph `g`, each of its referenced graphs, and the references
/// between them; returns every graph's execution order.
pub(crate) fn validate_model(g: &Graph) -> Result<ModelOrder, GraphError> {
    let root = validate_graph(g, g)?;
    let referenced = g
        .referenced
        .iter()
        .enumerate()
        .map(|(k, sub)| {
            validate_graph(sub, g).map_err(|e| GraphError::InReferenced {
                graph: k,
                error: Box::new(e),
            })
        })
        .collect::<Result<_, _>>()?;
    control_flow::check_references(g)?;
    Ok(ModelOrder { root, referenced })
}

/// Validates graph `g` of the model whose root is `root`; returns the operations in a valid
/// execution order.
fn validate_graph(g: &Graph, root: &Graph) -> Result<Vec<usize>, GraphError> {
    let n = g.operands.len();
    for (i, o) in g.operands.iter().enumerate() {
        check_operand(g, i, o)?;
        control_flow::check_operand(root, o).map_err(|r| operand_err(i, r))?;
    }
    for (list, want, what) in [
        (&g.input_indexes, Lifetime::SubgraphInput, "input"),
        (&g.output_indexes, Lifetime::SubgraphOutput, "output"),
    ] {
        let mut seen = vec![false; n];
        for (k, &idx) in list.iter().enumerate() {
            let idx = idx as usize;
            let o = g.operands.get(idx).ok_or_else(|| {
                GraphError::InvalidGraph(format!("{what} {k} names operand {idx}, out of range"))
            })?;
            if o.lifetime != want {
                return Err(GraphError::InvalidGraph(format!(
                    "{what} {k} (operand {idx}) has lifetime {:?}",
                    o.lifetime
                )));
            }
            if std::mem::replace(&mut seen[idx], true) {
                return Err(GraphError::InvalidGraph(format!(
                    "operand {idx} listed twice as a graph {what}"
                )));
            }
        }
        for (idx, o) in g.operands.iter().enumerate() {
            if o.lifetime == want && !seen[idx] {
                return Err(GraphError::InvalidGraph(format!(
                    "operand {idx} has lifetime {want:?} but is not a graph {what}"
                )));
            }
        }
    }
    let mut writer: Vec<Option<usize>> = vec![None; n];
    for (oi, op) in g.operations.iter().enumerate() {
        let err = |reason: String| GraphError::InvalidOperation {
            index: oi,
            op: op.op.name().to_string(),
            reason,
        };
        for &x in &op.inputs {
            if x as usize >= n {
                return Err(err(format!("input operand {x} out of range")));
            }
        }
        if op.outputs.is_empty() {
            return Err(err("no outputs".into()));
        }
        for &x in &op.outputs {
            let x = x as usize;
            let o = g
                .operands
                .get(x)
                .ok_or_else(|| err(format!("output operand {x} out of range")))?;
            if !matches!(
                o.lifetime,
                Lifetime::TemporaryVariable | Lifetime::SubgraphOutput
            ) {
                return Err(err(format!(
                    "output operand {x} has lifetime {:?}, must be TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT",
                    o.lifetime
                )));
            }
            if let Some(prev) = writer[x] {
                return Err(err(format!(
                    "operand {x} is written more than once (also by operation {prev})"
                )));
            }
            writer[x] = Some(oi);
        }
    }
    for (idx, o) in g.operands.iter().enumerate() {
        if matches!(
            o.lifetime,
            Lifetime::TemporaryVariable | Lifetime::SubgraphOutput
        ) && writer[idx].is_none()
        {
            return Err(GraphError::InvalidGraph(format!(
                "operand {idx} ({:?}) is never written by an operation",
                o.lifetime
            )));
        }
    }
    let order = execution_order(
        n,
        g.operations
            .iter()
            .map(|op| (op.inputs.as_slice(), op.outputs.as_slice())),
    )
    .map_err(|_| {
        GraphError::InvalidGraph(
            "the operations contain a cycle (no topological order exists)".into(),
        )
    })?;
    for oi in 0..g.operations.len() {
        if let Err(Issue::Invalid(reason)) = check_operation_in(root, g, oi) {
            return Err(GraphError::InvalidOperation {
                index: oi,
                op: operation_label(g, oi),
                reason,
            });
        }
    }
    Ok(order)
}

/// How errors name operation `oi`: its type, and its first input's operand type when that
/// operand exists (`STRIDED_SLICE, TENSOR_QUANT8_ASYMM`).
pub(crate) fn operation_label(g: &Graph, oi: usize) -> String {
    let Some(op) = g.operations.get(oi) else {
        return format!("operation {oi}");
    };
    match op.inputs.first().and_then(|&i| g.operands.get(i as usize)) {
        Some(o) => format!("{}, {}", op.op.name(), o.ty.name()),
        None => op.op.name().to_string(),
    }
}

/// Ok when the CPU executor can run operation `oi` of the root graph `g` as written (IF and
/// WHILE: with every operation of the graphs they reach).
pub(crate) fn check_operation(g: &Graph, oi: usize) -> Result<(), Issue> {
    check_operation_in(g, g, oi)?;
    control_flow::check_nested(g, oi, &|sub, j| check_operation_in(g, sub, j))
}

/// Ok when the CPU executor can run operation `oi` of `g`, a graph of the model `root`, as
/// written (IF and WHILE: their own arguments only).
pub(crate) fn check_operation_in(root: &Graph, g: &Graph, oi: usize) -> Result<(), Issue> {
    match control_flow::check(root, g, oi) {
        Some(verdict) => verdict,
        None => check_op(g, oi),
    }
}

fn supported_types(op: OperationType) -> Option<&'static [OperandType]> {
    SUPPORTED.iter().find(|(o, _)| *o == op).map(|(_, t)| *t)
}

fn check_op(g: &Graph, oi: usize) -> Result<(), Issue> {
    let op = &g.operations[oi];
    if let Some(def) = registry::find(op.op) {
        return registry::check(def, g, op);
    }
    let Some(types) = supported_types(op.op) else {
        return Err(Issue::Unsupported(format!(
            "{} has no CPU kernel",
            op.op.name()
        )));
    };
    let c = Ck {
        g,
        ins: &op.inputs,
        outs: &op.outputs,
    };
    let t0 = c.ty(0)?;
    let primary_supported = |t: OperandType| -> Result<(), Issue> {
        if types.contains(&t) {
            Ok(())
        } else {
            Err(Issue::Unsupported(format!(
                "{} on {} is not implemented",
                op.op.name(),
                t.name()
            )))
        }
    };
    match op.op {
        O::Add | O::Sub | O::Mul | O::Div => {
            c.counts(&[3], 1)?;
            c.is(1, t0, "second operand")?;
            c.is(2, T::Int32, "fused activation")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::Relu | O::Relu1 | O::Relu6 | O::Logistic | O::Tanh | O::Floor => {
            c.counts(&[1], 1)?;
            c.same_out(t0)?;
            primary_supported(t0)?;
            match op.op {
                O::Logistic => c.out_quant(1.0 / 256.0, 0)?,
                O::Tanh => c.out_quant(1.0 / 128.0, 128)?,
                _ => {}
            }
        }
        O::Abs | O::Exp | O::Log | O::Neg | O::Rsqrt | O::Sin | O::Sqrt | O::HardSwish => {
            c.counts(&[1], 1)?;
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::Elu => {
            c.counts(&[2], 1)?;
            c.is(1, float_scalar(t0), "alpha")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::Dequantize => {
            c.counts(&[1], 1)?;
            primary_supported(t0)?;
            match c.out(0)?.ty {
                T::TensorFloat32 | T::TensorFloat16 => {}
                t => return Err(Issue::Invalid(format!("output type {} invalid", t.name()))),
            }
        }
        O::Quantize => {
            c.counts(&[1], 1)?;
            primary_supported(t0)?;
            let ot = c.out(0)?.ty;
            if !matches!(ot, T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned) {
                return Err(Issue::Invalid(format!("output type {} invalid", ot.name())));
            }
        }
        O::Reshape => {
            c.counts(&[2], 1)?;
            c.is(1, T::TensorInt32, "shape")?;
            c.same_out(t0)?;
            c.same_quant()?;
            primary_supported(t0)?;
        }
        O::Squeeze | O::Transpose => {
            c.counts(&[1, 2], 1)?;
            c.opt(1, T::TensorInt32, "axes/permutation")?;
            c.same_out(t0)?;
            c.same_quant()?;
            primary_supported(t0)?;
        }
        O::Pad => {
            c.counts(&[2], 1)?;
            c.is(1, T::TensorInt32, "paddings")?;
            c.same_out(t0)?;
            c.same_quant()?;
            primary_supported(t0)?;
        }
        O::Concatenation => {
            if op.inputs.len() < 2 {
                return Err(Issue::Invalid(
                    "needs at least one tensor and the axis".into(),
                ));
            }
            c.counts(&[op.inputs.len()], 1)?;
            let last = op.inputs.len() - 1;
            c.is(last, T::Int32, "axis")?;
            for i in 1..last {
                c.is(i, t0, "tensor")?;
            }
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::SpaceToDepth | O::DepthToSpace => {
            c.counts(&[2, 3], 1)?;
            c.is(1, T::Int32, "block size")?;
            c.opt(2, T::Bool, "layout")?;
            c.same_out(t0)?;
            c.same_quant()?;
            primary_supported(t0)?;
        }
        O::Mean => {
            c.counts(&[3], 1)?;
            c.is(1, T::TensorInt32, "axes")?;
            c.is(2, T::Int32, "keep_dims")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::Softmax => {
            c.counts(&[2, 3], 1)?;
            c.is(1, float_scalar(t0), "beta")?;
            c.opt(2, T::Int32, "axis")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
            c.out_quant(1.0 / 256.0, 0)?;
        }
        O::L2Normalization => {
            c.counts(&[1, 2], 1)?;
            c.opt(1, T::Int32, "axis")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
            c.out_quant(1.0 / 128.0, 128)?;
        }
        O::FullyConnected => {
            c.counts(&[4], 1)?;
            c.is(1, t0, "weights")?;
            let bias = if FLOAT.contains(&t0) {
                t0
            } else {
                T::TensorInt32
            };
            c.is(2, bias, "bias")?;
            c.is(3, T::Int32, "fused activation")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::Conv2d | O::DepthwiseConv2d => {
            let dw = usize::from(op.op == O::DepthwiseConv2d);
            c.counts(&[7 + dw, 8 + dw, 10 + dw, 11 + dw, 13 + dw], 1)?;
            let n = op.inputs.len();
            let implicit = n == 7 + dw || n == 8 + dw || (n == 10 + dw && c.ty(7 + dw)? == T::Bool);
            let ft = c.ty(1)?;
            let per_channel_ok = ft == T::TensorQuant8SymmPerChannel && !FLOAT.contains(&t0);
            if ft != t0 && !per_channel_ok {
                return Err(Issue::Invalid(format!(
                    "filter type {} does not match input type {}",
                    ft.name(),
                    t0.name()
                )));
            }
            if ft == T::TensorQuant8SymmPerChannel {
                let want_dim = if dw == 1 { 3 } else { 0 };
                if c.inp(1)?.channel_quant.as_ref().map(|q| q.channel_dim) != Some(want_dim) {
                    return Err(Issue::Invalid(format!(
                        "per-channel filter must have channel_dim {want_dim}"
                    )));
                }
            }
            let bias = if FLOAT.contains(&t0) {
                t0
            } else {
                T::TensorInt32
            };
            c.is(2, bias, "bias")?;
            let first = if implicit { 4 } else { 7 };
            for i in 3..first + 3 + dw {
                c.is(i, T::Int32, "padding/stride/multiplier/activation")?;
            }
            let act = first + 2 + dw;
            c.opt(act + 1, T::Bool, "layout")?;
            c.opt(act + 2, T::Int32, "dilation width")?;
            c.opt(act + 3, T::Int32, "dilation height")?;
            c.same_out(t0)?;
            primary_supported(t0)?;
        }
        O::AveragePool2d | O::MaxPool2d | O::L2Pool2d => {
            c.counts(&[7, 8, 10, 11], 1)?;
            let implicit = op.inputs.len() <= 8;
            let last = if implicit { 6 } else { 9 };
            for i in 1..=last {
                c.is(i, T::Int32, "padding/stride/filter/activation")?;
            }
            c.opt(last + 1, T::Bool, "layout")?;
            c.same_out(t0)?;
            c.same_quant()?;
            primary_supported(t0)?;
        }
        _ => {
            return Err(Issue::Unsupported(format!(
                "{} has no CPU kernel",
                op.op.name()
            )));
        }
    }
    Ok(())
}
