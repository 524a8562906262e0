//! Comparisons, logic, SELECT, CAST and POW: values computed by hand, and every documented
//! error.
#![allow(clippy::panic)]

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

// ---------------------------------------------------------------- helpers

/// `op(a, b)` over inputs of types `ta`, `tb` with shapes `ad`, `bd`, output `to`.
fn binary(
    op: OperationType,
    (ta, ad): (OperandType, &[u32]),
    (tb, bd): (OperandType, &[u32]),
    to: OperandType,
) -> (Graph, u32, u32, u32) {
    let mut b = B::new();
    let x = b.input(ta, ad);
    let y = b.input(tb, bd);
    let o = b.output(to, &[]);
    b.op(op, &[x, y], &[o]);
    (b.g, x, y, o)
}

fn cmp(op: OperationType, ty: OperandType, ad: &[u32], bd: &[u32]) -> Graph {
    binary(op, (ty, ad), (ty, bd), T::TensorBool8).0
}

const ALL_CMP: [(OperationType, [u8; 3]); 6] = [
    // a = [1, 2, 3] against b = [2, 2, 2]
    (O::Equal, [0, 1, 0]),
    (O::NotEqual, [1, 0, 1]),
    (O::Greater, [0, 0, 1]),
    (O::GreaterEqual, [0, 1, 1]),
    (O::Less, [1, 0, 0]),
    (O::LessEqual, [1, 1, 0]),
];

// ---------------------------------------------------------------- comparisons

#[test]
fn every_comparison_on_float32() {
    for (op, want) in ALL_CMP {
        let g = cmp(op, T::TensorFloat32, &[3], &[3]);
        let (o, d) = run1(g, &[fb(&[1.0, 2.0, 3.0]), fb(&[2.0, 2.0, 2.0])]);
        assert_eq!(d, vec![3]);
        assert_eq!(o, want, "{op}");
    }
}

#[test]
fn every_comparison_on_float16() {
    for (op, want) in ALL_CMP {
        let g = cmp(op, T::TensorFloat16, &[3], &[3]);
        let (o, _) = run1(
            g,
            &[f16_bytes(&[1.0, 2.0, 3.0]), f16_bytes(&[2.0, 2.0, 2.0])],
        );
        assert_eq!(o, want, "{op}");
    }
}

#[test]
fn every_comparison_on_int32_broadcasting_a_scalar_like_operand() {
    for (op, want) in ALL_CMP {
        let g = cmp(op, T::TensorInt32, &[3], &[1]);
        let (o, d) = run1(g, &[i32_bytes(&[1, 2, 3]), i32_bytes(&[2])]);
        assert_eq!(d, vec![3]);
        assert_eq!(o, want, "{op}");
    }
}

#[test]
fn every_comparison_on_quant8_by_real_value_with_different_scales() {
    for (op, want) in ALL_CMP {
        let (mut g, x, y, _) = binary(
            op,
            (T::TensorQuant8Asymm, &[3]),
            (T::TensorQuant8Asymm, &[3]),
            T::TensorBool8,
        );
        // a: scale 0.5, zero point 0: [2, 4, 6] = [1, 2, 3]
        // b: scale 1, zero point 1: [3, 3, 3] = [2, 2, 2]
        set_q(&mut g, x, 0.5, 0);
        set_q(&mut g, y, 1.0, 1);
        let (o, _) = run1(g, &[vec![2, 4, 6], vec![3, 3, 3]]);
        assert_eq!(o, want, "{op}");
    }
}

#[test]
fn every_comparison_on_quant8_signed_by_real_value() {
    for (op, want) in ALL_CMP {
        let (mut g, x, y, _) = binary(
            op,
            (T::TensorQuant8AsymmSigned, &[3]),
            (T::TensorQuant8AsymmSigned, &[3]),
            T::TensorBool8,
        );
        // a: scale 0.25, zero point -10: [-6, -2, 2] = [1, 2, 3]
        // b: scale 2, zero point 5: [6, 6, 6] = [2, 2, 2]
        set_q(&mut g, x, 0.25, -10);
        set_q(&mut g, y, 2.0, 5);
        let (o, _) = run1(g, &[i8_bytes(&[-6, -2, 2]), i8_bytes(&[6, 6, 6])]);
        assert_eq!(o, want, "{op}");
    }
}

