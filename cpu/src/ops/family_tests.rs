//! The operations that moved from the old per-type match into the family tables
//! (elementwise, softmax, conv, pool, shape): the operand types NNAPI feature level 4 lists
//! for them, and their documented error conditions. Expected values are worked out by hand
//! in the comments.
#![allow(clippy::panic)]

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// HARD_SWISH(input) on an 8-bit type, input quantized (`in_s`, `in_zp`), output
/// (`out_s`, `out_zp`): the output bytes.
fn hard_swish_q8(ty: T, q: &[i32], in_q: (f32, i32), out_q: (f32, i32)) -> Vec<u8> {
    let mut b = B::new();
    let x = b.input(ty, &[q.len() as u32]);
    b.q(x, in_q.0, in_q.1);
    let o = b.output(ty, &[q.len() as u32]);
    b.q(o, out_q.0, out_q.1);
    b.op(O::HardSwish, &[x], &[o]);
    let bytes = q.iter().map(|&v| v as u8).collect();
    run_bytes(b.g, &[(bytes, vec![])]).0
}

/// NNAPI lists TENSOR_QUANT8_ASYMM and TENSOR_QUANT8_ASYMM_SIGNED for HARD_SWISH, with an
/// output of its own scale and zero point.
#[test]
fn hard_swish_on_8_bit_tensors_requantizes_to_the_output() {
    // input scale .25 zp 100: q 84,96,100,104,112,124 are -4,-1,0,1,3,6;
    // x·relu6(x+3)/6: 0, -1·2/6 = -.3333, 0, 1·4/6 = .6667, 3·6/6 = 3, 6·6/6 = 6;
    // output scale .05 zp 20: round(r/.05) + 20 = 20, -7+20 = 13, 20, 13+20 = 33, 80, 140
    let out = hard_swish_q8(
        T::TensorQuant8Asymm,
        &[84, 96, 100, 104, 112, 124],
        (0.25, 100),
        (0.05, 20),
    );
    assert_eq!(out, vec![20, 13, 20, 33, 80, 140]);
    // The same values shifted by -128 in values and zero points.
    let out = hard_swish_q8(
        T::TensorQuant8AsymmSigned,
        &[-44, -32, -28, -24, -16, -4],
        (0.25, -28),
        (0.05, -108),
    );
    assert_eq!(i8_vals(&out), vec![-108, -115, -108, -95, -48, 12]);
}

/// Saturation at both ends of the output's range.
#[test]
fn hard_swish_8_bit_saturates_at_the_output_range() {
    // input scale 1 zp 0: 0 and 255 are 0 and 255 → 0 and 255·6/6 = 255; output scale .5:
    // 510 saturates to 255. Signed: -128 (scale 1, zp 0) → -128·0 = 0 → zp -128 stays -128.
    let out = hard_swish_q8(T::TensorQuant8Asymm, &[0, 255], (1.0, 0), (0.5, 0));
    assert_eq!(out, vec![0, 255]);
    let out = hard_swish_q8(
        T::TensorQuant8AsymmSigned,
        &[-128, 127],
        (1.0, 0),
        (1.0, -128),
    );
    // 127 → 127·6/6 = 127 → 127 - 128 = -1
    assert_eq!(i8_vals(&out), vec![-128, -1]);
}

/// The reason operation 0 of `g` is not supported, asserting that it is not.
fn unsupported(g: &Graph) -> String {
    assert!(!g.is_operation_supported(0));
    g.unsupported_reason(0).unwrap_or_default()
}

/// Builds an operation's arguments after its tensor input.
type Args = fn(&mut B) -> Vec<u32>;

/// A graph of one `op` on a `ty` tensor [2, 2] followed by `args` (built by `args`), with an
/// output of `ty`.
fn one_op(op: O, ty: T, args: Args) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, &[2, 2]);
    let (s, z) = match ty {
        T::TensorInt32 | T::TensorBool8 => (0.0, 0),
        T::TensorQuant8Symm | T::TensorQuant16Symm => (0.5, 0),
        _ => (0.5, 3),
    };
    b.q(x, s, z);
    let mut ins = vec![x];
    ins.extend(args(&mut b));
    let o = b.output(ty, &[]);
    b.q(o, s, z);
    b.op(op, &ins, &[o]);
    b.g
}

