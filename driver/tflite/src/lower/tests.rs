//! Graph forms built by hand, lowered, checked for their operations and operands, and
//! executed on the CPU-only driver against values worked out by hand (in the comments).

use std::os::fd::AsFd;
use std::sync::Arc;

use nnaccel_hal::{
    Backend, DataLocation, Driver, ErrorStatus, ExecutionPreference, MeasureTiming, Memory,
    MemoryKind, MemoryPool, OperandLifetime, OperandType, OperationType, Priority, Request,
    RequestArgument,
};
use nnaccel_uapi::sys::{Mapping, memfd_create};

use super::*;
use crate::graph::{Activation, Node, Options, Padding, Quantization, Tensor};

// ---- a graph builder ---------------------------------------------------------------------

/// Builds one subgraph by hand.
#[derive(Default)]
pub(super) struct G {
    pub sub: Subgraph,
}

pub(super) fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of float16 bit patterns.
pub(super) fn f16_bits(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl G {
    /// A tensor; returns its index.
    pub fn t(&mut self, name: &str, ty: ElementType, shape: &[i32]) -> i32 {
        self.sub.tensors.push(Tensor {
            name: name.into(),
            element_type: ty,
            shape: shape.to_vec(),
            shape_signature: Vec::new(),
            quantization: Quantization::default(),
            sparsity: None,
            data: None,
            is_variable: false,
        });
        (self.sub.tensors.len() - 1) as i32
    }

    /// A FLOAT32 tensor.
    pub fn f(&mut self, name: &str, shape: &[i32]) -> i32 {
        self.t(name, ElementType::Float32, shape)
    }

    /// A constant.
    pub fn c(&mut self, name: &str, ty: ElementType, shape: &[i32], data: Vec<u8>) -> i32 {
        let t = self.t(name, ty, shape);
        self.sub.tensors[t as usize].data = Some(data);
        t
    }

    /// Sets a tensor's quantization.
    pub fn q(&mut self, t: i32, scales: &[f32], zero_points: &[i64], axis: i32) -> i32 {
        self.sub.tensors[t as usize].quantization = Quantization {
            scales: scales.to_vec(),
            zero_points: zero_points.to_vec(),
            axis,
        };
        t
    }

    /// A node.
    pub fn n(&mut self, code: i32, inputs: &[i32], outputs: &[i32], options: Options) {
        self.sub.nodes.push(Node {
            builtin_code: code,
            custom_code: None,
            version: 1,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            intermediates: Vec::new(),
            options,
        });
    }

    /// A two-input node without activation (ADD, MUL, …): y = a op c.
    pub fn arith(&mut self, code: i32, a: i32, c: i32, y: i32) {
        self.n(code, &[a, c], &[y], Options::Activation(Activation::None));
    }

    /// The subgraph's inputs and outputs, and the one-subgraph graph.
    pub fn graph(mut self, inputs: &[i32], outputs: &[i32]) -> Graph {
        self.sub.inputs = inputs.to_vec();
        self.sub.outputs = outputs.to_vec();
        Graph {
            subgraphs: vec![self.sub],
            version: 3,
            description: String::new(),
        }
    }
}

// ---- running a lowered model -------------------------------------------------------------

/// Prepares the model on the CPU-only driver and runs it once on `inputs` (bytes per model
/// input); returns the bytes of each output.
pub(super) fn run(lowered: &Lowered, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let driver = Driver::new(Backend::CpuOnly);
    let pm = driver
        .prepare_model(
            &lowered.model,
            ExecutionPreference::FastSingleAnswer,
            Priority::Medium,
            None,
        )
        .expect("prepare");
    let m = &lowered.model;
    let out_lens: Vec<usize> = m
        .output_indexes
        .iter()
        .map(|&o| build::byte_len(&m.operands[o as usize]).expect("known output shape"))
        .collect();
    let mut at = 0usize;
    let mut place = |len: usize| {
        let loc = DataLocation {
            pool_index: 0,
            offset: at as u32,
            length: len as u32,
            padding: 0,
        };
        at = (at + len).next_multiple_of(64);
        loc
    };
    let in_locs: Vec<_> = inputs.iter().map(|i| place(i.len())).collect();
    let out_locs: Vec<_> = out_lens.iter().map(|&l| place(l)).collect();
    let size = at.max(64).next_multiple_of(4096);
    let fd = memfd_create(c"test-io", size as u64).unwrap();
    let map = Mapping::map_shared(fd.as_fd(), 0, size, true).unwrap();
    for (i, loc) in inputs.iter().zip(&in_locs) {
        map.write_at(loc.offset as usize, i).unwrap();
    }
    let arg = |location: &DataLocation| RequestArgument {
        has_no_value: false,
        location: *location,
        dimensions: vec![],
    };
    let request = Request {
        inputs: in_locs.iter().map(arg).collect(),
        outputs: out_locs.iter().map(arg).collect(),
        pools: vec![MemoryPool::Memory(Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(fd),
            size: size as u64,
        })],
    };
    let result = pm.execute_synchronously(&request, MeasureTiming::No, None);
    assert_eq!(result.status, ErrorStatus::None, "execution failed");
    out_locs
        .iter()
        .map(|loc| {
            let mut b = vec![0u8; loc.length as usize];
            map.read_at(loc.offset as usize, &mut b).unwrap();
            b
        })
        .collect()
}

pub(super) fn op_types(l: &Lowered) -> Vec<OperationType> {
    l.model
        .operations
        .iter()
        .map(|o| o.operation_type)
        .collect()
}