#[test]
fn equal_and_not_equal_on_bool8() {
    let g = cmp(O::Equal, T::TensorBool8, &[4], &[4]);
    assert_eq!(
        run1(g, &[vec![0, 1, 0, 1], vec![0, 0, 1, 1]]).0,
        vec![1, 0, 0, 1]
    );
    let g = cmp(O::NotEqual, T::TensorBool8, &[4], &[4]);
    assert_eq!(
        run1(g, &[vec![0, 1, 0, 1], vec![0, 0, 1, 1]]).0,
        vec![0, 1, 1, 0]
    );
}

#[test]
fn greater_broadcasts_a_row_against_a_column() {
    let g = cmp(O::Greater, T::TensorFloat32, &[2, 1], &[3]);
    let (o, d) = run1(g, &[fb(&[1.0, 5.0]), fb(&[0.0, 1.0, 6.0])]);
    assert_eq!(d, vec![2, 3]);
    assert_eq!(o, vec![1, 0, 0, 1, 1, 0]);
}

#[test]
fn less_broadcasts_across_ranks() {
    let g = cmp(O::Less, T::TensorInt32, &[2, 2, 2], &[2, 1]);
    let (o, d) = run1(
        g,
        &[i32_bytes(&[0, 1, 2, 3, 4, 5, 6, 7]), i32_bytes(&[2, 5])],
    );
    assert_eq!(d, vec![2, 2, 2]);
    assert_eq!(o, vec![1, 1, 1, 1, 0, 0, 0, 0]);
}

#[test]
fn equal_with_nan_is_false_and_not_equal_true() {
    let g = cmp(O::Equal, T::TensorFloat32, &[1], &[1]);
    assert_eq!(run1(g, &[fb(&[f32::NAN]), fb(&[f32::NAN])]).0, vec![0]);
    let g = cmp(O::NotEqual, T::TensorFloat32, &[1], &[1]);
    assert_eq!(run1(g, &[fb(&[f32::NAN]), fb(&[f32::NAN])]).0, vec![1]);
}

#[test]
fn comparison_output_must_be_bool8() {
    let (g, ..) = binary(
        O::Less,
        (T::TensorFloat32, &[2]),
        (T::TensorFloat32, &[2]),
        T::TensorFloat32,
    );
    assert!(refused(g).contains("must be TENSOR_BOOL8"));
}

#[test]
fn comparison_inputs_must_share_a_type() {
    let (g, ..) = binary(
        O::Equal,
        (T::TensorFloat32, &[2]),
        (T::TensorInt32, &[2]),
        T::TensorBool8,
    );
    assert!(refused(g).contains("input1"));
}

#[test]
fn comparison_of_unbroadcastable_shapes_is_refused() {
    let g = cmp(O::GreaterEqual, T::TensorFloat32, &[2, 3], &[2]);
    assert!(refused(g).contains("cannot be broadcast"));
}

#[test]
fn comparison_of_unbroadcastable_shapes_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[0]);
    let y = b.input(T::TensorFloat32, &[0]);
    let o = b.output(T::TensorBool8, &[]);
    b.op(O::Equal, &[x, y], &[o]);
    let p = PreparedGraph::new(b.g).expect("prepares");
    let (d1, d2) = (fb(&[1.0, 2.0]), fb(&[1.0, 2.0, 3.0]));
    let args = [
        InputArg::Value {
            data: &d1,
            dimensions: vec![2],
        },
        InputArg::Value {
            data: &d2,
            dimensions: vec![3],
        },
    ];
    let mut out = [0u8; 16];
    let r = p.execute(&[], &args, &mut [&mut out[..]]);
    assert!(
        matches!(&r, Err(ExecError::InvalidArgument(m)) if m.contains("cannot be broadcast")),
        "{r:?}"
    );
}