/// NNAPI lists TENSOR_FLOAT16/32 and the two 8-bit asymmetric types for the shape
/// operations, none of the types below: they are refused (not implemented), not run.
#[test]
fn shape_operations_refuse_types_nnapi_does_not_list() {
    let cases: [(O, Args); 7] = [
        (O::Reshape, |b| vec![b.i32c(&[1], &[-1])]),
        (O::Squeeze, |_| vec![]),
        (O::Transpose, |_| vec![]),
        (O::Pad, |b| vec![b.i32c(&[2, 2], &[0, 0, 0, 0])]),
        (O::Concatenation, |b| vec![b.int(0)]),
        (O::SpaceToDepth, |b| vec![b.int(1)]),
        (O::DepthToSpace, |b| vec![b.int(1)]),
    ];
    for (op, args) in cases {
        let why = unsupported(&one_op(op, T::TensorInt32, args));
        assert!(
            why.contains("on TENSOR_INT32 is not implemented"),
            "{op:?}: {why}"
        );
    }
    for ty in [
        T::TensorQuant8Symm,
        T::TensorQuant16Symm,
        T::TensorQuant16Asymm,
        T::TensorBool8,
    ] {
        let g = one_op(O::Reshape, ty, |b| vec![b.i32c(&[1], &[-1])]);
        let why = unsupported(&g);
        assert!(why.contains("is not implemented"), "{ty:?}: {why}");
    }
}

/// The listed types still run: RESHAPE of a signed 8-bit tensor keeps its bytes.
#[test]
fn reshape_runs_the_listed_8_bit_signed_type() {
    let g = one_op(O::Reshape, T::TensorQuant8AsymmSigned, |b| {
        vec![b.i32c(&[1], &[-1])]
    });
    let (out, dims) = run_bytes(g, &[(i8_bytes(&[-1, 2, -3, 4]), vec![])]);
    assert_eq!(dims, vec![4]);
    assert_eq!(i8_vals(&out), vec![-1, 2, -3, 4]);
}

// ---------------------------------------------------------------- documented error conditions

/// A float32 graph of one `op`: graph inputs of `dims`, then the arguments `args` builds,
/// and a float32 output of unknown shape.
fn fop(op: O, dims: &[&[u32]], args: Args) -> Graph {
    let mut b = B::new();
    let mut ins: Vec<u32> = dims.iter().map(|d| b.input(T::TensorFloat32, d)).collect();
    ins.extend(args(&mut b));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(op, &ins, &[o]);
    b.g
}

/// `n` float zeros as bytes.
fn zeros(n: usize) -> Vec<u8> {
    fb(&vec![0.0; n])
}

/// Asserts that `msg` contains `want`.
fn says(msg: &str, want: &str) {
    assert!(msg.contains(want), "{msg:?} does not say {want:?}");
}

/// The activation of ADD, SUB, MUL and DIV has to be a FuseCode (0..=3).
#[test]
fn binary_operations_reject_an_activation_outside_the_fuse_codes() {
    let acts: [(i32, Args); 2] = [(4, |b| vec![b.int(4)]), (-1, |b| vec![b.int(-1)])];
    for op in [O::Add, O::Sub, O::Mul, O::Div] {
        for (act, arg) in acts {
            let g = fop(op, &[&[2], &[2]], arg);
            let e = exec_error(g, &[fb(&[1.0, 2.0]), fb(&[1.0, 2.0])]);
            says(&e, &format!("invalid fused activation {act}"));
        }
    }
    // The 8-bit kernels read the activation too.
    let mut b = B::new();
    let (x, y) = (
        b.input(T::TensorQuant8Asymm, &[2]),
        b.input(T::TensorQuant8Asymm, &[2]),
    );
    b.q(x, 0.5, 0);
    b.q(y, 0.5, 0);
    let a = b.int(9);
    let o = b.output(T::TensorQuant8Asymm, &[2]);
    b.q(o, 0.5, 0);
    b.op(O::Add, &[x, y, a], &[o]);
    says(
        &exec_error(b.g, &[vec![1, 2], vec![3, 4]]),
        "invalid fused activation 9",
    );
}

