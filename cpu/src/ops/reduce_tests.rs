//! REDUCE_*, ARGMAX, ARGMIN, TOPK_V2 and LOG_SOFTMAX: values computed by hand, and every
//! documented error.
#![allow(clippy::panic)]

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

// ---------------------------------------------------------------- helpers

/// REDUCE_`op` of an input `ty` `dims` over constant `axes`.
fn reduce_graph(
    op: OperationType,
    ty: OperandType,
    dims: &[u32],
    axes: &[i32],
    keep: bool,
    od: &[u32],
) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let a = b.i32c(&[axes.len() as u32], axes);
    let k = b.boolean(keep);
    let o = b.output(ty, od);
    b.op(op, &[x, a, k], &[o]);
    b.g
}

fn reduce_f32(
    op: OperationType,
    dims: &[u32],
    axes: &[i32],
    keep: bool,
    x: &[f32],
) -> (Vec<f32>, Vec<u32>) {
    let g = reduce_graph(op, T::TensorFloat32, dims, axes, keep, &[]);
    let (o, d) = run1(g, &[fb(x)]);
    (bf(&o), d)
}

const M23: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];

// ---------------------------------------------------------------- REDUCE_SUM

#[test]
fn reduce_sum_over_last_axis_drops_it() {
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 3], &[1], false, &M23);
    assert_eq!(d, vec![2]);
    close(&o, &[6.0, 15.0]);
}

#[test]
fn reduce_sum_negative_axis_with_keep_dims_keeps_a_one() {
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 3], &[-1], true, &M23);
    assert_eq!(d, vec![2, 1]);
    close(&o, &[6.0, 15.0]);
}

#[test]
fn reduce_sum_over_first_axis() {
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 3], &[0], false, &M23);
    assert_eq!(d, vec![3]);
    close(&o, &[5.0, 7.0, 9.0]);
}

#[test]
fn reduce_sum_repeated_axes_reduce_once() {
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 3], &[0, 0, -2], false, &M23);
    assert_eq!(d, vec![3]);
    close(&o, &[5.0, 7.0, 9.0]);
}

#[test]
fn reduce_sum_of_every_axis_gives_shape_one() {
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 3], &[0, 1], false, &M23);
    assert_eq!(d, vec![1]);
    close(&o, &[21.0]);
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 3], &[1, 0], true, &M23);
    assert_eq!(d, vec![1, 1]);
    close(&o, &[21.0]);
}

#[test]
fn reduce_sum_4d_over_inner_and_outer_axes() {
    // x[a][b][c][d] = 8a + 4b + 2c + d over [2, 2, 2, 2]; reduce axes 1 and 3.
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let (o, d) = reduce_f32(O::ReduceSum, &[2, 2, 2, 2], &[1, 3], false, &x);
    assert_eq!(d, vec![2, 2]);
    // out[a][c] = sum over b, d of 8a + 4b + 2c + d = 4·(8a + 2c) + 2·4 + 2·1
    close(&o, &[10.0, 18.0, 42.0, 50.0]);
}

#[test]
fn reduce_sum_float16() {
    let g = reduce_graph(O::ReduceSum, T::TensorFloat16, &[2, 3], &[1], false, &[2]);
    let (o, d) = run1(g, &[f16_bytes(&[0.5, 0.25, 0.125, 1.0, 2.0, 4.0])]);
    assert_eq!(d, vec![2]);
    assert_eq!(f16_vals(&o), vec![0.875, 7.0]);
}

#[test]
fn reduce_sum_axes_given_at_execution() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let a = b.input(T::TensorInt32, &[1]);
    let k = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::ReduceSum, &[x, a, k], &[o]);
    let (o, d) = run1(b.g, &[fb(&M23), i32_bytes(&[-2])]);
    assert_eq!(d, vec![3]);
    close(&bf(&o), &[5.0, 7.0, 9.0]);
}

// ---------------------------------------------------------------- REDUCE_MAX / MIN

#[test]
fn reduce_max_and_min_float32() {
    let x = [-1.0, -5.0, 3.0, 2.0, -7.0, 0.5];
    let (o, d) = reduce_f32(O::ReduceMax, &[2, 3], &[1], false, &x);
    assert_eq!(d, vec![2]);
    close(&o, &[3.0, 2.0]);
    let (o, _) = reduce_f32(O::ReduceMin, &[2, 3], &[1], false, &x);
    close(&o, &[-5.0, -7.0]);
    let (o, _) = reduce_f32(O::ReduceMax, &[2, 3], &[0], false, &x);
    close(&o, &[2.0, -5.0, 3.0]);
}

