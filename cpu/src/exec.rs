//! The graph interpreter: prepared graphs and their execution.

use std::borrow::Cow;

use crate::error::{ExecError, GraphError, OutputShape};
use crate::model::{Graph, Lifetime, OperandType};
use crate::ops::{self, OpCtx};
use crate::tensor::{Data, Tensor, kind_of, num_elements};
use crate::validate;

/// One execution input.
#[derive(Debug, Clone)]
pub enum InputArg<'a> {
    /// Raw little-endian bytes, exactly the size of the tensor.
    Value {
        /// The element bytes.
        data: &'a [u8],
        /// Fully specified dimensions, or empty to use the model's.
        dimensions: Vec<u32>,
    },
    /// The optional input is omitted.
    NoValue,
}

/// A validated graph ready to run many times, possibly from several threads at once.
#[derive(Debug)]
pub struct PreparedGraph {
    graph: Graph,
    /// Operation indexes in execution order.
    order: Vec<usize>,
    /// Decoded CONSTANT_COPY operands.
    consts: Vec<Option<Tensor>>,
    /// For each operand, the position in `order` of its last reader (usize::MAX if none).
    last_use: Vec<usize>,
    /// For each operation, its constant float weights transposed to `[k][n]` (FULLY_CONNECTED,
    /// CONV_2D), so the GEMM streams them instead of gathering them on every execution.
    weights_t: Vec<Option<Vec<f32>>>,
}

impl PreparedGraph {
    /// Validates `graph`, checks that every operation is supported, decodes constants.
    pub fn new(graph: Graph) -> Result<Self, GraphError> {
        let order = validate::validate_graph(&graph)?;
        for i in 0..graph.operations.len() {
            if let Err(validate::Issue::Invalid(reason) | validate::Issue::Unsupported(reason)) =
                validate::check_operation(&graph, i)
            {
                return Err(GraphError::Unsupported {
                    index: i,
                    op: validate::operation_label(&graph, i),
                    reason,
                });
            }
        }
        let mut consts = vec![None; graph.operands.len()];
        for (i, operand) in graph.operands.iter().enumerate() {
            if let Lifetime::ConstantCopy { offset, length } = operand.lifetime {
                // validate_graph checked the range and the length.
                let bytes = offset
                    .checked_add(length)
                    .and_then(|end| graph.operand_values.get(offset..end))
                    .ok_or_else(|| GraphError::InvalidOperand {
                        index: i,
                        reason: "CONSTANT_COPY location outside operand_values".into(),
                    })?;
                consts[i] = Some(Tensor::new(
                    operand.dimensions.clone(),
                    Data::decode(operand.ty, bytes),
                ));
            }
        }
        let mut last_use = vec![usize::MAX; graph.operands.len()];
        for (pos, &opi) in order.iter().enumerate() {
            for &inp in &graph.operations[opi].inputs {
                last_use[inp as usize] = pos;
            }
        }
        let weights_t = graph
            .operations
            .iter()
            .map(|op| ops::transposed_weights(&graph, op, &consts))
            .collect();
        Ok(PreparedGraph {
            graph,
            order,
            consts,
            last_use,
            weights_t,
        })
    }

