//! Issue 17: the operand types of the older operations that had a kernel but no test
//! (FLOAT16, QUANT8_ASYMM_SIGNED, INT32, ...). Expected values are worked out by hand from
//! NNAPI's definitions: float16 values are exactly representable in half precision; the
//! signed quant8 cases are the asymmetric ones shifted by -128 in values and zero point.
#![allow(clippy::panic)]

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// The per-operation operand types NNAPI lists, against the ones claimed here.
#[path = "nnapi_types_tests.rs"]
mod nnapi_types_tests;

/// A graph input tensor of the operation under test.
struct In {
    ty: T,
    dims: Vec<u32>,
    scale: f32,
    zp: i32,
    data: Vec<u8>,
}

fn t(ty: T, dims: &[u32], data: Vec<u8>) -> In {
    tq(ty, dims, 0.0, 0, data)
}

fn tq(ty: T, dims: &[u32], scale: f32, zp: i32, data: Vec<u8>) -> In {
    In {
        ty,
        dims: dims.to_vec(),
        scale,
        zp,
        data,
    }
}

fn f16(dims: &[u32], v: &[f32]) -> In {
    t(T::TensorFloat16, dims, f16_bytes(v))
}

fn i32t(dims: &[u32], v: &[i32]) -> In {
    t(T::TensorInt32, dims, i32_bytes(v))
}

fn u8q(dims: &[u32], scale: f32, zp: i32, v: &[u8]) -> In {
    tq(T::TensorQuant8Asymm, dims, scale, zp, v.to_vec())
}

fn i8q(dims: &[u32], scale: f32, zp: i32, v: &[i8]) -> In {
    tq(T::TensorQuant8AsymmSigned, dims, scale, zp, i8_bytes(v))
}

/// A constant argument after the tensor inputs.
enum A {
    I(i32),
    F(f32),
    H(f32),
    /// A constant TENSOR_INT32 of these dimensions and values.
    Ti(Vec<u32>, Vec<i32>),
}

/// Runs one `op` on the tensors `ins` (graph inputs, in order) followed by the constant
/// arguments `args`, with an output of type `out` quantized by (`scale`, `zp`).
fn run(op: O, ins: Vec<In>, args: &[A], out: (T, f32, i32)) -> (Vec<u8>, Vec<u32>) {
    let mut b = B::new();
    let mut idx = Vec::new();
    let mut data = Vec::new();
    for i in ins {
        let x = b.input(i.ty, &i.dims);
        b.q(x, i.scale, i.zp);
        idx.push(x);
        data.push((i.data, vec![]));
    }
    for a in args {
        idx.push(match a {
            A::I(v) => b.int(*v),
            A::F(v) => b.float(*v),
            A::H(v) => half(&mut b, *v),
            A::Ti(d, v) => b.i32c(d, v),
        });
    }
    let o = b.output(out.0, &[]);
    b.q(o, out.1, out.2);
    b.op(op, &idx, &[o]);
    run_bytes(b.g, &data)
}

const F16: (T, f32, i32) = (T::TensorFloat16, 0.0, 0);
const I32: (T, f32, i32) = (T::TensorInt32, 0.0, 0);
const F32: (T, f32, i32) = (T::TensorFloat32, 0.0, 0);

fn qa(scale: f32, zp: i32) -> (T, f32, i32) {
    (T::TensorQuant8Asymm, scale, zp)
}

fn qs(scale: f32, zp: i32) -> (T, f32, i32) {
    (T::TensorQuant8AsymmSigned, scale, zp)
}

/// Half-precision outputs within 2e-3 (relative) of `want`.
fn near16(out: &[u8], want: &[f32]) {
    let got = f16_vals(out);
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 2e-3 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}

/// 8-bit outputs within one quantization step of `want`.
fn near_q(got: &[i32], want: &[i32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1, "{got:?} vs {want:?}");
    }
}

fn s8(out: &[u8]) -> Vec<i32> {
    i8_vals(out).iter().map(|&v| i32::from(v)).collect()
}

fn u8s(out: &[u8]) -> Vec<i32> {
    out.iter().map(|&v| i32::from(v)).collect()
}

// ---------------------------------------------------------------- convolutions, FC

