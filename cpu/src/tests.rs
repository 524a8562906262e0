//! Unit tests: golden values per operation, interpreter behaviour, validation rules.
#![allow(clippy::useless_vec, clippy::panic)]

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

fn binary_graph(op: OperationType, ad: &[u32], bd: &[u32], od: &[u32], act: i32) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, ad);
    let y = b.input(T::TensorFloat32, bd);
    let a = b.int(act);
    let o = b.output(T::TensorFloat32, od);
    b.op(op, &[x, y, a], &[o]);
    b.g
}

// ---------------------------------------------------------------- codes and names

#[test]
fn operation_codes_and_names_round_trip() {
    for &op in OperationType::ALL {
        assert_eq!(OperationType::from_code(op.code()), Some(op));
        assert_eq!(OperationType::from_name(op.name()), Some(op));
    }
    assert_eq!(OperationType::ALL.len(), 102);
    assert_eq!(O::Conv2d.code(), 3);
    assert_eq!(O::Quantize.code(), 72);
    assert_eq!(O::Rank.code(), 101);
    assert_eq!(O::Transpose.name(), "TRANSPOSE");
    assert_eq!(OperationType::from_code(102), None);
}

#[test]
fn operand_codes_names_and_sizes() {
    for &t in OperandType::ALL {
        assert_eq!(OperandType::from_code(t.code()), Some(t));
        assert_eq!(OperandType::from_name(t.name()), Some(t));
    }
    assert_eq!(T::TensorQuant8AsymmSigned.code(), 14);
    assert_eq!(T::Bool.element_size(), 1);
    assert_eq!(T::Float16.element_size(), 2);
    assert_eq!(T::TensorFloat32.element_size(), 4);
    assert!(T::Uint32.is_scalar() && !T::TensorInt32.is_scalar());
    assert_eq!(T::TensorFloat32.name(), "TENSOR_FLOAT32");
}

#[test]
fn prepared_graph_is_send_and_sync() {
    fn check<X: Send + Sync>() {}
    check::<PreparedGraph>();
}

// ---------------------------------------------------------------- elementwise

#[test]
fn add_same_shape() {
    let g = binary_graph(O::Add, &[2, 2], &[2, 2], &[2, 2], 0);
    let (o, d) = run_f32(g, &[&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 30.0, 40.0]]);
    assert_eq!(d, vec![2, 2]);
    close(&o, &[11.0, 22.0, 33.0, 44.0]);
}

#[test]
fn add_broadcasts_row_over_matrix_with_relu() {
    let g = binary_graph(O::Add, &[2, 3], &[3], &[2, 3], 1);
    let (o, d) = run_f32(g, &[&[1.0, -2.0, 3.0, -4.0, 5.0, -6.0], &[1.0, 1.0, 1.0]]);
    assert_eq!(d, vec![2, 3]);
    close(&o, &[2.0, 0.0, 4.0, 0.0, 6.0, 0.0]);
}

#[test]
fn mul_broadcasts_column_against_row() {
    let g = binary_graph(O::Mul, &[2, 1], &[1, 3], &[2, 3], 0);
    let (o, d) = run_f32(g, &[&[2.0, 3.0], &[1.0, 10.0, 100.0]]);
    assert_eq!(d, vec![2, 3]);
    close(&o, &[2.0, 20.0, 200.0, 3.0, 30.0, 300.0]);
}

#[test]
fn sub_with_relu1_clamps_to_unit_range() {
    let g = binary_graph(O::Sub, &[4], &[4], &[4], 2);
    let (o, _) = run_f32(g, &[&[5.0, 0.5, -0.25, -3.0], &[0.0; 4]]);
    close(&o, &[1.0, 0.5, -0.25, -1.0]);
}

#[test]
fn div_with_relu6_and_size_one_extents() {
    let g = binary_graph(O::Div, &[1, 1, 3], &[1], &[1, 1, 3], 3);
    let (o, d) = run_f32(g, &[&[-4.0, 4.0, 40.0], &[2.0]]);
    assert_eq!(d, vec![1, 1, 3]);
    close(&o, &[0.0, 2.0, 6.0]);
}

#[test]
fn add_with_incompatible_shapes_fails() {
    let g = binary_graph(O::Add, &[2], &[3], &[0], 0);
    let p = PreparedGraph::new(g).unwrap();
    let a = fb(&[1.0, 2.0]);
    let c = fb(&[1.0, 2.0, 3.0]);
    let mut out = vec![0u8; 64];
    let r = p.execute(
        &[],
        &[
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
            InputArg::Value {
                data: &c,
                dimensions: vec![],
            },
        ],
        &mut [&mut out[..]],
    );
    assert!(matches!(r, Err(ExecError::InvalidArgument(_))), "{r:?}");
}

#[test]
fn int32_div_floors_toward_negative_infinity() {
    let mut b = B::new();
    let x = b.input(T::TensorInt32, &[4]);
    let y = b.input(T::TensorInt32, &[4]);
    let a = b.int(0);
    let o = b.output(T::TensorInt32, &[4]);
    b.op(O::Div, &[x, y, a], &[o]);
    let (out, _) = run_bytes(
        b.g,
        &[
            (i32_bytes(&[7, -7, 7, -8]), vec![]),
            (i32_bytes(&[2, 2, -2, 2]), vec![]),
        ],
    );
    assert_eq!(i32_vals(&out), vec![3, -4, -4, -4]);
}

fn unary(op: OperationType, x: &[f32]) -> Vec<f32> {
    let mut b = B::new();
    let i = b.input(T::TensorFloat32, &[x.len() as u32]);
    let o = b.output(T::TensorFloat32, &[x.len() as u32]);
    b.op(op, &[i], &[o]);
    run_f32(b.g, &[x]).0
}

#[test]
fn relu_family_clamps() {
    let x = [-7.0, -1.5, -0.5, 0.5, 1.5, 7.0];
    close(&unary(O::Relu, &x), &[0.0, 0.0, 0.0, 0.5, 1.5, 7.0]);
    close(&unary(O::Relu1, &x), &[-1.0, -1.0, -0.5, 0.5, 1.0, 1.0]);
    close(&unary(O::Relu6, &x), &[0.0, 0.0, 0.0, 0.5, 1.5, 6.0]);
}

#[test]
fn logistic_tanh_floor_golden() {
    close(&unary(O::Logistic, &[0.0, 2.0]), &[0.5, 0.880_797_1]);
    close(&unary(O::Tanh, &[0.0, 1.0]), &[0.0, 0.761_594_2]);
    close(&unary(O::Floor, &[-1.5, 1.5, 2.0]), &[-2.0, 1.0, 2.0]);
}

#[test]
fn chained_operations_through_temporaries() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let y = b.input(T::TensorFloat32, &[3]);
    let a = b.int(0);
    let t = b.temp(T::TensorFloat32, &[3]);
    let o = b.output(T::TensorFloat32, &[3]);
    // listed out of order on purpose: the executor sorts them
    b.op(O::Relu, &[t], &[o]);
    b.op(O::Sub, &[x, y, a], &[t]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0], &[2.0, 2.0, 2.0]]);
    close(&out, &[0.0, 0.0, 1.0]);
}

// ---------------------------------------------------------------- shapes

#[test]
fn reshape_infers_minus_one() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let s = b.i32c(&[2], &[3, -1]);
    let o = b.output(T::TensorFloat32, &[0, 0]);
    b.op(O::Reshape, &[x, s], &[o]);
    let (out, d) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    assert_eq!(d, vec![3, 2]);
    close(&out, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn squeeze_all_unit_dims_when_axes_omitted() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 1]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Squeeze, &[x], &[o]);
    let (_, d) = run_f32(b.g, &[&[1.0, 2.0]]);
    assert_eq!(d, vec![2]);
}