#[test]
fn reduce_max_of_all_negative_values() {
    let (o, _) = reduce_f32(O::ReduceMax, &[3], &[0], false, &[-3e38, -1e38, -2e38]);
    close(&o, &[-1e38]);
}

#[test]
fn reduce_max_and_min_float16() {
    let x = [-1.0, -5.0, 3.0, 2.0, -7.0, 0.5];
    let g = reduce_graph(
        O::ReduceMax,
        T::TensorFloat16,
        &[2, 3],
        &[-1],
        true,
        &[2, 1],
    );
    let (o, d) = run1(g, &[f16_bytes(&x)]);
    assert_eq!(d, vec![2, 1]);
    assert_eq!(f16_vals(&o), vec![3.0, 2.0]);
    let g = reduce_graph(
        O::ReduceMin,
        T::TensorFloat16,
        &[2, 3],
        &[-1],
        true,
        &[2, 1],
    );
    let (o, _) = run1(g, &[f16_bytes(&x)]);
    assert_eq!(f16_vals(&o), vec![-5.0, -7.0]);
}

fn q(mut g: Graph, scale: f32, zp: i32) -> Graph {
    for o in &mut g.operands {
        if o.ty.is_quantized() {
            o.scale = scale;
            o.zero_point = zp;
        }
    }
    g
}

#[test]
fn reduce_max_and_min_quant8_asymm_keep_the_quantization() {
    let x = vec![10u8, 200, 30, 0, 255, 7];
    let g = q(
        reduce_graph(
            O::ReduceMax,
            T::TensorQuant8Asymm,
            &[2, 3],
            &[1],
            false,
            &[2],
        ),
        0.5,
        100,
    );
    let (o, _) = run1(g, std::slice::from_ref(&x));
    assert_eq!(o, vec![200, 255]);
    let g = q(
        reduce_graph(
            O::ReduceMin,
            T::TensorQuant8Asymm,
            &[2, 3],
            &[1],
            false,
            &[2],
        ),
        0.5,
        100,
    );
    let (o, _) = run1(g, &[x]);
    assert_eq!(o, vec![10, 0]);
}

#[test]
fn reduce_max_and_min_quant8_asymm_signed() {
    let x = i8_bytes(&[-128, 5, -3, 127, -100, 0]);
    let g = q(
        reduce_graph(
            O::ReduceMax,
            T::TensorQuant8AsymmSigned,
            &[3, 2],
            &[0],
            false,
            &[2],
        ),
        0.1,
        -5,
    );
    let (o, _) = run1(g, std::slice::from_ref(&x));
    assert_eq!(i8_vals(&o), vec![-3, 127]);
    let g = q(
        reduce_graph(
            O::ReduceMin,
            T::TensorQuant8AsymmSigned,
            &[3, 2],
            &[0],
            false,
            &[2],
        ),
        0.1,
        -5,
    );
    let (o, _) = run1(g, &[x]);
    assert_eq!(i8_vals(&o), vec![-128, 0]);
}

// ---------------------------------------------------------------- REDUCE_PROD

#[test]
fn reduce_prod_float32() {
    let (o, d) = reduce_f32(O::ReduceProd, &[2, 3], &[1], false, &M23);
    assert_eq!(d, vec![2]);
    close(&o, &[6.0, 120.0]);
}

#[test]
fn reduce_prod_zero_times_infinity_is_zero() {
    let (o, _) = reduce_f32(O::ReduceProd, &[3], &[0], false, &[f32::INFINITY, 0.0, 2.0]);
    assert_eq!(o, vec![0.0]);
}

#[test]
fn reduce_prod_float16() {
    let g = reduce_graph(O::ReduceProd, T::TensorFloat16, &[2, 2], &[0], false, &[2]);
    let (o, _) = run1(g, &[f16_bytes(&[0.5, -3.0, 6.0, 2.0])]);
    assert_eq!(f16_vals(&o), vec![3.0, -6.0]);
}

// ---------------------------------------------------------------- REDUCE_ANY / ALL