#[test]
fn comparison_with_three_inputs_is_refused() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let z = b.int(0);
    let o = b.output(T::TensorBool8, &[]);
    b.op(O::Greater, &[x, y, z], &[o]);
    assert!(refused(b.g).contains("inputs given"));
}

#[test]
fn comparison_on_quant16_is_refused() {
    let (mut g, x, y, _) = binary(
        O::Equal,
        (T::TensorQuant16Symm, &[2]),
        (T::TensorQuant16Symm, &[2]),
        T::TensorBool8,
    );
    set_q(&mut g, x, 1.0, 0);
    set_q(&mut g, y, 1.0, 0);
    assert!(refused(g).contains("TENSOR_QUANT16_SYMM"));
}

// ---------------------------------------------------------------- logic

#[test]
fn logical_and_or_truth_tables() {
    let (g, ..) = binary(
        O::LogicalAnd,
        (T::TensorBool8, &[4]),
        (T::TensorBool8, &[4]),
        T::TensorBool8,
    );
    assert_eq!(
        run1(g, &[vec![0, 0, 1, 1], vec![0, 1, 0, 1]]).0,
        vec![0, 0, 0, 1]
    );
    let (g, ..) = binary(
        O::LogicalOr,
        (T::TensorBool8, &[4]),
        (T::TensorBool8, &[4]),
        T::TensorBool8,
    );
    assert_eq!(
        run1(g, &[vec![0, 0, 1, 1], vec![0, 1, 0, 1]]).0,
        vec![0, 1, 1, 1]
    );
}

#[test]
fn logical_and_broadcasts_and_reads_nonzero_as_true() {
    let (g, ..) = binary(
        O::LogicalAnd,
        (T::TensorBool8, &[2, 2]),
        (T::TensorBool8, &[2]),
        T::TensorBool8,
    );
    let (o, d) = run1(g, &[vec![3, 0, 1, 9], vec![1, 200]]);
    assert_eq!(d, vec![2, 2]);
    assert_eq!(o, vec![1, 0, 1, 1]);
}

#[test]
fn logical_not_flips_and_normalises() {
    let mut b = B::new();
    let x = b.input(T::TensorBool8, &[2, 2]);
    let o = b.output(T::TensorBool8, &[2, 2]);
    b.op(O::LogicalNot, &[x], &[o]);
    let (o, d) = run1(b.g, &[vec![0, 1, 5, 0]]);
    assert_eq!(d, vec![2, 2]);
    assert_eq!(o, vec![1, 0, 0, 1]);
}

#[test]
fn logical_or_on_float_is_refused() {
    let (g, ..) = binary(
        O::LogicalOr,
        (T::TensorFloat32, &[2]),
        (T::TensorFloat32, &[2]),
        T::TensorBool8,
    );
    assert!(refused(g).contains("TENSOR_FLOAT32"));
}

#[test]
fn logical_and_output_must_be_bool8() {
    let (g, ..) = binary(
        O::LogicalAnd,
        (T::TensorBool8, &[2]),
        (T::TensorBool8, &[2]),
        T::TensorInt32,
    );
    assert!(refused(g).contains("must be TENSOR_BOOL8"));
}

#[test]
fn logical_and_of_unbroadcastable_shapes_is_refused() {
    let (g, ..) = binary(
        O::LogicalAnd,
        (T::TensorBool8, &[3]),
        (T::TensorBool8, &[2]),
        T::TensorBool8,
    );
    assert!(refused(g).contains("cannot be broadcast"));
}

#[test]
fn logical_not_takes_one_input_of_bool8() {
    let mut b = B::new();
    let x = b.input(T::TensorBool8, &[2]);
    let y = b.input(T::TensorBool8, &[2]);
    let o = b.output(T::TensorBool8, &[2]);
    b.op(O::LogicalNot, &[x, y], &[o]);
    assert!(refused(b.g).contains("inputs given"));
    let mut b = B::new();
    let x = b.input(T::TensorInt32, &[2]);
    let o = b.output(T::TensorBool8, &[2]);
    b.op(O::LogicalNot, &[x], &[o]);
    assert!(refused(b.g).contains("TENSOR_INT32"));
}