/// NNAPI: for TENSOR_INT32 the FuseCode must be NONE; integer DIV by zero has no value.
#[test]
fn int32_binary_operations_need_activation_none_and_a_nonzero_divisor() {
    let graph = |op: O, act: i32| {
        let mut b = B::new();
        let (x, y) = (b.input(T::TensorInt32, &[2]), b.input(T::TensorInt32, &[2]));
        let a = b.int(act);
        let o = b.output(T::TensorInt32, &[2]);
        b.op(op, &[x, y, a], &[o]);
        b.g
    };
    let two = || vec![i32_bytes(&[6, 7]), i32_bytes(&[2, 3])];
    says(&exec_error(graph(O::Mul, 1), &two()), "must be NONE");
    let e = exec_error(graph(O::Div, 0), &[i32_bytes(&[6, 7]), i32_bytes(&[2, 0])]);
    says(&e, "integer division by zero");
}

/// Both operands of a binary operation have one type.
#[test]
fn binary_operands_of_two_types_are_invalid() {
    says(&refused(float32_and_float16(O::Sub)), "second operand");
}

/// `op`(float32 [2], float16 [2], INT32 0) with a float32 output.
fn float32_and_float16(op: O) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat16, &[2]);
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(op, &[x, y, a], &[o]);
    b.g
}

/// One 8-bit `op` on [2] with input quantization (.5, 10) and output quantization `out`.
fn q8_unary(op: O, ty: T, out: (f32, i32)) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, &[2]);
    b.q(x, 0.5, 10);
    let o = b.output(ty, &[2]);
    b.q(o, out.0, out.1);
    b.op(op, &[x], &[o]);
    b.g
}

/// NNAPI: the 8-bit output of RELU, RELU1 and RELU6 has the input's scale and zero point.
#[test]
fn relu_family_8_bit_output_must_keep_the_input_quantization() {
    for op in [O::Relu, O::Relu1, O::Relu6] {
        for ty in [T::TensorQuant8Asymm, T::TensorQuant8AsymmSigned] {
            says(
                &refused(q8_unary(op, ty, (0.25, 10))),
                "scale and zero point",
            );
            says(
                &refused(q8_unary(op, ty, (0.5, 11))),
                "scale and zero point",
            );
            assert!(q8_unary(op, ty, (0.5, 10)).validate().is_ok());
        }
    }
}

/// TANH's 8-bit output has scale 1/128 and zero point 128 (0 when signed); SOFTMAX's 1/256
/// and 0 (-128); L2_NORMALIZATION's 1/128 and 128 (0).
#[test]
fn fixed_output_quantization_is_enforced() {
    says(
        &refused(q8_unary(O::Tanh, T::TensorQuant8Asymm, (1.0 / 128.0, 0))),
        "zero point 128",
    );
    says(
        &refused(q8_unary(
            O::Tanh,
            T::TensorQuant8AsymmSigned,
            (1.0 / 128.0, 1),
        )),
        "zero point 0",
    );
    let with_arg = |op: O, ty: T, out: (f32, i32), beta: bool| {
        let mut b = B::new();
        let x = b.input(ty, &[2]);
        b.q(x, 0.5, 10);
        let mut ins = vec![x];
        if beta {
            ins.push(b.float(1.0));
        }
        let o = b.output(ty, &[2]);
        b.q(o, out.0, out.1);
        b.op(op, &ins, &[o]);
        b.g
    };
    let cases = [
        (
            O::Softmax,
            T::TensorQuant8Asymm,
            1.0 / 128.0,
            0,
            "scale 0.00390625",
        ),
        (
            O::Softmax,
            T::TensorQuant8AsymmSigned,
            1.0 / 256.0,
            0,
            "zero point -128",
        ),
        (
            O::L2Normalization,
            T::TensorQuant8Asymm,
            1.0 / 128.0,
            0,
            "zero point 128",
        ),
    ];
    for (op, ty, scale, zp, want) in cases {
        says(
            &refused(with_arg(op, ty, (scale, zp), op == O::Softmax)),
            want,
        );
    }
    let ok = with_arg(
        O::L2Normalization,
        T::TensorQuant8AsymmSigned,
        (1.0 / 128.0, 0),
        false,
    );
    assert!(ok.validate().is_ok());
}