#[test]
fn reduce_any_and_all_on_bool8() {
    let x = vec![0u8, 1, 0, 1, 1, 1];
    let g = reduce_graph(O::ReduceAny, T::TensorBool8, &[2, 3], &[1], false, &[2]);
    assert_eq!(run1(g, std::slice::from_ref(&x)).0, vec![1, 1]);
    let g = reduce_graph(O::ReduceAll, T::TensorBool8, &[2, 3], &[1], false, &[2]);
    assert_eq!(run1(g, std::slice::from_ref(&x)).0, vec![0, 1]);
    let g = reduce_graph(O::ReduceAny, T::TensorBool8, &[2, 3], &[0], false, &[3]);
    assert_eq!(run1(g, std::slice::from_ref(&x)).0, vec![1, 1, 1]);
    let g = reduce_graph(O::ReduceAll, T::TensorBool8, &[2, 3], &[0], true, &[1, 3]);
    assert_eq!(run1(g, &[x]).0, vec![0, 1, 0]);
}

#[test]
fn reduce_any_of_all_false_is_false_and_nonzero_counts_as_true() {
    let g = reduce_graph(O::ReduceAny, T::TensorBool8, &[3], &[0], false, &[1]);
    assert_eq!(run1(g, &[vec![0, 0, 0]]).0, vec![0]);
    let g = reduce_graph(O::ReduceAll, T::TensorBool8, &[3], &[0], false, &[1]);
    assert_eq!(run1(g, &[vec![2, 7, 1]]).0, vec![1]);
}

// ---------------------------------------------------------------- REDUCE_* errors

#[test]
fn reduce_with_two_inputs_is_refused() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let a = b.i32c(&[1], &[0]);
    let o = b.output(T::TensorFloat32, &[1]);
    b.op(O::ReduceSum, &[x, a], &[o]);
    assert!(refused(b.g).contains("inputs given"));
}

#[test]
fn reduce_axes_of_wrong_type_is_refused() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let a = b.int(0);
    let k = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[1]);
    b.op(O::ReduceMax, &[x, a, k], &[o]);
    assert!(refused(b.g).contains("axes"));
}

#[test]
fn reduce_keep_dims_must_be_bool() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let a = b.i32c(&[1], &[0]);
    let k = b.int(0);
    let o = b.output(T::TensorFloat32, &[1]);
    b.op(O::ReduceSum, &[x, a, k], &[o]);
    assert!(refused(b.g).contains("keep_dims"));
}

#[test]
fn reduce_axes_must_be_1d() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let a = b.i32c(&[1, 1], &[0]);
    let k = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::ReduceSum, &[x, a, k], &[o]);
    assert!(refused(b.g).contains("1-D"));
}

#[test]
fn reduce_sum_on_quant8_is_refused() {
    let g = q(
        reduce_graph(O::ReduceSum, T::TensorQuant8Asymm, &[2], &[0], false, &[1]),
        1.0,
        0,
    );
    assert!(refused(g).contains("TENSOR_QUANT8_ASYMM"));
}

#[test]
fn reduce_prod_on_int32_is_refused() {
    let g = reduce_graph(O::ReduceProd, T::TensorInt32, &[2], &[0], false, &[1]);
    assert!(refused(g).contains("TENSOR_INT32"));
}

#[test]
fn reduce_any_on_float_is_refused() {
    let g = reduce_graph(O::ReduceAny, T::TensorFloat32, &[2], &[0], false, &[1]);
    assert!(refused(g).contains("TENSOR_FLOAT32"));
}

#[test]
fn reduce_output_type_must_match_input() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let a = b.i32c(&[1], &[0]);
    let k = b.boolean(false);
    let o = b.output(T::TensorFloat16, &[1]);
    b.op(O::ReduceMin, &[x, a, k], &[o]);
    assert!(refused(b.g).contains("output type"));
}

#[test]
fn reduce_max_quantized_output_must_keep_input_quantization() {
    let mut g = q(
        reduce_graph(O::ReduceMax, T::TensorQuant8Asymm, &[2], &[0], false, &[1]),
        0.5,
        3,
    );
    let out = g.output_indexes[0] as usize;
    g.operands[out].scale = 0.25;
    assert!(refused(g).contains("scale and zero point"));
}