#[test]
fn transpose_with_permutation() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let p = b.i32c(&[2], &[1, 0]);
    let o = b.output(T::TensorFloat32, &[3, 2]);
    b.op(O::Transpose, &[x, p], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    close(&out, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
}

#[test]
fn pad_adds_zeros_before_and_after() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2]);
    let p = b.i32c(&[2, 2], &[0, 1, 1, 0]);
    let o = b.output(T::TensorFloat32, &[2, 3]);
    b.op(O::Pad, &[x, p], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0]]);
    close(&out, &[0.0, 1.0, 2.0, 0.0, 0.0, 0.0]);
}

#[test]
fn concatenation_along_axis_one() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 1]);
    let y = b.input(T::TensorFloat32, &[2, 2]);
    let a = b.int(1);
    let o = b.output(T::TensorFloat32, &[2, 3]);
    b.op(O::Concatenation, &[x, y, a], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0], &[3.0, 4.0, 5.0, 6.0]]);
    close(&out, &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
}

#[test]
fn mean_over_axes_with_and_without_keep_dims() {
    for (keep, want) in [(1, vec![1, 1, 2]), (0, vec![2])] {
        let mut b = B::new();
        let x = b.input(T::TensorFloat32, &[1, 2, 2]);
        let ax = b.i32c(&[2], &[0, 1]);
        let k = b.int(keep);
        let o = b.output(T::TensorFloat32, &[]);
        b.op(O::Mean, &[x, ax, k], &[o]);
        let (out, d) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 6.0]]);
        assert_eq!(d, want);
        close(&out, &[2.0, 4.0]);
    }
}

#[test]
fn space_to_depth_and_back() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
    let bs = b.int(2);
    let t = b.output(T::TensorFloat32, &[1, 1, 1, 4]);
    b.op(O::SpaceToDepth, &[x, bs], &[t]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
    close(&out, &[1.0, 2.0, 3.0, 4.0]);

    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1, 1, 8]);
    let bs = b.int(2);
    let t = b.output(T::TensorFloat32, &[1, 2, 2, 2]);
    b.op(O::DepthToSpace, &[x, bs], &[t]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]);
    close(&out, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);

    // 4x4x1 → 2x2x4: each output pixel gathers one 2x2 block
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 4, 4, 1]);
    let bs = b.int(2);
    let t = b.output(T::TensorFloat32, &[1, 2, 2, 4]);
    b.op(O::SpaceToDepth, &[x, bs], &[t]);
    let v: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let (out, _) = run_f32(b.g, &[&v]);
    close(&out[..4], &[0.0, 1.0, 4.0, 5.0]);
    close(&out[4..8], &[2.0, 3.0, 6.0, 7.0]);
}

// ---------------------------------------------------------------- softmax, norms, resize

#[test]
fn softmax_with_beta() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 3]);
    let beta = b.float(2.0);
    let o = b.output(T::TensorFloat32, &[1, 3]);
    b.op(O::Softmax, &[x, beta], &[o]);
    let (out, _) = run_f32(b.g, &[&[0.0, 0.5, 1.0]]);
    let e: Vec<f32> = [0.0f32, 1.0, 2.0].iter().map(|v| v.exp()).collect();
    let s: f32 = e.iter().sum();
    close(&out, &[e[0] / s, e[1] / s, e[2] / s]);
}

#[test]
fn softmax_along_axis_zero() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let beta = b.float(1.0);
    let ax = b.int(0);
    let o = b.output(T::TensorFloat32, &[2, 2]);
    b.op(O::Softmax, &[x, beta, ax], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 5.0, 1.0, 5.0]]);
    close(&out, &[0.5, 0.5, 0.5, 0.5]);
}

#[test]
fn l2_normalization_of_last_axis() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2]);
    let o = b.output(T::TensorFloat32, &[1, 2]);
    b.op(O::L2Normalization, &[x], &[o]);
    let (out, _) = run_f32(b.g, &[&[3.0, 4.0]]);
    close(&out, &[0.6, 0.8]);
}

#[test]
fn resize_bilinear_upscales_2x2_to_3x3() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
    let w = b.int(3);
    let h = b.int(3);
    let o = b.output(T::TensorFloat32, &[1, 3, 3, 1]);
    b.op(O::ResizeBilinear, &[x, w, h], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
    close(
        &out,
        &[
            1.0,
            5.0 / 3.0,
            2.0,
            7.0 / 3.0,
            3.0,
            10.0 / 3.0,
            3.0,
            11.0 / 3.0,
            4.0,
        ],
    );
}

// ---------------------------------------------------------------- FC, conv, pools

#[test]
fn fully_connected_two_batches_with_bias() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 3]);
    let w = b.f32c(&[2, 3], &[1.0, 0.0, -1.0, 0.5, 0.5, 0.5]);
    let bias = b.f32c(&[2], &[1.0, -10.0]);
    let a = b.int(1);
    let o = b.output(T::TensorFloat32, &[2, 2]);
    b.op(O::FullyConnected, &[x, w, bias, a], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0, 6.0, 8.0]]);
    // row0: (1-3)+1 = -1 → 0 ; (3)-10 → 0 ; row1: (4-8)+1=-3 → 0 ; 9-10 → 0 ... use relu
    close(&out, &[0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn fully_connected_flattens_higher_rank_input() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2]);
    let w = b.f32c(&[1, 2], &[1.0, 2.0]);
    let bias = b.f32c(&[1], &[0.5]);
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[2, 1]);
    b.op(O::FullyConnected, &[x, w, bias, a], &[o]);
    let (out, d) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(d, vec![2, 1]);
    close(&out, &[5.5, 11.5]);
}

fn conv_graph(
    in_dims: &[u32],
    filter_dims: &[u32],
    filter: &[f32],
    bias: &[f32],
    args: &[ConvArg],
) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, in_dims);
    let f = b.f32c(filter_dims, filter);
    let bi = b.f32c(&[bias.len() as u32], bias);
    let mut ins = vec![x, f, bi];
    for a in args {
        ins.push(match a {
            ConvArg::I(v) => b.int(*v),
            ConvArg::B(v) => b.boolean(*v),
        });
    }
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Conv2d, &ins, &[o]);
    b.g
}

#[derive(Clone, Copy)]
enum ConvArg {
    I(i32),
    B(bool),
}
use ConvArg::{B as Bo, I};

const IMG3: [f32; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];

#[test]
fn conv2d_valid_padding_stride_one() {
    let g = conv_graph(
        &[1, 3, 3, 1],
        &[1, 2, 2, 1],
        &[1.0, 2.0, 3.0, 4.0],
        &[0.5],
        &[I(2), I(1), I(1), I(0)],
    );
    let (out, d) = run_f32(g, &[&IMG3]);
    assert_eq!(d, vec![1, 2, 2, 1]);
    close(&out, &[37.5, 47.5, 67.5, 77.5]);
}

#[test]
fn conv2d_same_padding_stride_two_pads_tail() {
    let g = conv_graph(
        &[1, 3, 3, 1],
        &[1, 2, 2, 1],
        &[1.0, 2.0, 3.0, 4.0],
        &[0.5],
        &[I(1), I(2), I(2), I(0)],
    );
    let (out, d) = run_f32(g, &[&IMG3]);
    assert_eq!(d, vec![1, 2, 2, 1]);
    close(&out, &[37.5, 21.5, 23.5, 9.5]);
}

#[test]
fn conv2d_explicit_padding_and_relu6() {
    // pad left 1 only; 1x1 output row per input row
    let g = conv_graph(
        &[1, 1, 2, 1],
        &[1, 1, 2, 1],
        &[1.0, 1.0],
        &[0.0],
        &[I(1), I(0), I(0), I(0), I(1), I(1), I(3)],
    );
    let (out, d) = run_f32(g, &[&[5.0, 7.0]]);
    assert_eq!(d, vec![1, 1, 2, 1]);
    close(&out, &[5.0, 6.0]);
}

#[test]
fn conv2d_dilation_two() {
    let g = conv_graph(
        &[1, 3, 3, 1],
        &[1, 2, 2, 1],
        &[1.0, 2.0, 3.0, 4.0],
        &[0.5],
        &[I(2), I(1), I(1), I(0), Bo(false), I(2), I(2)],
    );
    let (out, d) = run_f32(g, &[&IMG3]);
    assert_eq!(d, vec![1, 1, 1, 1]);
    close(&out, &[64.5]);
}