// ---------------------------------------------------------------- SELECT

fn select_graph(ty: OperandType, dims: &[u32]) -> (Graph, [u32; 3]) {
    let mut b = B::new();
    let c = b.input(T::TensorBool8, dims);
    let x = b.input(ty, dims);
    let y = b.input(ty, dims);
    let o = b.output(ty, &[]);
    b.op(O::Select, &[c, x, y], &[o]);
    (b.g, [x, y, o])
}

#[test]
fn select_float32_picks_per_element() {
    let (g, _) = select_graph(T::TensorFloat32, &[2, 2]);
    let (o, d) = run1(
        g,
        &[
            vec![1, 0, 0, 7],
            fb(&[1.0, 2.0, 3.0, 4.0]),
            fb(&[-1.0, -2.0, -3.0, -4.0]),
        ],
    );
    assert_eq!(d, vec![2, 2]);
    assert_eq!(bf(&o), vec![1.0, -2.0, -3.0, 4.0]);
}

#[test]
fn select_float16_and_int32() {
    let (g, _) = select_graph(T::TensorFloat16, &[3]);
    let (o, _) = run1(
        g,
        &[
            vec![0, 1, 0],
            f16_bytes(&[0.5, 1.5, 2.5]),
            f16_bytes(&[9.0, 8.0, 7.0]),
        ],
    );
    assert_eq!(f16_vals(&o), vec![9.0, 1.5, 7.0]);
    let (g, _) = select_graph(T::TensorInt32, &[3]);
    let (o, _) = run1(
        g,
        &[
            vec![1, 1, 0],
            i32_bytes(&[1, i32::MAX, 3]),
            i32_bytes(&[4, 5, i32::MIN]),
        ],
    );
    assert_eq!(i32_vals(&o), vec![1, i32::MAX, i32::MIN]);
}

#[test]
fn select_quant8_requantizes_each_input_to_the_output() {
    let (mut g, [x, y, o]) = select_graph(T::TensorQuant8Asymm, &[4]);
    set_q(&mut g, x, 0.5, 10); // [12, 20, 0, 255] = [1, 5, -5, 122.5]
    set_q(&mut g, y, 2.0, 0); // [1, 3, 100, 200] = [2, 6, 200, 400]
    set_q(&mut g, o, 1.0, 5);
    let (out, _) = run1(
        g,
        &[vec![1, 0, 1, 0], vec![12, 20, 0, 255], vec![1, 3, 100, 200]],
    );
    // picks 1, 6, -5, 400 -> stored 6, 11, 0, 255 (400 saturates)
    assert_eq!(out, vec![6, 11, 0, 255]);
}

#[test]
fn select_quant8_rounds_half_away_from_zero() {
    let (mut g, [x, y, o]) = select_graph(T::TensorQuant8Asymm, &[2]);
    set_q(&mut g, x, 1.0, 0); // [3, 5] = [3, 5]
    set_q(&mut g, y, 1.0, 0);
    set_q(&mut g, o, 2.0, 0); // 1.5 -> 2, 2.5 -> 3
    let (out, _) = run1(g, &[vec![1, 1], vec![3, 5], vec![0, 0]]);
    assert_eq!(out, vec![2, 3]);
}

#[test]
fn select_quant8_rounds_after_adding_the_output_zero_point() {
    // real -2.5 into scale 1, zero point 3: -2.5 + 3 = 0.5 rounds to 1 (not round(-2.5) + 3 = 0)
    let (mut g, [x, y, o]) = select_graph(T::TensorQuant8Asymm, &[1]);
    set_q(&mut g, x, 0.5, 10);
    set_q(&mut g, y, 1.0, 0);
    set_q(&mut g, o, 1.0, 3);
    let (out, _) = run1(g, &[vec![1], vec![5], vec![0]]);
    assert_eq!(out, vec![1]);
}