#[test]
fn conv2d_quant8_signed_requantizes_like_asymm_case() {
    // x real [1,2,3,4] (scale .5, zp -10: q = 2r - 10), filter real 1 everywhere
    // (scale .25, zp 2: q 6), bias .5 (scale .125: q 4); valid 2x2 → 10 + .5 = 10.5;
    // output scale .5 zp -5 → 21 - 5 = 16
    let (out, d) = run(
        O::Conv2d,
        vec![
            i8q(&[1, 2, 2, 1], 0.5, -10, &[-8, -6, -4, -2]),
            i8q(&[1, 2, 2, 1], 0.25, 2, &[6, 6, 6, 6]),
            tq(T::TensorInt32, &[1], 0.125, 0, i32_bytes(&[4])),
        ],
        &[A::I(2), A::I(1), A::I(1), A::I(0)],
        qs(0.5, -5),
    );
    assert_eq!(d, vec![1, 1, 1, 1]);
    assert_eq!(i8_vals(&out), vec![16]);
}

#[test]
fn depthwise_conv2d_float16_sums_each_channel() {
    // valid 2x2, multiplier 1: 1*1 + 2*2 + 3*3 + 4*4 + .5 = 30.5
    let (out, d) = run(
        O::DepthwiseConv2d,
        vec![
            f16(&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]),
            f16(&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]),
            f16(&[1], &[0.5]),
        ],
        &[A::I(2), A::I(1), A::I(1), A::I(1), A::I(0)],
        F16,
    );
    assert_eq!(d, vec![1, 1, 1, 1]);
    assert_eq!(out, f16_bytes(&[30.5]));
}

#[test]
fn depthwise_conv2d_quant8_signed_requantizes_like_asymm_case() {
    // same numbers as the conv case: 4 * 1 * [1,2,3,4] summed = 10, + .5 → 10.5 → q 16
    let (out, _) = run(
        O::DepthwiseConv2d,
        vec![
            i8q(&[1, 2, 2, 1], 0.5, -10, &[-8, -6, -4, -2]),
            i8q(&[1, 2, 2, 1], 0.25, 2, &[6, 6, 6, 6]),
            tq(T::TensorInt32, &[1], 0.125, 0, i32_bytes(&[4])),
        ],
        &[A::I(2), A::I(1), A::I(1), A::I(1), A::I(0)],
        qs(0.5, -5),
    );
    assert_eq!(i8_vals(&out), vec![16]);
}

#[test]
fn fully_connected_float16_two_units_with_bias() {
    // [1,2]·[1,.5] + .5 = 2.5 ; [1,2]·[-1,2] + .25 = 3.25
    let (out, d) = run(
        O::FullyConnected,
        vec![
            f16(&[1, 2], &[1.0, 2.0]),
            f16(&[2, 2], &[1.0, 0.5, -1.0, 2.0]),
            f16(&[2], &[0.5, 0.25]),
        ],
        &[A::I(0)],
        F16,
    );
    assert_eq!(d, vec![1, 2]);
    assert_eq!(out, f16_bytes(&[2.5, 3.25]));
}

#[test]
fn fully_connected_quant8_signed_matches_hand_sum() {
    // the float16 case quantized: x scale .5 (q 2,4), w scale .5 (q 2,1,-2,4), bias scale
    // .25 (q 2,1); out scale .25 zp -10: 2.5/.25 - 10 = 0 ; 3.25/.25 - 10 = 3
    let (out, _) = run(
        O::FullyConnected,
        vec![
            i8q(&[1, 2], 0.5, 0, &[2, 4]),
            i8q(&[2, 2], 0.5, 0, &[2, 1, -2, 4]),
            tq(T::TensorInt32, &[2], 0.25, 0, i32_bytes(&[2, 1])),
        ],
        &[A::I(0)],
        qs(0.25, -10),
    );
    assert_eq!(i8_vals(&out), vec![0, 3]);
}

// ---------------------------------------------------------------- pooling

/// SAME padding, stride 1, 2x2 filter over a 2x2 image.
fn pool_same(op: O, x: In, out: (T, f32, i32)) -> Vec<u8> {
    let args: Vec<A> = [1, 1, 1, 2, 2, 0].iter().map(|&v| A::I(v)).collect();
    run(op, vec![x], &args, out).0
}

#[test]
fn average_pool_float16_counts_only_valid_elements() {
    // windows {1,2,3,4}, {2,4}, {3,4}, {4} → 2.5, 3, 3.5, 4
    let out = pool_same(
        O::AveragePool2d,
        f16(&[1, 2, 2, 1], &[1.0, 2.0, 3.0, 4.0]),
        F16,
    );
    assert_eq!(out, f16_bytes(&[2.5, 3.0, 3.5, 4.0]));
}