#[test]
fn reduce_rank_above_4_is_refused() {
    let g = reduce_graph(
        O::ReduceSum,
        T::TensorFloat32,
        &[1, 1, 1, 1, 2],
        &[0],
        false,
        &[],
    );
    assert!(refused(g).contains("rank 5"));
}

#[test]
fn reduce_constant_axis_out_of_range_is_refused() {
    let g = reduce_graph(O::ReduceSum, T::TensorFloat32, &[2, 3], &[2], false, &[]);
    assert!(refused(g).contains("axis 2 is outside [-2, 2)"));
    let g = reduce_graph(O::ReduceSum, T::TensorFloat32, &[2, 3], &[-3], false, &[]);
    assert!(refused(g).contains("axis -3"));
}

#[test]
fn reduce_axis_out_of_range_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let a = b.input(T::TensorInt32, &[1]);
    let k = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::ReduceSum, &[x, a, k], &[o]);
    let m = exec_error(b.g, &[fb(&M23), i32_bytes(&[5])]);
    assert!(m.contains("axis 5 out of range for rank 2"), "{m}");
}

#[test]
fn reduce_rank_above_4_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[0, 0, 0, 0, 0]);
    // An unknown rank in the model: the rank is only known at execution.
    b.g.operands[x as usize].dimensions.clear();
    let a = b.i32c(&[1], &[0]);
    let k = b.boolean(false);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::ReduceSum, &[x, a, k], &[o]);
    let p = PreparedGraph::new(b.g).expect("prepares");
    let data = fb(&[1.0; 2]);
    let args = [InputArg::Value {
        data: &data,
        dimensions: vec![1, 1, 1, 1, 2],
    }];
    let mut out = [0u8; 64];
    let r = p.execute(&[], &args, &mut [&mut out[..]]);
    assert!(
        matches!(&r, Err(ExecError::InvalidArgument(m)) if m.contains("rank 5 is above 4")),
        "{r:?}"
    );
}

// ---------------------------------------------------------------- ARGMAX / ARGMIN

fn arg_graph(op: OperationType, ty: OperandType, dims: &[u32], axis: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let a = b.int(axis);
    let o = b.output(T::TensorInt32, &[]);
    b.op(op, &[x, a], &[o]);
    b.g
}

#[test]
fn argmax_and_argmin_float32_along_each_axis() {
    let x = fb(&[1.0, 9.0, 3.0, 7.0, 2.0, 8.0]);
    let (o, d) = run1(
        arg_graph(O::Argmax, T::TensorFloat32, &[2, 3], 1),
        std::slice::from_ref(&x),
    );
    assert_eq!(d, vec![2]);
    assert_eq!(i32_vals(&o), vec![1, 2]);
    let (o, d) = run1(
        arg_graph(O::Argmax, T::TensorFloat32, &[2, 3], 0),
        std::slice::from_ref(&x),
    );
    assert_eq!(d, vec![3]);
    assert_eq!(i32_vals(&o), vec![1, 0, 1]);
    let (o, _) = run1(
        arg_graph(O::Argmin, T::TensorFloat32, &[2, 3], -1),
        std::slice::from_ref(&x),
    );
    assert_eq!(i32_vals(&o), vec![0, 1]);
    let (o, _) = run1(arg_graph(O::Argmin, T::TensorFloat32, &[2, 3], -2), &[x]);
    assert_eq!(i32_vals(&o), vec![0, 1, 0]);
}

#[test]
fn argmax_ties_pick_the_first_index() {
    let x = fb(&[4.0, 1.0, 4.0, 4.0]);
    let (o, _) = run1(arg_graph(O::Argmax, T::TensorFloat32, &[4], 0), &[x]);
    assert_eq!(i32_vals(&o), vec![0]);
    let x = fb(&[3.0, 1.0, 1.0, 5.0]);
    let (o, _) = run1(arg_graph(O::Argmin, T::TensorFloat32, &[4], 0), &[x]);
    assert_eq!(i32_vals(&o), vec![1]);
}

#[test]
fn argmax_of_a_vector_has_shape_one() {
    let (o, d) = run1(
        arg_graph(O::Argmax, T::TensorFloat32, &[3], 0),
        &[fb(&[0.0, 2.0, 1.0])],
    );
    assert_eq!(d, vec![1]);
    assert_eq!(i32_vals(&o), vec![1]);
}