/// The INT32 scalar constant value of operand `o`.
pub(super) fn int_arg(l: &Lowered, o: u32) -> i32 {
    let op = &l.model.operands[o as usize];
    assert_eq!(op.operand_type, OperandType::Int32);
    assert_eq!(op.lifetime, OperandLifetime::ConstantCopy);
    let at = op.location.offset as usize;
    let b = &l.model.operand_values[at..at + 4];
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Makes tensor `t` of `graph`'s main subgraph a constant of type `ty` (INT8 or UINT8)
/// holding `q`, quantized per tensor at `scale` and `zero_point`: a hybrid node's weights.
pub(super) fn quantize_const(
    graph: &mut Graph,
    t: usize,
    ty: ElementType,
    q: &[u8],
    scale: f32,
    zero_point: i64,
) {
    let tensor = &mut graph.subgraphs[0].tensors[t];
    tensor.element_type = ty;
    tensor.data = Some(q.to_vec());
    tensor.quantization.scales = vec![scale];
    tensor.quantization.zero_points = vec![zero_point];
}

/// Why node 0 of `graph`, a `op` node, is refused (it must be, as Unsupported).
pub(super) fn node0_refusal(graph: &Graph, op: &str) -> String {
    let err = lower_model(graph).unwrap_err();
    let LowerError::Unsupported { node, op: got, why } = err else {
        panic!("not Unsupported: {err}");
    };
    assert_eq!((node, got.as_str()), (0, op));
    why
}

/// The values of operand `o`, a FLOAT32 constant copied into `operand_values`.
pub(super) fn float_const(l: &Lowered, o: u32) -> Vec<f32> {
    let op = &l.model.operands[o as usize];
    assert_eq!(op.operand_type, OperandType::TensorFloat32);
    assert_eq!(op.lifetime, OperandLifetime::ConstantCopy);
    let at = op.location.offset as usize;
    to_f32s(&l.model.operand_values[at..at + op.location.length as usize])
}

pub(super) fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

fn conv_options(padding: Padding, stride: i32, activation: Activation) -> Options {
    Options::Conv2d {
        padding,
        stride_w: stride,
        stride_h: stride,
        dilation_w: 1,
        dilation_h: 1,
        activation,
    }
}

// ---- convolutions ----------------------------------------------------------------------------

/// A 4x4 input holding 1..=16 row-major, a 3x3 filter of ones, bias 1, SAME padding, stride 2.
fn same_stride2_conv() -> Graph {
    let mut g = G::default();
    let x = g.f("x", &[1, 4, 4, 1]);
    let w = g.c("w", ElementType::Float32, &[1, 3, 3, 1], f32s(&[1.0; 9]));
    let bias = g.c("b", ElementType::Float32, &[1], f32s(&[1.0]));
    let y = g.f("y", &[1, 2, 2, 1]);
    g.n(
        code::CONV_2D,
        &[x, w, bias],
        &[y],
        conv_options(Padding::Same, 2, Activation::None),
    );
    g.graph(&[x], &[y])
}

#[test]
fn conv_same_padding_maps_to_the_implicit_padding_code_and_strides() {
    let l = lower_model(&same_stride2_conv()).unwrap();
    assert_eq!(op_types(&l), [OperationType::Conv2d]);
    let args = &l.model.operations[0].inputs;
    // input, filter, bias, padding, stride w, stride h, activation: no dilation arguments.
    assert_eq!(args.len(), 7);
    assert_eq!(int_arg(&l, args[3]), 1, "SAME is NNAPI padding code 1");
    assert_eq!(int_arg(&l, args[4]), 2);
    assert_eq!(int_arg(&l, args[5]), 2);
    assert_eq!(int_arg(&l, args[6]), 0);
    assert_eq!(l.origins, [0]);
    assert_eq!(l.inputs[0].name, "x");
    assert_eq!(l.outputs[0].shape, [1, 2, 2, 1]);
}

#[test]
fn conv_same_padding_stride_2_executes_as_worked_by_hand() {
    // Output size ceil(4/2) = 2; total padding (2-1)*2 + 3 - 4 = 1, all of it after (bottom
    // and right). Input value at (r, c) is 4r + c + 1. Windows:
    //   (0,0): rows 0-2, cols 0-2: 4*(0+1+2)*3 + (0+1+2)*3 + 9 = 36 + 9 + 9 = 54
    //   (0,1): rows 0-2, cols 2-3: 4*3*2 + (2+3)*3 + 6 = 24 + 15 + 6 = 45
    //   (1,0): rows 2-3, cols 0-2: 4*(2+3)*3 + 3*2 + 6 = 60 + 6 + 6 = 72
    //   (1,1): rows 2-3, cols 2-3: 4*5*2 + 5*2 + 4 = 40 + 10 + 4 = 54
    // plus the bias 1.
    let l = lower_model(&same_stride2_conv()).unwrap();
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let out = run(&l, &[f32s(&x)]);
    assert_close(&to_f32s(&out[0]), &[55.0, 46.0, 73.0, 55.0]);
}

#[test]
fn dilated_conv_gets_layout_and_dilation_arguments() {
    let mut g = G::default();
    let x = g.f("x", &[1, 5, 5, 1]);
    let w = g.c("w", ElementType::Float32, &[1, 2, 2, 1], f32s(&[1.0; 4]));
    let y = g.f("y", &[1, 3, 3, 1]);
    g.n(
        code::CONV_2D,
        &[x, w, -1],
        &[y],
        Options::Conv2d {
            padding: Padding::Valid,
            stride_w: 1,
            stride_h: 1,
            dilation_w: 2,
            dilation_h: 2,
            activation: Activation::Relu,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let args = &l.model.operations[0].inputs;
    assert_eq!(args.len(), 10);
    assert_eq!(int_arg(&l, args[3]), 2, "VALID is NNAPI padding code 2");
    assert_eq!(int_arg(&l, args[6]), 1, "RELU is fuse code 1");
    assert_eq!(int_arg(&l, args[8]), 2);
    assert_eq!(int_arg(&l, args[9]), 2);
    // The omitted bias is a zero FLOAT32 vector of one element per output channel.
    let bias = &l.model.operands[args[2] as usize];
    assert_eq!(bias.operand_type, OperandType::TensorFloat32);
    assert_eq!(bias.dimensions, [1]);
    // Input 0..25: each output is x[r][c] + x[r][c+2] + x[r+2][c] + x[r+2][c+2] with
    // x[r][c] = 5r + c: 4*(5r + c) + 2 + 10 + 12 = 20r + 4c + 24 (all positive: RELU keeps
    // them). Without the dilation it would be 20r + 4c + 12.
    let input: Vec<f32> = (0..25).map(|v| v as f32).collect();
    let out = to_f32s(&run(&l, &[f32s(&input)])[0]);
    assert_close(
        &out,
        &[24.0, 28.0, 32.0, 44.0, 48.0, 52.0, 64.0, 68.0, 72.0],
    );
}

#[test]
fn depthwise_multiplier_comes_from_the_shapes_and_executes() {
    // One input channel, four output channels' worth of filter... two: multiplier 2, though
    // the stored option says 1. Input 2x2 [1, 2, 3, 4]; filter channel 0 all ones, channel 1
    // [1, 0, 0, -1]; bias [0.5, 0]. VALID: one output pixel, channel 0 = 1+2+3+4 + 0.5 =
    // 10.5, channel 1 = 1 - 4 = -3.
    let mut g = G::default();
    let x = g.f("x", &[1, 2, 2, 1]);
    // [1, H, W, C*m] layout: element (h, w, c) at (h*2 + w)*2 + c.
    let w = g.c(
        "w",
        ElementType::Float32,
        &[1, 2, 2, 2],
        f32s(&[1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, -1.0]),
    );
    let bias = g.c("b", ElementType::Float32, &[2], f32s(&[0.5, 0.0]));
    let y = g.f("y", &[1, 1, 1, 2]);
    g.n(
        code::DEPTHWISE_CONV_2D,
        &[x, w, bias],
        &[y],
        Options::DepthwiseConv2d {
            padding: Padding::Valid,
            stride_w: 1,
            stride_h: 1,
            depth_multiplier: 1,
            dilation_w: 1,
            dilation_h: 1,
            activation: Activation::None,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let args = &l.model.operations[0].inputs;
    assert_eq!(
        int_arg(&l, args[6]),
        2,
        "multiplier = 2 output / 1 input channels"
    );
    let out = to_f32s(&run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])])[0]);
    assert_close(&out, &[10.5, -3.0]);
}

#[test]
fn per_channel_int8_conv_maps_the_filter_and_bias_and_executes() {
    // Input int8 scale 0.5 zp 0: q [2, 4] = real [1, 2]. Filter [2,1,1,2] per-channel on
    // axis 0, scales [0.5, 0.25]: channel 0 q [2, 2] = [1, 1], channel 1 q [4, -4] = [1, -1].
    // Bias q [4, 8] at scales 0.5*0.5 = 0.25 and 0.5*0.25 = 0.125: real [1, 1].
    // Real outputs: 1+2+1 = 4 and 1-2+1 = 0. Output scale 0.5 zp -1: q 4/0.5 - 1 = 7, -1.
    let mut g = G::default();
    let x = g.t("x", ElementType::Int8, &[1, 1, 1, 2]);
    g.q(x, &[0.5], &[0], 0);
    let w = g.c(
        "w",
        ElementType::Int8,
        &[2, 1, 1, 2],
        vec![2, 2, 4, (-4i8) as u8],
    );
    g.q(w, &[0.5, 0.25], &[0, 0], 0);
    let bias = g.c("b", ElementType::Int32, &[2], i32s(&[4, 8]));
    g.q(bias, &[0.25, 0.125], &[0, 0], 0);
    let y = g.t("y", ElementType::Int8, &[1, 1, 1, 2]);
    g.q(y, &[0.5], &[-1], 0);
    g.n(
        code::CONV_2D,
        &[x, w, bias],
        &[y],
        conv_options(Padding::Valid, 1, Activation::None),
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let args = &l.model.operations[0].inputs;
    let f = &l.model.operands[args[1] as usize];
    assert_eq!(f.operand_type, OperandType::TensorQuant8SymmPerChannel);
    let extra = f.extra_params.as_ref().unwrap();
    assert_eq!(extra.scales, [0.5, 0.25]);
    assert_eq!(extra.channel_dim, 0);
    let b = &l.model.operands[args[2] as usize];
    assert_eq!(b.operand_type, OperandType::TensorInt32);
    assert_eq!(b.scale, 0.0, "a per-channel bias has scale 0 in NNAPI");
    assert_eq!(
        l.model.operands[args[0] as usize].operand_type,
        OperandType::TensorQuant8AsymmSigned
    );
    let out = run(&l, &[vec![2, 4]]);
    assert_eq!(out[0], [7u8, (-1i8) as u8]);
}

#[test]
fn fused_tanh_becomes_its_own_operation_after_the_node() {
    // tanh(0 + 0) = 0, tanh(0.5 + 0.5) = tanh(1) = 0.7615942.
    let mut g = G::default();
    let a = g.f("a", &[2]);
    let b = g.f("b", &[2]);
    let y = g.f("y", &[2]);
    g.n(
        code::ADD,
        &[a, b],
        &[y],
        Options::Activation(Activation::Tanh),
    );
    let l = lower_model(&g.graph(&[a, b], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Add, OperationType::Tanh]);
    let add = &l.model.operations[0];
    assert_eq!(int_arg(&l, add.inputs[2]), 0);
    let tanh = &l.model.operations[1];
    assert_eq!(tanh.inputs, add.outputs, "TANH reads the ADD's temporary");
    assert_eq!(tanh.outputs, l.model.output_indexes);
    assert_eq!(l.origins, [0, 0]);
    let out = run(&l, &[f32s(&[0.0, 0.5]), f32s(&[0.0, 0.5])]);
    assert_close(&to_f32s(&out[0]), &[0.0, 0.761_594_2]);
}

#[test]
fn fused_sign_bit_is_unsupported() {
    let mut g = G::default();
    let a = g.f("a", &[2]);
    let y = g.f("y", &[2]);
    g.n(
        code::ADD,
        &[a, a],
        &[y],
        Options::Activation(Activation::SignBit),
    );
    let e = lower_model(&g.graph(&[a], &[y])).unwrap_err();
    assert!(
        e.to_string().starts_with("node 0 (ADD): ") && e.to_string().contains("SIGN_BIT"),
        "{e}"
    );
}

#[test]
fn fully_connected_keep_num_dims_reshapes_after_and_executes() {
    // Input [1, 2, 3] = [[1,2,3],[4,5,6]], weights [[1,0,0],[0,1,1]], no bias: rows
    // [1, 2+3] = [1, 5] and [4, 5+6] = [4, 11]; output kept as [1, 2, 2].
    let mut g = G::default();
    let x = g.f("x", &[1, 2, 3]);
    let w = g.c(
        "w",
        ElementType::Float32,
        &[2, 3],
        f32s(&[1.0, 0.0, 0.0, 0.0, 1.0, 1.0]),
    );
    let y = g.f("y", &[1, 2, 2]);
    g.n(
        code::FULLY_CONNECTED,
        &[x, w, -1],
        &[y],
        Options::FullyConnected {
            activation: Activation::None,
            keep_num_dims: true,
            shuffled_weights: false,
            asymmetric_quantize_inputs: false,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(
        op_types(&l),
        [OperationType::FullyConnected, OperationType::Reshape]
    );
    let fc_out = l.model.operations[0].outputs[0];
    assert_eq!(l.model.operands[fc_out as usize].dimensions, [2, 2]);
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 5.0, 4.0, 11.0]);
}

// ---- folding ----------------------------------------------------------------------------------

#[test]
fn dequantize_of_float16_and_int8_constants_is_folded_and_executes() {
    // float16 [1.0, 0.5] (bits 0x3C00, 0x3800); int8 [10, -4] at scale 0.25, zp 2:
    // (10-2)*0.25 = 2, (-4-2)*0.25 = -1.5. y = x + h + q with x = [1, 2]: [4, 1].
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let h = g.c("h", ElementType::Float16, &[2], f16_bits(&[0x3C00, 0x3800]));
    let hf = g.f("hf", &[2]);
    let q = g.c("q", ElementType::Int8, &[2], vec![10, (-4i8) as u8]);
    g.q(q, &[0.25], &[2], 0);
    let qf = g.f("qf", &[2]);
    let s = g.f("s", &[2]);
    let y = g.f("y", &[2]);
    g.n(code::DEQUANTIZE, &[h], &[hf], Options::None);
    g.n(code::DEQUANTIZE, &[q], &[qf], Options::None);
    g.arith(code::ADD, x, hf, s);
    g.arith(code::ADD, s, qf, y);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Add, OperationType::Add]);
    assert_eq!(l.origins, [2, 3]);
    let out = run(&l, &[f32s(&[1.0, 2.0])]);
    assert_close(&to_f32s(&out[0]), &[4.0, 1.0]);
}

