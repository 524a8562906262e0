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