#[test]
fn average_pool_quant8_signed_matches_asymm_case() {
    // VALID 2x2 (no rounding tie): asymm q [1,2,3,6] (scale .5 zp 0) → (1+2+3+6)/4 = 3;
    // signed: q [-127,-126,-125,-122] with zp -128 → 3 - 128 = -125
    let args: Vec<A> = [2, 1, 1, 2, 2, 0].iter().map(|&v| A::I(v)).collect();
    let (out, d) = run(
        O::AveragePool2d,
        vec![i8q(&[1, 2, 2, 1], 0.5, -128, &[-127, -126, -125, -122])],
        &args,
        qs(0.5, -128),
    );
    assert_eq!(d, vec![1, 1, 1, 1]);
    assert_eq!(i8_vals(&out), vec![-125]);
}

#[test]
fn max_pool_float16_and_quant8_signed_take_window_maximum() {
    let out = pool_same(
        O::MaxPool2d,
        f16(&[1, 2, 2, 1], &[1.0, -2.0, 3.0, 0.5]),
        F16,
    );
    // windows {1,-2,3,.5}, {-2,.5}, {3,.5}, {.5}
    assert_eq!(out, f16_bytes(&[3.0, 0.5, 3.0, 0.5]));
    let out = pool_same(
        O::MaxPool2d,
        i8q(&[1, 2, 2, 1], 0.5, 0, &[1, -2, 3, 0]),
        qs(0.5, 0),
    );
    assert_eq!(i8_vals(&out), vec![3, 0, 3, 0]);
}

#[test]
fn l2_pool_float16_is_root_mean_square() {
    // VALID 2x2 over [1,1,3,5]: sqrt((1+1+9+25)/4) = sqrt(9) = 3
    let args: Vec<A> = [2, 1, 1, 2, 2, 0].iter().map(|&v| A::I(v)).collect();
    let (out, _) = run(
        O::L2Pool2d,
        vec![f16(&[1, 2, 2, 1], &[1.0, 1.0, 3.0, 5.0])],
        &args,
        F16,
    );
    near16(&out, &[3.0]);
}

// ---------------------------------------------------------------- elementwise binary

#[test]
fn add_int32_adds_exactly() {
    let (out, _) = run(
        O::Add,
        vec![i32t(&[3], &[1, -2, 3]), i32t(&[3], &[10, 20, -30])],
        &[A::I(0)],
        I32,
    );
    assert_eq!(i32_vals(&out), vec![11, 18, -27]);
}

#[test]
fn sub_in_float16_int32_and_quant8_types() {
    let (out, _) = run(
        O::Sub,
        vec![f16(&[3], &[1.0, 2.5, -3.0]), f16(&[3], &[0.5, 0.5, 1.0])],
        &[A::I(0)],
        F16,
    );
    assert_eq!(out, f16_bytes(&[0.5, 2.0, -4.0]));
    let (out, _) = run(
        O::Sub,
        vec![i32t(&[3], &[1, -2, 3]), i32t(&[3], &[10, 20, -30])],
        &[A::I(0)],
        I32,
    );
    assert_eq!(i32_vals(&out), vec![-9, -22, 33]);
    // x real [1, 6] (scale .5 zp 10: q 12, 22), y real [2, 1] (scale .25 zp 0: q 8, 4)
    // → [-1, 5], out scale 1 zp 5 → [4, 10]
    let (out, _) = run(
        O::Sub,
        vec![u8q(&[2], 0.5, 10, &[12, 22]), u8q(&[2], 0.25, 0, &[8, 4])],
        &[A::I(0)],
        qa(1.0, 5),
    );
    assert_eq!(out, vec![4, 10]);
    let (out, _) = run(
        O::Sub,
        vec![
            i8q(&[2], 0.5, -118, &[-116, -106]),
            i8q(&[2], 0.25, -128, &[-120, -124]),
        ],
        &[A::I(0)],
        qs(1.0, -123),
    );
    assert_eq!(i8_vals(&out), vec![-124, -118]);
}

