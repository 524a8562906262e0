//! The model under construction: operands made from TFLite tensors (on first use), constants
//! (small ones copied into `operand_values`, the rest in one memfd pool), operations tagged
//! with the TFLite node they come from, and the constant folding of DEQUANTIZE and DENSIFY.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use nnaccel_hal::{
    DataLocation, Model, Operand, OperandLifetime, OperandType, Operation, OperationType,
    Subgraph as HalSubgraph, SymmPerChannelQuantParams,
};
use nnaccel_protocol::modelfile::ConstantPool;

use super::LowerError;
use super::code::{DENSIFY, DEQUANTIZE};
use crate::graph::{Activation, ElementType, Graph, Node, Subgraph, Tensor, builtin_name};

type Result<T> = std::result::Result<T, LowerError>;

/// Constants up to this size are copied into `operand_values` (NNAPI's own threshold for
/// `ANeuralNetworksModel_setOperandValue` copies); larger ones go to the pool.
const MAX_COPY_BYTES: usize = 128;
/// Alignment of each value in `operand_values`.
const COPY_ALIGN: usize = 4;
/// DEQUANTIZE(DENSIFY(constant)) is as deep as folding goes in real models; the bound keeps a
/// malformed graph whose nodes feed each other from recursing without end.
const MAX_FOLD_DEPTH: usize = 4;

/// NNAPI's implicit padding codes.
pub(super) const PADDING_SAME: i32 = 1;
pub(super) const PADDING_VALID: i32 = 2;

/// An activation that still has to be applied after the operation that computes into
/// `target` (its result goes to `dest`).
pub(super) struct Fused {
    /// The NNAPI fuse code to give the operation.
    pub code: i32,
    /// Where the operation writes.
    pub target: u32,
    /// A separate activation operation and its destination.
    pub after: Option<(OperationType, u32)>,
}

/// Builds one NN HAL model from (part of) a TFLite subgraph.
pub(super) struct Builder<'g> {
    pub sub: &'g Subgraph,
    /// The TFLite node being lowered, for errors and origins.
    pub node: usize,
    pub operands: Vec<Operand>,
    pub operations: Vec<Operation>,
    pub origins: Vec<usize>,
    /// TFLite tensor → the operand holding its value.
    pub values: HashMap<usize, u32>,
    /// Constant operands and their bytes, placed by [`Builder::finish`].
    consts: Vec<(u32, Vec<u8>)>,
    /// TFLite tensor → the node that writes it.
    producers: HashMap<usize, usize>,
    /// The referenced subgraphs of the model being lowered (IF and WHILE), shared by the
    /// builders of the main and the referenced subgraphs; None for a delegate partition.
    pub refs: Option<Rc<RefCell<Refs<'g>>>>,
}

/// The referenced subgraphs lowered so far.
pub(super) struct Refs<'g> {
    /// The whole graph.
    pub graph: &'g Graph,
    /// TFLite subgraph index → referenced subgraph index.
    pub index: HashMap<usize, u32>,
    /// The referenced subgraphs by index; None while one is being lowered.
    pub parts: Vec<Option<Part>>,
}

impl<'g> Builder<'g> {
    pub fn new(sub: &'g Subgraph) -> Self {
        let mut producers = HashMap::new();
        for (i, n) in sub.nodes.iter().enumerate() {
            for &o in &n.outputs {
                if let Ok(o) = usize::try_from(o) {
                    producers.entry(o).or_insert(i);
                }
            }
        }
        Self {
            sub,
            node: 0,
            operands: Vec::new(),
            operations: Vec::new(),
            origins: Vec::new(),
            values: HashMap::new(),
            consts: Vec::new(),
            producers,
            refs: None,
        }
    }

    // ---- errors and access ---------------------------------------------------------------