#[test]
fn large_constants_go_to_a_memfd_pool() {
    let mut g = G::default();
    let x = g.f("x", &[64]);
    let c = g.c("c", ElementType::Float32, &[64], f32s(&[2.0; 64]));
    let y = g.f("y", &[64]);
    g.arith(code::MUL, x, c, y);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let mul = &l.model.operations[0];
    let c = &l.model.operands[mul.inputs[1] as usize];
    assert_eq!(c.lifetime, OperandLifetime::ConstantReference);
    assert_eq!(c.location.length, 256);
    assert_eq!(l.model.pools.len(), 1);
    let out = to_f32s(&run(&l, &[f32s(&[1.5; 64])])[0]);
    assert_close(&out, &[3.0; 64]);
}

// ---- errors -----------------------------------------------------------------------------------

/// Node 0 RELU, then node 1 RFFT2D (builtin 131, no NNAPI equivalent).
fn relu_then_rfft2d() -> Graph {
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let y = g.f("y", &[2]);
    let z = g.f("z", &[2]);
    g.n(code::RELU, &[x], &[y], Options::None);
    g.n(131, &[y], &[z], Options::None);
    g.graph(&[x], &[z])
}

#[test]
fn an_unsupported_builtin_is_an_error_naming_node_and_op() {
    let e = lower_model(&relu_then_rfft2d()).unwrap_err();
    match &e {
        LowerError::Unsupported { node, op, .. } => {
            assert_eq!((*node, op.as_str()), (1, "RFFT2D"));
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().starts_with("node 1 (RFFT2D): "), "{e}");
}

#[test]
fn a_custom_op_is_an_error_naming_it() {
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let y = g.f("y", &[2]);
    g.n(crate::graph::CUSTOM, &[x], &[y], Options::None);
    g.sub.nodes[0].custom_code = Some("MyOp".into());
    let e = lower_model(&g.graph(&[x], &[y])).unwrap_err();
    assert!(e.to_string().starts_with("node 0 (CUSTOM(MyOp)): "), "{e}");
}

#[test]
fn a_tensor_type_without_an_operand_type_is_an_error_naming_the_tensor() {
    let mut g = G::default();
    let x = g.t("strings", ElementType::String, &[2]);
    let y = g.f("y", &[2]);
    g.n(code::RELU, &[x], &[y], Options::None);
    let e = lower_model(&g.graph(&[x], &[y])).unwrap_err();
    assert!(e.to_string().contains("tensor 0 (strings)"), "{e}");
    assert!(e.to_string().contains("STRING"), "{e}");
}

#[test]
fn unknown_input_dimensions_become_zero() {
    let mut g = G::default();
    let x = g.f("x", &[1, 3]);
    g.sub.tensors[x as usize].shape_signature = vec![-1, 3];
    let y = g.f("y", &[1, 3]);
    g.sub.tensors[y as usize].shape_signature = vec![-1, 3];
    g.n(code::RELU, &[x], &[y], Options::None);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(
        l.model.operands[l.model.input_indexes[0] as usize].dimensions,
        [0, 3]
    );
    assert_eq!(l.inputs[0].shape, [-1, 3]);
}

// ---- partitions -------------------------------------------------------------------------------

#[test]
fn lower_nodes_takes_inputs_in_order_read_and_outputs_read_outside() {
    // 0: a = relu(x); 1: b = a + w (w constant); 2: c = b * x2; 3: d = tanh(c), outside.
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let x2 = g.f("x2", &[2]);
    let w = g.c("w", ElementType::Float32, &[2], f32s(&[1.0, 2.0]));
    let a = g.f("a", &[2]);
    let b = g.f("b", &[2]);
    let c = g.f("c", &[2]);
    let d = g.f("d", &[2]);
    g.n(code::RELU, &[x], &[a], Options::None);
    g.arith(code::ADD, a, w, b);
    g.arith(code::MUL, b, x2, c);
    g.n(code::TANH, &[c], &[d], Options::None);
    let graph = g.graph(&[x, x2], &[d, b]);
    let l = lower_nodes(&graph.subgraphs[0], &[0, 1, 2]).unwrap();
    let names = |v: &[TensorInfo]| v.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&l.inputs), ["x", "x2"]);
    assert_eq!(
        names(&l.outputs),
        ["b", "c"],
        "b is a subgraph output, c is read by node 3"
    );
    assert_eq!(l.origins, [0, 1, 2]);
    // x = [-1, 3], x2 = [2, 2]: a = [0, 3], b = [1, 5], c = [2, 10].
    let out = run(&l, &[f32s(&[-1.0, 3.0]), f32s(&[2.0, 2.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 5.0]);
    assert_close(&to_f32s(&out[1]), &[2.0, 10.0]);
}

#[test]
fn check_node_agrees_with_lower_nodes() {
    let graph = relu_then_rfft2d();
    let sub = &graph.subgraphs[0];
    assert!(check_node(sub, 0).is_ok());
    assert!(lower_nodes(sub, &[0]).is_ok());
    assert!(check_node(sub, 1).is_err());
    assert!(lower_nodes(sub, &[1]).is_err());
    assert!(check_node(sub, 2).is_err(), "no node 2");
}

// ---- splits, packs, slices ----------------------------------------------------------------

#[test]
fn split_v_with_unequal_sizes_becomes_slices_and_executes() {
    // [1, 2, 3, 4, 5] split in sizes [2, -1]: the -1 is 5 - 2 = 3: [1, 2] and [3, 4, 5].
    let mut g = G::default();
    let x = g.f("x", &[5]);
    let sizes = g.c("sizes", ElementType::Int32, &[2], i32s(&[2, -1]));
    let axis = g.c("axis", ElementType::Int32, &[], i32s(&[0]));
    let a = g.f("a", &[2]);
    let c = g.f("c", &[3]);
    g.n(
        code::SPLIT_V,
        &[x, sizes, axis],
        &[a, c],
        Options::Split { num_splits: 2 },
    );
    let l = lower_model(&g.graph(&[x], &[a, c])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Slice, OperationType::Slice]);
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 2.0]);
    assert_close(&to_f32s(&out[1]), &[3.0, 4.0, 5.0]);
}