#[test]
fn argmax_argmin_float16_and_int32() {
    let (o, _) = run1(
        arg_graph(O::Argmax, T::TensorFloat16, &[2, 2], 1),
        &[f16_bytes(&[0.5, -0.5, -2.0, 3.0])],
    );
    assert_eq!(i32_vals(&o), vec![0, 1]);
    let (o, _) = run1(
        arg_graph(O::Argmin, T::TensorInt32, &[2, 2], 1),
        &[i32_bytes(&[i32::MIN, i32::MAX, 5, -5])],
    );
    assert_eq!(i32_vals(&o), vec![0, 1]);
}

#[test]
fn argmax_argmin_quant8_compare_stored_values() {
    let g = q(
        arg_graph(O::Argmax, T::TensorQuant8Asymm, &[1, 4], 1),
        0.5,
        128,
    );
    assert_eq!(i32_vals(&run1(g, &[vec![0, 255, 129, 128]]).0), vec![1]);
    let g = q(
        arg_graph(O::Argmin, T::TensorQuant8AsymmSigned, &[1, 4], 1),
        0.5,
        0,
    );
    assert_eq!(
        i32_vals(&run1(g, &[i8_bytes(&[3, -128, 127, -128])]).0),
        vec![1]
    );
}

#[test]
fn argmax_3d_middle_axis() {
    // [2, 3, 2]: out[a][c] = argmax over b
    let x = fb(&[0.0, 5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 0.0, 8.0, 1.0, 7.0, 2.0]);
    let (o, d) = run1(arg_graph(O::Argmax, T::TensorFloat32, &[2, 3, 2], 1), &[x]);
    assert_eq!(d, vec![2, 2]);
    assert_eq!(i32_vals(&o), vec![2, 0, 0, 2]);
}

#[test]
fn argmax_constant_axis_out_of_range_is_refused() {
    assert!(refused(arg_graph(O::Argmax, T::TensorFloat32, &[2, 3], 2)).contains("axis 2"));
    assert!(refused(arg_graph(O::Argmin, T::TensorFloat32, &[2, 3], -3)).contains("axis -3"));
}

#[test]
fn argmax_axis_out_of_range_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let a = b.input(T::Int32, &[]);
    let o = b.output(T::TensorInt32, &[]);
    b.op(O::Argmax, &[x, a], &[o]);
    let m = exec_error(b.g, &[fb(&M23), i32_bytes(&[7])]);
    assert!(m.contains("axis 7 out of range"), "{m}");
}

#[test]
fn argmax_output_must_be_int32() {
    let mut g = arg_graph(O::Argmax, T::TensorFloat32, &[2, 3], 1);
    let out = g.output_indexes[0] as usize;
    g.operands[out].ty = T::TensorFloat32;
    assert!(refused(g).contains("TENSOR_FLOAT32"));
}

#[test]
fn argmax_on_bool_is_refused() {
    assert!(refused(arg_graph(O::Argmax, T::TensorBool8, &[2], 0)).contains("TENSOR_BOOL8"));
}

#[test]
fn argmin_axis_must_be_int32_scalar() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let a = b.float(0.0);
    let o = b.output(T::TensorInt32, &[]);
    b.op(O::Argmin, &[x, a], &[o]);
    assert!(refused(b.g).contains("axis"));
}

// ---------------------------------------------------------------- TOPK_V2

fn topk_graph(ty: OperandType, dims: &[u32], k: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let kk = b.int(k);
    let v = b.output(ty, &[]);
    let i = b.output(T::TensorInt32, &[]);
    b.op(O::TopkV2, &[x, kk], &[v, i]);
    b.g
}

#[test]
fn topk_float32_rows_sorted_descending_with_indices() {
    let x = fb(&[1.0, 4.0, 3.0, 2.0, -1.0, -4.0, 0.5, 9.0]);
    let outs = run_outputs(topk_graph(T::TensorFloat32, &[2, 4], 2), &[x]).unwrap();
    assert_eq!(outs[0].1, vec![2, 2]);
    assert_eq!(outs[1].1, vec![2, 2]);
    close(&bf(&outs[0].0), &[4.0, 3.0, 9.0, 0.5]);
    assert_eq!(i32_vals(&outs[1].0), vec![1, 2, 3, 2]);
}