#[test]
fn mul_in_float16_int32_and_quant8_types() {
    let (out, _) = run(
        O::Mul,
        vec![f16(&[3], &[1.5, -2.0, 0.25]), f16(&[3], &[2.0, 3.0, -4.0])],
        &[A::I(0)],
        F16,
    );
    assert_eq!(out, f16_bytes(&[3.0, -6.0, -1.0]));
    let (out, _) = run(
        O::Mul,
        vec![i32t(&[2], &[2, -3]), i32t(&[2], &[4, 5])],
        &[A::I(0)],
        I32,
    );
    assert_eq!(i32_vals(&out), vec![8, -15]);
    // x real [1, 2] (scale .5 zp 10: q 12, 14), y real [2, 3] (scale .25: q 8, 12)
    // → [2, 6], out scale 1 zp 5 → [7, 11]
    let (out, _) = run(
        O::Mul,
        vec![u8q(&[2], 0.5, 10, &[12, 14]), u8q(&[2], 0.25, 0, &[8, 12])],
        &[A::I(0)],
        qa(1.0, 5),
    );
    assert_eq!(out, vec![7, 11]);
    let (out, _) = run(
        O::Mul,
        vec![
            i8q(&[2], 0.5, -118, &[-116, -114]),
            i8q(&[2], 0.25, -128, &[-120, -116]),
        ],
        &[A::I(0)],
        qs(1.0, -123),
    );
    assert_eq!(i8_vals(&out), vec![-121, -117]);
}

#[test]
fn div_float16_divides() {
    let (out, _) = run(
        O::Div,
        vec![f16(&[3], &[1.0, 3.0, -6.0]), f16(&[3], &[2.0, 4.0, 1.5])],
        &[A::I(0)],
        F16,
    );
    assert_eq!(out, f16_bytes(&[0.5, 0.75, -4.0]));
}

#[test]
fn minimum_float16_takes_smaller() {
    let (out, _) = run(
        O::Minimum,
        vec![f16(&[3], &[1.0, -2.0, 0.5]), f16(&[3], &[0.5, 3.0, 0.5])],
        &[],
        F16,
    );
    assert_eq!(out, f16_bytes(&[0.5, -2.0, 0.5]));
}

// ---------------------------------------------------------------- activations

#[test]
fn relu_family_float16_clamps() {
    let x = [-7.0, -1.5, -0.5, 0.5, 1.5, 7.0];
    for (op, want) in [
        (O::Relu, [0.0, 0.0, 0.0, 0.5, 1.5, 7.0]),
        (O::Relu1, [-1.0, -1.0, -0.5, 0.5, 1.0, 1.0]),
        (O::Relu6, [0.0, 0.0, 0.0, 0.5, 1.5, 6.0]),
    ] {
        let (out, _) = run(op, vec![f16(&[6], &x)], &[], F16);
        assert_eq!(out, f16_bytes(&want), "{op:?}");
    }
}

#[test]
fn relu_family_quant8_clamps_in_quantized_domain() {
    // scale .5 zp 100: q [90,100,101,104,120] = real [-5, 0, .5, 2, 10]
    // relu → [0,0,.5,2,10]; relu1 → [-1,0,.5,1,1]; relu6 → [0,0,.5,2,6]
    let x = [90u8, 100, 101, 104, 120];
    for (op, want) in [
        (O::Relu, [100, 100, 101, 104, 120]),
        (O::Relu1, [98, 100, 101, 102, 102]),
        (O::Relu6, [100, 100, 101, 104, 112]),
    ] {
        let (out, _) = run(op, vec![u8q(&[5], 0.5, 100, &x)], &[], qa(0.5, 100));
        assert_eq!(u8s(&out), want.to_vec(), "{op:?}");
        // signed: values and zero point shifted by -128
        let xs: Vec<i8> = x.iter().map(|&v| (i32::from(v) - 128) as i8).collect();
        let (out, _) = run(op, vec![i8q(&[5], 0.5, -28, &xs)], &[], qs(0.5, -28));
        let ws: Vec<i32> = want.iter().map(|v| v - 128).collect();
        assert_eq!(s8(&out), ws, "{op:?} signed");
    }
}

#[test]
fn logistic_float16_and_quant8_signed() {
    // 1/(1+e^0) = .5 ; 1/(1+e^-2) = 0.880797
    let (out, _) = run(O::Logistic, vec![f16(&[2], &[0.0, 2.0])], &[], F16);
    near16(&out, &[0.5, 0.880_797]);
    // signed output scale 1/256 zp -128: .5 → 0 ; 12.7 → ~1 → 127 ; -12.8 → ~0 → -128
    let (out, _) = run(
        O::Logistic,
        vec![i8q(&[3], 0.1, 0, &[0, 127, -128])],
        &[],
        qs(1.0 / 256.0, -128),
    );
    near_q(&s8(&out), &[0, 127, -128]);
    assert_eq!(i8_vals(&out)[0], 0);
}