#[test]
fn conv2d_nchw_layout_matches_nhwc() {
    // 2 input channels, 2 output channels, 1x1 filter
    let filter = [1.0, 2.0, 3.0, 4.0];
    let nhwc = conv_graph(
        &[1, 1, 2, 2],
        &[2, 1, 1, 2],
        &filter,
        &[0.0, 1.0],
        &[I(2), I(1), I(1), I(0)],
    );
    let (a, _) = run_f32(nhwc, &[&[1.0, 10.0, 2.0, 20.0]]);
    close(&a, &[21.0, 44.0, 42.0, 87.0]);
    let nchw = conv_graph(
        &[1, 2, 1, 2],
        &[2, 1, 1, 2],
        &filter,
        &[0.0, 1.0],
        &[I(2), I(1), I(1), I(0), Bo(true)],
    );
    let (b, d) = run_f32(nchw, &[&[1.0, 2.0, 10.0, 20.0]]);
    assert_eq!(d, vec![1, 2, 1, 2]);
    close(&b, &[21.0, 42.0, 44.0, 87.0]);
}

fn depthwise(
    in_dims: &[u32],
    x: &[f32],
    fd: &[u32],
    f: &[f32],
    bias: &[f32],
    mult: i32,
) -> (Vec<f32>, Vec<u32>) {
    let mut b = B::new();
    let i = b.input(T::TensorFloat32, in_dims);
    let fi = b.f32c(fd, f);
    let bi = b.f32c(&[bias.len() as u32], bias);
    let pad = b.int(2);
    let s1 = b.int(1);
    let s2 = b.int(1);
    let m = b.int(mult);
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::DepthwiseConv2d, &[i, fi, bi, pad, s1, s2, m, a], &[o]);
    run_f32(b.g, &[x])
}

#[test]
fn depthwise_conv2d_with_depth_multiplier() {
    let (out, d) = depthwise(
        &[1, 2, 2, 2],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        &[1, 1, 1, 4],
        &[1.0, 2.0, 3.0, 4.0],
        &[0.0; 4],
        2,
    );
    assert_eq!(d, vec![1, 2, 2, 4]);
    close(
        &out,
        &[
            1.0, 2.0, 6.0, 8.0, 3.0, 6.0, 12.0, 16.0, 5.0, 10.0, 18.0, 24.0, 7.0, 14.0, 24.0, 32.0,
        ],
    );
    let (out, d) = depthwise(
        &[1, 2, 2, 1],
        &[1.0, 2.0, 3.0, 4.0],
        &[1, 2, 2, 2],
        &[1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0],
        &[1.0, 2.0],
        2,
    );
    assert_eq!(d, vec![1, 1, 1, 2]);
    close(&out, &[31.0, 302.0]);
}

fn pool(op: OperationType, x: &[f32], act: i32) -> Vec<f32> {
    let mut b = B::new();
    let i = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
    let args: Vec<u32> = [1, 1, 1, 2, 2, act].iter().map(|&v| b.int(v)).collect();
    let o = b.output(T::TensorFloat32, &[1, 2, 2, 1]);
    let mut ins = vec![i];
    ins.extend(args);
    b.op(op, &ins, &[o]);
    run_f32(b.g, &[x]).0
}

#[test]
fn average_pool_same_padding_counts_only_valid_elements() {
    close(
        &pool(O::AveragePool2d, &[1.0, 2.0, 3.0, 4.0], 0),
        &[2.5, 3.0, 3.5, 4.0],
    );
}

#[test]
fn max_pool_with_relu1() {
    close(&pool(O::MaxPool2d, &[1.0, 2.0, 3.0, 4.0], 0), &[4.0; 4]);
    close(
        &pool(O::MaxPool2d, &[-3.0, -2.0, -5.0, 0.5], 2),
        &[0.5, 0.5, 0.5, 0.5],
    );
}

#[test]
fn l2_pool_is_root_mean_square() {
    let out = pool(O::L2Pool2d, &[1.0, 2.0, 3.0, 4.0], 0);
    close(&out, &[7.5f32.sqrt(), 10.0f32.sqrt(), 12.5f32.sqrt(), 4.0]);
}

#[test]
fn average_pool_explicit_padding_stride_two() {
    let mut b = B::new();
    let i = b.input(T::TensorFloat32, &[1, 4, 4, 1]);
    // pads l r t b = 0, stride 2x2, filter 2x2, none
    let args: Vec<u32> = [0, 0, 0, 0, 2, 2, 2, 2, 0]
        .iter()
        .map(|&v| b.int(v))
        .collect();
    let o = b.output(T::TensorFloat32, &[1, 2, 2, 1]);
    let mut ins = vec![i];
    ins.extend(args);
    b.op(O::AveragePool2d, &ins, &[o]);
    let v: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let (out, _) = run_f32(b.g, &[&v]);
    close(&out, &[2.5, 4.5, 10.5, 12.5]);
}

// ---------------------------------------------------------------- quantized

#[test]
fn quantize_and_dequantize_round_trip() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[4]);
    let q = b.temp(T::TensorQuant8Asymm, &[4]);
    b.q(q, 0.5, 10);
    let o = b.output(T::TensorFloat32, &[4]);
    b.op(O::Quantize, &[x], &[q]);
    b.op(O::Dequantize, &[q], &[o]);
    let (out, _) = run_f32(b.g, &[&[0.0, 1.25, -100.0, 1000.0]]);
    // 1.25/0.5 = 2.5 rounds away from zero to 3 → 1.5; saturates at 0 and 255
    close(&out, &[0.0, 1.5, -5.0, 122.5]);
}

#[test]
fn quant8_add_requantizes_exactly() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[3]);
    b.q(x, 0.5, 128);
    let y = b.input(T::TensorQuant8Asymm, &[3]);
    b.q(y, 0.25, 100);
    let a = b.int(0);
    let o = b.output(T::TensorQuant8Asymm, &[3]);
    b.q(o, 1.0, 3);
    b.op(O::Add, &[x, y, a], &[o]);
    // x = [1.0, 6.0, -2.0], y = [2.0, 0.0, -10.0] → [3, 6, -12] → q = [6, 9, 0 (clamped)]
    let (out, _) = run_bytes(
        b.g,
        &[(vec![130, 140, 124], vec![]), (vec![108, 100, 60], vec![])],
    );
    assert_eq!(out, vec![6, 9, 0]);
}

/// TFLite's quantized ADD/SUB for one pair of values, written out from its reference kernel's
/// steps (left shift 20, each input rescaled to twice the larger scale, the sum to the output).
fn tflite_quant_add(
    x: i32,
    y: i32,
    (s1, z1): (f32, i32),
    (s2, z2): (f32, i32),
    (so, zo): (f32, i32),
    sub: bool,
) -> i32 {
    use crate::ops::quant::{mbqm, quantize_multiplier};
    let twice_max = 2.0 * f64::from(s1.max(s2));
    let (m1, e1) = quantize_multiplier(f64::from(s1) / twice_max);
    let (m2, e2) = quantize_multiplier(f64::from(s2) / twice_max);
    let m2 = if sub { -m2 } else { m2 };
    let (mo, eo) = quantize_multiplier(twice_max / (f64::from(1 << 20) * f64::from(so)));
    let sx = mbqm((x - z1) * (1 << 20), m1, e1);
    let sy = mbqm((y - z2) * (1 << 20), m2, e2);
    mbqm(sx.saturating_add(sy), mo, eo).saturating_add(zo)
}