#[test]
fn select_quant8_signed_requantizes() {
    let (mut g, [x, y, o]) = select_graph(T::TensorQuant8AsymmSigned, &[3]);
    set_q(&mut g, x, 0.5, -10); // [-8, 100, -128] = [1, 55, -59]
    set_q(&mut g, y, 1.0, 0); // [1, 2, 3]
    set_q(&mut g, o, 0.25, 0);
    let (out, _) = run1(
        g,
        &[
            vec![1, 1, 1],
            i8_bytes(&[-8, 100, -128]),
            i8_bytes(&[1, 2, 3]),
        ],
    );
    // [4, 220 -> 127, -236 -> -128]
    assert_eq!(i8_vals(&out), vec![4, 127, -128]);
}

#[test]
fn select_of_different_shapes_is_refused() {
    let mut b = B::new();
    let c = b.input(T::TensorBool8, &[3]);
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Select, &[c, x, y], &[o]);
    assert!(refused(b.g).contains("must have the same shape"));
}

#[test]
fn select_of_different_shapes_at_execution_fails() {
    let mut b = B::new();
    let c = b.input(T::TensorBool8, &[0]);
    let x = b.input(T::TensorFloat32, &[0]);
    let y = b.input(T::TensorFloat32, &[0]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Select, &[c, x, y], &[o]);
    let p = PreparedGraph::new(b.g).expect("prepares");
    let (dc, dx, dy) = (vec![1u8, 0], fb(&[1.0, 2.0]), fb(&[1.0]));
    let args = [
        InputArg::Value {
            data: &dc,
            dimensions: vec![2],
        },
        InputArg::Value {
            data: &dx,
            dimensions: vec![2],
        },
        InputArg::Value {
            data: &dy,
            dimensions: vec![1],
        },
    ];
    let mut out = [0u8; 16];
    let r = p.execute(&[], &args, &mut [&mut out[..]]);
    assert!(
        matches!(&r, Err(ExecError::InvalidArgument(m)) if m.contains("must have the same shape")),
        "{r:?}"
    );
}

#[test]
fn select_condition_must_be_bool8() {
    let mut b = B::new();
    let c = b.input(T::TensorInt32, &[2]);
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Select, &[c, x, y], &[o]);
    assert!(refused(b.g).contains("condition"));
}

#[test]
fn select_inputs_and_output_share_a_type() {
    let mut b = B::new();
    let c = b.input(T::TensorBool8, &[2]);
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat16, &[2]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Select, &[c, x, y], &[o]);
    assert!(refused(b.g).contains("input2"));
    let mut b = B::new();
    let c = b.input(T::TensorBool8, &[2]);
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorInt32, &[]);
    b.op(O::Select, &[c, x, y], &[o]);
    assert!(refused(b.g).contains("output 0 must be TENSOR_FLOAT32"));
}

#[test]
fn select_on_bool_values_is_refused() {
    let (g, _) = select_graph(T::TensorBool8, &[2]);
    assert!(refused(g).contains("input 1 type TENSOR_BOOL8"));
}

// ---------------------------------------------------------------- CAST

fn cast_graph(from: OperandType, to: OperandType, dims: &[u32]) -> Graph {
    let mut b = B::new();
    let x = b.input(from, dims);
    let o = b.output(to, dims);
    b.op(O::Cast, &[x], &[o]);
    for i in [x, o] {
        if b.g.operands[i as usize].ty.is_quantized() {
            b.q(i, 1.0, 0);
        }
    }
    b.g
}

#[test]
fn cast_float32_to_int32_truncates_toward_zero() {
    let g = cast_graph(T::TensorFloat32, T::TensorInt32, &[4]);
    let (o, _) = run1(g, &[fb(&[2.7, -2.7, 0.5, 1e10])]);
    assert_eq!(i32_vals(&o), vec![2, -2, 0, i32::MAX]);
}

#[test]
fn cast_float32_to_quant8_saturates_then_truncates() {
    let g = cast_graph(T::TensorFloat32, T::TensorQuant8Asymm, &[5]);
    let (o, _) = run1(g, &[fb(&[-1.0, 300.0, 2.9, 255.0, 0.0])]);
    assert_eq!(o, vec![0, 255, 2, 255, 0]);
}