#[test]
fn tanh_float16_and_quant8_types() {
    let (out, _) = run(O::Tanh, vec![f16(&[2], &[0.0, 1.0])], &[], F16);
    near16(&out, &[0.0, 0.761_594]);
    // input scale .1 zp 128: q [128,133,255,0] = [0,.5,12.7,-12.8]; tanh .5 = .462117
    // output scale 1/128 zp 128: [128, 128 + 59.15 → 187, 255, 0]
    let (out, _) = run(
        O::Tanh,
        vec![u8q(&[4], 0.1, 128, &[128, 133, 255, 0])],
        &[],
        qa(1.0 / 128.0, 128),
    );
    near_q(&u8s(&out), &[128, 187, 255, 0]);
    assert_eq!(out[0], 128);
    let (out, _) = run(
        O::Tanh,
        vec![i8q(&[4], 0.1, 0, &[0, 5, 127, -128])],
        &[],
        qs(1.0 / 128.0, 0),
    );
    near_q(&s8(&out), &[0, 59, 127, -128]);
    assert_eq!(i8_vals(&out)[0], 0);
}

#[test]
fn softmax_float16_and_quant8_signed() {
    // beta is a FLOAT16 scalar for float16 input; equal logits → 1/4 each
    let (out, _) = run(O::Softmax, vec![f16(&[1, 4], &[1.0; 4])], &[A::H(1.0)], F16);
    assert_eq!(out, f16_bytes(&[0.25; 4]));
    // e^0/(e^0+e^1) = 0.268941, e^1/(…) = 0.731059
    let (out, _) = run(
        O::Softmax,
        vec![f16(&[1, 2], &[0.0, 1.0])],
        &[A::H(1.0)],
        F16,
    );
    near16(&out, &[0.268_941, 0.731_059]);
    // signed output scale 1/256 zp -128: two equal logits → .5 → 128 - 128 = 0
    let (out, _) = run(
        O::Softmax,
        vec![i8q(&[1, 2], 0.1, 0, &[12, 12])],
        &[A::F(1.0)],
        qs(1.0 / 256.0, -128),
    );
    assert_eq!(i8_vals(&out), vec![0, 0]);
}

#[test]
fn elu_and_hard_swish_float16() {
    // elu alpha 1: x for x > 0, e^x - 1 otherwise: e^-1 - 1 = -0.632121
    let (out, _) = run(
        O::Elu,
        vec![f16(&[3], &[2.0, 0.0, -1.0])],
        &[A::H(1.0)],
        F16,
    );
    near16(&out, &[2.0, 0.0, -0.632_121]);
    // x * relu6(x + 3) / 6: -4 → 0, -1.5 → -1.5*1.5/6 = -.375, 3 → 3, 1 → 4/6
    let (out, _) = run(
        O::HardSwish,
        vec![f16(&[4], &[-4.0, -1.5, 3.0, 1.0])],
        &[],
        F16,
    );
    near16(&out, &[0.0, -0.375, 3.0, 0.666_667]);
}

#[test]
fn float16_unary_math_operations() {
    let cases: [(O, [f32; 2], [f32; 2]); 9] = [
        (O::Abs, [-1.5, 2.0], [1.5, 2.0]),
        (O::Neg, [-1.5, 2.0], [1.5, -2.0]),
        (O::Floor, [-1.5, 1.5], [-2.0, 1.0]),
        (O::Sqrt, [4.0, 2.25], [2.0, 1.5]),
        (O::Rsqrt, [4.0, 0.25], [0.5, 2.0]),
        (O::Exp, [0.0, 1.0], [1.0, std::f32::consts::E]),
        (O::Log, [1.0, 4.0], [0.0, 1.386_294]),
        (O::Sin, [0.0, std::f32::consts::FRAC_PI_2], [0.0, 1.0]),
        (O::Abs, [0.0, -0.25], [0.0, 0.25]),
    ];
    for (op, x, want) in cases {
        let (out, _) = run(op, vec![f16(&[2], &x)], &[], F16);
        near16(&out, &want);
    }
}

// ---------------------------------------------------------------- normalization, reduce

#[test]
fn l2_normalization_float16_and_quant8_types() {
    // [3,4] / 5 = [.6, .8]
    let (out, _) = run(
        O::L2Normalization,
        vec![f16(&[1, 2], &[3.0, 4.0])],
        &[],
        F16,
    );
    near16(&out, &[0.6, 0.8]);
    // output scale 1/128: .6*128 = 76.8 → 77, .8*128 = 102.4 → 102 (+ zp 128 asymm)
    let (out, _) = run(
        O::L2Normalization,
        vec![u8q(&[1, 2], 1.0, 128, &[131, 132])],
        &[],
        qa(1.0 / 128.0, 128),
    );
    near_q(&u8s(&out), &[205, 230]);
    let (out, _) = run(
        O::L2Normalization,
        vec![i8q(&[1, 2], 1.0, 0, &[3, 4])],
        &[],
        qs(1.0 / 128.0, 0),
    );
    near_q(&s8(&out), &[77, 102]);
}