#[test]
fn topk_equal_values_put_the_larger_index_first() {
    let x = fb(&[5.0, 7.0, 5.0, 7.0, 5.0]);
    let outs = run_outputs(topk_graph(T::TensorFloat32, &[5], 4), &[x]).unwrap();
    close(&bf(&outs[0].0), &[7.0, 7.0, 5.0, 5.0]);
    assert_eq!(i32_vals(&outs[1].0), vec![3, 1, 4, 2]);
}

#[test]
fn topk_with_k_equal_to_the_row_sorts_it() {
    let x = i32_bytes(&[3, -2, 10]);
    let outs = run_outputs(topk_graph(T::TensorInt32, &[3], 3), &[x]).unwrap();
    assert_eq!(i32_vals(&outs[0].0), vec![10, 3, -2]);
    assert_eq!(i32_vals(&outs[1].0), vec![2, 0, 1]);
}

#[test]
fn topk_float16() {
    let outs = run_outputs(
        topk_graph(T::TensorFloat16, &[1, 3], 1),
        &[f16_bytes(&[0.25, -8.0, 0.5])],
    )
    .unwrap();
    assert_eq!(outs[0].1, vec![1, 1]);
    assert_eq!(f16_vals(&outs[0].0), vec![0.5]);
    assert_eq!(i32_vals(&outs[1].0), vec![2]);
}

#[test]
fn topk_quant8_values_keep_the_input_quantization() {
    let g = q(topk_graph(T::TensorQuant8Asymm, &[4], 2), 0.5, 10);
    let outs = run_outputs(g, &[vec![3, 200, 17, 200]]).unwrap();
    assert_eq!(outs[0].0, vec![200, 200]);
    assert_eq!(i32_vals(&outs[1].0), vec![3, 1]);
    let g = q(topk_graph(T::TensorQuant8AsymmSigned, &[4], 3), 0.5, -10);
    let outs = run_outputs(g, &[i8_bytes(&[-128, 127, 0, -5])]).unwrap();
    assert_eq!(i8_vals(&outs[0].0), vec![127, 0, -5]);
    assert_eq!(i32_vals(&outs[1].0), vec![1, 2, 3]);
}

#[test]
fn topk_k_zero_is_refused() {
    assert!(refused(topk_graph(T::TensorFloat32, &[3], 0)).contains("k must be > 0"));
}

#[test]
fn topk_k_above_last_dimension_is_refused() {
    assert!(
        refused(topk_graph(T::TensorFloat32, &[2, 3], 4))
            .contains("larger than the last dimension")
    );
}

#[test]
fn topk_k_above_last_dimension_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let k = b.input(T::Int32, &[]);
    let v = b.output(T::TensorFloat32, &[]);
    let i = b.output(T::TensorInt32, &[]);
    b.op(O::TopkV2, &[x, k], &[v, i]);
    let m = exec_error(b.g, &[fb(&M23), i32_bytes(&[4])]);
    assert!(m.contains("k 4 is larger than the last dimension 3"), "{m}");
}

#[test]
fn topk_negative_k_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let k = b.input(T::Int32, &[]);
    let v = b.output(T::TensorFloat32, &[]);
    let i = b.output(T::TensorInt32, &[]);
    b.op(O::TopkV2, &[x, k], &[v, i]);
    let m = exec_error(b.g, &[fb(&[1.0, 2.0, 3.0]), i32_bytes(&[-1])]);
    assert!(m.contains("k must be > 0"), "{m}");
}

#[test]
fn topk_needs_two_outputs() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let k = b.int(1);
    let v = b.output(T::TensorFloat32, &[]);
    b.op(O::TopkV2, &[x, k], &[v]);
    assert!(refused(b.g).contains("outputs given"));
}

#[test]
fn topk_indices_output_must_be_int32() {
    let mut g = topk_graph(T::TensorFloat32, &[3], 1);
    let i = g.output_indexes[1] as usize;
    g.operands[i].ty = T::TensorFloat32;
    assert!(refused(g).contains("indices"));
}

#[test]
fn topk_values_must_keep_the_input_quantization() {
    let mut g = q(topk_graph(T::TensorQuant8Asymm, &[3], 1), 0.5, 10);
    let v = g.output_indexes[0] as usize;
    g.operands[v].zero_point = 11;
    assert!(refused(g).contains("scale and zero point"));
}