#[test]
fn cast_int32_to_quant8_saturates() {
    let g = cast_graph(T::TensorInt32, T::TensorQuant8Asymm, &[4]);
    let (o, _) = run1(g, &[i32_bytes(&[-5, 256, 17, i32::MAX])]);
    assert_eq!(o, vec![0, 255, 17, 255]);
}

#[test]
fn cast_quant8_to_float_uses_the_stored_value() {
    let mut g = cast_graph(T::TensorQuant8Asymm, T::TensorFloat32, &[3]);
    let x = g.input_indexes[0];
    set_q(&mut g, x, 0.5, 100);
    let (o, _) = run1(g, &[vec![0, 100, 255]]);
    assert_eq!(bf(&o), vec![0.0, 100.0, 255.0]);
}

#[test]
fn cast_int32_to_float16_and_float16_to_float32() {
    let g = cast_graph(T::TensorInt32, T::TensorFloat16, &[3]);
    let (o, _) = run1(g, &[i32_bytes(&[-3, 2048, 100_000])]);
    assert_eq!(f16_vals(&o), vec![-3.0, 2048.0, f32::INFINITY]);
    let g = cast_graph(T::TensorFloat16, T::TensorFloat32, &[2]);
    let (o, _) = run1(g, &[f16_bytes(&[0.333_251_95, -65504.0])]);
    assert_eq!(bf(&o), vec![0.333_251_95, -65504.0]);
}

#[test]
fn cast_float16_to_int32_and_quant8() {
    let g = cast_graph(T::TensorFloat16, T::TensorInt32, &[2]);
    assert_eq!(
        i32_vals(&run1(g, &[f16_bytes(&[-7.5, 3.25])]).0),
        vec![-7, 3]
    );
    let g = cast_graph(T::TensorFloat16, T::TensorQuant8Asymm, &[2]);
    assert_eq!(run1(g, &[f16_bytes(&[-7.5, 1000.0])]).0, vec![0, 255]);
}

#[test]
fn cast_quant8_to_int32_and_float16() {
    let g = cast_graph(T::TensorQuant8Asymm, T::TensorInt32, &[2]);
    assert_eq!(i32_vals(&run1(g, &[vec![0, 255]]).0), vec![0, 255]);
    let g = cast_graph(T::TensorQuant8Asymm, T::TensorFloat16, &[2]);
    assert_eq!(f16_vals(&run1(g, &[vec![7, 255]]).0), vec![7.0, 255.0]);
}

#[test]
fn cast_float32_to_float32_and_int32_to_int32_copy() {
    let g = cast_graph(T::TensorFloat32, T::TensorFloat32, &[2]);
    assert_eq!(bf(&run1(g, &[fb(&[1.5, -0.0])]).0), vec![1.5, -0.0]);
    let g = cast_graph(T::TensorInt32, T::TensorInt32, &[2]);
    assert_eq!(
        i32_vals(&run1(g, &[i32_bytes(&[i32::MIN, 9])]).0),
        vec![i32::MIN, 9]
    );
}

#[test]
fn cast_float32_to_float16_rounds_and_overflows_to_infinity() {
    let g = cast_graph(T::TensorFloat32, T::TensorFloat16, &[2]);
    let (o, _) = run1(g, &[fb(&[1.0 / 3.0, 1e6])]);
    assert_eq!(f16_vals(&o), vec![0.333_251_95, f32::INFINITY]);
}

#[test]
fn cast_identity_of_the_copy_only_types() {
    let g = cast_graph(T::TensorBool8, T::TensorBool8, &[3]);
    assert_eq!(run1(g, &[vec![1, 0, 1]]).0, vec![1, 0, 1]);
    let g = cast_graph(T::TensorQuant8AsymmSigned, T::TensorQuant8AsymmSigned, &[2]);
    assert_eq!(
        i8_vals(&run1(g, &[i8_bytes(&[-128, 127])]).0),
        vec![-128, 127]
    );
    let g = cast_graph(T::TensorQuant8Symm, T::TensorQuant8Symm, &[2]);
    assert_eq!(i8_vals(&run1(g, &[i8_bytes(&[-5, 6])]).0), vec![-5, 6]);
    let g = cast_graph(T::TensorQuant16Symm, T::TensorQuant16Symm, &[2]);
    let v: Vec<u8> = [-300i16, 301]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(run1(g, std::slice::from_ref(&v)).0, v);
    let g = cast_graph(T::TensorQuant16Asymm, T::TensorQuant16Asymm, &[2]);
    let v: Vec<u8> = [0u16, 65535].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(run1(g, std::slice::from_ref(&v)).0, v);
}