#[test]
fn mean_float16_and_quant8_types() {
    // [[1,2],[3,6]] over axis 1 of [1,2,2]: [(1+3)/2, (2+6)/2] = [2, 4]
    let (out, d) = run(
        O::Mean,
        vec![f16(&[1, 2, 2], &[1.0, 2.0, 3.0, 6.0])],
        &[A::Ti(vec![1], vec![1]), A::I(0)],
        F16,
    );
    assert_eq!(d, vec![1, 2]);
    assert_eq!(out, f16_bytes(&[2.0, 4.0]));
    // q [12,14,16,22] (scale .5 zp 10) → [(12+16)/2, (14+22)/2] = [14, 18]
    let (out, _) = run(
        O::Mean,
        vec![u8q(&[1, 2, 2], 0.5, 10, &[12, 14, 16, 22])],
        &[A::Ti(vec![1], vec![1]), A::I(0)],
        qa(0.5, 10),
    );
    assert_eq!(out, vec![14, 18]);
    let (out, _) = run(
        O::Mean,
        vec![i8q(&[1, 2, 2], 0.5, -118, &[-116, -114, -112, -106])],
        &[A::Ti(vec![1], vec![1]), A::I(0)],
        qs(0.5, -118),
    );
    assert_eq!(i8_vals(&out), vec![-114, -110]);
}

#[test]
fn argmax_and_argmin_in_more_types() {
    let (out, _) = run(
        O::Argmax,
        vec![i8q(&[2, 2], 1.0, 0, &[-5, 3, 7, -128])],
        &[A::I(1)],
        I32,
    );
    assert_eq!(i32_vals(&out), vec![1, 0]);
    let (out, _) = run(O::Argmax, vec![i32t(&[3], &[-1, 9, 4])], &[A::I(0)], I32);
    assert_eq!(i32_vals(&out), vec![1]);
    let (out, _) = run(
        O::Argmin,
        vec![f16(&[2, 2], &[1.5, -0.5, 2.0, 3.0])],
        &[A::I(1)],
        I32,
    );
    assert_eq!(i32_vals(&out), vec![1, 0]);
    let (out, _) = run(
        O::Argmin,
        vec![u8q(&[3], 1.0, 0, &[9, 2, 200])],
        &[A::I(0)],
        I32,
    );
    assert_eq!(i32_vals(&out), vec![1]);
}

#[test]
fn comparisons_of_bool8_order_false_before_true() {
    // x [1,0,1,0] vs y [0,1,1,0]
    for (op, want) in [
        (O::Greater, [1u8, 0, 0, 0]),
        (O::GreaterEqual, [1, 0, 1, 1]),
        (O::Less, [0, 1, 0, 0]),
        (O::LessEqual, [0, 1, 1, 1]),
    ] {
        let (out, _) = run(
            op,
            vec![
                t(T::TensorBool8, &[4], vec![1, 0, 1, 0]),
                t(T::TensorBool8, &[4], vec![0, 1, 1, 0]),
            ],
            &[],
            (T::TensorBool8, 0.0, 0),
        );
        assert_eq!(out, want.to_vec(), "{op:?}");
    }
}

// ---------------------------------------------------------------- quantize, dequantize

#[test]
fn dequantize_quant8_signed_and_symm() {
    // (q - zp) * scale: (-128+128)*.5 = 0, .5, 255*.5 = 127.5
    let (out, _) = run(
        O::Dequantize,
        vec![i8q(&[3], 0.5, -128, &[-128, -127, 127])],
        &[],
        F32,
    );
    assert_eq!(bf(&out), vec![0.0, 0.5, 127.5]);
    let (out, _) = run(
        O::Dequantize,
        vec![tq(
            T::TensorQuant8Symm,
            &[3],
            0.25,
            0,
            i8_bytes(&[-4, 0, 8]),
        )],
        &[],
        F32,
    );
    assert_eq!(bf(&out), vec![-1.0, 0.0, 2.0]);
}