/// Unary outputs have the input's type; ELU's alpha and SOFTMAX's beta the input's float
/// scalar type; DEQUANTIZE outputs floats, QUANTIZE 8-bit asymmetric values.
#[test]
fn argument_and_output_types_are_checked() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat16, &[2]);
    b.op(O::Exp, &[x], &[o]);
    says(&refused(b.g), "differs from input type");
    let g = fop(O::Elu, &[&[2]], |b| vec![half(b, 1.0)]);
    says(&refused(g), "alpha");
    let g = fop(O::Softmax, &[&[2]], |b| vec![half(b, 1.0)]);
    says(&refused(g), "beta");
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[2]);
    b.q(x, 0.5, 0);
    let o = b.output(T::TensorInt32, &[2]);
    b.op(O::Dequantize, &[x], &[o]);
    says(&refused(b.g), "output type TENSOR_INT32 invalid");
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Quantize, &[x], &[o]);
    says(&refused(b.g), "output type TENSOR_FLOAT32 invalid");
}

/// RESHAPE: at most one -1, and the new shape holds the input's elements; SQUEEZE only
/// squeezes extents of 1; TRANSPOSE's permutation is one of the input's rank.
#[test]
fn reshape_squeeze_and_transpose_reject_bad_shapes() {
    let four = || vec![zeros(4)];
    let e = exec_error(
        fop(O::Reshape, &[&[2, 2]], |b| vec![b.i32c(&[2], &[-1, -1])]),
        &four(),
    );
    says(&e, "more than one -1");
    let e = exec_error(
        fop(O::Reshape, &[&[2, 2]], |b| vec![b.i32c(&[1], &[3])]),
        &four(),
    );
    says(&e, "has 3 elements, input has 4");
    let e = exec_error(
        fop(O::Squeeze, &[&[2, 2]], |b| vec![b.i32c(&[1], &[1])]),
        &four(),
    );
    says(&e, "cannot squeeze axis 1 of extent 2");
    let e = exec_error(
        fop(O::Transpose, &[&[2, 2]], |b| vec![b.i32c(&[2], &[0, 0])]),
        &four(),
    );
    says(&e, "invalid permutation");
    let e = exec_error(
        fop(O::Transpose, &[&[2, 2]], |b| vec![b.i32c(&[3], &[0, 1, 2])]),
        &four(),
    );
    says(&e, "does not match rank 2");
}

/// PAD: paddings of shape [rank, 2], none negative.
#[test]
fn pad_rejects_misshapen_or_negative_paddings() {
    let four = || vec![zeros(4)];
    let e = exec_error(
        fop(O::Pad, &[&[2, 2]], |b| vec![b.i32c(&[1, 2], &[0, 0])]),
        &four(),
    );
    says(&e, "paddings must have shape [2, 2]");
    let e = exec_error(
        fop(O::Pad, &[&[2, 2]], |b| {
            vec![b.i32c(&[2, 2], &[0, -1, 0, 0])]
        }),
        &four(),
    );
    says(&e, "negative padding");
}

/// CONCATENATION: every tensor of one type and the same extents off the axis; the axis in
/// [-rank, rank).
#[test]
fn concatenation_rejects_mismatched_tensors_and_axes() {
    let e = exec_error(
        fop(O::Concatenation, &[&[2, 2], &[3, 1]], |b| vec![b.int(1)]),
        &[zeros(4), zeros(3)],
    );
    says(&e, "incompatible");
    let e = exec_error(
        fop(O::Concatenation, &[&[2, 2], &[2, 2]], |b| vec![b.int(2)]),
        &[zeros(4), zeros(4)],
    );
    says(&e, "axis 2 out of range for rank 2");
    let e = refused(float32_and_float16(O::Concatenation));
    says(&e, "(tensor) must be TENSOR_FLOAT32");
}

/// SPACE_TO_DEPTH: block_size >= 1 dividing height and width; DEPTH_TO_SPACE: block_size²
/// dividing the depth.
#[test]
fn space_depth_moves_reject_block_sizes_that_do_not_divide() {
    let x = || vec![zeros(8)];
    let e = exec_error(
        fop(O::SpaceToDepth, &[&[1, 2, 2, 2]], |b| vec![b.int(0)]),
        &x(),
    );
    says(&e, "block_size must be > 0");
    let e = exec_error(
        fop(O::SpaceToDepth, &[&[1, 2, 2, 2]], |b| vec![b.int(3)]),
        &x(),
    );
    says(&e, "must be multiples of 3");
    let e = exec_error(
        fop(O::DepthToSpace, &[&[1, 2, 2, 2]], |b| vec![b.int(2)]),
        &x(),
    );
    says(&e, "depth 2 must be a multiple of 4");
}