#[test]
fn split_into_equal_pieces_is_one_nnapi_split() {
    // SPLIT takes the axis first: [1, 2, 3, 4] in two along axis -1: [1, 2], [3, 4].
    let mut g = G::default();
    let axis = g.c("axis", ElementType::Int32, &[], i32s(&[-1]));
    let x = g.f("x", &[1, 4]);
    let a = g.f("a", &[1, 2]);
    let c = g.f("c", &[1, 2]);
    g.n(
        code::SPLIT,
        &[axis, x],
        &[a, c],
        Options::Split { num_splits: 2 },
    );
    let l = lower_model(&g.graph(&[x], &[a, c])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Split]);
    assert_eq!(int_arg(&l, l.model.operations[0].inputs[1]), 1);
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 2.0]);
    assert_close(&to_f32s(&out[1]), &[3.0, 4.0]);
}

#[test]
fn pack_and_unpack_execute_through_reshape_concat_and_split() {
    // PACK [1, 2] and [3, 4] on axis 1: [[1, 3], [2, 4]]. UNPACK that on axis 0: [1, 3], [2, 4].
    let mut g = G::default();
    let a = g.f("a", &[2]);
    let c = g.f("c", &[2]);
    let p = g.f("p", &[2, 2]);
    let u0 = g.f("u0", &[2]);
    let u1 = g.f("u1", &[2]);
    g.n(
        code::PACK,
        &[a, c],
        &[p],
        Options::Pack {
            values_count: 2,
            axis: 1,
        },
    );
    g.n(
        code::UNPACK,
        &[p],
        &[u0, u1],
        Options::Unpack { num: 2, axis: 0 },
    );
    let l = lower_model(&g.graph(&[a, c], &[p, u0, u1])).unwrap();
    let out = run(&l, &[f32s(&[1.0, 2.0]), f32s(&[3.0, 4.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 3.0, 2.0, 4.0]);
    assert_close(&to_f32s(&out[1]), &[1.0, 3.0]);
    assert_close(&to_f32s(&out[2]), &[2.0, 4.0]);
}

#[test]
fn strided_slice_executes_with_constant_begin_end_strides() {
    // [1, 2, 3, 4][1:4:2] = [2, 4].
    let mut g = G::default();
    let x = g.f("x", &[4]);
    let begin = g.c("b", ElementType::Int32, &[1], i32s(&[1]));
    let end = g.c("e", ElementType::Int32, &[1], i32s(&[4]));
    let strides = g.c("s", ElementType::Int32, &[1], i32s(&[2]));
    let y = g.f("y", &[2]);
    g.n(
        code::STRIDED_SLICE,
        &[x, begin, end, strides],
        &[y],
        Options::StridedSlice {
            begin_mask: 0,
            end_mask: 0,
            ellipsis_mask: 0,
            new_axis_mask: 0,
            shrink_axis_mask: 0,
            offset: false,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])]);
    assert_close(&to_f32s(&out[0]), &[2.0, 4.0]);
}