#[test]
fn quantize_float16_rounds_and_saturates() {
    // scale .5 zp 10: 0 → 10, 1.5 → 13, -100 → 0 (saturated), 1000 → 255
    let (out, _) = run(
        O::Quantize,
        vec![f16(&[4], &[0.0, 1.5, -100.0, 1000.0])],
        &[],
        qa(0.5, 10),
    );
    assert_eq!(out, vec![10, 13, 0, 255]);
}

// ---------------------------------------------------------------- data movement

/// Each element-moving case in every type NNAPI lists for it besides TENSOR_FLOAT32 (which
/// the older tests cover): (type, bytes of the values 1..=n, scale, zp).
fn typed(n: usize) -> Vec<(T, Vec<u8>, f32, i32)> {
    let v: Vec<f32> = (1..=n).map(|i| i as f32).collect();
    let iv: Vec<i32> = (1..=n as i32).collect();
    vec![
        (T::TensorFloat16, f16_bytes(&v), 0.0, 0),
        (
            T::TensorQuant8Asymm,
            iv.iter().map(|&x| x as u8).collect(),
            0.5,
            10,
        ),
        (
            T::TensorQuant8AsymmSigned,
            iv.iter().map(|&x| (x - 5) as u8).collect(),
            0.5,
            -5,
        ),
    ]
}

/// The bytes of `bytes` (elements of `ty`) reordered by `perm`.
fn permuted(ty: T, bytes: &[u8], perm: &[usize]) -> Vec<u8> {
    let sz = ty.element_size();
    perm.iter()
        .flat_map(|&p| bytes[p * sz..(p + 1) * sz].to_vec())
        .collect()
}

#[test]
fn transpose_moves_elements_of_every_type() {
    // [[1,2,3],[4,5,6]] transposed: 1,4,2,5,3,6
    for (ty, bytes, s, z) in typed(6) {
        let (out, d) = run(
            O::Transpose,
            vec![tq(ty, &[2, 3], s, z, bytes.clone())],
            &[A::Ti(vec![2], vec![1, 0])],
            (ty, s, z),
        );
        assert_eq!(d, vec![3, 2], "{ty:?}");
        assert_eq!(out, permuted(ty, &bytes, &[0, 3, 1, 4, 2, 5]), "{ty:?}");
    }
}

#[test]
fn squeeze_drops_unit_dims_of_every_type() {
    for (ty, bytes, s, z) in typed(2) {
        let (out, d) = run(
            O::Squeeze,
            vec![tq(ty, &[1, 2, 1], s, z, bytes.clone())],
            &[A::Ti(vec![1], vec![0])],
            (ty, s, z),
        );
        assert_eq!(d, vec![2, 1], "{ty:?}");
        assert_eq!(out, bytes, "{ty:?}");
    }
}

#[test]
fn concatenation_joins_every_type_along_axis() {
    // [[1],[2]] ++ [[3,4],[5,6]] on axis 1 → 1,3,4,2,5,6
    for (ty, bytes, s, z) in typed(6) {
        let sz = ty.element_size();
        let (out, d) = run(
            O::Concatenation,
            vec![
                tq(ty, &[2, 1], s, z, bytes[..2 * sz].to_vec()),
                tq(ty, &[2, 2], s, z, bytes[2 * sz..].to_vec()),
            ],
            &[A::I(1)],
            (ty, s, z),
        );
        assert_eq!(d, vec![2, 3], "{ty:?}");
        assert_eq!(out, permuted(ty, &bytes, &[0, 2, 3, 1, 4, 5]), "{ty:?}");
    }
}

#[test]
fn space_to_depth_and_depth_to_space_in_every_type() {
    // 1x2x2x1 → 1x1x1x4 keeps the order 1,2,3,4 ; and back
    for (ty, bytes, s, z) in typed(4) {
        let (out, d) = run(
            O::SpaceToDepth,
            vec![tq(ty, &[1, 2, 2, 1], s, z, bytes.clone())],
            &[A::I(2)],
            (ty, s, z),
        );
        assert_eq!(d, vec![1, 1, 1, 4], "{ty:?}");
        assert_eq!(out, bytes, "{ty:?}");
        let (out, d) = run(
            O::DepthToSpace,
            vec![tq(ty, &[1, 1, 1, 4], s, z, bytes.clone())],
            &[A::I(2)],
            (ty, s, z),
        );
        assert_eq!(d, vec![1, 2, 2, 1], "{ty:?}");
        assert_eq!(out, bytes, "{ty:?}");
    }
}