    /// The node being lowered.
    pub fn cur(&self) -> Result<&'g Node> {
        let sub: &'g Subgraph = self.sub;
        sub.nodes
            .get(self.node)
            .ok_or_else(|| LowerError::BadGraph(format!("node {} does not exist", self.node)))
    }

    /// An Unsupported error for the node being lowered.
    pub fn err(&self, why: impl Into<String>) -> LowerError {
        let op = match self.sub.nodes.get(self.node) {
            Some(n) => node_name(n),
            None => "?".to_string(),
        };
        LowerError::Unsupported {
            node: self.node,
            op,
            why: why.into(),
        }
    }

    /// Tensor `t` of the subgraph.
    pub fn tensor(&self, t: usize) -> Result<&'g Tensor> {
        let sub: &'g Subgraph = self.sub;
        sub.tensors
            .get(t)
            .ok_or_else(|| self.err(format!("tensor {t} does not exist")))
    }

    /// The tensor index of the node's input `k` (an error when it is missing or omitted).
    pub fn input(&self, k: usize) -> Result<usize> {
        let n = self.cur()?;
        match n.inputs.get(k) {
            Some(&t) if t >= 0 => {
                let t = t as usize;
                self.tensor(t)?;
                Ok(t)
            }
            Some(_) => Err(self.err(format!("input {k} is omitted"))),
            None => Err(self.err(format!("input {k} is missing ({} inputs)", n.inputs.len()))),
        }
    }

    /// The node's optional input `k`: None when absent or -1.
    pub fn opt_input(&self, k: usize) -> Result<Option<usize>> {
        match self.cur()?.inputs.get(k) {
            Some(&t) if t >= 0 => {
                self.tensor(t as usize)?;
                Ok(Some(t as usize))
            }
            _ => Ok(None),
        }
    }

    /// The tensor index of the node's output `k`.
    pub fn output(&self, k: usize) -> Result<usize> {
        let n = self.cur()?;
        match n.outputs.get(k) {
            Some(&t) if t >= 0 => {
                let t = t as usize;
                self.tensor(t)?;
                Ok(t)
            }
            _ => Err(self.err(format!(
                "output {k} is missing ({} outputs)",
                n.outputs.len()
            ))),
        }
    }

    /// The operands of a one-input, one-output node: its input's value and its new output.
    pub fn unary_io(&mut self) -> Result<(u32, u32)> {
        self.arity(1..=1, 1)?;
        let x = self.value(self.input(0)?)?;
        let y = self.define(self.output(0)?)?;
        Ok((x, y))
    }

    /// Requires exactly `n` inputs (counting omitted ones) and `m` outputs.
    pub fn arity(&self, inputs: std::ops::RangeInclusive<usize>, outputs: usize) -> Result<()> {
        let n = self.cur()?;
        if !inputs.contains(&n.inputs.len()) {
            return Err(self.err(format!(
                "{} inputs, expected {}..={}",
                n.inputs.len(),
                inputs.start(),
                inputs.end()
            )));
        }
        if n.outputs.len() != outputs {
            return Err(self.err(format!("{} outputs, expected {outputs}", n.outputs.len())));
        }
        Ok(())
    }

    // ---- constants -----------------------------------------------------------------------

    /// The producer of `t` if it is a node whose output is folded into a constant at import
    /// (DEQUANTIZE or DENSIFY of a constant).
    pub fn folded_producer(&self, t: usize) -> Option<usize> {
        let p = *self.producers.get(&t)?;
        let n = self.sub.nodes.get(p)?;
        if !matches!(n.builtin_code, DEQUANTIZE | DENSIFY) {
            return None;
        }
        let src = usize::try_from(*n.inputs.first()?).ok()?;
        self.is_constant_at(src, 1).then_some(p)
    }

    /// The node that writes tensor `t`, if any.
    pub fn producer(&self, t: usize) -> Option<usize> {
        self.producers.get(&t).copied()
    }

    /// Whether node `n` is folded at import (all its outputs are constants it computes).
    pub fn folded_producer_of_node(&self, n: usize) -> bool {
        self.sub.nodes.get(n).is_some_and(|node| {
            !node.outputs.is_empty()
                && node
                    .outputs
                    .iter()
                    .all(|&o| usize::try_from(o).is_ok_and(|o| self.folded_producer(o) == Some(n)))
        })
    }

    fn is_constant_at(&self, t: usize, depth: usize) -> bool {
        if depth > MAX_FOLD_DEPTH {
            return false;
        }
        match self.sub.tensors.get(t) {
            Some(tensor) if tensor.data.is_some() => true,
            Some(_) => {
                let Some(&p) = self.producers.get(&t) else {
                    return false;
                };
                let Some(n) = self.sub.nodes.get(p) else {
                    return false;
                };
                matches!(n.builtin_code, DEQUANTIZE | DENSIFY)
                    && n.inputs
                        .first()
                        .and_then(|&s| usize::try_from(s).ok())
                        .is_some_and(|s| self.is_constant_at(s, depth + 1))
            }
            None => false,
        }
    }

    /// Whether tensor `t` has a value known at import (stored, or folded).
    pub fn is_constant(&self, t: usize) -> bool {
        self.is_constant_at(t, 0)
    }

    /// The dense little-endian bytes of constant tensor `t`, folding DEQUANTIZE and DENSIFY.
    pub fn const_bytes(&self, t: usize) -> Result<Vec<u8>> {
        self.const_bytes_at(t, 0)
    }

    fn const_bytes_at(&self, t: usize, depth: usize) -> Result<Vec<u8>> {
        let tensor = self.tensor(t)?;
        if let Some(data) = &tensor.data {
            return match &tensor.sparsity {
                Some(_) => crate::densify::densify(tensor).map_err(|why| LowerError::BadTensor {
                    tensor: t,
                    name: tensor.name.clone(),
                    why,
                }),
                None => Ok(data.clone()),
            };
        }
        let producer = self
            .producers
            .get(&t)
            .and_then(|&p| Some((p, self.sub.nodes.get(p)?)));
        if let (true, Some((p, n))) = (depth < MAX_FOLD_DEPTH, producer) {
            let src = n.inputs.first().and_then(|&s| usize::try_from(s).ok());
            let fold_err = |why: String| LowerError::Unsupported {
                node: p,
                op: node_name(n),
                why,
            };
            match (n.builtin_code, src) {
                (DENSIFY, Some(src)) => return self.const_bytes_at(src, depth + 1),
                (DEQUANTIZE, Some(src)) => {
                    let bytes = self.const_bytes_at(src, depth + 1)?;
                    let from = self.tensor(src)?;
                    if tensor.element_type != ElementType::Float32 {
                        return Err(fold_err(format!(
                            "a constant dequantized to {} (only FLOAT32 is folded)",
                            tensor.element_type.name()
                        )));
                    }
                    return super::fold::dequantize(from, &bytes).map_err(fold_err);
                }
                _ => {}
            }
        }
        Err(self.err(format!("tensor {t} ({}) must be a constant", tensor.name)))
    }

    /// The values of a constant integer tensor (INT32 or INT64) as i32.
    pub fn const_ints(&self, t: usize) -> Result<Vec<i32>> {
        let tensor = self.tensor(t)?;
        let bytes = self.const_bytes(t)?;
        match tensor.element_type {
            ElementType::Int32 => Ok(bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()),
            ElementType::Int64 => bytes
                .chunks_exact(8)
                .map(|c| {
                    let v = i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                    i32::try_from(v).map_err(|_| {
                        self.err(format!("tensor {t} ({}): {v} exceeds INT32", tensor.name))
                    })
                })
                .collect(),
            other => Err(self.err(format!(
                "tensor {t} ({}) is {}, expected INT32 or INT64",
                tensor.name,
                other.name()
            ))),
        }
    }

    /// A new constant operand.
    pub fn constant(&mut self, mut operand: Operand, bytes: Vec<u8>) -> u32 {
        operand.lifetime = OperandLifetime::ConstantCopy;
        let i = self.push_operand(operand);
        self.consts.push((i, bytes));
        i
    }

    fn scalar(&mut self, ty: OperandType, bytes: Vec<u8>) -> u32 {
        self.constant(plain(ty, Vec::new()), bytes)
    }

    /// An INT32 scalar constant.
    pub fn int(&mut self, v: i32) -> u32 {
        self.scalar(OperandType::Int32, v.to_le_bytes().to_vec())
    }

    /// A BOOL scalar constant.
    pub fn boolean(&mut self, v: bool) -> u32 {
        self.scalar(OperandType::Bool, vec![u8::from(v)])
    }

    /// A float scalar in the precision of a tensor of type `like` (FLOAT16 for TENSOR_FLOAT16,
    /// else FLOAT32).
    pub fn float_like(&mut self, like: OperandType, v: f32) -> u32 {
        if like == OperandType::TensorFloat16 {
            let h = nnaccel_cpu::f32_to_f16(v);
            self.scalar(OperandType::Float16, h.to_le_bytes().to_vec())
        } else {
            self.scalar(OperandType::Float32, v.to_le_bytes().to_vec())
        }
    }

    /// A constant TENSOR_INT32 of rank 1.
    pub fn ints(&mut self, v: &[i32]) -> u32 {
        let dims = vec![v.len() as u32];
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(plain(OperandType::TensorInt32, dims), bytes)
    }

    // ---- operands of tensors --------------------------------------------------------------

    pub fn push_operand(&mut self, operand: Operand) -> u32 {
        self.operands.push(operand);
        (self.operands.len() - 1) as u32
    }

    /// The operand describing tensor `t` (type, dimensions, quantization), not yet added.
    pub fn describe(&self, t: usize) -> Result<Operand> {
        let tensor = self.tensor(t)?;
        operand_of(tensor).map_err(|why| LowerError::BadTensor {
            tensor: t,
            name: tensor.name.clone(),
            why,
        })
    }

    /// The operand holding the value of tensor `t`: one computed before, or a constant made
    /// now from its bytes.
    pub fn value(&mut self, t: usize) -> Result<u32> {
        if let Some(&o) = self.values.get(&t) {
            return Ok(o);
        }
        if !self.is_constant(t) {
            let name = &self.tensor(t)?.name;
            return Err(self.err(format!(
                "tensor {t} ({name}) is read before any node writes it"
            )));
        }
        let operand = self.describe(t)?;
        let bytes = self.const_bytes(t)?;
        let want = byte_len(&operand);
        if want != Some(bytes.len()) {
            let name = &self.tensor(t)?.name;
            return Err(LowerError::BadTensor {
                tensor: t,
                name: name.clone(),
                why: format!(
                    "{} bytes of data for shape {:?} of {:?}",
                    bytes.len(),
                    operand.dimensions,
                    operand.operand_type
                ),
            });
        }
        let o = self.constant(operand, bytes);
        self.values.insert(t, o);
        Ok(o)
    }

    /// The weights operand of tensor `t` for a node computing on input operand `x`: `t`'s
    /// value, or for a float input and constant quantized weights (a hybrid, dynamic-range
    /// node) those weights dequantized to FLOAT32 at import, the float computation NNAPI's
    /// delegate makes of a hybrid node. Refused: a FLOAT16 input with quantized weights, and
    /// a float input with quantized weights computed at run time (or the reverse).
    pub fn weights(&mut self, x: u32, t: usize) -> Result<u32> {
        let x_float = is_float(self.ty(x));
        let tensor = self.tensor(t)?;
        let quantized_const = !matches!(
            tensor.element_type,
            ElementType::Float32 | ElementType::Float16
        ) && self.is_constant(t);
        if x_float && quantized_const {
            if self.ty(x) != OperandType::TensorFloat32 {
                return Err(self.err("a FLOAT16 input with quantized weights"));
            }
            let bytes = self.const_bytes(t)?;
            let floats = super::fold::dequantize(tensor, &bytes).map_err(|why| self.err(why))?;
            let dims = dims_of(tensor).map_err(|why| self.err(why))?;
            return Ok(self.constant(plain(OperandType::TensorFloat32, dims), floats));
        }
        let w = self.value(t)?;
        if x_float != is_float(self.ty(w)) {
            return Err(self
                .err("a float input with quantized weights computed at run time, or the reverse"));
        }
        Ok(w)
    }

    /// A new temporary operand for output tensor `t` of the node.
    pub fn define(&mut self, t: usize) -> Result<u32> {
        if self.values.contains_key(&t) {
            return Err(self.err(format!("tensor {t} is written twice")));
        }
        let operand = self.describe(t)?;
        let o = self.push_operand(operand);
        self.values.insert(t, o);
        Ok(o)
    }

    /// Every output tensor of the node, defined as operands ([`Builder::define`]), in order.
    pub fn define_outputs(&mut self) -> Result<Vec<u32>> {
        let n = self.cur()?.outputs.len();
        (0..n).map(|k| self.define(self.output(k)?)).collect()
    }

    /// Whether two quantized operands share scale and zero point.
    pub fn same_quantization(&self, a: u32, c: u32) -> bool {
        let (a, c) = (&self.operands[a as usize], &self.operands[c as usize]);
        a.scale == c.scale && a.zero_point == c.zero_point
    }

    /// Requantizes `x` into `y` (both 8-bit quantized, same shape): NNAPI has no
    /// quantized-to-quantized QUANTIZE, so a DEQUANTIZE to float32, then a QUANTIZE.
    pub fn requantize(&mut self, x: u32, y: u32) {
        let dims = self.dims(x).to_vec();
        let f = self.push_operand(plain(OperandType::TensorFloat32, dims));
        self.op(OperationType::Dequantize, vec![x], vec![f]);
        self.op(OperationType::Quantize, vec![f], vec![y]);
    }

    /// Refuses a node that reads or writes a 16-bit quantized tensor computed at run time
    /// (TFLite's 16x8 scheme): NNAPI's TENSOR_QUANT16_SYMM has no arithmetic (no ADD, CONV_2D,
    /// DEQUANTIZE or QUANTIZE takes it), as NNAPI's own TFLite delegate finds. 16-bit constants
    /// stay usable where they fold (a DEQUANTIZE of int16 weights).
    pub fn refuse_16bit_activations(&self) -> Result<()> {
        let node = self.cur()?;
        for &t in node.inputs.iter().chain(&node.outputs) {
            let Ok(t) = usize::try_from(t) else { continue };
            let tensor = self.tensor(t)?;
            if tensor.element_type == ElementType::Int16
                && tensor.quantization.is_quantized()
                && !self.is_constant(t)
            {
                return Err(self.err(format!(
                    "tensor {t} ({}) is a 16-bit quantized activation (TFLite's 16x8 scheme): \
                     NNAPI has no operation on TENSOR_QUANT16_SYMM activations",
                    tensor.name
                )));
            }
        }
        Ok(())
    }

    /// A new temporary operand like `like` with other dimensions.
    pub fn temp_like(&mut self, like: u32, dims: Vec<u32>) -> u32 {
        let mut o = self.operands[like as usize].clone();
        o.dimensions = dims;
        o.lifetime = OperandLifetime::TemporaryVariable;
        o.location = DataLocation::default();
        self.push_operand(o)
    }

    /// A NO_VALUE operand of `like`'s type, standing for an omitted optional input.
    pub fn no_value(&mut self, like: u32) -> u32 {
        let mut o = plain(self.ty(like), Vec::new());
        o.lifetime = OperandLifetime::NoValue;
        self.push_operand(o)
    }

    /// A new temporary operand like `like` with its dimensions.
    pub fn temp_same(&mut self, like: u32) -> u32 {
        let dims = self.operands[like as usize].dimensions.clone();
        self.temp_like(like, dims)
    }

    pub fn ty(&self, o: u32) -> OperandType {
        self.operands[o as usize].operand_type
    }

    pub fn dims(&self, o: u32) -> &[u32] {
        &self.operands[o as usize].dimensions
    }

    /// Gives operand `o` other dimensions (an output whose file stores no shape).
    pub fn set_dims(&mut self, o: u32, dims: Vec<u32>) {
        if let Some(operand) = self.operands.get_mut(o as usize) {
            operand.dimensions = dims;
        }
    }

    /// The stored (concrete) shape of tensor `t`.
    pub fn shape(&self, t: usize) -> Result<&'g [i32]> {
        Ok(&self.tensor(t)?.shape)
    }

    // ---- operations ------------------------------------------------------------------------

    /// Adds an operation coming from the current node.
    pub fn op(&mut self, ty: OperationType, inputs: Vec<u32>, outputs: Vec<u32>) {
        self.operations.push(Operation {
            operation_type: ty,
            inputs,
            outputs,
        });
        self.origins.push(self.node);
    }

    /// How to apply `act` to an operation that writes `dest` and takes a fuse code.
    pub fn fuse(&mut self, dest: u32, act: Activation) -> Result<Fused> {
        let code = match act {
            Activation::None => 0,
            Activation::Relu => 1,
            Activation::ReluN1To1 => 2,
            Activation::Relu6 => 3,
            Activation::Tanh | Activation::Sigmoid => {
                return self.separate(dest, act);
            }
            Activation::SignBit => {
                return Err(self.err("fused activation SIGN_BIT has no NNAPI equivalent"));
            }
        };
        Ok(Fused {
            code,
            target: dest,
            after: None,
        })
    }

    /// How to apply `act` after an operation that takes no fuse code: every activation but
    /// NONE becomes its own operation.
    pub fn separate(&mut self, dest: u32, act: Activation) -> Result<Fused> {
        let op = match act {
            Activation::None => {
                return Ok(Fused {
                    code: 0,
                    target: dest,
                    after: None,
                });
            }
            Activation::Relu => OperationType::Relu,
            Activation::ReluN1To1 => OperationType::Relu1,
            Activation::Relu6 => OperationType::Relu6,
            Activation::Tanh => OperationType::Tanh,
            Activation::Sigmoid => OperationType::Logistic,
            Activation::SignBit => {
                return Err(self.err("fused activation SIGN_BIT has no NNAPI equivalent"));
            }
        };
        if matches!(op, OperationType::Tanh | OperationType::Logistic) && !is_float(self.ty(dest)) {
            return Err(self.err(format!(
                "a fused {op:?} on a quantized output: the value before the activation has no \
                 quantization to compute in"
            )));
        }
        let target = self.temp_same(dest);
        Ok(Fused {
            code: 0,
            target,
            after: Some((op, dest)),
        })
    }

    /// Adds operation `ty` writing the target of `f`, then `f`'s separate activation.
    pub fn op_fused(&mut self, ty: OperationType, inputs: Vec<u32>, f: &Fused) {
        self.op(ty, inputs, vec![f.target]);
        self.finish_fused(f);
    }

    /// Adds the separate activation operation of `f`, if any.
    fn finish_fused(&mut self, f: &Fused) {
        if let Some((op, dest)) = f.after {
            self.op(op, vec![f.target], vec![dest]);
        }
    }

    /// Copies `src` into `dest` (same type and shape) with a RESHAPE to `dest`'s dimensions.
    pub fn copy(&mut self, src: u32, dest: u32) {
        let dims: Vec<i32> = self.dims(dest).iter().map(|&d| d as i32).collect();
        let shape = self.ints(&dims);
        self.op(OperationType::Reshape, vec![src, shape], vec![dest]);
    }

    // ---- the result --------------------------------------------------------------------------

    /// The lowered (sub)graph with its inputs and outputs marked; constants not yet placed.
    pub fn into_part(mut self, inputs: &[u32], outputs: &[u32]) -> Part {
        for &i in inputs {
            self.operands[i as usize].lifetime = OperandLifetime::SubgraphInput;
        }
        for &o in outputs {
            self.operands[o as usize].lifetime = OperandLifetime::SubgraphOutput;
        }
        Part {
            graph: HalSubgraph {
                operands: self.operands,
                operations: self.operations,
                input_indexes: inputs.to_vec(),
                output_indexes: outputs.to_vec(),
            },
            consts: self.consts,
        }
    }
}