// ---- quantization -------------------------------------------------------------------------

#[test]
fn requantizing_quantize_is_a_dequantize_then_a_quantize() {
    // uint8 scale 0.5 zp 10: q [12, 20] = real [1, 5]; to scale 0.25 zp 0: [4, 20].
    let mut g = G::default();
    let x = g.t("x", ElementType::UInt8, &[2]);
    g.q(x, &[0.5], &[10], 0);
    let y = g.t("y", ElementType::UInt8, &[2]);
    g.q(y, &[0.25], &[0], 0);
    g.n(code::QUANTIZE, &[x], &[y], Options::None);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(
        op_types(&l),
        [OperationType::Dequantize, OperationType::Quantize]
    );
    assert_eq!(run(&l, &[vec![12, 20]])[0], [4, 20]);
}

#[test]
fn leaky_relu_is_prelu_with_a_constant_alpha_float_and_int8() {
    // Float: alpha 0.1 on [-2, 3]: [-0.2, 3].
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let y = g.f("y", &[2]);
    g.n(
        code::LEAKY_RELU,
        &[x],
        &[y],
        Options::LeakyRelu { alpha: 0.1 },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Prelu]);
    assert_close(&to_f32s(&run(&l, &[f32s(&[-2.0, 3.0])])[0]), &[-0.2, 3.0]);
    // int8 scale 0.5: q [-10, 6] = real [-5, 3]; alpha 0.2: [-1, 3] = q [-2, 6].
    let mut g = G::default();
    let x = g.t("x", ElementType::Int8, &[2]);
    g.q(x, &[0.5], &[0], 0);
    let y = g.t("y", ElementType::Int8, &[2]);
    g.q(y, &[0.5], &[0], 0);
    g.n(
        code::LEAKY_RELU,
        &[x],
        &[y],
        Options::LeakyRelu { alpha: 0.2 },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let out = run(&l, &[vec![(-10i8) as u8, 6]]);
    assert_eq!(out[0], [(-2i8) as u8, 6]);
}