#[test]
fn quant8_add_and_sub_match_the_tflite_steps_for_every_input_value() {
    // Every value of x against every value of y (65536 pairs), both 8-bit types, ADD and SUB,
    // scales that put either input on top.
    let cases = [
        ((0.5, 128), (0.25, 100), (1.0, 3)),
        ((0.02, 7), (0.11, 250), (0.07, 131)),
    ];
    for signed in [false, true] {
        let (ty, qmin, qmax, shift) = if signed {
            (T::TensorQuant8AsymmSigned, -128, 127, 128)
        } else {
            (T::TensorQuant8Asymm, 0, 255, 0)
        };
        for ((s1, z1), (s2, z2), (so, zo)) in cases {
            let (z1, z2, zo) = (z1 - shift, z2 - shift, zo - shift);
            for op in [O::Add, O::Sub] {
                let mut b = B::new();
                let x = b.input(ty, &[256, 256]);
                b.q(x, s1, z1);
                let y = b.input(ty, &[256, 256]);
                b.q(y, s2, z2);
                let a = b.int(0);
                let o = b.output(ty, &[256, 256]);
                b.q(o, so, zo);
                b.op(op, &[x, y, a], &[o]);
                let byte = |v: i32| v as u8;
                let xs: Vec<u8> = (0..65536).map(|i| byte(qmin + i / 256)).collect();
                let ys: Vec<u8> = (0..65536).map(|i| byte(qmin + i % 256)).collect();
                let (out, _) = run_bytes(b.g, &[(xs, vec![]), (ys, vec![])]);
                for (i, &got) in out.iter().enumerate() {
                    let (xv, yv) = (qmin + i as i32 / 256, qmin + i as i32 % 256);
                    let want = tflite_quant_add(xv, yv, (s1, z1), (s2, z2), (so, zo), op == O::Sub)
                        .clamp(qmin, qmax);
                    let got = if signed {
                        i32::from(got as i8)
                    } else {
                        i32::from(got)
                    };
                    assert_eq!(got, want, "{op:?} signed={signed} x={xv} y={yv}");
                }
            }
        }
    }
}

#[test]
fn quant8_relu6_clamps_in_quantized_domain() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[4]);
    b.q(x, 0.1, 50);
    let o = b.output(T::TensorQuant8Asymm, &[4]);
    b.q(o, 0.1, 50);
    b.op(O::Relu6, &[x], &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![0, 50, 80, 200], vec![])]);
    assert_eq!(out, vec![50, 50, 80, 110]);
}

#[test]
fn quant8_logistic_and_softmax_use_fixed_output_scale() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[2]);
    b.q(x, 0.1, 128);
    let o = b.output(T::TensorQuant8Asymm, &[2]);
    b.q(o, 1.0 / 256.0, 0);
    b.op(O::Logistic, &[x], &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![128, 255], vec![])]);
    assert_eq!(out[0], 128);
    assert!(out[1] >= 254);

    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 2]);
    b.q(x, 0.1, 128);
    let beta = b.float(1.0);
    let o = b.output(T::TensorQuant8Asymm, &[1, 2]);
    b.q(o, 1.0 / 256.0, 0);
    b.op(O::Softmax, &[x, beta], &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![140, 140], vec![])]);
    assert_eq!(out, vec![128, 128]);
}

#[test]
fn quant8_logistic_with_wrong_output_scale_is_invalid() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[2]);
    b.q(x, 0.1, 128);
    let o = b.output(T::TensorQuant8Asymm, &[2]);
    b.q(o, 0.5, 0);
    b.op(O::Logistic, &[x], &[o]);
    assert!(matches!(
        b.g.validate(),
        Err(GraphError::InvalidOperation { index: 0, .. })
    ));
}

#[test]
fn quant8_average_and_max_pool() {
    for (op, want) in [(O::AveragePool2d, vec![3u8]), (O::MaxPool2d, vec![4u8])] {
        let mut b = B::new();
        let i = b.input(T::TensorQuant8Asymm, &[1, 2, 2, 1]);
        b.q(i, 0.5, 0);
        let args: Vec<u32> = [2, 1, 1, 2, 2, 0].iter().map(|&v| b.int(v)).collect();
        let o = b.output(T::TensorQuant8Asymm, &[1, 1, 1, 1]);
        b.q(o, 0.5, 0);
        let mut ins = vec![i];
        ins.extend(args);
        b.op(op, &ins, &[o]);
        // avg of 1,2,3,4 = 2.5 → rounds to 3
        let (out, _) = run_bytes(b.g, &[(vec![1, 2, 3, 4], vec![])]);
        assert_eq!(out, want);
    }
}

#[test]
fn quant8_concatenation_requantizes_differing_scales() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1]);
    b.q(x, 1.0, 0);
    let y = b.input(T::TensorQuant8Asymm, &[1]);
    b.q(y, 2.0, 0);
    let a = b.int(0);
    let o = b.output(T::TensorQuant8Asymm, &[2]);
    b.q(o, 1.0, 0);
    b.op(O::Concatenation, &[x, y, a], &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![7], vec![]), (vec![7], vec![])]);
    assert_eq!(out, vec![7, 14]);
}

/// Quantized CONV_2D / FULLY_CONNECTED agree with the float computation within one step.
#[test]
fn quant8_conv_and_fc_match_float_within_one_step() {
    let (sx, zx, sw, zw, so, zo) = (0.5f32, 120i32, 0.25f32, 130i32, 1.0f32, 100i32);
    let xq: Vec<u8> = (0..18).map(|i| (110 + i * 3) as u8).collect();
    let wq: Vec<u8> = (0..8).map(|i| (120 + i * 4) as u8).collect();
    let bias = [10i32, -20];
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 3, 3, 2]);
    b.q(x, sx, zx);
    let w = b.konst(T::TensorQuant8Asymm, &[2, 2, 1, 2], wq.clone());
    b.q(w, sw, zw);
    let bi = b.i32c(&[2], &bias);
    b.q(bi, sx * sw, 0);
    let args: Vec<u32> = [2, 1, 1, 0].iter().map(|&v| b.int(v)).collect();
    let o = b.output(T::TensorQuant8Asymm, &[1, 2, 3, 2]);
    b.q(o, so, zo);
    let mut ins = vec![x, w, bi];
    ins.extend(args);
    b.op(O::Conv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(xq.clone(), vec![])]);
    let xf: Vec<f32> = xq
        .iter()
        .map(|&v| (i32::from(v) - zx) as f32 * sx)
        .collect();
    let wf: Vec<f32> = wq
        .iter()
        .map(|&v| (i32::from(v) - zw) as f32 * sw)
        .collect();
    let bf_: Vec<f32> = bias.iter().map(|&v| v as f32 * sx * sw).collect();
    let reference = naive_conv(
        &xf,
        [1, 3, 3, 2],
        &wf,
        [2, 2, 1, 2],
        &bf_,
        (0, 0, 0, 0),
        (1, 1),
        (1, 1),
    );
    for (q, r) in out.iter().zip(&reference) {
        let want = ((r / so).round() as i32 + zo).clamp(0, 255);
        assert!(
            (i32::from(*q) - want).abs() <= 1,
            "{out:?} vs {reference:?}"
        );
    }

    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[2, 4]);
    b.q(x, sx, zx);
    let w = b.konst(T::TensorQuant8Asymm, &[2, 4], wq.clone());
    b.q(w, sw, zw);
    let bi = b.i32c(&[2], &bias);
    b.q(bi, sx * sw, 0);
    let a = b.int(0);
    let o = b.output(T::TensorQuant8Asymm, &[2, 2]);
    b.q(o, so, zo);
    b.op(O::FullyConnected, &[x, w, bi, a], &[o]);
    let (out, _) = run_bytes(b.g, &[(xq[..8].to_vec(), vec![])]);
    for bt in 0..2 {
        for u in 0..2 {
            let r: f32 = (0..4).map(|k| xf[bt * 4 + k] * wf[u * 4 + k]).sum::<f32>() + bf_[u];
            let want = ((r / so).round() as i32 + zo).clamp(0, 255);
            assert!((i32::from(out[bt * 2 + u]) - want).abs() <= 1);
        }
    }
}

