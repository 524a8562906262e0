//! MAXIMUM, MINIMUM and PRELU. Expected values are worked out by hand in the comments.

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// `op(a, b)` with both inputs as graph inputs; quantization (scale, zp) of a, b, output.
fn two(
    op: OperationType,
    ty: OperandType,
    ad: &[u32],
    bd: &[u32],
    od: &[u32],
    q: Option<[(f32, i32); 3]>,
) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, ad);
    let y = b.input(ty, bd);
    let o = b.output(ty, od);
    if let Some([qa, qb, qo]) = q {
        b.q(x, qa.0, qa.1);
        b.q(y, qb.0, qb.1);
        b.q(o, qo.0, qo.1);
    }
    b.op(op, &[x, y], &[o]);
    b.g
}

fn run2(g: Graph, a: Vec<u8>, b: Vec<u8>) -> Vec<u8> {
    run_bytes(g, &[(a, vec![]), (b, vec![])]).0
}

// ---------------------------------------------------------------- MAXIMUM / MINIMUM

#[test]
fn minimum_float32_broadcasts_the_smaller_operand() {
    let g = two(O::Minimum, T::TensorFloat32, &[2, 2], &[2], &[2, 2], None);
    let (out, _) = run_f32(g, &[&[1.0, 5.0, -1.0, 0.0], &[0.0, 2.0]]);
    assert_eq!(out, vec![0.0, 2.0, -1.0, 0.0]);
}

#[test]
fn maximum_broadcasts_a_leading_operand_too() {
    // [2, 1] against [3]: outer product shape [2, 3].
    let g = two(O::Maximum, T::TensorFloat32, &[2, 1], &[3], &[2, 3], None);
    let (out, d) = run_f32(g, &[&[1.0, 4.0], &[0.0, 2.0, 5.0]]);
    assert_eq!(d, vec![2, 3]);
    assert_eq!(out, vec![1.0, 2.0, 5.0, 4.0, 4.0, 5.0]);
}

#[test]
fn maximum_and_minimum_int32() {
    let ib = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let bi = |b: Vec<u8>| {
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>()
    };
    let g = two(O::Maximum, T::TensorInt32, &[3], &[1], &[3], None);
    assert_eq!(bi(run2(g, ib(&[3, -7, 9]), ib(&[0]))), vec![3, 0, 9]);
    let g = two(O::Minimum, T::TensorInt32, &[3], &[1], &[3], None);
    assert_eq!(bi(run2(g, ib(&[3, -7, 9]), ib(&[0]))), vec![0, -7, 0]);
}

#[test]
fn maximum_float16() {
    let g = two(O::Maximum, T::TensorFloat16, &[2], &[2], &[2], None);
    let out = run2(g, f16_bytes(&[1.5, -2.0]), f16_bytes(&[0.5, 0.5]));
    assert_eq!(f16_vals(&out), vec![1.5, 0.5]);
}

/// a: scale 0.5, reals [1, 5]; b: scale 1 zero point 10, reals [3, 1]; output scale 0.25:
/// a requantizes to [4, 20], b to [12, 4].
const QMM: [(f32, i32); 3] = [(0.5, 0), (1.0, 10), (0.25, 0)];

#[test]
fn maximum_quant8_requantizes_both_operands_to_the_output() {
    let g = two(
        O::Maximum,
        T::TensorQuant8Asymm,
        &[2],
        &[2],
        &[2],
        Some(QMM),
    );
    assert_eq!(run2(g, vec![2, 10], vec![13, 11]), vec![12, 20]);
}

#[test]
fn minimum_quant8_requantizes_both_operands_to_the_output() {
    let g = two(
        O::Minimum,
        T::TensorQuant8Asymm,
        &[2],
        &[2],
        &[2],
        Some(QMM),
    );
    assert_eq!(run2(g, vec![2, 10], vec![13, 11]), vec![4, 4]);
}

#[test]
fn quant8_min_max_round_half_away_and_saturate() {
    // a = 1 at scale 0.3 is 0.3 = 1.5 output steps of 0.2 → 2; b = 100 at scale 1 is 500
    // steps → saturates at 255.
    let q = Some([(0.3, 0), (1.0, 0), (0.2, 0)]);
    let g = two(O::Minimum, T::TensorQuant8Asymm, &[1], &[1], &[1], q);
    assert_eq!(run2(g, vec![1], vec![100]), vec![2]);
    let g = two(O::Maximum, T::TensorQuant8Asymm, &[1], &[1], &[1], q);
    assert_eq!(run2(g, vec![1], vec![100]), vec![255]);
}

