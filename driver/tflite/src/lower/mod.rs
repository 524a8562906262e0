//! The graph form ([`crate::graph`]) → an NN HAL [`Model`], each TFLite builtin mapped as
//! NNAPI's own TFLite delegate maps it. The whole main subgraph ([`lower_model`], for
//! `nnaccelctl run model.tflite`) or the nodes of one delegate partition ([`lower_nodes`]).
//!
//! Tensors map as the delegate maps them: FLOAT32 → TENSOR_FLOAT32, FLOAT16 →
//! TENSOR_FLOAT16, INT32 → TENSOR_INT32, BOOL → TENSOR_BOOL8, quantized UINT8 →
//! TENSOR_QUANT8_ASYMM, quantized INT8 → TENSOR_QUANT8_ASYMM_SIGNED (per-channel: TENSOR_QUANT8_SYMM_PER_CHANNEL
//! with its channel dimension), quantized INT16 (zero point 0) → TENSOR_QUANT16_SYMM. A
//! dimension unknown until execution (-1 in the shape signature) is 0; a scalar is `[1]`.
//! Constants up to 128 bytes are copied into `operand_values`, larger ones go to one memfd
//! pool (`pools[0]`).
//!
//! | TFLite builtin | NN HAL operation(s) |
//! |---|---|
//! | ADD, SUB, MUL, DIV | same, with the fuse code |
//! | AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D | same (implicit padding) |
//! | CONV_2D | CONV_2D (implicit padding; layout and dilations when dilated) |
//! | DEPTHWISE_CONV_2D | DEPTHWISE_CONV_2D, multiplier = output channels / input channels |
//! | TRANSPOSE_CONV | TRANSPOSE_CONV_2D (input, filter, bias, output shape, …) |
//! | FULLY_CONNECTED | FULLY_CONNECTED (+ RESHAPE when the output is not 2-D: keep_num_dims) |
//! | hybrid CONV_2D / DEPTHWISE / FULLY_CONNECTED (float input, constant int8/uint8 weights) | the weights dequantized to FLOAT32 at import |
//! | a missing bias | a zero bias (FLOAT32/FLOAT16, or INT32 at input × filter scale) |
//! | fused RELU, RELU_N1_TO_1, RELU6 | the fuse code (a RELU/RELU1/RELU6 operation after CONCATENATION) |
//! | fused TANH, SIGMOID | TANH / LOGISTIC after the node, through a temporary (float only) |
//! | CONCATENATION | CONCATENATION |
//! | RESHAPE | RESHAPE to the constant shape tensor's, else the option's, else the output's shape |
//! | EXPAND_DIMS, SQUEEZE | RESHAPE to the input's shape with a 1 inserted / the squeezed 1s removed |
//! | SOFTMAX, LOG_SOFTMAX | SOFTMAX (beta), LOG_SOFTMAX (beta 1, axis -1) |
//! | LOGISTIC, TANH, RELU, RELU6, RELU_N1_TO_1, HARD_SWISH, ELU | same (RELU_N1_TO_1 → RELU1) |
//! | ABS, EXP, LOG, SQRT, RSQRT, SIN, NEG, FLOOR | same |
//! | MAXIMUM, MINIMUM, POW, PRELU | same |
//! | SQUARED_DIFFERENCE | SUB then MUL (float) |
//! | LEAKY_RELU | PRELU with a constant alpha |
//! | EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL | same |
//! | LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT | same |
//! | RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR | same (constant size) |
//! | PAD, PADV2 | PAD, PAD_V2 (constant paddings) |
//! | MEAN, SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD, REDUCE_ANY, REDUCE_ALL | MEAN, REDUCE_* |
//! | QUANTIZE | QUANTIZE; quantized → quantized: DEQUANTIZE then QUANTIZE |
//! | DEQUANTIZE | folded for constants; else DEQUANTIZE (FLOAT16: CAST) |
//! | DENSIFY | folded (sparse constants densified at import) |
//! | SPLIT, SPLIT_V | SPLIT when the pieces are equal, else one SLICE per output |
//! | PACK | RESHAPE of each input (a 1 at the axis), CONCATENATION |
//! | UNPACK | SPLIT, RESHAPE of each piece |
//! | STRIDED_SLICE | STRIDED_SLICE (no ellipsis/new-axis masks, no offset) |
//! | SLICE, TRANSPOSE, TILE | same (constant begin/size, perm, multiples) |
//! | SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND | same, NHWC (BATCH_TO_SPACE_ND: zero crops only) |
//! | SPACE_TO_DEPTH, DEPTH_TO_SPACE | same, NHWC |
//! | L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION | same |
//! | ARG_MAX, ARG_MIN | ARGMAX, ARGMIN (constant axis, INT32 output) |
//! | GATHER | GATHER (batch_dims 0, INT32 indices) |
//! | SELECT, SELECT_V2 | SELECT (all three of one shape) |
//! | TOPK_V2 | TOPK_V2 (constant k) |
//! | CAST, FILL, EMBEDDING_LOOKUP | same |
//! | SQUARE | MUL of the input with itself |
//! | ADD_N | a chain of ADDs |
//! | CEIL | NEG, FLOOR, NEG (float) |
//! | FLOOR_DIV | DIV (INT32: NNAPI's floors), + FLOOR for floats |
//! | FLOOR_MOD | a − FLOOR_DIV(a, b) · b: DIV, (FLOOR), MUL, SUB |
//! | RELU_0_TO_1 | RELU1 then RELU |
//! | COS | SIN(x + π/2) (float) |
//! | GELU | element-wise operations: the tanh form when approximate, else relu(x) − 0.5·|x|·(1 − erf(|x|/√2)) with erf to 1.5e-7 (float) |
//! | BATCH_MATMUL | FULLY_CONNECTED with the constant right-hand side (transposed at import unless adj_y; + RESHAPE) |
//! | MIRROR_PAD | a GATHER of the mirrored indexes per padded axis |
//! | REVERSE_V2 | a GATHER of the reversed indexes per axis |
//! | HASHTABLE_LOOKUP | HASHTABLE_LOOKUP |
//! | IF, WHILE | IF, WHILE, the subgraphs they name lowered as referenced subgraphs |
//! | VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE, CALL_ONCE | state inputs and outputs ([`Lowered::state`]) |
//! | RNN, SVDF (float; fused NONE/RELU/RELU_N1_TO_1/RELU6/TANH) | RNN, SVDF; the variable state tensor a state input and output named after it (initial value its buffer, else zeros) |
//! | UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN (float; the same activations) | same, with NNAPI 1.3's hidden-state outputs: each variable hidden state a state input and output; merged or separate outputs; an auxiliary input with both auxiliary weights, or alone when time-major |
//! | LSTM (FULL kernel, float; CIFG, peephole, projection, layer norm) | LSTM (23 inputs, 27 with layer norm); output and cell state variable tensors carried as RNN's state is |
//! | UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM (float) | same (28 / 61 inputs), the final states (outputs 1–2 / 2–5 after the sequence outputs) the state outputs |
//! | hybrid RNN, SVDF, sequence RNNs, LSTM family (float32 input, constant int8/uint8 weights) | the float operation, its weights dequantized to FLOAT32 at import (biases and states stay float); hybrid BIDIRECTIONAL_SEQUENCE_RNN time-major over several steps, or batch-major with an auxiliary size other than the input's, refused (LiteRT's hybrid kernel departs there) |
//!
//! Notes: UINT8 and INT8 tensors without quantization are given scale 1, zero point 0 (their
//! values as they are). A fused TANH or SIGMOID is applied as NNAPI's delegate applies it;
//! LiteRT's own ADD and CONV_2D kernels clamp only for the RELU family and leave a fused TANH
//! out. LOCAL_RESPONSE_NORMALIZATION sums the window [c − radius, c + radius] as NNAPI and
//! LiteRT's optimized kernel do (its reference kernel stops one short). ARG_MAX/ARG_MIN with an
//! INT64 output, GATHER with run-time INT64 indices and every other INT64 tensor computed at
//! run time have no NNAPI type.
//!
//! Anything else — other builtins, custom operators, a tensor type without an NNAPI operand
//! type, a fused SIGN_BIT, parameters that must be constant and are not — is an error naming
//! the node and its operation ([`LowerError::Unsupported`]). Nothing is dropped.