#[test]
fn topk_on_bool_is_refused() {
    assert!(refused(topk_graph(T::TensorBool8, &[3], 1)).contains("TENSOR_BOOL8"));
}

// ---------------------------------------------------------------- LOG_SOFTMAX

fn log_softmax_graph(ty: OperandType, dims: &[u32], beta: f32, axis: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let be = if ty == T::TensorFloat16 {
        b.konst(T::Float16, &[], f32_to_f16(beta).to_le_bytes().to_vec())
    } else {
        b.float(beta)
    };
    let a = b.int(axis);
    let o = b.output(ty, dims);
    b.op(O::LogSoftmax, &[x, be, a], &[o]);
    b.g
}

#[test]
fn log_softmax_float32_last_axis() {
    // log_softmax([1, 2, 3]) = x - 3 - ln(e^-2 + e^-1 + 1) = x - 3.4076059644
    let g = log_softmax_graph(T::TensorFloat32, &[2, 3], 1.0, -1);
    let (o, _) = run_f32(g, &[&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]]);
    let l3 = -(3f32).ln();
    close(&o, &[-2.407_606, -1.407_606, -0.407_606, l3, l3, l3]);
}

#[test]
fn log_softmax_beta_scales_the_logits_along_axis_0() {
    // beta 0.5 on [0, 2 ln 3] gives logits [0, ln 3]: [-ln 4, ln 3 - ln 4].
    let g = log_softmax_graph(T::TensorFloat32, &[2, 1], 0.5, 0);
    let (o, _) = run_f32(g, &[&[0.0, 2.0 * 3f32.ln()]]);
    close(&o, &[-1.386_294_4, -0.287_682_1]);
}

#[test]
fn log_softmax_negative_beta_and_large_values_stay_finite() {
    let g = log_softmax_graph(T::TensorFloat32, &[2], -1.0, 0);
    let (o, _) = run_f32(g, &[&[1000.0, 1001.0]]);
    // logits [-1000, -1001]: [-ln(1 + e^-1), -1 - ln(1 + e^-1)]
    close(&o, &[-0.313_261_7, -1.313_261_7]);
}

#[test]
fn log_softmax_float16_takes_a_float16_beta() {
    let g = log_softmax_graph(T::TensorFloat16, &[2], 1.0, 0);
    let (o, _) = run1(g, &[f16_bytes(&[1.0, 1.0])]);
    let got = f16_vals(&o);
    assert!(
        got.iter()
            .all(|&v| (v + std::f32::consts::LN_2).abs() < 1e-3),
        "{got:?}"
    );
}

#[test]
fn log_softmax_beta_type_must_match_the_tensor() {
    let mut g = log_softmax_graph(T::TensorFloat16, &[2], 1.0, 0);
    // Swap the FLOAT16 beta for a FLOAT32 one.
    let mut b = B { g: g.clone() };
    let be = b.float(1.0);
    g = b.g;
    g.operations[0].inputs[1] = be;
    assert!(refused(g).contains("beta"));
}

#[test]
fn log_softmax_constant_axis_out_of_range_is_refused() {
    let g = log_softmax_graph(T::TensorFloat32, &[2, 3], 1.0, 2);
    assert!(refused(g).contains("axis 2"));
}

#[test]
fn log_softmax_on_quant8_is_refused() {
    let g = q(
        log_softmax_graph(T::TensorQuant8Asymm, &[2], 1.0, 0),
        0.5,
        0,
    );
    assert!(refused(g).contains("TENSOR_QUANT8_ASYMM"));
}

#[test]
fn log_softmax_axis_out_of_range_at_execution_fails() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let be = b.float(1.0);
    let a = b.input(T::Int32, &[]);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::LogSoftmax, &[x, be, a], &[o]);
    let m = exec_error(b.g, &[fb(&[1.0, 2.0]), i32_bytes(&[-2])]);
    assert!(m.contains("axis -2 out of range"), "{m}");
}

// ---------------------------------------------------------------- declared output shapes