#[test]
fn min_max_quant8_signed() {
    // a: scale 0.5 zp -10, q [-8, 0] = reals [1, 5]; b: scale 1, q [3, 1]; output scale
    // 0.25 zp -128: a → [-124, -108], b → [-116, -124].
    let q = Some([(0.5, -10), (1.0, 0), (0.25, -128)]);
    let g = two(O::Maximum, T::TensorQuant8AsymmSigned, &[2], &[2], &[2], q);
    assert_eq!(
        run2(g, i8_bytes(&[-8, 0]), i8_bytes(&[3, 1])),
        i8_bytes(&[-116, -108])
    );
    let g = two(O::Minimum, T::TensorQuant8AsymmSigned, &[2], &[2], &[2], q);
    assert_eq!(
        run2(g, i8_bytes(&[-8, 0]), i8_bytes(&[3, 1])),
        i8_bytes(&[-124, -124])
    );
}

#[test]
fn maximum_refuses_operands_of_different_types() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorInt32, &[2]);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Maximum, &[x, y], &[o]);
    invalid(b.g);
}

#[test]
fn minimum_refuses_three_inputs_and_bool_tensors() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let z = b.int(0);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Minimum, &[x, y, z], &[o]);
    invalid(b.g);
    invalid(two(O::Minimum, T::TensorBool8, &[2], &[2], &[2], None));
}

#[test]
fn maximum_refuses_output_of_another_type() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat16, &[2]);
    b.op(O::Maximum, &[x, y], &[o]);
    invalid(b.g);
}

#[test]
fn maximum_of_shapes_that_do_not_broadcast_fails_at_execution() {
    let g = two(O::Maximum, T::TensorFloat32, &[2], &[3], &[], None);
    let p = PreparedGraph::new(g).unwrap();
    let (a, b) = (fb(&[1.0, 2.0]), fb(&[1.0, 2.0, 3.0]));
    let args = [
        InputArg::Value {
            data: &a,
            dimensions: vec![],
        },
        InputArg::Value {
            data: &b,
            dimensions: vec![],
        },
    ];
    let mut out = [0u8; 64];
    let mut outs: Vec<&mut [u8]> = vec![&mut out[..]];
    let e = p.execute(&[], &args, &mut outs).unwrap_err();
    assert!(format!("{e}").contains("cannot be broadcast"), "{e}");
}

// ---------------------------------------------------------------- PRELU

#[test]
fn prelu_float32_per_channel_alpha() {
    // alpha [0.5, 2] along the last axis: [-1·0.5, 2, -3·0.5, -4·2].
    let g = two(O::Prelu, T::TensorFloat32, &[2, 2], &[2], &[2, 2], None);
    let (out, _) = run_f32(g, &[&[-1.0, 2.0, -3.0, -4.0], &[0.5, 2.0]]);
    assert_eq!(out, vec![-0.5, 2.0, -1.5, -8.0]);
}

#[test]
fn prelu_float16() {
    let g = two(O::Prelu, T::TensorFloat16, &[2, 2], &[2], &[2, 2], None);
    let out = run2(
        g,
        f16_bytes(&[-1.0, 2.0, -3.0, -4.0]),
        f16_bytes(&[0.5, 2.0]),
    );
    assert_eq!(f16_vals(&out), vec![-0.5, 2.0, -1.5, -8.0]);
}

#[test]
fn prelu_quant8_asymm_matches_the_integer_reference() {
    // x: scale 0.5 zp 128, centered [-2, 4, -6, -8]; alpha: scale 0.25 zp 50, centered
    // [2, 8]; output scale 0.25 zp 100. Positive side 4 × 2 = 8; negative side products
    // [-4, -12, -64] × 0.5 = [-2, -6, -32].
    let q = Some([(0.5, 128), (0.25, 50), (0.25, 100)]);
    let g = two(O::Prelu, T::TensorQuant8Asymm, &[2, 2], &[2], &[2, 2], q);
    assert_eq!(
        run2(g, vec![126, 132, 122, 120], vec![52, 58]),
        vec![98, 108, 94, 68]
    );
}

#[test]
fn prelu_quant8_negative_tie_rounds_towards_zero_like_gemmlowp() {
    // (-3)·1 × 0.5 = -1.5: the doubling high multiply gives -1 (not -2).
    let q = Some([(0.5, 128), (0.25, 50), (0.25, 100)]);
    let g = two(O::Prelu, T::TensorQuant8Asymm, &[1], &[1], &[1], q);
    assert_eq!(run2(g, vec![125], vec![51]), vec![99]);
}

#[test]
fn prelu_quant8_saturates() {
    // Output zero point 0: the negative results clamp at 0, 4 × 2 = 8 stays.
    let q = Some([(0.5, 128), (0.25, 50), (0.25, 0)]);
    let g = two(O::Prelu, T::TensorQuant8Asymm, &[2, 2], &[2], &[2, 2], q);
    assert_eq!(
        run2(g, vec![126, 132, 122, 120], vec![52, 58]),
        vec![0, 8, 0, 0]
    );
}