// ---- resource variables -------------------------------------------------------------------

/// init (subgraph 1): counter = 1.0. main: CALL_ONCE; y = counter + step; counter = y.
fn counter_graph() -> Graph {
    let mut init = G::default();
    let r = init.t("r", ElementType::Resource, &[]);
    let one = init.c("one", ElementType::Float32, &[1], f32s(&[1.0]));
    let handle = Options::VarHandle {
        container: String::new(),
        shared_name: "counter".into(),
    };
    init.n(code::VAR_HANDLE, &[], &[r], handle.clone());
    init.n(code::ASSIGN_VARIABLE, &[r, one], &[], Options::None);
    let mut g = G::default();
    let step = g.f("step", &[1]);
    let r = g.t("r", ElementType::Resource, &[]);
    let v = g.f("v", &[1]);
    let y = g.f("y", &[1]);
    g.n(
        code::CALL_ONCE,
        &[],
        &[],
        Options::CallOnce { init_subgraph: 1 },
    );
    g.n(code::VAR_HANDLE, &[], &[r], handle);
    g.n(code::READ_VARIABLE, &[r], &[v], Options::None);
    g.arith(code::ADD, v, step, y);
    g.n(code::ASSIGN_VARIABLE, &[r, y], &[], Options::None);
    let mut graph = g.graph(&[step], &[y]);
    graph.subgraphs.push(init.sub);
    graph
}

#[test]
fn a_variable_incremented_by_assign_variable_is_carried_as_state() {
    let l = lower_model(&counter_graph()).unwrap();
    assert_eq!(l.state.len(), 1);
    let s = &l.state[0];
    assert_eq!(s.name, "counter");
    assert_eq!((s.input, s.output), (1, 1), "state after the model's own");
    assert_eq!(s.initial, f32s(&[1.0]));
    assert_eq!(l.inputs.len(), 2);
    assert_eq!(l.outputs.len(), 2);
    assert_eq!(l.inputs[1].name, "counter");
    // Two executions, feeding the state output back: 1 + 1 = 2, then 2 + 1 = 3.
    let first = run(&l, &[f32s(&[1.0]), s.initial.clone()]);
    assert_close(&to_f32s(&first[0]), &[2.0]);
    assert_close(&to_f32s(&first[1]), &[2.0]);
    let second = run(&l, &[f32s(&[1.0]), first[1].clone()]);
    assert_close(&to_f32s(&second[0]), &[3.0]);
    assert_close(&to_f32s(&second[1]), &[3.0]);
}

#[test]
fn an_init_subgraph_that_computes_is_a_clear_error() {
    let mut graph = counter_graph();
    // Make the init subgraph's assigned value the output of a RELU.
    let init = &mut graph.subgraphs[1];
    let relu_out = init.tensors.len() as i32;
    init.tensors.push(init.tensors[1].clone());
    init.tensors[relu_out as usize].data = None;
    init.nodes.insert(
        1,
        Node {
            builtin_code: code::RELU,
            custom_code: None,
            version: 1,
            inputs: vec![1],
            outputs: vec![relu_out],
            intermediates: vec![],
            options: Options::None,
        },
    );
    init.nodes[2].inputs[1] = relu_out;
    let e = lower_model(&graph).unwrap_err().to_string();
    assert!(e.starts_with("node 1 (RELU): in init subgraph 1"), "{e}");
}

#[test]
fn a_variable_never_assigned_in_main_reads_as_its_initial_constant() {
    let mut graph = counter_graph();
    graph.subgraphs[0].nodes.pop();
    let l = lower_model(&graph).unwrap();
    assert!(l.state.is_empty());
    assert_eq!(l.inputs.len(), 1);
    let out = run(&l, &[f32s(&[5.0])]);
    assert_close(&to_f32s(&out[0]), &[6.0]);
}