mod basic;
mod build;
mod control;
mod conv;
mod fold;
mod gelu;
mod lstm;
mod movement;
mod recurrent;
mod rnn;
mod seq_rnn;
mod state;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lstm;
#[cfg(test)]
mod tests_ops;
#[cfg(test)]
mod tests_recurrent;
#[cfg(test)]
mod tests_seq_rnn;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use nnaccel_hal::{Model, OperationType};

use crate::graph::{ElementType, Graph, Subgraph};
use build::Builder;

/// One input or output of a lowered model, as the request sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The TFLite tensor (in the lowered subgraph).
    pub tensor: usize,
    /// Its name (a state variable's: the variable's shared name).
    pub name: String,
    /// Its TFLite element type (the request's bytes are TFLite's).
    pub element_type: ElementType,
    /// Its shape; -1 where unknown until execution.
    pub shape: Vec<i32>,
}

/// A resource variable carried between executions: the value read from model input `input`
/// and the value written to model output `output`; `initial` before the first execution.
#[derive(Clone, Debug, PartialEq)]
pub struct StateVariable {
    /// The variable's shared name.
    pub name: String,
    /// Position in the model's inputs.
    pub input: usize,
    /// Position in the model's outputs.
    pub output: usize,
    /// The bytes of the value the init subgraph assigns.
    pub initial: Vec<u8>,
}