#[test]
fn prelu_quant8_signed() {
    let q = Some([(0.5, 0), (0.25, 0), (0.25, 0)]);
    let g = two(
        O::Prelu,
        T::TensorQuant8AsymmSigned,
        &[2, 2],
        &[2],
        &[2, 2],
        q,
    );
    assert_eq!(
        run2(g, i8_bytes(&[-2, 4, -6, -8]), i8_bytes(&[2, 8])),
        i8_bytes(&[-2, 8, -6, -32])
    );
}

#[test]
fn prelu_refuses_int32() {
    invalid(two(O::Prelu, T::TensorInt32, &[2], &[2], &[2], None));
}

#[test]
fn prelu_refuses_alpha_of_another_type() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat16, &[2]);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Prelu, &[x, y], &[o]);
    invalid(b.g);
}

// ------------------------------------------------ examples of the NNAPI test specifications
// prelu.mod.py and maximum.mod.py (V1_2); quantized inputs are the spec's reals quantized.

#[test]
fn spec_prelu_channel_alpha_float_and_quant8() {
    let x = [
        0.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -2.0, -2.0, -2.0,
    ];
    let want = [
        0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, -1.0, -2.0, 0.0, -2.0, -4.0,
    ];
    let g = two(
        O::Prelu,
        T::TensorFloat32,
        &[1, 2, 2, 3],
        &[1, 1, 3],
        &[1, 2, 2, 3],
        None,
    );
    let (out, _) = run_f32(g, &[&x, &[0.0, 1.0, 2.0]]);
    assert_eq!(out, want.to_vec());
    // Input (0.25, 128), alpha (0.25, 50), output (0.5, 120).
    let q = Some([(0.25, 128), (0.25, 50), (0.5, 120)]);
    let g = two(
        O::Prelu,
        T::TensorQuant8Asymm,
        &[1, 2, 2, 3],
        &[1, 1, 3],
        &[1, 2, 2, 3],
        q,
    );
    let xq: Vec<u8> = x.iter().map(|&v| (128.0 + 4.0 * v) as u8).collect();
    let out = run2(g, xq, vec![50, 54, 58]);
    let wq: Vec<u8> = want.iter().map(|&v| (120.0 + 2.0 * v) as u8).collect();
    assert_eq!(out, wq);
}

#[test]
fn spec_maximum_simple_and_broadcast_float() {
    let g = two(
        O::Maximum,
        T::TensorFloat32,
        &[3, 1, 2],
        &[3, 1, 2],
        &[3, 1, 2],
        None,
    );
    let (out, _) = run_f32(
        g,
        &[
            &[1.0, 0.0, -1.0, 11.0, -2.0, -1.44],
            &[-1.0, 0.0, 1.0, 12.0, -3.0, -1.43],
        ],
    );
    assert_eq!(out, vec![1.0, 0.0, 1.0, 12.0, -2.0, -1.43]);
    let g = two(
        O::Maximum,
        T::TensorFloat32,
        &[3, 1, 2],
        &[2],
        &[3, 1, 2],
        None,
    );
    let (out, _) = run_f32(g, &[&[1.0, 0.0, -1.0, -2.0, -1.44, 11.0], &[0.5, 2.0]]);
    assert_eq!(out, vec![1.0, 2.0, 0.5, 2.0, 0.5, 11.0]);
}

#[test]
fn spec_maximum_quant8_operands_of_different_scales() {
    // input0 (0.5, 127): [1, 0, -1, 11, -2, -1.44] is [129, 127, 125, 149, 123, 124];
    // input1 (1, 100): [-1, 0, 1, 12, -3, -1.43] is [99, 100, 101, 112, 97, 99].
    // Output (2, 80): input0 → [80.5, 80, 79.5, 85.5, 79, 79.25], input1 → [79.5, 80,
    // 80.5, 86, 78.5, 79.5], rounded half away: [81, 80, 80, 86, 79, 79] and
    // [80, 80, 81, 86, 79, 80]. (The spec's float answer quantizes to 79 in the last place;
    // the quantized input -1.43 → -1 makes it 80, within the one-step tolerance.)
    let q = Some([(0.5, 127), (1.0, 100), (2.0, 80)]);
    let g = two(
        O::Maximum,
        T::TensorQuant8Asymm,
        &[3, 1, 2],
        &[3, 1, 2],
        &[3, 1, 2],
        q,
    );
    let out = run2(
        g,
        vec![129, 127, 125, 149, 123, 124],
        vec![99, 100, 101, 112, 97, 99],
    );
    assert_eq!(out, vec![81, 80, 81, 86, 79, 80]);
}