#[test]
fn cast_float32_to_bool8_is_refused() {
    let g = cast_graph(T::TensorFloat32, T::TensorBool8, &[2]);
    assert!(refused(g).contains("CAST from TENSOR_FLOAT32 to TENSOR_BOOL8"));
}

#[test]
fn cast_from_a_copy_only_type_to_another_is_refused() {
    let g = cast_graph(T::TensorBool8, T::TensorInt32, &[2]);
    assert!(refused(g).contains("not a supported pair"));
    let g = cast_graph(T::TensorQuant8AsymmSigned, T::TensorQuant8Asymm, &[2]);
    assert!(refused(g).contains("not a supported pair"));
}

#[test]
fn cast_identity_copies_stored_values_whatever_the_output_quantization() {
    let mut g = cast_graph(T::TensorQuant8AsymmSigned, T::TensorQuant8AsymmSigned, &[2]);
    let o = g.output_indexes[0];
    set_q(&mut g, o, 0.5, 3);
    assert_eq!(i8_vals(&run1(g, &[i8_bytes(&[-7, 8])]).0), vec![-7, 8]);
    let mut g = cast_graph(T::TensorQuant8Asymm, T::TensorQuant8Asymm, &[2]);
    let o = g.output_indexes[0];
    set_q(&mut g, o, 0.5, 3);
    assert_eq!(run1(g, &[vec![0, 255]]).0, vec![0, 255]);
}

#[test]
fn cast_output_shape_must_match() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorInt32, &[3]);
    b.op(O::Cast, &[x], &[o]);
    assert!(refused(b.g).contains("differs from input shape"));
}

#[test]
fn cast_with_two_inputs_is_refused() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorInt32, &[2]);
    b.op(O::Cast, &[x, y], &[o]);
    assert!(refused(b.g).contains("inputs given"));
}

// ---------------------------------------------------------------- POW

#[test]
fn pow_float32_elementwise_and_broadcast() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorFloat32, &[2, 2]),
        (T::TensorFloat32, &[2]),
        T::TensorFloat32,
    );
    let (o, d) = run1(g, &[fb(&[2.0, 9.0, 0.5, 4.0]), fb(&[3.0, 0.5])]);
    assert_eq!(d, vec![2, 2]);
    close(&bf(&o), &[8.0, 3.0, 0.125, 2.0]);
}

#[test]
fn pow_edge_values() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorFloat32, &[4]),
        (T::TensorFloat32, &[4]),
        T::TensorFloat32,
    );
    let (o, _) = run1(
        g,
        &[fb(&[0.0, -2.0, 5.0, -8.0]), fb(&[0.0, 2.0, -1.0, 0.5])],
    );
    let o = bf(&o);
    close(&o[..3], &[1.0, 4.0, 0.2]);
    assert!(o[3].is_nan(), "{o:?}");
}

#[test]
fn pow_float16() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorFloat16, &[3]),
        (T::TensorFloat16, &[1]),
        T::TensorFloat16,
    );
    let (o, _) = run1(g, &[f16_bytes(&[1.5, -3.0, 10.0]), f16_bytes(&[2.0])]);
    assert_eq!(f16_vals(&o), vec![2.25, 9.0, 100.0]);
}

#[test]
fn pow_exponent_type_must_match_base() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorFloat32, &[2]),
        (T::TensorFloat16, &[2]),
        T::TensorFloat32,
    );
    assert!(refused(g).contains("exponent"));
}