#[test]
fn quant8_depthwise_with_per_channel_filter() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 1, 1, 2]);
    b.q(x, 0.5, 10);
    let w = b.konst(
        T::TensorQuant8SymmPerChannel,
        &[1, 1, 1, 2],
        vec![2, (-4i8) as u8],
    );
    b.g.operands[w as usize].channel_quant = Some(ChannelQuant {
        channel_dim: 3,
        scales: vec![0.5, 0.25],
    });
    let bi = b.i32c(&[2], &[0, 0]);
    let args: Vec<u32> = [2, 1, 1, 1, 0].iter().map(|&v| b.int(v)).collect();
    let o = b.output(T::TensorQuant8Asymm, &[1, 1, 1, 2]);
    b.q(o, 0.5, 50);
    let mut ins = vec![x, w, bi];
    ins.extend(args);
    b.op(O::DepthwiseConv2d, &ins, &[o]);
    // x = [(14-10)*.5, (18-10)*.5] = [2, 4]; w = [1, -1] → [2, -4] → q = [54, 42]
    let (out, _) = run_bytes(b.g, &[(vec![14, 18], vec![])]);
    assert_eq!(out, vec![54, 42]);
}

// ---------------------------------------------------------------- interpreter behaviour

#[test]
fn too_small_output_reports_needed_shape() {
    let g = binary_graph(O::Add, &[2, 2], &[2, 2], &[2, 2], 0);
    let p = PreparedGraph::new(g).unwrap();
    let a = fb(&[1.0; 4]);
    let mut out = vec![0u8; 15];
    let r = p.execute(
        &[],
        &[
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
        ],
        &mut [&mut out[..]],
    );
    match r {
        Err(ExecError::OutputInsufficientSize(shapes)) => {
            assert_eq!(
                shapes,
                vec![OutputShape {
                    dimensions: vec![2, 2],
                    is_sufficient: false
                }]
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn dynamic_output_shape_resolved_from_input_dimensions() {
    let g = binary_graph(O::Add, &[0, 0], &[0, 0], &[0, 0], 0);
    let p = PreparedGraph::new(g).unwrap();
    let a = fb(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let mut out = vec![0u8; 100];
    let shapes = p
        .execute(
            &[],
            &[
                InputArg::Value {
                    data: &a,
                    dimensions: vec![3, 2],
                },
                InputArg::Value {
                    data: &a,
                    dimensions: vec![3, 2],
                },
            ],
            &mut [&mut out[..]],
        )
        .unwrap();
    assert_eq!(shapes[0].dimensions, vec![3, 2]);
    assert!(shapes[0].is_sufficient);
    close(&bf(&out[..24]), &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
}

#[test]
fn unspecified_input_dimensions_are_invalid_argument() {
    let g = binary_graph(O::Add, &[0, 2], &[0, 2], &[0, 2], 0);
    let p = PreparedGraph::new(g).unwrap();
    let a = fb(&[1.0, 2.0]);
    let mut out = vec![0u8; 100];
    let r = p.execute(
        &[],
        &[
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
        ],
        &mut [&mut out[..]],
    );
    assert!(matches!(r, Err(ExecError::InvalidArgument(_))));
}

#[test]
fn wrong_input_byte_length_is_invalid_argument() {
    let g = binary_graph(O::Add, &[2, 2], &[2, 2], &[2, 2], 0);
    let p = PreparedGraph::new(g).unwrap();
    let good = fb(&[1.0; 4]);
    let mut out = vec![0u8; 100];
    for bad_len in [0usize, 3, 15, 17, 32] {
        let bad = vec![0u8; bad_len];
        let r = p.execute(
            &[],
            &[
                InputArg::Value {
                    data: &good,
                    dimensions: vec![],
                },
                InputArg::Value {
                    data: &bad,
                    dimensions: vec![],
                },
            ],
            &mut [&mut out[..]],
        );
        assert!(
            matches!(r, Err(ExecError::InvalidArgument(_))),
            "{bad_len}: {r:?}"
        );
    }
}

#[test]
fn mismatched_input_dimensions_are_invalid_argument() {
    let g = binary_graph(O::Add, &[2, 2], &[2, 2], &[2, 2], 0);
    let p = PreparedGraph::new(g).unwrap();
    let good = fb(&[1.0; 4]);
    let mut out = vec![0u8; 100];
    for dims in [vec![4], vec![4, 1], vec![1, 2, 2]] {
        let r = p.execute(
            &[],
            &[
                InputArg::Value {
                    data: &good,
                    dimensions: dims.clone(),
                },
                InputArg::Value {
                    data: &good,
                    dimensions: vec![],
                },
            ],
            &mut [&mut out[..]],
        );
        assert!(
            matches!(r, Err(ExecError::InvalidArgument(_))),
            "{dims:?}: {r:?}"
        );
    }
}

#[test]
fn wrong_argument_counts_are_invalid_argument() {
    let g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    let p = PreparedGraph::new(g).unwrap();
    let a = fb(&[1.0]);
    let mut out = vec![0u8; 4];
    let r = p.execute(
        &[],
        &[InputArg::Value {
            data: &a,
            dimensions: vec![],
        }],
        &mut [&mut out[..]],
    );
    assert!(matches!(r, Err(ExecError::InvalidArgument(_))));
    let r = p.execute(
        &[],
        &[
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
            InputArg::Value {
                data: &a,
                dimensions: vec![],
            },
        ],
        &mut [],
    );
    assert!(matches!(r, Err(ExecError::InvalidArgument(_))));
}

#[test]
fn constant_reference_reads_from_pools() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let c = b.add(
        T::TensorFloat32,
        &[2],
        Lifetime::ConstantReference {
            pool: 1,
            offset: 4,
            length: 8,
        },
    );
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Mul, &[x, c, a], &[o]);
    let p = PreparedGraph::new(b.g).unwrap();
    let mut pool1 = vec![0u8; 4];
    pool1.extend(fb(&[3.0, 4.0]));
    let xin = fb(&[2.0, 0.5]);
    let mut out = vec![0u8; 8];
    p.execute(
        &[&[], &pool1],
        &[InputArg::Value {
            data: &xin,
            dimensions: vec![],
        }],
        &mut [&mut out[..]],
    )
    .unwrap();
    close(&bf(&out), &[6.0, 2.0]);
    // missing pool or a pool too short → InvalidArgument
    let r = p.execute(
        &[&[]],
        &[InputArg::Value {
            data: &xin,
            dimensions: vec![],
        }],
        &mut [&mut out[..]],
    );
    assert!(matches!(r, Err(ExecError::InvalidArgument(_))));
    let r = p.execute(
        &[&[], &pool1[..8]],
        &[InputArg::Value {
            data: &xin,
            dimensions: vec![],
        }],
        &mut [&mut out[..]],
    );
    assert!(matches!(r, Err(ExecError::InvalidArgument(_))));
}

#[test]
fn concurrent_executions_share_one_prepared_graph() {
    let g = binary_graph(O::Add, &[2], &[2], &[2], 0);
    let p = std::sync::Arc::new(PreparedGraph::new(g).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let a = fb(&[t as f32, 1.0]);
                let mut out = vec![0u8; 8];
                for _ in 0..50 {
                    p.execute(
                        &[],
                        &[
                            InputArg::Value {
                                data: &a,
                                dimensions: vec![],
                            },
                            InputArg::Value {
                                data: &a,
                                dimensions: vec![],
                            },
                        ],
                        &mut [&mut out[..]],
                    )
                    .unwrap();
                }
                bf(&out)
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        close(&h.join().unwrap(), &[2.0 * t as f32, 2.0]);
    }
}

#[test]
fn supported_operations_are_reported() {
    let g = binary_graph(O::Add, &[2], &[2], &[2], 0);
    assert!(g.is_operation_supported(0));
    assert!(!g.is_operation_supported(1));
    let mut b = B::new();
    // FLOOR on TENSOR_INT32 passes the structural checks, but no kernel runs it.
    let x = b.input(T::TensorInt32, &[2]);
    let o = b.output(T::TensorInt32, &[2]);
    b.op(O::Floor, &[x], &[o]);
    assert!(b.g.validate().is_ok());
    assert!(!b.g.is_operation_supported(0));
    assert!(b.g.unsupported_reason(0).is_some());
    assert!(matches!(
        PreparedGraph::new(b.g),
        Err(GraphError::Unsupported { index: 0, .. })
    ));
    assert!(
        supported_operation_types()
            .iter()
            .any(|(o, t)| *o == O::Conv2d && t.contains(&T::TensorQuant8Asymm))
    );
}

// ---------------------------------------------------------------- validation rules

#[test]
fn validation_rejects_operation_operand_out_of_range() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operations[0].inputs[1] = 99;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperation { index: 0, .. })
    ));
}