/// MEAN's axes, SOFTMAX's and L2_NORMALIZATION's axis lie in [-rank, rank).
#[test]
fn reductions_and_normalizations_reject_axes_out_of_range() {
    let x = || vec![zeros(4)];
    let g = fop(O::Mean, &[&[2, 2]], |b| vec![b.i32c(&[1], &[5]), b.int(0)]);
    says(&exec_error(g, &x()), "axis 5 out of range for rank 2");
    let g = fop(O::Softmax, &[&[2, 2]], |b| vec![b.float(1.0), b.int(2)]);
    says(&exec_error(g, &x()), "axis 2 out of range for rank 2");
    let g = fop(O::L2Normalization, &[&[2, 2]], |b| vec![b.int(-3)]);
    says(&exec_error(g, &x()), "axis -3 out of range for rank 2");
}

/// FULLY_CONNECTED: 2-D weights [units, input size], a bias of `units` values of the input's
/// float type, an input whose size is a multiple of the input size.
#[test]
fn fully_connected_rejects_misshapen_operands() {
    let fc = |w: &'static [u32], bias: u32, x: &'static [u32]| {
        let mut b = B::new();
        let i = b.input(T::TensorFloat32, x);
        let wn: u32 = w.iter().product();
        let wc = b.f32c(w, &vec![1.0; wn as usize]);
        let bc = b.f32c(&[bias], &vec![0.0; bias as usize]);
        let a = b.int(0);
        let o = b.output(T::TensorFloat32, &[]);
        b.op(O::FullyConnected, &[i, wc, bc, a], &[o]);
        b.g
    };
    let e = exec_error(fc(&[2, 2, 1], 2, &[1, 2]), &[zeros(2)]);
    says(&e, "weights must be 2-D");
    let e = exec_error(fc(&[2, 2], 3, &[1, 2]), &[zeros(2)]);
    says(&e, "bias has 3 elements, expected 2");
    let e = exec_error(fc(&[2, 2], 2, &[1, 3]), &[zeros(3)]);
    says(&e, "not a multiple of input size 2");
    let mut b = B::new();
    let i = b.input(T::TensorFloat32, &[1, 2]);
    let w = b.f32c(&[1, 2], &[1.0, 1.0]);
    let bias = b.konst(T::TensorFloat16, &[1], f16_bytes(&[0.0]));
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::FullyConnected, &[i, w, bias, a], &[o]);
    says(&refused(b.g), "(bias) must be TENSOR_FLOAT32");
}

/// CONV_2D / DEPTHWISE_CONV_2D (implicit padding) on a float [1, 2, 2, 2] input with a
/// constant filter of `fdims`, `oc` bias values, padding scheme `scheme`, stride `stride`
/// and (depthwise) `multiplier`.
fn conv(dw: bool, fdims: &'static [u32], oc: u32, scheme: i32, stride: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 2]);
    let n: u32 = fdims.iter().product();
    let f = b.f32c(fdims, &vec![1.0; n as usize]);
    let bias = b.f32c(&[oc], &vec![0.0; oc as usize]);
    let mut ins = vec![x, f, bias, b.int(scheme), b.int(stride), b.int(stride)];
    if dw {
        ins.push(b.int(1));
    }
    ins.push(b.int(0));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(if dw { O::DepthwiseConv2d } else { O::Conv2d }, &ins, &[o]);
    b.g
}