/// A lowered model and how its inputs and outputs relate to the TFLite graph.
#[derive(Debug)]
pub struct Lowered {
    /// Ready for `HalDevice::prepare_model`; big constants in a memfd pool.
    pub model: Model,
    /// One per model input, in request order (state inputs last).
    pub inputs: Vec<TensorInfo>,
    /// One per model output (state outputs last).
    pub outputs: Vec<TensorInfo>,
    /// Resource variables carried between executions.
    pub state: Vec<StateVariable>,
    /// Per model operation (main subgraph): the TFLite node it came from.
    pub origins: Vec<usize>,
}

/// Why a graph cannot be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// A node has no NNAPI mapping (its operation, types, options or inputs).
    #[error("node {node} ({op}): {why}")]
    Unsupported {
        /// Node index in its subgraph.
        node: usize,
        /// The operation's name (`CONV_2D`, `CUSTOM(name)`).
        op: String,
        /// What is not mappable.
        why: String,
    },
    /// A tensor cannot be an operand (type, shape, quantization, data).
    #[error("tensor {tensor} ({name}): {why}")]
    BadTensor {
        /// Tensor index.
        tensor: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The graph's structure is wrong (missing subgraph, bad indexes, cycles).
    #[error("graph: {0}")]
    BadGraph(String),
    /// The memfd pool for the constants cannot be made.
    #[error("cannot create the constant pool ({size} bytes): {source}")]
    Pool {
        /// Pool size.
        size: u64,
        /// Why.
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, LowerError>;

/// TFLite `BuiltinOperator` codes (one table for the crate, in `graph`).
use crate::graph::op as code;

/// Lowers the node `b.node` (which is not folded and not a variable operation).
fn lower_node(b: &mut Builder<'_>) -> Result<()> {
    use OperationType as T;
    use code::*;
    let node = b.cur()?;
    if node.builtin_code == crate::graph::CUSTOM {
        return Err(b.err("custom operators have no NNAPI equivalent"));
    }
    b.refuse_16bit_activations()?;
    match node.builtin_code {
        CONV_2D => conv::conv(b, false),
        DEPTHWISE_CONV_2D => conv::conv(b, true),
        TRANSPOSE_CONV => conv::transpose_conv(b),
        FULLY_CONNECTED => conv::fully_connected(b),
        AVERAGE_POOL_2D => conv::pool(b, T::AveragePool2d),
        MAX_POOL_2D => conv::pool(b, T::MaxPool2d),
        L2_POOL_2D => conv::pool(b, T::L2Pool2d),
        ADD => basic::arithmetic(b, T::Add),
        SUB => basic::arithmetic(b, T::Sub),
        MUL => basic::arithmetic(b, T::Mul),
        DIV => basic::arithmetic(b, T::Div),
        CONCATENATION => basic::concatenation(b),
        RESHAPE => basic::reshape(b),
        EXPAND_DIMS => basic::expand_or_squeeze(b, true),
        SQUEEZE => basic::expand_or_squeeze(b, false),
        SOFTMAX => basic::softmax(b),
        LOG_SOFTMAX => basic::log_softmax(b),
        LOGISTIC => basic::unary(b, T::Logistic),
        TANH => basic::unary(b, T::Tanh),
        RELU => basic::relu_family(b, T::Relu),
        RELU_N1_TO_1 => basic::relu_family(b, T::Relu1),
        RELU6 => basic::relu_family(b, T::Relu6),
        HARD_SWISH => basic::unary(b, T::HardSwish),
        ELU => basic::elu(b),
        ABS => basic::unary(b, T::Abs),
        EXP => basic::unary(b, T::Exp),
        LOG => basic::unary(b, T::Log),
        SQRT => basic::unary(b, T::Sqrt),
        RSQRT => basic::unary(b, T::Rsqrt),
        SIN => basic::unary(b, T::Sin),
        NEG => basic::unary(b, T::Neg),
        FLOOR => basic::unary(b, T::Floor),
        LOGICAL_NOT => basic::unary(b, T::LogicalNot),
        MAXIMUM => basic::binary(b, T::Maximum),
        MINIMUM => basic::binary(b, T::Minimum),
        POW => basic::binary(b, T::Pow),
        PRELU => basic::binary(b, T::Prelu),
        EQUAL => basic::binary(b, T::Equal),
        NOT_EQUAL => basic::binary(b, T::NotEqual),
        LESS => basic::binary(b, T::Less),
        LESS_EQUAL => basic::binary(b, T::LessEqual),
        GREATER => basic::binary(b, T::Greater),
        GREATER_EQUAL => basic::binary(b, T::GreaterEqual),
        LOGICAL_AND => basic::binary(b, T::LogicalAnd),
        LOGICAL_OR => basic::binary(b, T::LogicalOr),
        SQUARED_DIFFERENCE => basic::squared_difference(b),
        LEAKY_RELU => basic::leaky_relu(b),
        RESIZE_BILINEAR => basic::resize(b, T::ResizeBilinear),
        RESIZE_NEAREST_NEIGHBOR => basic::resize(b, T::ResizeNearestNeighbor),
        PAD => basic::pad(b, false),
        PADV2 => basic::pad(b, true),
        MEAN => basic::reduce(b, T::Mean),
        SUM => basic::reduce(b, T::ReduceSum),
        REDUCE_MAX => basic::reduce(b, T::ReduceMax),
        REDUCE_MIN => basic::reduce(b, T::ReduceMin),
        REDUCE_PROD => basic::reduce(b, T::ReduceProd),
        REDUCE_ANY => basic::reduce(b, T::ReduceAny),
        REDUCE_ALL => basic::reduce(b, T::ReduceAll),
        QUANTIZE => basic::quantize(b),
        DEQUANTIZE => basic::dequantize(b),
        SPLIT => movement::split(b, false),
        SPLIT_V => movement::split(b, true),
        PACK => movement::pack(b),
        UNPACK => movement::unpack(b),
        STRIDED_SLICE => movement::strided_slice(b),
        SLICE => movement::with_int_tensors(b, T::Slice, 2, false),
        TRANSPOSE => movement::with_int_tensors(b, T::Transpose, 1, false),
        TILE => movement::with_int_tensors(b, T::Tile, 1, false),
        SPACE_TO_BATCH_ND => movement::with_int_tensors(b, T::SpaceToBatchNd, 2, true),
        BATCH_TO_SPACE_ND => movement::batch_to_space(b),
        SPACE_TO_DEPTH => movement::block(b, T::SpaceToDepth),
        DEPTH_TO_SPACE => movement::block(b, T::DepthToSpace),
        L2_NORMALIZATION => movement::l2_normalization(b),
        LOCAL_RESPONSE_NORMALIZATION => movement::local_response_normalization(b),
        ARG_MAX => movement::arg_min_max(b, T::Argmax),
        ARG_MIN => movement::arg_min_max(b, T::Argmin),
        GATHER => movement::gather(b),
        SELECT | SELECT_V2 => movement::select(b),
        TOPK_V2 => movement::top_k(b),
        FILL => movement::fill(b),
        EMBEDDING_LOOKUP => movement::embedding_lookup(b),
        SQUARE => movement::square(b),
        ADD_N => movement::add_n(b),
        CEIL => movement::ceil(b),
        RELU_0_TO_1 => movement::relu_0_to_1(b),
        CAST => basic::unary(b, T::Cast),
        BATCH_MATMUL => conv::batch_matmul(b),
        GELU => gelu::gelu(b),
        COS => gelu::cos(b),
        FLOOR_DIV => movement::floor_div_mod(b, false),
        FLOOR_MOD => movement::floor_div_mod(b, true),
        MIRROR_PAD => movement::mirror_pad(b),
        REVERSE_V2 => movement::reverse(b),
        HASHTABLE_LOOKUP => movement::direct(b, T::HashtableLookup),
        IF => control::if_(b),
        WHILE => control::while_(b),
        DENSIFY => Err(b.err("DENSIFY of a tensor that is not a sparse constant")),
        VAR_HANDLE | READ_VARIABLE | ASSIGN_VARIABLE | CALL_ONCE => Err(whole_model_only(b)),
        code if recurrent::is_recurrent(code) => Err(whole_model_only(b)),
        _ => Err(b.err("no NNAPI equivalent")),
    }
}

/// Operations that only the whole model lowers (state and referenced subgraphs).
fn is_whole_model_only(code: i32) -> bool {
    use code::*;
    matches!(
        code,
        VAR_HANDLE | READ_VARIABLE | ASSIGN_VARIABLE | CALL_ONCE | IF | WHILE
    ) || recurrent::is_recurrent(code)
}

/// The error for one of [`is_whole_model_only`]'s operations in a partition.
fn whole_model_only(b: &Builder<'_>) -> LowerError {
    b.err(
        "resource variables, recurrent state (RNN, SVDF, LSTM and their sequence forms), IF and WHILE are only lowered with \
         the whole model's main subgraph (lower_model)",
    )
}

/// The TensorInfo of tensor `t`.
fn info(sub: &Subgraph, t: usize, name: Option<&str>) -> Result<TensorInfo> {
    let tensor = sub
        .tensors
        .get(t)
        .ok_or_else(|| LowerError::BadGraph(format!("tensor {t} does not exist")))?;
    let shape = if !tensor.shape_signature.is_empty()
        && tensor.shape_signature.len() == tensor.shape.len()
    {
        tensor.shape_signature.clone()
    } else {
        tensor.shape.clone()
    };
    Ok(TensorInfo {
        tensor: t,
        name: name.unwrap_or(&tensor.name).to_string(),
        element_type: tensor.element_type,
        shape,
    })
}

fn tensor_index(sub: &Subgraph, t: i32, what: &str) -> Result<usize> {
    usize::try_from(t)
        .ok()
        .filter(|&t| t < sub.tensors.len())
        .ok_or_else(|| LowerError::BadGraph(format!("{what} tensor {t} does not exist")))
}

/// Every tensor index of node `n` names a tensor (inputs may be -1, omitted).
fn check_indexes(sub: &Subgraph, n: usize) -> Result<()> {
    let node = sub
        .nodes
        .get(n)
        .ok_or_else(|| LowerError::BadGraph(format!("node {n} does not exist")))?;
    let bad = |what: &str, t: i32| {
        LowerError::BadGraph(format!("node {n}: {what} tensor {t} does not exist"))
    };
    for &t in &node.inputs {
        if t != -1 && usize::try_from(t).map_or(true, |t| t >= sub.tensors.len()) {
            return Err(bad("input", t));
        }
    }
    for &t in &node.outputs {
        if usize::try_from(t).map_or(true, |t| t >= sub.tensors.len()) {
            return Err(bad("output", t));
        }
    }
    Ok(())
}

/// Makes `t` a model output: its operand, or a copy of it when that operand cannot be an
/// output as it is (an input, a constant, or already an output).
fn output_operand(b: &mut Builder<'_>, t: usize, taken: &HashSet<u32>) -> Result<u32> {
    if !b.values.contains_key(&t) && !b.is_constant(t) {
        return Err(LowerError::BadGraph(format!(
            "output tensor {t} is never written"
        )));
    }
    let o = b.value(t)?;
    Ok(as_output(b, o, taken))
}

/// `o`, or a copy of it when it cannot be an output as it is (not written by an operation of
/// this model, or already an output).
fn as_output(b: &mut Builder<'_>, o: u32, taken: &HashSet<u32>) -> u32 {
    let fresh = !taken.contains(&o) && b.operations.iter().any(|op| op.outputs.contains(&o));
    if fresh {
        return o;
    }
    let d = b.temp_same(o);
    b.copy(o, d);
    d
}

/// Lowers the whole of `b.sub`: its inputs defined, every node lowered (variable operations
/// through `vars`), its outputs made outputs. Returns the input and output operands and the
/// set of operands taken as outputs.
fn lower_whole(
    b: &mut Builder<'_>,
    mut vars: Option<&mut state::Variables>,
) -> Result<(Vec<u32>, Vec<u32>, HashSet<u32>)> {
    let sub = b.sub;
    let mut inputs = Vec::new();
    for &t in &sub.inputs {
        let t = tensor_index(sub, t, "input")?;
        inputs.push(b.define(t)?);
    }
    for node in 0..sub.nodes.len() {
        check_indexes(sub, node)?;
        b.node = node;
        if b.folded_producer_of_node(node) {
            continue;
        }
        let handled = match vars.as_deref_mut() {
            Some(v) => v.lower(b)?,
            None => false,
        };
        if !handled {
            lower_node(b)?;
        }
    }
    let mut outputs = Vec::new();
    let mut taken = HashSet::new();
    for &t in &sub.outputs {
        let t = tensor_index(sub, t, "output")?;
        b.node = b.producer(t).unwrap_or(0);
        let o = output_operand(b, t, &taken)?;
        taken.insert(o);
        outputs.push(o);
    }
    Ok((inputs, outputs, taken))
}

/// Lowers the main subgraph (0) of `graph`, with the init subgraph its CALL_ONCE names.
pub fn lower_model(graph: &Graph) -> Result<Lowered> {
    let sub = graph
        .subgraphs
        .first()
        .ok_or_else(|| LowerError::BadGraph("the model has no subgraph".into()))?;
    let mut b = Builder::new(sub);
    let refs = Rc::new(RefCell::new(build::Refs {
        graph,
        index: Default::default(),
        parts: Vec::new(),
    }));
    b.refs = Some(refs.clone());
    let mut vars = state::Variables::new(graph)?;
    let (mut inputs, mut outputs, mut taken) = lower_whole(&mut b, Some(&mut vars))?;
    // lower_whole checked every index.
    let infos = |list: &[i32]| -> Result<Vec<TensorInfo>> {
        list.iter().map(|&t| info(sub, t as usize, None)).collect()
    };
    let mut input_infos = infos(&sub.inputs)?;
    let mut output_infos = infos(&sub.outputs)?;
    let mut io = state::Io {
        inputs: &mut inputs,
        input_infos: &mut input_infos,
        outputs: &mut outputs,
        output_infos: &mut output_infos,
    };
    let state = vars.finish(&mut b, &mut io, &mut taken)?;
    let origins = b.origins.clone();
    let referenced = control::take_parts(&refs)?;
    let model = build::assemble(b.into_part(&inputs, &outputs), referenced, true)?;
    Ok(Lowered {
        model,
        inputs: input_infos,
        outputs: output_infos,
        state,
        origins,
    })
}

/// Lowers one delegate partition: the nodes `nodes` of `subgraph`. Model inputs are the
/// non-constant tensors the nodes read and do not write (in the order first read); outputs
/// are the tensors they write that a node outside the set reads or that are subgraph outputs
/// (in the order written).
pub fn lower_nodes(subgraph: &Subgraph, nodes: &[usize]) -> Result<Lowered> {
    lower_partition(subgraph, nodes, true)
}

/// Ok iff [`lower_nodes`]`(subgraph, &[node])` would succeed for this node.
pub fn check_node(subgraph: &Subgraph, node: usize) -> Result<()> {
    lower_partition(subgraph, &[node], false).map(|_| ())
}

fn lower_partition(sub: &Subgraph, nodes: &[usize], pool: bool) -> Result<Lowered> {
    let mut seen = HashSet::new();
    for &n in nodes {
        if n >= sub.nodes.len() {
            return Err(LowerError::BadGraph(format!("node {n} does not exist")));
        }
        if !seen.insert(n) {
            return Err(LowerError::BadGraph(format!("node {n} is listed twice")));
        }
        check_indexes(sub, n)?;
    }
    let mut b = Builder::new(sub);
    // Tensors written inside the set, and the inputs: read, not written before, not constant.
    let mut written = HashSet::new();
    let mut inputs = Vec::new();
    let mut input_infos = Vec::new();
    let mut produced = Vec::new();
    for &n in nodes {
        b.node = n;
        let node = b.cur()?;
        if is_whole_model_only(node.builtin_code) {
            return Err(whole_model_only(&b));
        }
        for &t in &node.inputs {
            let Ok(t) = usize::try_from(t) else { continue };
            tensor_index(sub, t as i32, "input")?;
            if written.contains(&t) || b.values.contains_key(&t) || b.is_constant(t) {
                continue;
            }
            let o = b.define(t)?;
            inputs.push(o);
            input_infos.push(info(sub, t, None)?);
        }
        for &t in &node.outputs {
            let t = tensor_index(sub, t, "output")?;
            if written.insert(t) {
                produced.push(t);
            }
        }
    }
    for &n in nodes {
        b.node = n;
        if !b.folded_producer_of_node(n) {
            lower_node(&mut b)?;
        }
    }
    let read_outside: HashSet<usize> = sub
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| !seen.contains(i))
        .flat_map(|(_, n)| n.inputs.iter().filter_map(|&t| usize::try_from(t).ok()))
        .chain(sub.outputs.iter().filter_map(|&t| usize::try_from(t).ok()))
        .collect();
    let mut outputs = Vec::new();
    let mut output_infos = Vec::new();
    let mut taken = HashSet::new();
    for t in produced {
        if !read_outside.contains(&t) {
            continue;
        }
        b.node = b.producer(t).unwrap_or(b.node);
        let o = output_operand(&mut b, t, &taken)?;
        taken.insert(o);
        outputs.push(o);
        output_infos.push(info(sub, t, None)?);
    }
    let origins = b.origins.clone();
    let model = build::assemble(b.into_part(&inputs, &outputs), Vec::new(), pool)?;
    Ok(Lowered {
        model,
        inputs: input_infos,
        outputs: output_infos,
        state: Vec::new(),
        origins,
    })
}