#[test]
fn reduce_declared_output_shape_must_match_the_reduction() {
    let g = reduce_graph(O::ReduceSum, T::TensorFloat32, &[2, 3], &[1], false, &[3]);
    assert!(refused(g).contains("output 0 is declared [3], the operation produces [2]"));
    let g = reduce_graph(O::ReduceMax, T::TensorFloat32, &[2, 3], &[1], true, &[2]);
    assert!(refused(g).contains("produces [2, 1]"));
    // An unknown extent in the declaration is fine.
    let g = reduce_graph(O::ReduceMin, T::TensorFloat32, &[2, 3], &[0], true, &[1, 0]);
    assert!(PreparedGraph::new(g).is_ok());
}

#[test]
fn argmax_declared_output_shape_must_drop_the_axis() {
    let mut g = arg_graph(O::Argmax, T::TensorFloat32, &[2, 3], 1);
    let o = g.output_indexes[0] as usize;
    g.operands[o].dimensions = vec![3];
    assert!(refused(g).contains("produces [2]"));
}

#[test]
fn topk_declared_output_shapes_must_end_in_k() {
    let mut g = topk_graph(T::TensorFloat32, &[2, 3], 2);
    let v = g.output_indexes[0] as usize;
    g.operands[v].dimensions = vec![2, 3];
    assert!(refused(g).contains("output 0 is declared [2, 3], the operation produces [2, 2]"));
    let mut g = topk_graph(T::TensorFloat32, &[2, 3], 2);
    let i = g.output_indexes[1] as usize;
    g.operands[i].dimensions = vec![2, 1];
    assert!(refused(g).contains("output 1 is declared [2, 1]"));
}

#[test]
fn log_softmax_declared_output_shape_must_be_the_input_shape() {
    let mut g = log_softmax_graph(T::TensorFloat32, &[2, 3], 1.0, 1);
    let o = g.output_indexes[0] as usize;
    g.operands[o].dimensions = vec![3, 2];
    assert!(refused(g).contains("output 0 is declared [3, 2]"));
}

#[test]
fn topk_rank3_rows_are_the_last_dimension() {
    // [2, 1, 3]: rows [3, 1, 2] and [0, 0, -1]
    let x = i32_bytes(&[3, 1, 2, 0, 0, -1]);
    let outs = run_outputs(topk_graph(T::TensorInt32, &[2, 1, 3], 2), &[x]).unwrap();
    assert_eq!(outs[0].1, vec![2, 1, 2]);
    assert_eq!(i32_vals(&outs[0].0), vec![3, 2, 0, 0]);
    assert_eq!(i32_vals(&outs[1].0), vec![0, 2, 1, 0]);
}

// ---------------------------------------------------------------- hostile arguments

#[test]
fn extreme_axis_values_are_refused_without_overflow() {
    let g = reduce_graph(
        O::ReduceSum,
        T::TensorFloat32,
        &[2],
        &[i32::MIN],
        false,
        &[],
    );
    assert!(refused(g).contains("axis -2147483648"));
    let g = reduce_graph(O::ReduceAny, T::TensorBool8, &[2], &[i32::MAX], false, &[]);
    assert!(refused(g).contains("axis 2147483647"));
    assert!(refused(arg_graph(O::Argmin, T::TensorInt32, &[2], i32::MIN)).contains("axis"));
    let g = log_softmax_graph(T::TensorFloat32, &[2], 1.0, i32::MAX);
    assert!(refused(g).contains("axis"));
}

#[test]
fn extreme_k_at_execution_fails_cleanly() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let k = b.input(T::Int32, &[]);
    let v = b.output(T::TensorFloat32, &[]);
    let i = b.output(T::TensorInt32, &[]);
    b.op(O::TopkV2, &[x, k], &[v, i]);
    let m = exec_error(b.g.clone(), &[fb(&[1.0, 2.0, 3.0]), i32_bytes(&[i32::MAX])]);
    assert!(m.contains("larger than the last dimension"), "{m}");
    let m = exec_error(b.g, &[fb(&[1.0, 2.0, 3.0]), i32_bytes(&[i32::MIN])]);
    assert!(m.contains("k must be > 0"), "{m}");
}

#[test]
fn extreme_axes_at_execution_fail_cleanly() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let a = b.input(T::TensorInt32, &[2]);
    let k = b.boolean(true);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::ReduceProd, &[x, a, k], &[o]);
    let m = exec_error(b.g, &[fb(&M23), i32_bytes(&[0, i32::MIN])]);
    assert!(m.contains("out of range for rank 2"), "{m}");
}