#[test]
fn validation_rejects_operand_written_twice() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    let op = g.operations[0].clone();
    g.operations.push(op);
    let e = g.validate().unwrap_err();
    assert!(e.to_string().contains("more than once"), "{e}");
}

#[test]
fn validation_rejects_cycles() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1]);
    let t1 = b.temp(T::TensorFloat32, &[1]);
    let t2 = b.temp(T::TensorFloat32, &[1]);
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[1]);
    b.op(O::Add, &[x, t2, a], &[t1]);
    b.op(O::Relu, &[t1], &[t2]);
    b.op(O::Relu, &[t1], &[o]);
    let e = b.g.validate().unwrap_err();
    assert!(e.to_string().contains("cycle"), "{e}");
}

#[test]
fn validation_rejects_temporary_never_written() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1]);
    let t = b.temp(T::TensorFloat32, &[1]);
    let a = b.int(0);
    let o = b.output(T::TensorFloat32, &[1]);
    b.op(O::Add, &[x, t, a], &[o]);
    assert!(matches!(b.g.validate(), Err(GraphError::InvalidGraph(_))));
}

#[test]
fn validation_rejects_input_index_with_wrong_lifetime() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.input_indexes[1] = 2; // the activation constant
    assert!(matches!(g.validate(), Err(GraphError::InvalidGraph(_))));
}

#[test]
fn validation_rejects_unlisted_graph_input() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.input_indexes.pop();
    assert!(matches!(g.validate(), Err(GraphError::InvalidGraph(_))));
}

#[test]
fn validation_rejects_output_written_to_constant() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operations[0].outputs[0] = 2;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperation { .. })
    ));
}

#[test]
fn validation_rejects_constant_copy_outside_values() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operands[2].lifetime = Lifetime::ConstantCopy {
        offset: 2,
        length: 4,
    };
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperand { index: 2, .. })
    ));
}

#[test]
fn validation_rejects_constant_length_mismatch() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operand_values.extend([0u8; 4]);
    g.operands[2].lifetime = Lifetime::ConstantCopy {
        offset: 0,
        length: 8,
    };
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperand { index: 2, .. })
    ));
}

#[test]
fn validation_rejects_wrong_argument_count() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operations[0].inputs.pop();
    let e = g.validate().unwrap_err();
    assert!(
        matches!(e, GraphError::InvalidOperation { index: 0, .. }),
        "{e}"
    );
}

#[test]
fn validation_rejects_wrong_scalar_type() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operands[2].ty = T::Float32;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperation { index: 0, .. })
    ));
}

#[test]
fn validation_rejects_mismatched_operand_types() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operands[1].ty = T::TensorInt32;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperation { index: 0, .. })
    ));
}

#[test]
fn validation_rejects_bad_quantization_parameters() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operands[0].ty = T::TensorQuant8Asymm;
    g.operands[0].scale = 0.5;
    g.operands[0].zero_point = 300;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperand { index: 0, .. })
    ));
    g.operands[0].zero_point = 0;
    g.operands[0].scale = 0.0;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperand { index: 0, .. })
    ));
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operands[0].scale = 1.0;
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperand { index: 0, .. })
    ));
}

#[test]
fn validation_rejects_scalar_with_dimensions() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    g.operands[2].dimensions = vec![1];
    assert!(matches!(
        g.validate(),
        Err(GraphError::InvalidOperand { index: 2, .. })
    ));
}

#[test]
fn validation_rejects_per_channel_without_scales() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8SymmPerChannel, &[2]);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Dequantize, &[x], &[o]);
    assert!(matches!(
        b.g.validate(),
        Err(GraphError::InvalidOperand { index: 0, .. })
    ));
}

#[test]
fn validation_rejects_duplicate_graph_output() {
    let mut g = binary_graph(O::Add, &[1], &[1], &[1], 0);
    let o = g.output_indexes[0];
    g.output_indexes.push(o);
    assert!(matches!(g.validate(), Err(GraphError::InvalidGraph(_))));
}

// ---------------------------------------------------------------- property tests

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }
    fn f(&mut self) -> f32 {
        (self.next() % 2001) as f32 / 1000.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
}

/// Naive NHWC convolution with explicit padding (l, r, t, b), strides (w, h), dilation (w, h).
#[allow(clippy::too_many_arguments)]
fn naive_conv(
    x: &[f32],
    [n, h, w, c]: [usize; 4],
    f: &[f32],
    [oc, fh, fw, _]: [usize; 4],
    bias: &[f32],
    (pl, pr, pt, pb): (usize, usize, usize, usize),
    (sw, sh): (usize, usize),
    (dw, dh): (usize, usize),
) -> Vec<f32> {
    let oh = (h + pt + pb - ((fh - 1) * dh + 1)) / sh + 1;
    let ow = (w + pl + pr - ((fw - 1) * dw + 1)) / sw + 1;
    let mut out = vec![];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let mut acc = bias[o];
                    for ky in 0..fh {
                        for kx in 0..fw {
                            let iy = (oy * sh + ky * dh) as isize - pt as isize;
                            let ix = (ox * sw + kx * dw) as isize - pl as isize;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            for ch in 0..c {
                                acc += x[((b * h + iy as usize) * w + ix as usize) * c + ch]
                                    * f[((o * fh + ky) * fw + kx) * c + ch];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    out
}

#[test]
fn conv2d_matches_naive_reference_on_random_shapes() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..60 {
        let (n, h, w, c) = (
            rng.range(1, 2),
            rng.range(1, 9),
            rng.range(1, 9),
            rng.range(1, 5),
        );
        let (oc, fh, fw) = (rng.range(1, 5), rng.range(1, 4), rng.range(1, 4));
        let (sw, sh, dw, dh) = (
            rng.range(1, 3),
            rng.range(1, 3),
            rng.range(1, 2),
            rng.range(1, 2),
        );
        let (pl, pr, pt, pb) = (
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
        );
        if h + pt + pb < (fh - 1) * dh + 1 || w + pl + pr < (fw - 1) * dw + 1 {
            continue;
        }
        let x = rng.vec((n * h * w * c) as usize);
        let f = rng.vec((oc * fh * fw * c) as usize);
        let bias = rng.vec(oc as usize);
        let args: Vec<ConvArg> = [pl, pr, pt, pb, sw, sh]
            .iter()
            .map(|&v| I(v as i32))
            .chain([I(0), Bo(false), I(dw as i32), I(dh as i32)])
            .collect();
        let g = conv_graph(&[n, h, w, c], &[oc, fh, fw, c], &f, &bias, &args);
        let (out, _) = run_f32(g, &[&x]);
        let u = |v: u32| v as usize;
        let want = naive_conv(
            &x,
            [u(n), u(h), u(w), u(c)],
            &f,
            [u(oc), u(fh), u(fw), u(c)],
            &bias,
            (u(pl), u(pr), u(pt), u(pb)),
            (u(sw), u(sh)),
            (u(dw), u(dh)),
        );
        close(&out, &want);
    }
}

#[test]
fn fully_connected_matches_naive_reference_on_random_shapes() {
    let mut rng = XorShift(12345);
    for _ in 0..40 {
        let (batch, isz, units) = (rng.range(1, 6), rng.range(1, 40), rng.range(1, 20));
        let x = rng.vec((batch * isz) as usize);
        let wv = rng.vec((units * isz) as usize);
        let bias = rng.vec(units as usize);
        let mut b = B::new();
        let xi = b.input(T::TensorFloat32, &[batch, isz]);
        let wi = b.f32c(&[units, isz], &wv);
        let bi = b.f32c(&[units], &bias);
        let a = b.int(0);
        let o = b.output(T::TensorFloat32, &[batch, units]);
        b.op(O::FullyConnected, &[xi, wi, bi, a], &[o]);
        let (out, _) = run_f32(b.g, &[&x]);
        let (bs, is, us) = (batch as usize, isz as usize, units as usize);
        let mut want = vec![];
        for r in 0..bs {
            for u in 0..us {
                want.push(bias[u] + (0..is).map(|k| x[r * is + k] * wv[u * is + k]).sum::<f32>());
            }
        }
        close(&out, &want);
    }
}

#[test]
fn random_input_dimensions_never_panic() {
    let mut rng = XorShift(777);
    let g = conv_graph(
        &[0, 0, 0, 2],
        &[1, 3, 3, 2],
        &[0.1; 18],
        &[0.0],
        &[I(1), I(2), I(2), I(0)],
    );
    let p = PreparedGraph::new(g).unwrap();
    let mut out = vec![0u8; 4096];
    for _ in 0..200 {
        let dims: Vec<u32> = (0..4).map(|_| rng.range(0, 6)).collect();
        let len = rng.range(0, 400) as usize;
        let data = vec![0u8; len];
        let _ = p.execute(
            &[],
            &[InputArg::Value {
                data: &data,
                dimensions: dims,
            }],
            &mut [&mut out[..]],
        );
    }
}

#[test]
fn extra_float_unary_operations() {
    close(&unary(O::Abs, &[-2.0, 3.0]), &[2.0, 3.0]);
    close(&unary(O::Exp, &[0.0, 1.0]), &[1.0, std::f32::consts::E]);
    close(&unary(O::Log, &[1.0, std::f32::consts::E]), &[0.0, 1.0]);
    close(&unary(O::Neg, &[-2.0, 3.0]), &[2.0, -3.0]);
    close(&unary(O::Sqrt, &[4.0, 9.0]), &[2.0, 3.0]);
    close(&unary(O::Rsqrt, &[4.0, 0.25]), &[0.5, 2.0]);
    close(&unary(O::Sin, &[0.0]), &[0.0]);
    close(
        &unary(O::HardSwish, &[-4.0, 0.0, 1.0, 4.0]),
        &[0.0, 0.0, 2.0 / 3.0, 4.0],
    );
}

#[test]
fn maximum_minimum_and_prelu_broadcast() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat32, &[2, 2]);
    b.op(O::Maximum, &[x, y], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 5.0, -1.0, 0.0], &[0.0, 2.0]]);
    close(&out, &[1.0, 5.0, 0.0, 2.0]);

    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let y = b.input(T::TensorFloat32, &[2]);
    let o = b.output(T::TensorFloat32, &[2, 2]);
    b.op(O::Prelu, &[x, y], &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, -5.0, -1.0, 2.0], &[0.5, 0.1]]);
    close(&out, &[1.0, -0.5, -0.5, 2.0]);
}