    /// The graph this was prepared from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the graph. See the crate documentation for the contract.
    pub fn execute(
        &self,
        pools: &[&[u8]],
        inputs: &[InputArg<'_>],
        outputs: &mut [&mut [u8]],
    ) -> Result<Vec<OutputShape>, ExecError> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.execute_inner(pools, inputs, outputs)
        })) {
            Ok(r) => r,
            Err(_) => Err(ExecError::Failed("internal error in a kernel".into())),
        }
    }

    fn execute_inner(
        &self,
        pools: &[&[u8]],
        inputs: &[InputArg<'_>],
        outputs: &mut [&mut [u8]],
    ) -> Result<Vec<OutputShape>, ExecError> {
        let g = &self.graph;
        if inputs.len() != g.input_indexes.len() {
            return Err(ExecError::InvalidArgument(format!(
                "{} inputs given, the graph has {}",
                inputs.len(),
                g.input_indexes.len()
            )));
        }
        if outputs.len() != g.output_indexes.len() {
            return Err(ExecError::InvalidArgument(format!(
                "{} outputs given, the graph has {}",
                outputs.len(),
                g.output_indexes.len()
            )));
        }
        let mut values: Vec<Option<Cow<'_, Tensor>>> = Vec::with_capacity(g.operands.len());
        for (i, operand) in g.operands.iter().enumerate() {
            let v = match &operand.lifetime {
                Lifetime::ConstantCopy { .. } => self.consts[i].as_ref().map(Cow::Borrowed),
                Lifetime::ConstantReference {
                    pool,
                    offset,
                    length,
                } => {
                    let p = pools.get(*pool as usize).ok_or_else(|| {
                        ExecError::InvalidArgument(format!(
                            "operand {i}: pool {pool} not given ({} pools)",
                            pools.len()
                        ))
                    })?;
                    let bytes = offset
                        .checked_add(*length)
                        .and_then(|end| p.get(*offset..end))
                        .ok_or_else(|| {
                            ExecError::InvalidArgument(format!(
                                "operand {i}: constant reference outside pool {pool}"
                            ))
                        })?;
                    Some(Cow::Owned(Tensor::new(
                        operand.dimensions.clone(),
                        Data::decode(operand.ty, bytes),
                    )))
                }
                _ => None,
            };
            values.push(v);
        }
        for (k, arg) in inputs.iter().enumerate() {
            let idx = g.input_indexes[k] as usize;
            let operand = &g.operands[idx];
            match arg {
                InputArg::NoValue => {}
                InputArg::Value { data, dimensions } => {
                    let dims = resolve_input_dims(k, &operand.dimensions, dimensions, operand.ty)?;
                    let n = num_elements(&dims).ok_or_else(|| {
                        ExecError::InvalidArgument(format!("input {k}: tensor too large"))
                    })?;
                    let need = n * operand.ty.element_size();
                    if data.len() != need {
                        return Err(ExecError::InvalidArgument(format!(
                            "input {k}: {} bytes given, {need} needed for {} {:?}",
                            data.len(),
                            operand.ty.name(),
                            dims
                        )));
                    }
                    values[idx] = Some(Cow::Owned(Tensor::new(
                        dims,
                        Data::decode(operand.ty, data),
                    )));
                }
            }
        }

        for (pos, &opi) in self.order.iter().enumerate() {
            let op = &g.operations[opi];
            let produced = {
                let ctx = OpCtx {
                    graph: g,
                    op,
                    index: opi,
                    values: &values,
                    weights_t: self.weights_t.get(opi).and_then(|w| w.as_deref()),
                };
                ops::run(&ctx)?
            };
            #[cfg(test)]
            if let Some(first) = op.inputs.first().and_then(|&i| g.operands.get(i as usize)) {
                crate::coverage::record(op.op, first.ty);
            }
            if produced.len() != op.outputs.len() {
                return Err(ExecError::Failed(format!(
                    "operation {opi} ({}) produced {} outputs, expected {}",
                    op.op.name(),
                    produced.len(),
                    op.outputs.len()
                )));
            }
            for (t, &oi) in produced.into_iter().zip(&op.outputs) {
                let operand = &g.operands[oi as usize];
                if t.data.kind() != kind_of(operand.ty) {
                    return Err(ExecError::Failed(format!(
                        "operation {opi} ({}): output {oi} computed with the wrong element type for {}",
                        op.op.name(),
                        operand.ty.name()
                    )));
                }
                if !dims_compatible(&operand.dimensions, &t.dims) {
                    return Err(ExecError::InvalidArgument(format!(
                        "operation {opi} ({}): output {oi} has shape {:?}, declared {:?}",
                        op.op.name(),
                        t.dims,
                        operand.dimensions
                    )));
                }
                values[oi as usize] = Some(Cow::Owned(t));
            }
            for &inp in &op.inputs {
                let inp = inp as usize;
                if self.last_use[inp] == pos
                    && g.operands[inp].lifetime == Lifetime::TemporaryVariable
                {
                    values[inp] = None;
                }
            }
        }

        let mut shapes = Vec::with_capacity(outputs.len());
        let mut all_ok = true;
        for (k, &oi) in g.output_indexes.iter().enumerate() {
            let t = values[oi as usize].as_deref().ok_or_else(|| {
                ExecError::Failed(format!("output {k} (operand {oi}) was not computed"))
            })?;
            let ty = g.operands[oi as usize].ty;
            let ok = outputs[k].len() >= t.data.len() * ty.element_size();
            all_ok &= ok;
            shapes.push(OutputShape {
                dimensions: t.dims.clone(),
                is_sufficient: ok,
            });
        }
        if !all_ok {
            return Err(ExecError::OutputInsufficientSize(shapes));
        }
        for (k, &oi) in g.output_indexes.iter().enumerate() {
            if let Some(t) = values[oi as usize].as_deref() {
                t.data
                    .encode(g.operands[oi as usize].ty, &mut outputs[k][..]);
            }
        }
        Ok(shapes)
    }
}

/// Whether `actual` fits `declared` (empty = unknown rank; 0 = unknown extent).
fn dims_compatible(declared: &[u32], actual: &[u32]) -> bool {
    if declared.is_empty() {
        return true;
    }
    declared.len() == actual.len() && declared.iter().zip(actual).all(|(&d, &a)| d == 0 || d == a)
}

fn resolve_input_dims(
    k: usize,
    model: &[u32],
    given: &[u32],
    ty: OperandType,
) -> Result<Vec<u32>, ExecError> {
    if ty.is_scalar() {
        if !given.is_empty() {
            return Err(ExecError::InvalidArgument(format!(
                "input {k}: dimensions given for a scalar"
            )));
        }
        return Ok(Vec::new());
    }
    let dims = if given.is_empty() {
        model.to_vec()
    } else {
        if !model.is_empty() && model.len() != given.len() {
            return Err(ExecError::InvalidArgument(format!(
                "input {k}: rank {} given, the model has rank {}",
                given.len(),
                model.len()
            )));
        }
        for (i, (&m, &g)) in model.iter().zip(given).enumerate() {
            if m != 0 && m != g {
                return Err(ExecError::InvalidArgument(format!(
                    "input {k}: extent {i} is {g}, the model says {m}"
                )));
            }
        }
        given.to_vec()
    };
    if dims.is_empty() || dims.contains(&0) {
        return Err(ExecError::InvalidArgument(format!(
            "input {k}: dimensions not fully specified ({dims:?})"
        )));
    }
    Ok(dims)
}