/// One lowered (sub)graph and its constants' bytes, before they are placed.
pub(super) struct Part {
    pub graph: HalSubgraph,
    consts: Vec<(u32, Vec<u8>)>,
}

/// The model of the main part and the referenced ones, every constant placed: up to 128
/// bytes copied into `operand_values`, larger ones in one memfd pool (when `pool`; without
/// it they stay unplaced, for checks that never prepare the model).
pub(super) fn assemble(main: Part, referenced: Vec<Part>, pool: bool) -> Result<Model> {
    let mut parts: Vec<Part> = Vec::with_capacity(referenced.len() + 1);
    parts.push(main);
    parts.extend(referenced);
    let mut operand_values = Vec::new();
    let mut big = Vec::new();
    for (k, part) in parts.iter_mut().enumerate() {
        for (o, bytes) in std::mem::take(&mut part.consts) {
            if bytes.len() <= MAX_COPY_BYTES {
                let offset = operand_values.len().next_multiple_of(COPY_ALIGN);
                operand_values.resize(offset, 0);
                operand_values.extend_from_slice(&bytes);
                part.graph.operands[o as usize].location = location(offset, bytes.len())?;
            } else {
                part.graph.operands[o as usize].lifetime = OperandLifetime::ConstantReference;
                big.push((k, o, bytes));
            }
        }
    }
    let end = operand_values.len().next_multiple_of(COPY_ALIGN);
    operand_values.resize(end, 0);
    let mut pools = Vec::new();
    if !big.is_empty() && pool {
        let values: Vec<&[u8]> = big.iter().map(|(_, _, b)| b.as_slice()).collect();
        let made = ConstantPool::new(c"nnaccel-tflite-constants", &values).map_err(|e| {
            LowerError::Pool {
                size: e.size,
                source: e.source,
            }
        })?;
        for ((k, o, b), &offset) in big.iter().zip(&made.offsets) {
            parts[*k].graph.operands[*o as usize].location = location(offset, b.len())?;
        }
        pools.push(made.memory);
    }
    let mut parts = parts.into_iter();
    let main = parts.next().map(|p| p.graph).unwrap_or_default();
    Ok(Model {
        operands: main.operands,
        operations: main.operations,
        input_indexes: main.input_indexes,
        output_indexes: main.output_indexes,
        referenced: parts.map(|p| p.graph).collect(),
        operand_values,
        pools,
        relax_computation_float32_to_float16: false,
    })
}