#[test]
fn elu_scales_negative_side() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let a = b.float(2.0);
    let o = b.output(T::TensorFloat32, &[2]);
    b.op(O::Elu, &[x, a], &[o]);
    let (out, _) = run_f32(b.g, &[&[-1.0, 3.0]]);
    close(&out, &[2.0 * ((-1.0f32).exp() - 1.0), 3.0]);
}

#[test]
fn max_pool_nchw_layout() {
    let mut b = B::new();
    let i = b.input(T::TensorFloat32, &[1, 2, 2, 2]);
    let mut ins = vec![i];
    for v in [2, 1, 1, 2, 2, 0] {
        ins.push(b.int(v));
    }
    ins.push(b.boolean(true));
    let o = b.output(T::TensorFloat32, &[1, 2, 1, 1]);
    b.op(O::MaxPool2d, &ins, &[o]);
    let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0, 8.0, 7.0, 6.0, 5.0]]);
    close(&out, &[4.0, 8.0]);
}

#[test]
fn resize_bilinear_align_corners_and_half_pixel() {
    for (align, half, want) in [
        (
            true,
            false,
            vec![1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0],
        ),
        (
            false,
            true,
            vec![1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0],
        ),
    ] {
        let mut b = B::new();
        let x = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
        let w = b.int(3);
        let h = b.int(3);
        let l = b.boolean(false);
        let al = b.boolean(align);
        let hp = b.boolean(half);
        let o = b.output(T::TensorFloat32, &[1, 3, 3, 1]);
        b.op(O::ResizeBilinear, &[x, w, h, l, al, hp], &[o]);
        let (out, _) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
        close(&out, &want);
    }
}

#[test]
fn resize_bilinear_scale_form() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 2, 1]);
    let w = b.float(2.0);
    let h = b.float(1.0);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::ResizeBilinear, &[x, w, h], &[o]);
    let (out, d) = run_f32(b.g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(d, vec![1, 2, 4, 1]);
    close(&out, &[1.0, 1.5, 2.0, 2.0, 3.0, 3.5, 4.0, 4.0]);
}

#[test]
fn quant8_signed_add_and_relu() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8AsymmSigned, &[3]);
    b.q(x, 0.5, 0);
    let y = b.input(T::TensorQuant8AsymmSigned, &[3]);
    b.q(y, 0.5, 0);
    let a = b.int(1);
    let o = b.output(T::TensorQuant8AsymmSigned, &[3]);
    b.q(o, 0.5, -10);
    b.op(O::Add, &[x, y, a], &[o]);
    // [-1, 2, 60] + [-3, 1, 60] = [-4, 3, 120] (q) → + zp -10 → relu floor at -10, clamp 127
    let neg = |v: i8| v as u8;
    let (out, _) = run_bytes(
        b.g,
        &[
            (vec![neg(-1), 2, 60], vec![]),
            (vec![neg(-3), 1, 60], vec![]),
        ],
    );
    let got: Vec<i8> = out.iter().map(|&v| v as i8).collect();
    assert_eq!(got, vec![-10, -7, 110]);
}

#[test]
fn dequantize_per_channel() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8SymmPerChannel, &[2, 2]);
    b.g.operands[x as usize].channel_quant = Some(ChannelQuant {
        channel_dim: 1,
        scales: vec![1.0, 0.5],
    });
    let o = b.output(T::TensorFloat32, &[2, 2]);
    b.op(O::Dequantize, &[x], &[o]);
    let (out, _) = run_bytes(b.g, &[(vec![2, 2, (-4i8) as u8, 4], vec![])]);
    close(&bf(&out), &[2.0, 1.0, -4.0, 2.0]);
}

#[test]
fn omitted_optional_input_uses_default() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 1]);
    let axes = b.input(T::TensorInt32, &[1]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Squeeze, &[x, axes], &[o]);
    let p = PreparedGraph::new(b.g).unwrap();
    let data = fb(&[1.0, 2.0]);
    let mut out = [0u8; 8];
    let shapes = p
        .execute(
            &[],
            &[
                InputArg::Value {
                    data: &data,
                    dimensions: vec![],
                },
                InputArg::NoValue,
            ],
            &mut [&mut out[..]],
        )
        .unwrap();
    assert_eq!(shapes[0].dimensions, vec![2]);
}