#[test]
fn hybrid_fully_connected_dequantizes_its_constant_int8_weights_at_import() {
    // Weights int8 [[2, -4]] at scale 0.5 (per tensor, zp 0): real [[1, -2]]. Input [3, 1]:
    // 3*1 + 1*(-2) = 1.
    let mut g = G::default();
    let x = g.f("x", &[1, 2]);
    let w = g.c("w", ElementType::Int8, &[1, 2], vec![2, (-4i8) as u8]);
    g.q(w, &[0.5], &[0], 0);
    let y = g.f("y", &[1, 1]);
    g.n(
        code::FULLY_CONNECTED,
        &[x, w, -1],
        &[y],
        Options::FullyConnected {
            activation: Activation::None,
            keep_num_dims: false,
            shuffled_weights: false,
            asymmetric_quantize_inputs: false,
        },
    );
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    let fc = &l.model.operations[0];
    assert_eq!(
        l.model.operands[fc.inputs[1] as usize].operand_type,
        OperandType::TensorFloat32
    );
    assert_close(&to_f32s(&run(&l, &[f32s(&[3.0, 1.0])])[0]), &[1.0]);
}

// ---- control flow --------------------------------------------------------------------------

/// A subgraph of one unary node: input a, output y.
fn unary_subgraph(code: i32) -> Subgraph {
    let mut g = G::default();
    let a = g.f("a", &[2]);
    let y = g.f("y", &[2]);
    g.n(code, &[a], &[y], Options::None);
    g.graph(&[a], &[y]).subgraphs.remove(0)
}

#[test]
fn if_runs_the_branch_its_condition_names() {
    // then: RELU, else: NEG. x = [-1, 2]: true → [0, 2], false → [1, -2].
    let mut g = G::default();
    let cond = g.t("cond", ElementType::Bool, &[1]);
    let x = g.f("x", &[2]);
    let y = g.f("y", &[2]);
    g.n(
        code::IF,
        &[cond, x],
        &[y],
        Options::If {
            then_subgraph: 1,
            else_subgraph: 2,
        },
    );
    let mut graph = g.graph(&[cond, x], &[y]);
    graph.subgraphs.push(unary_subgraph(code::RELU));
    graph.subgraphs.push(unary_subgraph(code::NEG));
    let l = lower_model(&graph).unwrap();
    assert_eq!(op_types(&l), [OperationType::If]);
    assert_eq!(l.model.referenced.len(), 2);
    let x = f32s(&[-1.0, 2.0]);
    assert_close(&to_f32s(&run(&l, &[vec![1], x.clone()])[0]), &[0.0, 2.0]);
    assert_close(&to_f32s(&run(&l, &[vec![0], x])[0]), &[1.0, -2.0]);
}

#[test]
fn while_loops_its_body_until_the_condition_fails() {
    // cond: i < 5; body: i + i. From 1: 2, 4, 8 (8 < 5 fails): 8.
    let mut cond = G::default();
    let i = cond.f("i", &[1]);
    let five = cond.c("five", ElementType::Float32, &[1], f32s(&[5.0]));
    let lt = cond.t("lt", ElementType::Bool, &[1]);
    cond.n(code::LESS, &[i, five], &[lt], Options::None);
    let mut body = G::default();
    let i = body.f("i", &[1]);
    let j = body.f("j", &[1]);
    body.arith(code::ADD, i, i, j);
    let mut g = G::default();
    let x = g.f("x", &[1]);
    let y = g.f("y", &[1]);
    g.n(
        code::WHILE,
        &[x],
        &[y],
        Options::While {
            cond_subgraph: 1,
            body_subgraph: 2,
        },
    );
    let mut graph = g.graph(&[x], &[y]);
    graph
        .subgraphs
        .push(cond.graph(&[0], &[2]).subgraphs.remove(0));
    graph
        .subgraphs
        .push(body.graph(&[0], &[1]).subgraphs.remove(0));
    let l = lower_model(&graph).unwrap();
    assert_eq!(op_types(&l), [OperationType::While]);
    assert_close(&to_f32s(&run(&l, &[f32s(&[1.0])])[0]), &[8.0]);
}

#[test]
fn a_subgraph_that_runs_itself_is_an_error() {
    let mut g = G::default();
    let cond = g.t("cond", ElementType::Bool, &[1]);
    let x = g.f("x", &[2]);
    let y = g.f("y", &[2]);
    let options = Options::If {
        then_subgraph: 1,
        else_subgraph: 1,
    };
    g.n(code::IF, &[cond, x], &[y], options.clone());
    let mut graph = g.graph(&[cond, x], &[y]);
    let mut inner = G::default();
    let cond = inner.t("cond", ElementType::Bool, &[1]);
    let x = inner.f("x", &[2]);
    let y = inner.f("y", &[2]);
    inner.n(code::IF, &[cond, x], &[y], options);
    graph
        .subgraphs
        .push(inner.graph(&[cond, x], &[y]).subgraphs.remove(0));
    let e = lower_model(&graph).unwrap_err().to_string();
    assert!(
        e.starts_with("node 0 (IF): in subgraph 1: node 0 (IF)"),
        "{e}"
    );
    assert!(e.contains("recursion"), "{e}");
}

// ---- malformed graphs ------------------------------------------------------------------------