fn location(offset: usize, len: usize) -> Result<DataLocation> {
    let too_large = || LowerError::BadGraph("the constants exceed 4 GiB".into());
    Ok(DataLocation {
        pool_index: 0,
        offset: u32::try_from(offset).map_err(|_| too_large())?,
        length: u32::try_from(len).map_err(|_| too_large())?,
        padding: 0,
    })
}

/// The name of a node's operation for messages: the builtin's name, or `CUSTOM(name)`.
pub(super) fn node_name(n: &Node) -> String {
    match &n.custom_code {
        Some(c) if n.builtin_code == crate::graph::CUSTOM => format!("CUSTOM({c})"),
        _ => builtin_name(n.builtin_code).into_owned(),
    }
}

/// An operand with no quantization, a temporary.
pub(super) fn plain(ty: OperandType, dims: Vec<u32>) -> Operand {
    Operand {
        operand_type: ty,
        dimensions: dims,
        scale: 0.0,
        zero_point: 0,
        lifetime: OperandLifetime::TemporaryVariable,
        location: DataLocation::default(),
        extra_params: None,
    }
}

pub(super) fn is_float(ty: OperandType) -> bool {
    matches!(ty, OperandType::TensorFloat32 | OperandType::TensorFloat16)
}

/// The bytes a fully specified tensor operand takes (None when a dimension is unknown).
pub(super) fn byte_len(o: &Operand) -> Option<usize> {
    let mut n = o.operand_type.element_size();
    for &d in &o.dimensions {
        if d == 0 {
            return None;
        }
        n = n.checked_mul(d as usize)?;
    }
    Some(n)
}