#[test]
fn pow_on_int32_is_refused() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorInt32, &[2]),
        (T::TensorInt32, &[2]),
        T::TensorInt32,
    );
    assert!(refused(g).contains("TENSOR_INT32"));
}

#[test]
fn pow_output_type_must_match() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorFloat32, &[2]),
        (T::TensorFloat32, &[2]),
        T::TensorFloat16,
    );
    assert!(refused(g).contains("output type"));
}

#[test]
fn pow_of_unbroadcastable_shapes_is_refused() {
    let (g, ..) = binary(
        O::Pow,
        (T::TensorFloat32, &[2]),
        (T::TensorFloat32, &[3]),
        T::TensorFloat32,
    );
    assert!(refused(g).contains("cannot be broadcast"));
}

// ---------------------------------------------------------------- declared output shapes

#[test]
fn comparison_declared_output_shape_must_be_the_broadcast_shape() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 1]);
    let y = b.input(T::TensorFloat32, &[3]);
    let o = b.output(T::TensorBool8, &[3]);
    b.op(O::Greater, &[x, y], &[o]);
    assert!(refused(b.g).contains("output 0 is declared [3], the operation produces [2, 3]"));
}

#[test]
fn comparison_with_an_unknown_extent_accepts_the_known_broadcast() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[0]);
    let y = b.input(T::TensorFloat32, &[3]);
    let o = b.output(T::TensorBool8, &[3]);
    b.op(O::Equal, &[x, y], &[o]);
    let p = PreparedGraph::new(b.g).expect("prepares");
    let (d1, d2) = (fb(&[2.0]), fb(&[1.0, 2.0, 3.0]));
    let args = [
        InputArg::Value {
            data: &d1,
            dimensions: vec![1],
        },
        InputArg::Value {
            data: &d2,
            dimensions: vec![],
        },
    ];
    let mut out = [0u8; 3];
    let shapes = p.execute(&[], &args, &mut [&mut out[..]]).unwrap();
    assert_eq!(shapes[0].dimensions, vec![3]);
    assert_eq!(out, [0, 1, 0]);
}

#[test]
fn select_declared_output_shape_must_be_the_input_shape() {
    let mut b = B::new();
    let c = b.input(T::TensorBool8, &[2]);
    let x = b.input(T::TensorInt32, &[2]);
    let y = b.input(T::TensorInt32, &[2]);
    let o = b.output(T::TensorInt32, &[3]);
    b.op(O::Select, &[c, x, y], &[o]);
    assert!(refused(b.g).contains("output 0 is declared [3]"));
}

#[test]
fn logical_not_and_pow_declared_output_shapes_are_checked() {
    let mut b = B::new();
    let x = b.input(T::TensorBool8, &[2]);
    let o = b.output(T::TensorBool8, &[2, 1]);
    b.op(O::LogicalNot, &[x], &[o]);
    assert!(refused(b.g).contains("output 0 is declared [2, 1]"));
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let y = b.input(T::TensorFloat32, &[1]);
    let o = b.output(T::TensorFloat32, &[4]);
    b.op(O::Pow, &[x, y], &[o]);
    assert!(refused(b.g).contains("produces [2, 2]"));
}

// ---------------------------------------------------------------- in a graph

#[test]
fn greater_feeds_select_then_reduce_max_through_temporaries() {
    // elementwise maximum of x and y via GREATER + SELECT, then the largest of each row.
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let y = b.input(T::TensorFloat32, &[2, 2]);
    let c = b.temp(T::TensorBool8, &[0, 0]);
    b.op(O::Greater, &[x, y], &[c]);
    let m = b.temp(T::TensorFloat32, &[0, 0]);
    b.op(O::Select, &[c, x, y], &[m]);
    let axes = b.i32c(&[1], &[1]);
    let keep = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[0]);
    b.op(O::ReduceMax, &[m, axes, keep], &[o]);
    let (out, d) = run_f32(b.g, &[&[1.0, 5.0, -2.0, 0.0], &[3.0, 4.0, -1.0, -3.0]]);
    assert_eq!(d, vec![2]);
    close(&out, &[5.0, 0.0]);
}