#[test]
fn malformed_nodes_of_every_builtin_are_errors_not_panics() {
    // Every code with inputs that are wrong in assorted ways: out of range, omitted, constants
    // whose bytes do not fill their shapes, scalars where tensors belong, odd quantization.
    let input_sets: &[&[i32]] = &[
        &[],
        &[0],
        &[0, 1],
        &[0, 1, 2],
        &[2, 3, 4, 5],
        &[0, -1, 99],
        &[3, 3, 3],
        &[4, 0, 1, 2, 3, 5],
    ];
    let options = [
        Options::None,
        Options::Activation(Activation::Tanh),
        Options::Split { num_splits: 0 },
        Options::Pack {
            values_count: 2,
            axis: -7,
        },
        Options::Unpack { num: 3, axis: 9 },
        Options::Concatenation {
            axis: i32::MIN,
            activation: Activation::None,
        },
        conv_options(Padding::Same, 0, Activation::Relu),
    ];
    for code in -1..=210 {
        for inputs in input_sets {
            for opt in &options {
                let mut g = G::default();
                let x = g.f("x", &[1, 2, 2, 1]);
                g.sub.tensors[x as usize].shape_signature = vec![-1, 2, 2, 1];
                g.c("short", ElementType::Int32, &[3], vec![1, 2]);
                let q = g.c("q", ElementType::Int8, &[2], vec![1, 2]);
                g.q(q, &[0.5, 0.25, 1.0], &[0], 3);
                g.c("scalar", ElementType::Int32, &[], i32s(&[i32::MIN]));
                g.c(
                    "big",
                    ElementType::Int64,
                    &[2],
                    [i64::MAX, -1]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                );
                let y = g.f("y", &[1, 2, 2, 1]);
                let y2 = g.t("y2", ElementType::Int8, &[-3]);
                for outputs in [&[y][..], &[y, y2], &[y2]] {
                    let mut g = G { sub: g.sub.clone() };
                    g.n(code, inputs, outputs, opt.clone());
                    let graph = g.graph(&[x], &[y]);
                    let lowered = lower_model(&graph);
                    let checked = check_node(&graph.subgraphs[0], 0);
                    // A node that lowers alone also checks alone.
                    if lowered.is_ok() {
                        assert!(checked.is_ok(), "code {code}: {checked:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_partition_reads_a_folded_dequantize_as_a_constant() {
    // 0: w = DEQUANTIZE(w16) (float16 [2, 4] → [2, 4]); 1: y = x * w. A partition of node 1
    // alone takes x only (w is a constant there); node 0 alone outputs w through a copy.
    let mut g = G::default();
    let x = g.f("x", &[2]);
    let w16 = g.c(
        "w16",
        ElementType::Float16,
        &[2],
        f16_bits(&[0x4000, 0x4400]),
    );
    let w = g.f("w", &[2]);
    let y = g.f("y", &[2]);
    g.n(code::DEQUANTIZE, &[w16], &[w], Options::None);
    g.arith(code::MUL, x, w, y);
    let graph = g.graph(&[x], &[y]);
    let sub = &graph.subgraphs[0];
    let l = lower_nodes(sub, &[1]).unwrap();
    assert_eq!(l.inputs.len(), 1);
    assert_eq!(l.inputs[0].name, "x");
    // x = [1, 3] times w = [2, 4]: [2, 12].
    assert_close(&to_f32s(&run(&l, &[f32s(&[1.0, 3.0])])[0]), &[2.0, 12.0]);
    let both = lower_nodes(sub, &[0, 1]).unwrap();
    assert_eq!(op_types(&both), [OperationType::Mul]);
    let alone = lower_nodes(sub, &[0]).unwrap();
    assert_eq!(alone.outputs[0].name, "w");
    assert_close(&to_f32s(&run(&alone, &[])[0]), &[2.0, 4.0]);
}

#[test]
fn variables_and_control_flow_are_not_partition_material() {
    let graph = counter_graph();
    let sub = &graph.subgraphs[0];
    for node in [2, 4] {
        let e = check_node(sub, node).unwrap_err().to_string();
        assert!(e.contains("only lowered with the whole model"), "{e}");
    }
}

/// Two dense rows, each holding one value, at column `columns[row]` (CSR).
fn two_rows_csr(columns: &[i32]) -> crate::graph::Sparsity {
    use crate::graph::{DimensionMetadata, Sparsity};
    Sparsity {
        traversal_order: vec![0, 1],
        block_map: vec![],
        dim_metadata: vec![
            DimensionMetadata::Dense { size: 2 },
            DimensionMetadata::SparseCsr {
                array_segments: vec![0, 1, 2],
                array_indices: columns.to_vec(),
            },
        ],
    }
}

#[test]
fn densify_of_a_sparse_constant_is_folded_and_executes() {
    // CSR [[0, 5, 0], [7, 0, 0]]: rows dense (2), columns compressed: row 0 holds column 1,
    // row 1 column 0; values [5, 7]. y = x + dense with x = [1, 1, 1, 2, 2, 2]:
    // [1, 6, 1, 9, 2, 2].
    let mut g = G::default();
    let x = g.f("x", &[2, 3]);
    let s = g.c("s", ElementType::Float32, &[2, 3], f32s(&[5.0, 7.0]));
    g.sub.tensors[s as usize].sparsity = Some(two_rows_csr(&[1, 0]));
    let d = g.f("d", &[2, 3]);
    let y = g.f("y", &[2, 3]);
    g.n(code::DENSIFY, &[s], &[d], Options::None);
    g.arith(code::ADD, x, d, y);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Add]);
    let out = run(&l, &[f32s(&[1.0, 1.0, 1.0, 2.0, 2.0, 2.0])]);
    assert_close(&to_f32s(&out[0]), &[1.0, 6.0, 1.0, 9.0, 2.0, 2.0]);
}

#[test]
fn densify_then_dequantize_of_sparse_int8_weights_folds_both() {
    // Sparse int8 [[0, 4], [-2, 0]] at scale 0.5: dense [0, 4, -2, 0] → [0, 2, -1, 0].
    // y = x * w with x = [1, 2, 3, 4]: [0, 4, -3, 0].
    let mut g = G::default();
    let x = g.f("x", &[2, 2]);
    let s = g.c("s", ElementType::Int8, &[2, 2], vec![4, (-2i8) as u8]);
    g.q(s, &[0.5], &[0], 0);
    g.sub.tensors[s as usize].sparsity = Some(two_rows_csr(&[1, 0]));
    let dq = g.t("dq", ElementType::Int8, &[2, 2]);
    g.q(dq, &[0.5], &[0], 0);
    let w = g.f("w", &[2, 2]);
    let y = g.f("y", &[2, 2]);
    g.n(code::DENSIFY, &[s], &[dq], Options::None);
    g.n(code::DEQUANTIZE, &[dq], &[w], Options::None);
    g.arith(code::MUL, x, w, y);
    let l = lower_model(&g.graph(&[x], &[y])).unwrap();
    assert_eq!(op_types(&l), [OperationType::Mul]);
    let out = run(&l, &[f32s(&[1.0, 2.0, 3.0, 4.0])]);
    assert_close(&to_f32s(&out[0]), &[0.0, 4.0, -3.0, 0.0]);
}