/// The dimensions of a tensor's operand: the shape signature where it has one of the same
/// rank (-1, unknown until execution, becomes 0), else the stored shape; a scalar (rank 0) is
/// given as `[1]`, since a tensor operand of no dimensions means an unknown rank to NNAPI.
pub(super) fn dims_of(t: &Tensor) -> std::result::Result<Vec<u32>, String> {
    let src = if !t.shape_signature.is_empty() && t.shape_signature.len() == t.shape.len() {
        &t.shape_signature
    } else {
        &t.shape
    };
    if src.is_empty() {
        return Ok(vec![1]);
    }
    src.iter()
        .map(|&d| match d {
            -1 => Ok(0),
            d if d >= 0 => Ok(d as u32),
            d => Err(format!("dimension {d} in shape {src:?}")),
        })
        .collect()
}

/// The NN HAL operand of a TFLite tensor, mapped as NNAPI's TFLite delegate maps types.
pub(super) fn operand_of(t: &Tensor) -> std::result::Result<Operand, String> {
    let dims = dims_of(t)?;
    let q = &t.quantization;
    let scale = q.scales.first().copied().unwrap_or(0.0);
    let zero = q.zero_points.first().copied().unwrap_or(0);
    let zero_point = i32::try_from(zero).map_err(|_| format!("zero point {zero} exceeds INT32"))?;
    let check_scale = || {
        if scale.is_finite() && scale > 0.0 {
            Ok(())
        } else {
            Err(format!("quantization scale {scale} is not positive"))
        }
    };
    let ty = match t.element_type {
        ElementType::Float32 => OperandType::TensorFloat32,
        ElementType::Float16 => OperandType::TensorFloat16,
        ElementType::Int32 => {
            // A quantized bias keeps its scale; other INT32 tensors have none.
            let mut o = plain(OperandType::TensorInt32, dims);
            if q.is_quantized() && !q.is_per_channel() && scale.is_finite() && scale > 0.0 {
                o.scale = scale;
            }
            return Ok(o);
        }
        ElementType::Bool => OperandType::TensorBool8,
        ElementType::UInt8 | ElementType::Int8 if !q.is_quantized() => {
            // Plain bytes: a unit scale keeps values as they are.
            let ty = if t.element_type == ElementType::UInt8 {
                OperandType::TensorQuant8Asymm
            } else {
                OperandType::TensorQuant8AsymmSigned
            };
            let mut o = plain(ty, dims);
            o.scale = 1.0;
            return Ok(o);
        }
        ElementType::UInt8 => {
            check_scale()?;
            if !(0..=255).contains(&zero_point) {
                return Err(format!("UINT8 zero point {zero_point} outside [0, 255]"));
            }
            OperandType::TensorQuant8Asymm
        }
        ElementType::Int8 if q.is_per_channel() => {
            if q.zero_points.iter().any(|&z| z != 0) {
                return Err("per-channel INT8 quantization with a non-zero zero point".into());
            }
            let rank = dims.len() as i32;
            let axis = if q.axis < 0 { q.axis + rank } else { q.axis };
            let channels = usize::try_from(axis)
                .ok()
                .and_then(|a| t.shape.get(a))
                .copied()
                .ok_or_else(|| format!("quantized dimension {} outside rank {rank}", q.axis))?;
            if channels as usize != q.scales.len() {
                return Err(format!(
                    "{} per-channel scales for {channels} channels",
                    q.scales.len()
                ));
            }
            if q.scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                return Err("a per-channel scale is not positive".into());
            }
            let mut o = plain(OperandType::TensorQuant8SymmPerChannel, dims);
            o.extra_params = Some(SymmPerChannelQuantParams {
                scales: q.scales.clone(),
                channel_dim: axis as u32,
            });
            return Ok(o);
        }
        ElementType::Int8 => {
            check_scale()?;
            if !(-128..=127).contains(&zero_point) {
                return Err(format!("INT8 zero point {zero_point} outside [-128, 127]"));
            }
            OperandType::TensorQuant8AsymmSigned
        }
        ElementType::Int16 if q.is_quantized() && !q.is_per_channel() => {
            check_scale()?;
            if zero_point != 0 {
                return Err(format!(
                    "INT16 quantization with zero point {zero_point} (only symmetric maps)"
                ));
            }
            OperandType::TensorQuant16Symm
        }
        other => {
            return Err(format!(
                "element type {}{} has no NNAPI operand type",
                other.name(),
                if other == ElementType::Int16 {
                    " without per-tensor quantization"
                } else {
                    ""
                }
            ));
        }
    };
    let mut o = plain(ty, dims);
    o.scale = scale;
    o.zero_point = zero_point;
    Ok(o)
}