#[test]
fn float16_add_and_conv_compute_in_half_precision_io() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat16, &[3]);
    let y = b.input(T::TensorFloat16, &[3]);
    let a = b.int(0);
    let o = b.output(T::TensorFloat16, &[3]);
    b.op(O::Add, &[x, y, a], &[o]);
    let (out, _) = run_bytes(
        b.g,
        &[
            (f16_bytes(&[1.0, 2.5, -3.0]), vec![]),
            (f16_bytes(&[0.5, 0.5, 1.0]), vec![]),
        ],
    );
    assert_eq!(out, f16_bytes(&[1.5, 3.0, -2.0]));

    let mut b = B::new();
    let x = b.input(T::TensorFloat16, &[1, 2, 2, 1]);
    let f = b.konst(
        T::TensorFloat16,
        &[1, 2, 2, 1],
        f16_bytes(&[1.0, 2.0, 3.0, 4.0]),
    );
    let bias = b.konst(T::TensorFloat16, &[1], f16_bytes(&[0.5]));
    let mut ins = vec![x, f, bias];
    for v in [2, 1, 1, 0] {
        ins.push(b.int(v));
    }
    let o = b.output(T::TensorFloat16, &[1, 1, 1, 1]);
    b.op(O::Conv2d, &ins, &[o]);
    let (out, _) = run_bytes(b.g, &[(f16_bytes(&[1.0, 1.0, 1.0, 1.0]), vec![])]);
    assert_eq!(out, f16_bytes(&[10.5]));
}

/// Naive NHWC depthwise convolution (filter [1, fh, fw, c*mult]).
#[allow(clippy::too_many_arguments)]
fn naive_depthwise(
    x: &[f32],
    [n, h, w, c]: [usize; 4],
    f: &[f32],
    (fh, fw, mult): (usize, usize, usize),
    bias: &[f32],
    (pl, pr, pt, pb): (usize, usize, usize, usize),
    (sw, sh): (usize, usize),
    (dw, dh): (usize, usize),
) -> Vec<f32> {
    let oc = c * mult;
    let oh = (h + pt + pb - ((fh - 1) * dh + 1)) / sh + 1;
    let ow = (w + pl + pr - ((fw - 1) * dw + 1)) / sw + 1;
    let mut out = vec![];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for o in 0..oc {
                    let mut acc = bias[o];
                    for ky in 0..fh {
                        for kx in 0..fw {
                            let iy = (oy * sh + ky * dh) as isize - pt as isize;
                            let ix = (ox * sw + kx * dw) as isize - pl as isize;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            acc += x[((b * h + iy as usize) * w + ix as usize) * c + o / mult]
                                * f[(ky * fw + kx) * oc + o];
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn check_depthwise(
    rng: &mut XorShift,
    [n, h, w, c]: [u32; 4],
    (fh, fw, mult): (u32, u32, u32),
    (pl, pr, pt, pb): (u32, u32, u32, u32),
    (sw, sh): (u32, u32),
    (dw, dh): (u32, u32),
    act: i32,
) {
    let oc = c * mult;
    let x = rng.vec((n * h * w * c) as usize);
    let f = rng.vec((fh * fw * oc) as usize);
    let bias = rng.vec(oc as usize);
    let mut b = B::new();
    let xi = b.input(T::TensorFloat32, &[n, h, w, c]);
    let fi = b.f32c(&[1, fh, fw, oc], &f);
    let bi = b.f32c(&[oc], &bias);
    let mut ins = vec![xi, fi, bi];
    for v in [pl, pr, pt, pb, sw, sh, mult] {
        ins.push(b.int(v as i32));
    }
    ins.push(b.int(act));
    ins.push(b.boolean(false));
    ins.push(b.int(dw as i32));
    ins.push(b.int(dh as i32));
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::DepthwiseConv2d, &ins, &[o]);
    let (out, _) = run_f32(b.g, &[&x]);
    let u = |v: u32| v as usize;
    let mut want = naive_depthwise(
        &x,
        [u(n), u(h), u(w), u(c)],
        &f,
        (u(fh), u(fw), u(mult)),
        &bias,
        (u(pl), u(pr), u(pt), u(pb)),
        (u(sw), u(sh)),
        (u(dw), u(dh)),
    );
    if act == 3 {
        for v in &mut want {
            *v = v.clamp(0.0, 6.0);
        }
    }
    close(&out, &want);
}

#[test]
fn depthwise_matches_naive_reference_on_random_shapes() {
    let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
    for i in 0..60 {
        let (n, h, w) = (rng.range(1, 2), rng.range(1, 9), rng.range(1, 9));
        // Channel counts below, at and above the 32-wide register block.
        let c = if i % 3 == 0 {
            rng.range(30, 70)
        } else {
            rng.range(1, 5)
        };
        let mult = if i % 2 == 0 { 1 } else { rng.range(1, 3) };
        let (fh, fw) = (rng.range(1, 4), rng.range(1, 4));
        let (sw, sh, dw, dh) = (
            rng.range(1, 3),
            rng.range(1, 3),
            rng.range(1, 2),
            rng.range(1, 2),
        );
        let pads = (
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
        );
        if h + pads.2 + pads.3 < (fh - 1) * dh + 1 || w + pads.0 + pads.1 < (fw - 1) * dw + 1 {
            continue;
        }
        let act = if i % 4 == 1 { 3 } else { 0 };
        check_depthwise(
            &mut rng,
            [n, h, w, c],
            (fh, fw, mult),
            pads,
            (sw, sh),
            (dw, dh),
            act,
        );
    }
}

#[test]
fn large_layers_split_across_threads_match_naive() {
    crate::set_max_threads(2);
    let mut rng = XorShift(0x5851_F42D_4C95_7F2D);
    // Depthwise: rows split across threads (4.5 Mflop), 40 channels = block + remainder.
    check_depthwise(
        &mut rng,
        [2, 56, 56, 40],
        (3, 3, 1),
        (1, 1, 1, 1),
        (1, 1),
        (1, 1),
        3,
    );
    // CONV_2D 3x3 SAME on 64x64x16 -> 16: several im2col blocks, pixel runs per thread.
    // CONV_2D 1x1 on 64x64x32 -> 40: direct GEMM split by pixel runs.
    // CONV_2D 3x3 on 6x6x64 -> 96, stride 2: one block, the GEMM split by columns.
    for (dims, fdims, pad, stride) in [
        ([1u32, 64, 64, 16], [16u32, 3, 3, 16], 1u32, 1u32),
        ([1, 64, 64, 32], [40, 1, 1, 32], 0, 1),
        ([2, 12, 12, 64], [160, 3, 3, 64], 1, 2),
    ] {
        let [n, h, w, c] = dims;
        let [oc, fh, fw, _] = fdims;
        let x = rng.vec((n * h * w * c) as usize);
        let f = rng.vec((oc * fh * fw * c) as usize);
        let bias = rng.vec(oc as usize);
        let args: Vec<ConvArg> = [pad, pad, pad, pad, stride, stride, 0]
            .iter()
            .map(|&v| I(v as i32))
            .collect();
        let g = conv_graph(&dims, &fdims, &f, &bias, &args);
        let (out, _) = run_f32(g, &[&x]);
        let u = |v: u32| v as usize;
        let p = u(pad);
        let want = naive_conv(
            &x,
            dims.map(u),
            &f,
            fdims.map(u),
            &bias,
            (p, p, p, p),
            (u(stride), u(stride)),
            (1, 1),
        );
        close(&out, &want);
    }
    // FULLY_CONNECTED 8x512 · (1024x512)^T: the GEMM split by output units.
    let (batch, isz, units) = (8u32, 512u32, 1024u32);
    let x = rng.vec((batch * isz) as usize);
    let wv = rng.vec((units * isz) as usize);
    let bias = rng.vec(units as usize);
    let mut b = B::new();
    let xi = b.input(T::TensorFloat32, &[batch, isz]);
    let wi = b.f32c(&[units, isz], &wv);
    let bi = b.f32c(&[units], &bias);
    let a = b.int(1);
    let o = b.output(T::TensorFloat32, &[batch, units]);
    b.op(O::FullyConnected, &[xi, wi, bi, a], &[o]);
    let (out, _) = run_f32(b.g, &[&x]);
    let (is, us) = (isz as usize, units as usize);
    let mut want = vec![];
    for r in 0..batch as usize {
        for u in 0..us {
            let v = bias[u] + (0..is).map(|k| x[r * is + k] * wv[u * is + k]).sum::<f32>();
            want.push(v.max(0.0));
        }
    }
    close(&out, &want);
}