#[test]
fn pad_fills_with_the_zero_point_in_every_type() {
    // [1,2] as 1x2 padded (0,1),(1,0) → [[0,1,2],[0,0,0]]; quantized pad value is the
    // zero point (real 0)
    for (ty, bytes, s, z) in typed(2) {
        let (out, d) = run(
            O::Pad,
            vec![tq(ty, &[1, 2], s, z, bytes.clone())],
            &[A::Ti(vec![2, 2], vec![0, 1, 1, 0])],
            (ty, s, z),
        );
        assert_eq!(d, vec![2, 3], "{ty:?}");
        let sz = ty.element_size();
        let zero: Vec<u8> = match ty {
            T::TensorFloat16 => f16_bytes(&[0.0]),
            _ => vec![z as u8],
        };
        let mut want = zero.clone();
        want.extend_from_slice(&bytes[..2 * sz]);
        for _ in 0..3 {
            want.extend_from_slice(&zero);
        }
        assert_eq!(out, want, "{ty:?}");
    }
}

#[test]
fn reshape_keeps_bytes_of_every_type() {
    let cases = typed(4);
    for (ty, bytes, s, z) in cases {
        let (out, d) = run(
            O::Reshape,
            vec![tq(ty, &[2, 2], s, z, bytes.clone())],
            &[A::Ti(vec![2], vec![-1, 1])],
            (ty, s, z),
        );
        assert_eq!(d, vec![4, 1], "{ty:?}");
        assert_eq!(out, bytes, "{ty:?}");
    }
}

#[test]
fn rank_of_symmetric_and_16_bit_quantized_tensors() {
    for (ty, dims) in [
        (T::TensorQuant8Symm, &[2u32, 1][..]),
        (T::TensorQuant16Asymm, &[3][..]),
        (T::TensorQuant16Symm, &[1, 1, 2][..]),
    ] {
        let n: u32 = dims.iter().product();
        let bytes = vec![0u8; n as usize * ty.element_size()];
        let (out, _) = run(
            O::Rank,
            vec![tq(ty, dims, 1.0, 0, bytes)],
            &[],
            (T::Int32, 0.0, 0),
        );
        assert_eq!(i32_vals(&out), vec![dims.len() as i32], "{ty:?}");
    }
    let mut b = B::new();
    let x = b.input(T::TensorQuant8SymmPerChannel, &[2, 3, 1, 1]);
    b.g.operands[x as usize].channel_quant = Some(ChannelQuant {
        channel_dim: 0,
        scales: vec![1.0, 0.5],
    });
    let o = b.output(T::Int32, &[]);
    b.op(O::Rank, &[x], &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![0; 6], vec![])]);
    assert_eq!(i32_vals(&out), vec![4]);
}

#[test]
fn average_pool_quant8_signed_rounds_ties_away_from_zero_like_tflite() {
    // TFLite's int8 average pool rounds the integer mean half away from zero:
    // (-127 - 126 - 125 - 124) = -502, (-502 - 2) / 4 = -126 (the uint8 kernel's
    // (502 + 2) / 4 = 126 for the unshifted values)
    let args: Vec<A> = [2, 1, 1, 2, 2, 0].iter().map(|&v| A::I(v)).collect();
    let (out, _) = run(
        O::AveragePool2d,
        vec![i8q(&[1, 2, 2, 1], 0.5, -128, &[-127, -126, -125, -124])],
        &args,
        qs(0.5, -128),
    );
    assert_eq!(i8_vals(&out), vec![-126]);
}

/// ABS and NEG on TENSOR_INT32 (NNAPI feature levels 4 and 3): by hand, with the extremes.
/// The most negative value wraps to itself under both, as two's complement does.
#[test]
fn abs_and_neg_on_int32_with_the_extremes() {
    let x = [-3, 0, 7, i32::MIN, i32::MAX];
    for (op, want) in [
        (O::Abs, [3, 0, 7, i32::MIN, i32::MAX]),
        (O::Neg, [3, 0, -7, i32::MIN, -i32::MAX]),
    ] {
        let mut b = B::new();
        let i = b.input(T::TensorInt32, &[5]);
        let o = b.output(T::TensorInt32, &[5]);
        b.op(op, &[i], &[o]);
        let (out, dims) = run_bytes(b.g, &[(i32_bytes(&x), vec![])]);
        assert_eq!(dims, [5]);
        assert_eq!(i32_vals(&out), want, "{op:?}");
    }
}

/// An INT32 ABS whose output is declared float breaks the operation's definition.
#[test]
fn abs_on_int32_with_a_float_output_is_refused() {
    let mut b = B::new();
    let i = b.input(T::TensorInt32, &[2]);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Abs, &[i], &[o]);
    invalid(b.g);
}