/// The convolutions: filter depth (CONV_2D) or depth × multiplier (DEPTHWISE) matching the
/// input, a bias per output channel, strides > 0, a padding scheme NNAPI defines.
#[test]
fn convolutions_reject_mismatched_filters_and_bad_arguments() {
    let x = || vec![zeros(8)];
    let e = exec_error(conv(false, &[1, 1, 1, 3], 1, 1, 1), &x());
    says(&e, "filter depth 3 does not match input depth 2");
    let e = exec_error(conv(false, &[1, 1, 1, 2], 2, 1, 1), &x());
    says(&e, "bias length does not match the output depth");
    let e = exec_error(conv(false, &[1, 1, 1, 2], 1, 1, 0), &x());
    says(&e, "stride_w must be > 0");
    let e = exec_error(conv(true, &[1, 1, 1, 3], 3, 1, 1), &x());
    says(&e, "does not match input depth 2");
    for dw in [false, true] {
        let fd: &'static [u32] = if dw { &[1, 1, 1, 2] } else { &[2, 1, 1, 2] };
        let e = exec_error(conv(dw, fd, 2, 3, 1), &x());
        says(&e, "padding scheme 3");
    }
}

/// The filter type matches the input's, or is per-channel on channel 0 (3 for depthwise).
#[test]
fn convolution_filter_types_are_checked() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 1]);
    let f = b.konst(T::TensorFloat16, &[1, 1, 1, 1], f16_bytes(&[1.0]));
    let bias = b.f32c(&[1], &[0.0]);
    let args = [b.int(2), b.int(1), b.int(1), b.int(0)];
    let o = b.output(T::TensorFloat32, &[]);
    let mut ins = vec![x, f, bias];
    ins.extend(args);
    b.op(O::Conv2d, &ins, &[o]);
    says(
        &refused(b.g),
        "filter type TENSOR_FLOAT16 does not match input type TENSOR_FLOAT32",
    );
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 1, 1, 1]);
    b.q(x, 0.5, 0);
    let f = b.konst(T::TensorQuant8SymmPerChannel, &[1, 1, 1, 1], vec![1]);
    b.g.operands[f as usize].channel_quant = Some(ChannelQuant {
        channel_dim: 3,
        scales: vec![0.5],
    });
    let bias = b.konst(T::TensorInt32, &[1], i32_bytes(&[0]));
    let args = [b.int(2), b.int(1), b.int(1), b.int(0)];
    let o = b.output(T::TensorQuant8Asymm, &[]);
    b.q(o, 1.0, 0);
    let mut ins = vec![x, f, bias];
    ins.extend(args);
    b.op(O::Conv2d, &ins, &[o]);
    says(&refused(b.g), "per-channel filter must have channel_dim 0");
}

/// Implicit-padding pooling arguments: scheme, stride w/h, filter w/h, activation.
fn pool_args(b: &mut B, v: [i32; 6]) -> Vec<u32> {
    v.iter().map(|&x| b.int(x)).collect()
}

/// Pooling: strides and filter extents > 0, a FuseCode activation, a padding scheme NNAPI
/// defines; an 8-bit output keeps the input's quantization; L2_POOL_2D is float only.
#[test]
fn pooling_rejects_bad_arguments() {
    let x = || vec![zeros(4)];
    let cases: [(Args, &str); 4] = [
        (|b| pool_args(b, [1, 0, 1, 1, 1, 0]), "stride_w must be > 0"),
        (
            |b| pool_args(b, [1, 1, 1, 0, 1, 0]),
            "filter_width must be > 0",
        ),
        (
            |b| pool_args(b, [1, 1, 1, 1, 1, 7]),
            "invalid fused activation 7",
        ),
        (|b| pool_args(b, [5, 1, 1, 1, 1, 0]), "padding scheme 5"),
    ];
    for op in [O::AveragePool2d, O::MaxPool2d, O::L2Pool2d] {
        for (args, want) in cases {
            says(&exec_error(fop(op, &[&[1, 2, 2, 1]], args), &x()), want);
        }
    }
    let q8 = |op: O, out_zp: i32| {
        let mut b = B::new();
        let x = b.input(T::TensorQuant8Asymm, &[1, 2, 2, 1]);
        b.q(x, 0.5, 3);
        let mut ins = vec![x];
        ins.extend(pool_args(&mut b, [2, 1, 1, 2, 2, 0]));
        let o = b.output(T::TensorQuant8Asymm, &[]);
        b.q(o, 0.5, out_zp);
        b.op(op, &ins, &[o]);
        b.g
    };
    says(&refused(q8(O::MaxPool2d, 4)), "scale and zero point");
    says(
        &unsupported(&q8(O::L2Pool2d, 3)),
        "L2_POOL_2D on TENSOR_QUANT8_ASYMM is not implemented",
    );
}
