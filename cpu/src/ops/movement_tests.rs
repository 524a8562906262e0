//! Tests of the shape and data-movement family. Expected values are worked out by hand from
//! NNAPI's definitions (each test's comment or literal says how).

use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// Every tensor type the element-moving operations accept (besides TENSOR_INT32).
const FQ: [T; 4] = [
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];
/// FQ plus TENSOR_INT32.
const FQI: [T; 5] = [
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
    T::TensorInt32,
];

/// Little-endian bytes of `v` as elements of `ty` (values are small integers or exact
/// halves, representable in every type used).
fn enc(ty: T, v: &[f32]) -> Vec<u8> {
    match ty {
        T::TensorFloat32 | T::Float32 => fb(v),
        T::TensorFloat16 | T::Float16 => f16_bytes(v),
        T::TensorInt32 | T::Int32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        T::TensorQuant8Asymm | T::TensorBool8 => v.iter().map(|&x| x as u8).collect(),
        T::TensorQuant8AsymmSigned | T::TensorQuant8Symm => {
            v.iter().map(|&x| (x as i8) as u8).collect()
        }
        t => panic!("no encoder for {t:?}"),
    }
}

/// Elements of `ty` in `b`, as f32.
fn dec(ty: T, b: &[u8]) -> Vec<f32> {
    match ty {
        T::TensorFloat32 => bf(b),
        T::TensorFloat16 => f16_vals(b),
        T::TensorInt32 | T::Int32 => i32_vals(b).into_iter().map(|x| x as f32).collect(),
        T::TensorQuant8Asymm => b.iter().map(|&x| f32::from(x)).collect(),
        T::TensorQuant8AsymmSigned => i8_vals(b).into_iter().map(f32::from).collect(),
        t => panic!("no decoder for {t:?}"),
    }
}

/// `inputs` encoded in the types of `g`'s inputs.
fn encode_inputs(g: &Graph, inputs: &[&[f32]]) -> Vec<Vec<u8>> {
    inputs
        .iter()
        .zip(&g.input_indexes)
        .map(|(v, &i)| enc(g.operands[i as usize].ty, v))
        .collect()
}

/// A graph of one `op` whose input 0 has type `ty` and `dims` (quantized: scale 0.5 and zero
/// point `zp`), further inputs added by `args`, and one output of the same type, shape
/// unknown.
fn graph(op: O, ty: T, dims: &[u32], zp: i32, args: impl FnOnce(&mut B) -> Vec<u32>) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let mut ins = vec![x];
    ins.extend(args(&mut b));
    let o = b.output(ty, &[]);
    if ty.is_quantized() {
        b.q(x, 0.5, zp);
        b.q(o, 0.5, zp);
    }
    b.op(op, &ins, &[o]);
    b.g
}

/// Runs `g` with `inputs` (each in its graph input's type); output 0 as f32 and its shape.
fn run(g: Graph, inputs: &[&[f32]]) -> (Vec<f32>, Vec<u32>) {
    let oty = g.operands[g.output_indexes[0] as usize].ty;
    let ins: Vec<(Vec<u8>, Vec<u32>)> = encode_inputs(&g, inputs)
        .into_iter()
        .map(|b| (b, vec![]))
        .collect();
    let (o, d) = run_bytes(g, &ins);
    (dec(oty, &o), d)
}

/// Runs `g` with `inputs`; every output as f32 with its shape.
fn run_all(g: Graph, inputs: &[&[f32]]) -> Vec<(Vec<f32>, Vec<u32>)> {
    let otys: Vec<T> = g
        .output_indexes
        .iter()
        .map(|&i| g.operands[i as usize].ty)
        .collect();
    let bytes = encode_inputs(&g, inputs);
    run_outputs(g, &bytes)
        .unwrap()
        .into_iter()
        .zip(&otys)
        .map(|((b, d), &t)| (dec(t, &b), d))
        .collect()
}

/// The execution error of `g` on `inputs`.
fn exec_err(g: Graph, inputs: &[&[f32]]) -> String {
    let bytes = encode_inputs(&g, inputs);
    exec_error(g, &bytes)
}

fn assert_has(msg: &str, part: &str) {
    assert!(msg.contains(part), "{msg:?} does not mention {part:?}");
}

// ---- STRIDED_SLICE ---------------------------------------------------------------------------

/// STRIDED_SLICE of input `ty` `dims` with constant begin/end/strides and masks.
fn ss(ty: T, dims: &[u32], be: [&[i32]; 3], masks: [i32; 3]) -> Graph {
    let r = dims.len() as u32;
    graph(O::StridedSlice, ty, dims, 1, |b| {
        vec![
            b.i32c(&[r], be[0]),
            b.i32c(&[r], be[1]),
            b.i32c(&[r], be[2]),
            b.int(masks[0]),
            b.int(masks[1]),
            b.int(masks[2]),
        ]
    })
}

#[test]
fn strided_slice_takes_a_sub_block_in_every_type() {
    // [[1, 2, 3], [4, 5, 6]][0:2, 1:3] = [[2, 3], [5, 6]].
    for ty in FQ {
        let g = ss(ty, &[2, 3], [&[0, 1], &[2, 3], &[1, 1]], [0, 0, 0]);
        let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
        assert_eq!((o, d), (vec![2.0, 3.0, 5.0, 6.0], vec![2, 2]), "{ty:?}");
    }
}

#[test]
fn strided_slice_int8_signed_4d_with_stride_two_keeps_negative_values() {
    // Rows 1 and 3 of a [1, 4, 1, 2] tensor holding -4..=3.
    let g = ss(
        T::TensorQuant8AsymmSigned,
        &[1, 4, 1, 2],
        [&[0, 1, 0, 0], &[1, 4, 1, 2], &[1, 2, 1, 1]],
        [0, 0, 0],
    );
    let (o, d) = run(g, &[&[-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]]);
    assert_eq!(d, vec![1, 2, 1, 2]);
    assert_eq!(o, vec![-2.0, -1.0, 2.0, 3.0]);
}

#[test]
fn strided_slice_negative_stride_with_masks_reverses() {
    // begin_mask and end_mask set: the whole axis, walked backwards.
    let g = ss(T::TensorFloat32, &[4], [&[0], &[0], &[-1]], [1, 1, 0]);
    let (o, _) = run(g, &[&[1.0, 2.0, 3.0, 4.0]]);
    assert_eq!(o, vec![4.0, 3.0, 2.0, 1.0]);
}

#[test]
fn strided_slice_negative_indexes_count_from_the_end() {
    // [0, 1, 2, 3, 4][-4:-1:2] = [1, 3].
    let g = ss(T::TensorFloat32, &[5], [&[-4], &[-1], &[2]], [0, 0, 0]);
    let (o, d) = run(g, &[&[0.0, 1.0, 2.0, 3.0, 4.0]]);
    assert_eq!((o, d), (vec![1.0, 3.0], vec![2]));
}

#[test]
fn strided_slice_clamps_out_of_range_begin_and_end() {
    let g = ss(T::TensorFloat32, &[3], [&[-100], &[100], &[1]], [0, 0, 0]);
    assert_eq!(run(g, &[&[1.0, 2.0, 3.0]]).0, vec![1.0, 2.0, 3.0]);
    let g = ss(T::TensorFloat32, &[3], [&[100], &[-100], &[-1]], [0, 0, 0]);
    assert_eq!(run(g, &[&[1.0, 2.0, 3.0]]).0, vec![3.0, 2.0, 1.0]);
}

#[test]
fn strided_slice_begin_mask_ignores_begin_and_end_mask_ignores_end() {
    // begin 2 and end 0 on axis 1 are ignored: the full row.
    let g = ss(
        T::TensorFloat32,
        &[2, 3],
        [&[1, 2], &[2, 0], &[1, 1]],
        [2, 2, 0],
    );
    let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    assert_eq!((o, d), (vec![4.0, 5.0, 6.0], vec![1, 3]));
}

#[test]
fn strided_slice_shrink_axis_drops_the_dimension() {
    let g = ss(
        T::TensorQuant8Asymm,
        &[2, 3],
        [&[1, 0], &[2, 3], &[1, 1]],
        [0, 0, 1],
    );
    let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    assert_eq!((o, d), (vec![4.0, 5.0, 6.0], vec![3]));
}

#[test]
fn strided_slice_shrinking_every_axis_gives_shape_one() {
    let g = ss(
        T::TensorFloat32,
        &[2, 3],
        [&[1, 2], &[2, 3], &[1, 1]],
        [0, 0, 3],
    );
    let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    assert_eq!((o, d), (vec![6.0], vec![1]));
}

#[test]
fn strided_slice_empty_range_gives_a_zero_extent() {
    let g = ss(T::TensorFloat32, &[3], [&[2], &[1], &[1]], [0, 0, 0]);
    let (o, d) = run(g, &[&[1.0, 2.0, 3.0]]);
    assert_eq!((o, d), (vec![], vec![0]));
}

#[test]
fn strided_slice_refuses_a_zero_stride() {
    let g = ss(T::TensorFloat32, &[3], [&[0], &[3], &[0]], [0, 0, 0]);
    assert_has(&refused(g), "strides must be non-zero");
}

#[test]
fn strided_slice_zero_stride_from_an_input_fails_at_execution() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let be = b.i32c(&[1], &[0]);
    let en = b.i32c(&[1], &[3]);
    let st = b.input(T::TensorInt32, &[1]);
    let m = [b.int(0), b.int(0), b.int(0)];
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::StridedSlice, &[x, be, en, st, m[0], m[1], m[2]], &[o]);
    assert_has(
        &exec_err(b.g, &[&[1.0, 2.0, 3.0], &[0.0]]),
        "stride 0 is zero",
    );
}

#[test]
fn strided_slice_refuses_mask_bits_beyond_the_rank() {
    for (k, what) in [(0, "begin_mask"), (1, "end_mask"), (2, "shrink_axis_mask")] {
        let mut m = [0; 3];
        m[k] = 1 << 4;
        let g = ss(
            T::TensorFloat32,
            &[1, 1, 1, 3],
            [&[0; 4], &[1; 4], &[1; 4]],
            m,
        );
        assert_has(&refused(g), &format!("{what} has bits beyond rank 4"));
    }
}

#[test]
fn strided_slice_shrink_of_more_than_one_element_fails_at_execution() {
    let g = ss(T::TensorFloat32, &[3], [&[0], &[2], &[1]], [0, 0, 1]);
    assert_has(&exec_err(g, &[&[1.0, 2.0, 3.0]]), "one element");
}

#[test]
fn strided_slice_shrink_with_negative_stride_fails_at_execution() {
    let g = ss(T::TensorFloat32, &[3], [&[2], &[1], &[-1]], [0, 0, 1]);
    assert_has(&exec_err(g, &[&[1.0, 2.0, 3.0]]), "positive stride");
}

#[test]
fn strided_slice_refuses_a_begin_of_the_wrong_length() {
    let g = graph(O::StridedSlice, T::TensorFloat32, &[2, 3], 0, |b| {
        vec![
            b.i32c(&[3], &[0, 0, 0]),
            b.i32c(&[2], &[2, 3]),
            b.i32c(&[2], &[1, 1]),
            b.int(0),
            b.int(0),
            b.int(0),
        ]
    });
    assert_has(&refused(g), "begin has 3 entries for an input of rank 2");
}

#[test]
fn strided_slice_refuses_rank_five() {
    let g = ss(
        T::TensorFloat32,
        &[1, 1, 1, 1, 2],
        [&[0; 5], &[1; 5], &[1; 5]],
        [0; 3],
    );
    assert_has(&refused(g), "rank 5");
}

#[test]
fn strided_slice_refuses_an_output_with_other_quantization() {
    let mut g = ss(T::TensorQuant8AsymmSigned, &[3], [&[0], &[3], &[1]], [0; 3]);
    let o = g.output_indexes[0] as usize;
    g.operands[o].zero_point = 3;
    assert_has(&refused(g), "scale and zero point");
}

#[test]
fn strided_slice_refuses_a_missing_mask() {
    let g = graph(O::StridedSlice, T::TensorFloat32, &[3], 0, |b| {
        vec![
            b.i32c(&[1], &[0]),
            b.i32c(&[1], &[3]),
            b.i32c(&[1], &[1]),
            b.int(0),
            b.int(0),
        ]
    });
    assert_has(&refused(g), "6 inputs given");
}

#[test]
fn strided_slice_on_int32_is_unsupported_not_invalid() {
    let g = ss(T::TensorInt32, &[3], [&[0], &[3], &[1]], [0; 3]);
    assert!(matches!(
        PreparedGraph::new(g),
        Err(GraphError::Unsupported { .. })
    ));
}

// ---- SLICE -----------------------------------------------------------------------------------

fn sl(ty: T, dims: &[u32], begin: &[i32], size: &[i32]) -> Graph {
    let r = dims.len() as u32;
    graph(O::Slice, ty, dims, 2, |b| {
        vec![b.i32c(&[r], begin), b.i32c(&[r], size)]
    })
}

#[test]
fn slice_with_size_minus_one_takes_the_rest_in_every_type() {
    for ty in FQI {
        let g = sl(ty, &[2, 3], &[1, 1], &[1, -1]);
        let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
        assert_eq!((o, d), (vec![5.0, 6.0], vec![1, 2]), "{ty:?}");
    }
}

#[test]
fn slice_of_a_4d_block() {
    // [2, 2, 2, 1] holding 0..8; begin [1, 0, 1, 0], size [1, 2, 1, 1] → elements 5 and 7.
    let g = sl(
        T::TensorQuant8AsymmSigned,
        &[2, 2, 2, 1],
        &[1, 0, 1, 0],
        &[1, 2, 1, 1],
    );
    let (o, d) = run(g, &[&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]]);
    assert_eq!((o, d), (vec![5.0, 7.0], vec![1, 2, 1, 1]));
}

#[test]
fn slice_refuses_a_negative_begin() {
    assert_has(
        &refused(sl(T::TensorFloat32, &[3], &[-1], &[1])),
        "begin must be >= 0",
    );
}

#[test]
fn slice_refuses_a_size_below_minus_one() {
    assert_has(
        &refused(sl(T::TensorFloat32, &[3], &[0], &[-2])),
        "size must be >= 0 or -1",
    );
}

#[test]
fn slice_of_size_zero_or_from_the_end_is_empty() {
    let g = sl(T::TensorFloat32, &[2, 3], &[0, 1], &[2, 0]);
    assert_eq!(run(g, &[&iota(6, 0.0)]), (vec![], vec![2, 0]));
    let g = sl(T::TensorFloat32, &[3], &[3], &[-1]);
    assert_eq!(run(g, &[&iota(3, 0.0)]), (vec![], vec![0]));
}

#[test]
fn slice_of_rank_five() {
    let g = sl(
        T::TensorInt32,
        &[1, 1, 1, 2, 2],
        &[0, 0, 0, 1, 0],
        &[-1, -1, -1, 1, 2],
    );
    assert_eq!(
        run(g, &[&iota(4, 0.0)]),
        (vec![2.0, 3.0], vec![1, 1, 1, 1, 2])
    );
}

#[test]
fn slice_past_the_end_fails_at_execution() {
    let g = sl(T::TensorFloat32, &[3], &[1], &[3]);
    assert_has(&exec_err(g, &[&[1.0, 2.0, 3.0]]), "exceeds extent 3");
}

#[test]
fn slice_begin_beyond_the_extent_fails_at_execution() {
    let g = sl(T::TensorFloat32, &[3], &[4], &[-1]);
    assert_has(
        &exec_err(g, &[&[1.0, 2.0, 3.0]]),
        "begin[0] = 4 outside [0, 3]",
    );
}

#[test]
fn slice_refuses_a_size_of_the_wrong_length() {
    let g = graph(O::Slice, T::TensorFloat32, &[3], 0, |b| {
        vec![b.i32c(&[1], &[0]), b.i32c(&[2], &[1, 1])]
    });
    assert_has(&refused(g), "size has 2 entries");
}

// ---- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND ---------------------------------------------------

fn s2b(ty: T, dims: &[u32], zp: i32, block: &[i32], pads: &[i32], nchw: Option<bool>) -> Graph {
    graph(O::SpaceToBatchNd, ty, dims, zp, |b| {
        let mut v = vec![b.i32c(&[2], block), b.i32c(&[2, 2], pads)];
        if let Some(l) = nchw {
            v.push(b.boolean(l));
        }
        v
    })
}

fn b2s(ty: T, dims: &[u32], block: &[i32], nchw: Option<bool>) -> Graph {
    graph(O::BatchToSpaceNd, ty, dims, 0, |b| {
        let mut v = vec![b.i32c(&[2], block)];
        if let Some(l) = nchw {
            v.push(b.boolean(l));
        }
        v
    })
}

fn iota(n: usize, from: f32) -> Vec<f32> {
    (0..n).map(|i| from + i as f32).collect()
}

/// A [1, 4, 4, 1] image of 1..=16 split in 2x2 blocks: batch k takes pixel (k / 2, k % 2) of
/// every block.
const S2B_OUT: [f32; 16] = [
    1.0, 3.0, 9.0, 11.0, 2.0, 4.0, 10.0, 12.0, 5.0, 7.0, 13.0, 15.0, 6.0, 8.0, 14.0, 16.0,
];

#[test]
fn space_to_batch_splits_blocks_into_batches_in_every_type() {
    for ty in FQ {
        let g = s2b(ty, &[1, 4, 4, 1], 0, &[2, 2], &[0, 0, 0, 0], None);
        let (o, d) = run(g, &[&iota(16, 1.0)]);
        assert_eq!((o, d), (S2B_OUT.to_vec(), vec![4, 2, 2, 1]), "{ty:?}");
    }
}

#[test]
fn space_to_batch_pads_with_zero() {
    // [1, 5, 2, 1] holding 1..=10, block [3, 2], top padding 1, left padding 2: the padded
    // 6x4 image [0 0 0 0; 0 0 1 2; 0 0 3 4; ...] taken at (sy, sx) offsets of 3x2 blocks.
    let g = s2b(
        T::TensorFloat32,
        &[1, 5, 2, 1],
        0,
        &[3, 2],
        &[1, 0, 2, 0],
        None,
    );
    let (o, d) = run(g, &[&iota(10, 1.0)]);
    assert_eq!(d, vec![6, 2, 2, 1]);
    let want = [
        0., 0., 0., 5., 0., 0., 0., 6., 0., 1., 0., 7., 0., 2., 0., 8., 0., 3., 0., 9., 0., 4., 0.,
        10.,
    ];
    assert_eq!(o, want.to_vec());
}

#[test]
fn space_to_batch_pads_quantized_tensors_with_the_zero_point() {
    for (ty, zp) in [
        (T::TensorQuant8Asymm, 128),
        (T::TensorQuant8AsymmSigned, -5),
    ] {
        let g = s2b(ty, &[1, 1, 1, 1], zp, &[1, 2], &[0, 0, 0, 1], None);
        let (o, d) = run(g, &[&[7.0]]);
        assert_eq!((o, d), (vec![7.0, zp as f32], vec![2, 1, 1, 1]), "{ty:?}");
    }
}

#[test]
fn space_to_batch_nchw_moves_whole_channels() {
    // NCHW [1, 2, 2, 2]: channel 0 = [0, 10, 20, 30], channel 1 = [1, 11, 21, 31]; each 2x2
    // block pixel becomes a batch holding its two channels.
    let g = s2b(
        T::TensorFloat32,
        &[1, 2, 2, 2],
        0,
        &[2, 2],
        &[0; 4],
        Some(true),
    );
    let (o, d) = run(g, &[&[0., 10., 20., 30., 1., 11., 21., 31.]]);
    assert_eq!(d, vec![4, 2, 1, 1]);
    assert_eq!(o, vec![0., 1., 10., 11., 20., 21., 30., 31.]);
}

#[test]
fn space_to_batch_nhwc_flag_false_is_the_default_layout() {
    let g = s2b(
        T::TensorFloat32,
        &[1, 4, 4, 1],
        0,
        &[2, 2],
        &[0; 4],
        Some(false),
    );
    assert_eq!(run(g, &[&iota(16, 1.0)]).0, S2B_OUT.to_vec());
}

#[test]
fn space_to_batch_indivisible_padded_extent_fails_at_execution() {
    let g = s2b(T::TensorFloat32, &[1, 3, 2, 1], 0, &[2, 2], &[0; 4], None);
    assert_has(&exec_err(g, &[&iota(6, 0.0)]), "multiples of the block");
}

#[test]
fn space_to_batch_refuses_a_zero_block() {
    let g = s2b(T::TensorFloat32, &[1, 2, 2, 1], 0, &[0, 2], &[0; 4], None);
    assert_has(&refused(g), "block_shape entries must be >= 1");
}

#[test]
fn space_to_batch_refuses_negative_padding() {
    let g = s2b(
        T::TensorFloat32,
        &[1, 2, 2, 1],
        0,
        &[1, 1],
        &[0, -1, 0, 0],
        None,
    );
    assert_has(&refused(g), "paddings must be >= 0");
}

#[test]
fn space_to_batch_refuses_a_3d_input() {
    let g = s2b(T::TensorFloat32, &[2, 2, 1], 0, &[1, 1], &[0; 4], None);
    assert_has(&refused(g), "rank 3 outside 4..=4");
}

#[test]
fn batch_to_space_is_the_inverse_in_every_type() {
    for ty in FQ {
        let g = b2s(ty, &[4, 2, 2, 1], &[2, 2], None);
        let (o, d) = run(g, &[&S2B_OUT]);
        assert_eq!((o, d), (iota(16, 1.0), vec![1, 4, 4, 1]), "{ty:?}");
    }
}

#[test]
fn batch_to_space_nchw() {
    let g = b2s(T::TensorFloat32, &[4, 2, 1, 1], &[2, 2], Some(true));
    let (o, d) = run(g, &[&[0., 1., 10., 11., 20., 21., 30., 31.]]);
    assert_eq!(d, vec![1, 2, 2, 2]);
    assert_eq!(o, vec![0., 10., 20., 30., 1., 11., 21., 31.]);
}

#[test]
fn batch_to_space_indivisible_batch_fails_at_execution() {
    let g = b2s(T::TensorFloat32, &[3, 1, 1, 1], &[2, 1], None);
    assert_has(&exec_err(g, &[&[1.0, 2.0, 3.0]]), "multiple of the block");
}

#[test]
fn batch_to_space_refuses_a_block_of_three_entries() {
    let g = graph(O::BatchToSpaceNd, T::TensorFloat32, &[4, 1, 1, 1], 0, |b| {
        vec![b.i32c(&[3], &[2, 2, 1])]
    });
    assert_has(&refused(g), "block_shape must have shape [2]");
}

#[test]
fn batch_to_space_refuses_a_float_layout_flag() {
    let g = graph(O::BatchToSpaceNd, T::TensorFloat32, &[4, 1, 1, 1], 0, |b| {
        vec![b.i32c(&[2], &[2, 2]), b.float(1.0)]
    });
    assert_has(&refused(g), "layout");
}

// ---- GATHER ----------------------------------------------------------------------------------

fn ga(ty: T, dims: &[u32], axis: i32, idims: &[u32], idx: &[i32]) -> Graph {
    graph(O::Gather, ty, dims, 3, |b| {
        vec![b.int(axis), b.i32c(idims, idx)]
    })
}

#[test]
fn gather_rows_in_every_type() {
    for ty in FQI {
        let g = ga(ty, &[3, 2], 0, &[2], &[2, 0]);
        let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
        assert_eq!((o, d), (vec![5.0, 6.0, 1.0, 2.0], vec![2, 2]), "{ty:?}");
    }
}

#[test]
fn gather_negative_axis_with_2d_indices_inserts_their_shape() {
    // out[i, j, 0] = in[i, idx[j, 0]] with idx = [[1], [0]].
    let g = ga(T::TensorFloat32, &[3, 2], -1, &[2, 1], &[1, 0]);
    let (o, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    assert_eq!((o, d), (vec![2.0, 1.0, 4.0, 3.0, 6.0, 5.0], vec![3, 2, 1]));
}

#[test]
fn gather_repeats_indices() {
    let g = ga(T::TensorQuant8AsymmSigned, &[3], 0, &[4], &[1, 1, 0, 2]);
    assert_eq!(run(g, &[&[-1.0, 5.0, -7.0]]).0, vec![5.0, 5.0, -1.0, -7.0]);
}

#[test]
fn gather_index_out_of_range_fails_at_execution() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let ax = b.int(0);
    let i = b.input(T::TensorInt32, &[1]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Gather, &[x, ax, i], &[o]);
    assert_has(
        &exec_err(b.g, &[&[1.0, 2.0, 3.0], &[3.0]]),
        "index 3 outside [0, 3)",
    );
}

#[test]
fn gather_refuses_a_negative_constant_index() {
    assert_has(
        &refused(ga(T::TensorFloat32, &[3], 0, &[1], &[-1])),
        "indices must be >= 0",
    );
}

#[test]
fn gather_refuses_an_axis_beyond_the_rank() {
    assert_has(
        &refused(ga(T::TensorFloat32, &[3, 2], 2, &[1], &[0])),
        "axis 2 out of range",
    );
}

#[test]
fn gather_refuses_float_indices() {
    let g = graph(O::Gather, T::TensorFloat32, &[3], 0, |b| {
        vec![b.int(0), b.f32c(&[1], &[0.0])]
    });
    assert_has(&refused(g), "indices");
}

// ---- SPLIT -----------------------------------------------------------------------------------

fn sp(ty: T, dims: &[u32], axis: i32, n: i32, outs: usize) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let a = b.int(axis);
    let k = b.int(n);
    let os: Vec<u32> = (0..outs).map(|_| b.output(ty, &[])).collect();
    if ty.is_quantized() {
        b.q(x, 0.25, 1);
        for &o in &os {
            b.q(o, 0.25, 1);
        }
    }
    b.op(O::Split, &[x, a, k], &os);
    b.g
}

#[test]
fn split_into_three_along_the_last_axis_in_every_type() {
    for ty in FQI {
        let outs = run_all(sp(ty, &[2, 3], 1, 3, 3), &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
        let want: Vec<(Vec<f32>, Vec<u32>)> = vec![
            (vec![1.0, 4.0], vec![2, 1]),
            (vec![2.0, 5.0], vec![2, 1]),
            (vec![3.0, 6.0], vec![2, 1]),
        ];
        assert_eq!(outs, want, "{ty:?}");
    }
}

#[test]
fn split_with_negative_axis() {
    let outs = run_all(
        sp(T::TensorFloat32, &[2, 2], -2, 2, 2),
        &[&[1.0, 2.0, 3.0, 4.0]],
    );
    assert_eq!(
        outs,
        vec![(vec![1.0, 2.0], vec![1, 2]), (vec![3.0, 4.0], vec![1, 2])]
    );
}

#[test]
fn split_into_one_copies_the_input() {
    let outs = run_all(
        sp(T::TensorQuant8AsymmSigned, &[3], 0, 1, 1),
        &[&[-3.0, 0.0, 3.0]],
    );
    assert_eq!(outs, vec![(vec![-3.0, 0.0, 3.0], vec![3])]);
}

#[test]
fn split_refuses_num_splits_different_from_the_outputs() {
    assert_has(
        &refused(sp(T::TensorFloat32, &[4], 0, 2, 3)),
        "num_splits is 2 but 3 outputs",
    );
}

#[test]
fn split_refuses_zero_splits() {
    assert_has(
        &refused(sp(T::TensorFloat32, &[4], 0, 0, 1)),
        "num_splits must be > 0",
    );
}

#[test]
fn split_indivisible_extent_fails_at_execution() {
    let g = sp(T::TensorFloat32, &[3], 0, 2, 2);
    assert_has(
        &exec_err(g, &[&[1.0, 2.0, 3.0]]),
        "not a multiple of num_splits 2",
    );
}

#[test]
fn split_refuses_an_output_with_other_quantization() {
    let mut g = sp(T::TensorQuant8Asymm, &[4], 0, 2, 2);
    let o = g.output_indexes[1] as usize;
    g.operands[o].scale = 1.0;
    assert_has(&refused(g), "output 1 scale and zero point");
}

// ---- EXPAND_DIMS -----------------------------------------------------------------------------

fn ed(ty: T, dims: &[u32], axis: i32) -> Graph {
    graph(O::ExpandDims, ty, dims, 0, |b| vec![b.int(axis)])
}

#[test]
fn expand_dims_inserts_a_unit_axis_in_every_type() {
    for ty in FQI {
        let (o, d) = run(ed(ty, &[2, 3], 0), &[&iota(6, 0.0)]);
        assert_eq!((o, d), (iota(6, 0.0), vec![1, 2, 3]), "{ty:?}");
    }
}

#[test]
fn expand_dims_at_the_end_and_negative_axes() {
    assert_eq!(
        run(ed(T::TensorFloat32, &[2, 3], 2), &[&iota(6, 0.0)]).1,
        vec![2, 3, 1]
    );
    assert_eq!(
        run(ed(T::TensorFloat32, &[2, 3], -1), &[&iota(6, 0.0)]).1,
        vec![2, 3, 1]
    );
    assert_eq!(
        run(ed(T::TensorFloat32, &[2, 3], -3), &[&iota(6, 0.0)]).1,
        vec![1, 2, 3]
    );
}

#[test]
fn expand_dims_refuses_an_axis_beyond_rank_plus_one() {
    assert_has(
        &refused(ed(T::TensorFloat32, &[2, 3], 3)),
        "axis 3 out of range for rank 3",
    );
    assert_has(
        &refused(ed(T::TensorFloat32, &[2, 3], -4)),
        "axis -4 out of range",
    );
}

// ---- PAD_V2 ----------------------------------------------------------------------------------

fn pv(ty: T, dims: &[u32], zp: i32, pads: &[i32], value: f32) -> Graph {
    let r = dims.len() as u32;
    graph(O::PadV2, ty, dims, zp, |b| {
        let p = b.i32c(&[r, 2], pads);
        let v = match ty {
            T::TensorFloat32 => b.float(value),
            T::TensorFloat16 => b.konst(T::Float16, &[], enc(T::Float16, &[value])),
            _ => b.int(value as i32),
        };
        vec![p, v]
    })
}

#[test]
fn pad_v2_pads_with_the_value_in_every_type() {
    // [1, 2] padded one row above and one column to the right.
    for (ty, v) in [
        (T::TensorFloat32, 9.5),
        (T::TensorFloat16, -2.5),
        (T::TensorQuant8Asymm, 200.0),
        (T::TensorQuant8AsymmSigned, -100.0),
    ] {
        let (o, d) = run(pv(ty, &[1, 2], 3, &[1, 0, 0, 1], v), &[&[1.0, 2.0]]);
        assert_eq!(d, vec![2, 3], "{ty:?}");
        assert_eq!(o, vec![v, v, v, 1.0, 2.0, v], "{ty:?}");
    }
}

#[test]
fn pad_v2_of_a_4d_tensor_on_every_side() {
    let (o, d) = run(
        pv(
            T::TensorFloat32,
            &[1, 1, 1, 1],
            0,
            &[0, 0, 1, 1, 1, 0, 0, 0],
            0.5,
        ),
        &[&[4.0]],
    );
    assert_eq!(d, vec![1, 3, 2, 1]);
    assert_eq!(o, vec![0.5, 0.5, 0.5, 4.0, 0.5, 0.5]);
}

#[test]
fn pad_v2_refuses_a_pad_value_of_the_wrong_type() {
    let g = graph(O::PadV2, T::TensorFloat16, &[2], 0, |b| {
        vec![b.i32c(&[1, 2], &[1, 1]), b.float(1.0)]
    });
    assert_has(&refused(g), "pad_value) must be FLOAT16");
}

#[test]
fn pad_v2_refuses_a_quantized_pad_value_outside_the_type() {
    let g = pv(T::TensorQuant8Asymm, &[2], 0, &[1, 1], 256.0);
    assert_has(&refused(g), "pad_value 256 outside");
    let g = pv(T::TensorQuant8AsymmSigned, &[2], 0, &[1, 1], -129.0);
    assert_has(&refused(g), "pad_value -129 outside");
}

#[test]
fn pad_v2_quantized_pad_value_from_an_input_is_checked_at_execution() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1]);
    b.q(x, 1.0, 0);
    let p = b.i32c(&[1, 2], &[1, 0]);
    let v = b.input(T::Int32, &[]);
    let o = b.output(T::TensorQuant8Asymm, &[]);
    b.q(o, 1.0, 0);
    b.op(O::PadV2, &[x, p, v], &[o]);
    assert_has(&exec_err(b.g, &[&[1.0], &[-1.0]]), "pad_value -1 outside");
}

#[test]
fn pad_v2_refuses_negative_padding() {
    assert_has(
        &refused(pv(T::TensorFloat32, &[2], 0, &[-1, 0], 0.0)),
        "paddings must be >= 0",
    );
}

#[test]
fn pad_v2_refuses_paddings_of_the_wrong_shape() {
    let g = graph(O::PadV2, T::TensorFloat32, &[2, 2], 0, |b| {
        vec![b.i32c(&[1, 2], &[1, 1]), b.float(0.0)]
    });
    assert_has(&refused(g), "paddings must have shape [2, 2]");
}

// ---- TILE ------------------------------------------------------------------------------------

fn ti(ty: T, dims: &[u32], m: &[i32]) -> Graph {
    graph(O::Tile, ty, dims, 0, |b| vec![b.i32c(&[m.len() as u32], m)])
}

#[test]
fn tile_repeats_a_vector_in_every_type() {
    for ty in FQI {
        let (o, d) = run(ti(ty, &[2], &[3]), &[&[1.0, 2.0]]);
        assert_eq!((o, d), (vec![1., 2., 1., 2., 1., 2.], vec![6]), "{ty:?}");
    }
}

#[test]
fn tile_repeats_each_axis() {
    // [[1, 2], [3, 4]] tiled [2, 1]: the rows twice; tiled [1, 2]: each row twice over.
    let (o, d) = run(ti(T::TensorFloat32, &[2, 2], &[2, 1]), &[&[1., 2., 3., 4.]]);
    assert_eq!((o, d), (vec![1., 2., 3., 4., 1., 2., 3., 4.], vec![4, 2]));
    let (o, d) = run(ti(T::TensorFloat32, &[2, 2], &[1, 2]), &[&[1., 2., 3., 4.]]);
    assert_eq!((o, d), (vec![1., 2., 1., 2., 3., 4., 3., 4.], vec![2, 4]));
}

#[test]
fn tile_refuses_multiples_of_the_wrong_length() {
    assert_has(
        &refused(ti(T::TensorFloat32, &[2, 2], &[2])),
        "multiples has 1 entries",
    );
}

#[test]
fn tile_refuses_negative_multiples() {
    assert_has(
        &refused(ti(T::TensorFloat32, &[2], &[-1])),
        "multiples must be >= 0",
    );
}

#[test]
fn tile_too_large_fails_at_execution() {
    let g = ti(T::TensorFloat32, &[2], &[i32::MAX]);
    assert_has(&exec_err(g, &[&[1.0, 2.0]]), "too large");
}

// ---- CHANNEL_SHUFFLE -------------------------------------------------------------------------

fn cs(ty: T, dims: &[u32], groups: i32, axis: i32) -> Graph {
    graph(O::ChannelShuffle, ty, dims, 0, |b| {
        vec![b.int(groups), b.int(axis)]
    })
}

#[test]
fn channel_shuffle_interleaves_groups_in_every_type() {
    // Channels [0 1 2 | 3 4 5] in 2 groups → [0 3 1 4 2 5].
    for ty in FQ {
        let (o, d) = run(cs(ty, &[1, 6], 2, -1), &[&iota(6, 0.0)]);
        assert_eq!((o, d), (vec![0., 3., 1., 4., 2., 5.], vec![1, 6]), "{ty:?}");
    }
}

#[test]
fn channel_shuffle_three_groups() {
    // [0 1 | 2 3 | 4 5] → [0 2 4 1 3 5].
    let (o, _) = run(cs(T::TensorFloat32, &[6], 3, 0), &[&iota(6, 0.0)]);
    assert_eq!(o, vec![0., 2., 4., 1., 3., 5.]);
}

#[test]
fn channel_shuffle_along_the_first_axis_moves_rows() {
    let (o, _) = run(cs(T::TensorFloat32, &[4, 2], 2, 0), &[&iota(8, 0.0)]);
    assert_eq!(o, vec![0., 1., 4., 5., 2., 3., 6., 7.]);
}

#[test]
fn channel_shuffle_refuses_zero_groups() {
    assert_has(
        &refused(cs(T::TensorFloat32, &[4], 0, 0)),
        "num_groups must be > 0",
    );
}

#[test]
fn channel_shuffle_refuses_an_axis_beyond_the_rank() {
    assert_has(
        &refused(cs(T::TensorFloat32, &[4], 2, 1)),
        "axis 1 out of range",
    );
}

#[test]
fn channel_shuffle_indivisible_channels_fail_at_execution() {
    let g = cs(T::TensorFloat32, &[5], 2, 0);
    assert_has(
        &exec_err(g, &[&iota(5, 0.0)]),
        "not a multiple of num_groups 2",
    );
}

// ---- FILL ------------------------------------------------------------------------------------

fn fi(out: T, dims: &[i32], value_ty: T, value: f32) -> Graph {
    let mut b = B::new();
    let d = b.i32c(&[dims.len() as u32], dims);
    let v = b.konst(value_ty, &[], enc(value_ty, &[value]));
    let o = b.output(out, &[]);
    b.op(O::Fill, &[d, v], &[o]);
    b.g
}

#[test]
fn fill_writes_the_value_in_every_type() {
    for (out, vt, v) in [
        (T::TensorFloat32, T::Float32, 1.5),
        (T::TensorFloat16, T::Float16, -0.5),
        (T::TensorInt32, T::Int32, 7.0),
    ] {
        let (o, d) = run(fi(out, &[2, 3], vt, v), &[]);
        assert_eq!((o, d), (vec![v; 6], vec![2, 3]), "{out:?}");
    }
}

#[test]
fn fill_with_dims_from_an_input() {
    let mut b = B::new();
    let d = b.input(T::TensorInt32, &[1]);
    let v = b.int(-4);
    let o = b.output(T::TensorInt32, &[]);
    b.op(O::Fill, &[d, v], &[o]);
    assert_eq!(run(b.g, &[&[3.0]]), (vec![-4.0; 3], vec![3]));
}

#[test]
fn fill_negative_dims_from_an_input_fail_at_execution() {
    let mut b = B::new();
    let d = b.input(T::TensorInt32, &[1]);
    let v = b.int(0);
    let o = b.output(T::TensorInt32, &[]);
    b.op(O::Fill, &[d, v], &[o]);
    assert_has(&exec_err(b.g, &[&[-2.0]]), "dims[0] = -2 must be >= 0");
}

#[test]
fn fill_refuses_negative_constant_dims() {
    assert_has(
        &refused(fi(T::TensorInt32, &[2, -1], T::Int32, 0.0)),
        "dims must be >= 0",
    );
}

#[test]
fn fill_refuses_a_value_of_the_wrong_type() {
    assert_has(
        &refused(fi(T::TensorFloat32, &[2], T::Int32, 0.0)),
        "(value) must be FLOAT32",
    );
}

#[test]
fn fill_refuses_a_quantized_output() {
    let mut g = fi(T::TensorQuant8Asymm, &[2], T::Int32, 0.0);
    let o = g.output_indexes[0] as usize;
    g.operands[o].scale = 1.0;
    assert_has(&refused(g), "output type");
}

#[test]
fn fill_too_large_fails_at_execution() {
    let g = fi(T::TensorInt32, &[65536, 65536], T::Int32, 0.0);
    assert_has(&exec_err(g, &[]), "too large");
}

// ---- RANK ------------------------------------------------------------------------------------

fn rk(ty: T, dims: &[u32], out: T) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    if ty.is_quantized() {
        b.q(x, 1.0, 0);
    }
    let o = b.output(out, &[]);
    b.op(O::Rank, &[x], &[o]);
    b.g
}

#[test]
fn rank_counts_dimensions_of_any_tensor_type() {
    for (ty, dims) in [
        (T::TensorFloat32, &[2u32, 3, 4][..]),
        (T::TensorFloat16, &[5][..]),
        (T::TensorInt32, &[1, 1][..]),
        (T::TensorQuant8Asymm, &[1, 2, 1, 1][..]),
        (T::TensorQuant8AsymmSigned, &[2, 2][..]),
        (T::TensorBool8, &[3, 1, 1][..]),
    ] {
        let n: usize = dims.iter().map(|&d| d as usize).product();
        let (o, d) = run(rk(ty, dims, T::Int32), &[&vec![0.0; n]]);
        assert_eq!((o, d), (vec![dims.len() as f32], vec![]), "{ty:?}");
    }
}

#[test]
fn rank_refuses_a_tensor_output() {
    assert_has(
        &refused(rk(T::TensorFloat32, &[2], T::TensorInt32)),
        "must be INT32",
    );
}

#[test]
fn rank_refuses_a_second_input() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2]);
    let y = b.int(0);
    let o = b.output(T::Int32, &[]);
    b.op(O::Rank, &[x, y], &[o]);
    assert_has(&refused(b.g), "2 inputs given");
}

// ---- SQUEEZE (kernel in shape.rs) ------------------------------------------------------------

#[test]
fn squeeze_with_an_empty_axes_tensor_squeezes_nothing() {
    // NNAPI: only an omitted squeeze-dims operand squeezes every unit dimension; a present
    // but empty list squeezes none. The empty list comes from FILL(dims = [0]).
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2]);
    let d = b.i32c(&[1], &[0]);
    let v = b.int(0);
    let axes = b.temp(T::TensorInt32, &[0]);
    b.op(O::Fill, &[d, v], &[axes]);
    let o = b.output(T::TensorFloat32, &[1, 2]);
    b.op(O::Squeeze, &[x, axes], &[o]);
    assert_eq!(run(b.g, &[&[1.0, 2.0]]), (vec![1.0, 2.0], vec![1, 2]));
}

#[test]
fn squeeze_negative_axes_to_rank_zero() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 1]);
    let axes = b.i32c(&[2], &[-1, 0]);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Squeeze, &[x, axes], &[o]);
    assert_eq!(run(b.g, &[&[3.0]]), (vec![3.0], vec![]));
}

#[test]
fn squeeze_with_a_no_value_axes_operand_squeezes_every_unit_dimension() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2, 1]);
    let axes = b.add(T::TensorInt32, &[], Lifetime::NoValue);
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::Squeeze, &[x, axes], &[o]);
    assert_eq!(run(b.g, &[&[1.0, 2.0]]), (vec![1.0, 2.0], vec![2]));
}

// ---- Value-dependent rules with arguments given at execution ---------------------------------

/// A graph of `op` on a float32 input of `dims` whose other arguments are graph inputs of the
/// types and shapes in `args` (run with the values given to `exec_err`).
fn with_inputs(op: O, dims: &[u32], args: &[(T, &[u32])], outs: usize) -> Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, dims);
    let mut ins = vec![x];
    for &(t, d) in args {
        ins.push(b.input(t, d));
    }
    let os: Vec<u32> = (0..outs).map(|_| b.output(T::TensorFloat32, &[])).collect();
    b.op(op, &ins, &os);
    b.g
}

#[test]
fn strided_slice_mask_beyond_the_rank_from_an_input_fails_at_execution() {
    let l: &[u32] = &[1];
    let g = with_inputs(
        O::StridedSlice,
        &[3],
        &[
            (T::TensorInt32, l),
            (T::TensorInt32, l),
            (T::TensorInt32, l),
            (T::Int32, &[]),
            (T::Int32, &[]),
            (T::Int32, &[]),
        ],
        1,
    );
    let m = exec_err(
        g,
        &[&[1., 2., 3.], &[0.], &[3.], &[1.], &[2.], &[0.], &[0.]],
    );
    assert_has(&m, "begin_mask has bits beyond rank 1");
}

#[test]
fn slice_negative_size_from_an_input_fails_at_execution() {
    let g = with_inputs(
        O::Slice,
        &[3],
        &[(T::TensorInt32, &[1]), (T::TensorInt32, &[1])],
        1,
    );
    let m = exec_err(g, &[&[1., 2., 3.], &[0.], &[-2.]]);
    assert_has(&m, "size[0] = -2 must be >= 0 or -1");
}

#[test]
fn space_to_batch_zero_block_and_negative_padding_from_inputs_fail_at_execution() {
    let args: &[(T, &[u32])] = &[(T::TensorInt32, &[2]), (T::TensorInt32, &[2, 2])];
    let x = iota(4, 0.0);
    let g = with_inputs(O::SpaceToBatchNd, &[1, 2, 2, 1], args, 1);
    assert_has(
        &exec_err(g, &[&x, &[0., 1.], &[0.; 4]]),
        "entries must be >= 1",
    );
    let g = with_inputs(O::SpaceToBatchNd, &[1, 2, 2, 1], args, 1);
    assert_has(
        &exec_err(g, &[&x, &[1., 1.], &[0., 0., -1., 0.]]),
        "must be >= 0",
    );
}

#[test]
fn space_to_batch_huge_padding_fails_at_execution_without_allocating() {
    let args: &[(T, &[u32])] = &[(T::TensorInt32, &[2]), (T::TensorInt32, &[2, 2])];
    let g = with_inputs(O::SpaceToBatchNd, &[1, 1, 1, 1], args, 1);
    let big = i32::MAX as f32;
    assert_has(
        &exec_err(g, &[&[1.], &[1., 1.], &[big, 0., big, 0.]]),
        "too large",
    );
}

#[test]
fn batch_to_space_huge_block_fails_at_execution() {
    let g = with_inputs(
        O::BatchToSpaceNd,
        &[1, 1, 1, 1],
        &[(T::TensorInt32, &[2])],
        1,
    );
    let big = i32::MAX as f32;
    assert_has(&exec_err(g, &[&[1.], &[big, big]]), "multiple of the block");
}

#[test]
fn gather_axis_from_an_input_out_of_range_fails_at_execution() {
    let g = with_inputs(
        O::Gather,
        &[3],
        &[(T::Int32, &[]), (T::TensorInt32, &[1])],
        1,
    );
    assert_has(
        &exec_err(g, &[&[1., 2., 3.], &[-2.], &[0.]]),
        "axis -2 out of range",
    );
}

#[test]
fn split_num_splits_from_an_input_must_match_the_outputs() {
    let g = with_inputs(O::Split, &[4], &[(T::Int32, &[]), (T::Int32, &[])], 2);
    assert_has(
        &exec_err(g, &[&[1., 2., 3., 4.], &[0.], &[4.]]),
        "num_splits is 4 but 2 outputs",
    );
}

#[test]
fn expand_dims_axis_from_an_input_out_of_range_fails_at_execution() {
    let g = with_inputs(O::ExpandDims, &[3], &[(T::Int32, &[])], 1);
    assert_has(
        &exec_err(g, &[&[1., 2., 3.], &[2.]]),
        "axis 2 out of range for rank 2",
    );
}

#[test]
fn channel_shuffle_zero_groups_from_an_input_fail_at_execution() {
    let g = with_inputs(
        O::ChannelShuffle,
        &[4],
        &[(T::Int32, &[]), (T::Int32, &[])],
        1,
    );
    assert_has(
        &exec_err(g, &[&[1., 2., 3., 4.], &[0.], &[0.]]),
        "num_groups must be > 0",
    );
}

#[test]
fn tile_negative_multiple_from_an_input_fails_at_execution() {
    let g = with_inputs(O::Tile, &[2], &[(T::TensorInt32, &[1])], 1);
    assert_has(
        &exec_err(g, &[&[1., 2.], &[-1.]]),
        "multiples[0] = -1 must be >= 0",
    );
}

#[test]
fn pad_v2_negative_padding_from_an_input_fails_at_execution() {
    let g = with_inputs(
        O::PadV2,
        &[2],
        &[(T::TensorInt32, &[1, 2]), (T::Float32, &[])],
        1,
    );
    assert_has(
        &exec_err(g, &[&[1., 2.], &[0., -1.], &[0.]]),
        "must be >= 0",
    );
}

#[test]
fn movement_operations_refuse_bool_tensors_as_unsupported() {
    for op in [O::Gather, O::ExpandDims, O::Tile] {
        let mut b = B::new();
        let x = b.input(T::TensorBool8, &[2]);
        let a = match op {
            O::Tile => b.i32c(&[1], &[1]),
            _ => b.int(0),
        };
        let mut ins = vec![x, a];
        if op == O::Gather {
            ins.push(b.i32c(&[1], &[0]));
        }
        let o = b.output(T::TensorBool8, &[]);
        b.op(op, &ins, &[o]);
        assert!(
            matches!(PreparedGraph::new(b.g), Err(GraphError::Unsupported { .. })),
            "{op:?}"
        );
    }
}

#[test]
fn pad_v2_on_int32_is_unsupported_not_invalid() {
    let g = graph(O::PadV2, T::TensorInt32, &[2], 0, |b| {
        vec![b.i32c(&[1, 2], &[1, 1]), b.int(0)]
    });
    assert!(matches!(
        PreparedGraph::new(g),
        Err(GraphError::Unsupported { .. })
    ));
}

#[test]
fn rank_refuses_a_scalar_input() {
    let mut b = B::new();
    let x = b.int(3);
    let o = b.output(T::Int32, &[]);
    b.op(O::Rank, &[x], &[o]);
    assert_has(&refused(b.g), "is not a tensor");
}

#[test]
fn strided_slice_output_declared_with_unknown_extents_gets_its_shape_at_execution() {
    let mut g = ss(
        T::TensorFloat32,
        &[2, 3],
        [&[0, 1], &[2, 3], &[1, 1]],
        [0, 0, 0],
    );
    let o = g.output_indexes[0] as usize;
    g.operands[o].dimensions = vec![0, 0];
    let (v, d) = run(g, &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]);
    assert_eq!((v, d), (vec![2.0, 3.0, 5.0, 6.0], vec![2, 2]));
}

#[test]
fn strided_slice_output_declared_with_the_wrong_shape_fails_at_execution() {
    let mut g = ss(
        T::TensorFloat32,
        &[2, 3],
        [&[0, 1], &[2, 3], &[1, 1]],
        [0, 0, 0],
    );
    let o = g.output_indexes[0] as usize;
    g.operands[o].dimensions = vec![2, 3];
    assert_has(&exec_err(g, &[&iota(6, 0.0)]), "declared [2, 3]");
}

#[test]
fn strided_slice_begin_of_the_wrong_length_from_an_input_fails_at_execution() {
    // begin's length is unknown in the model (extent 0), so only execution can check it.
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[3]);
    let be = b.input(T::TensorInt32, &[0]);
    let en = b.i32c(&[1], &[3]);
    let st = b.i32c(&[1], &[1]);
    let m = [b.int(0), b.int(0), b.int(0)];
    let o = b.output(T::TensorFloat32, &[]);
    b.op(O::StridedSlice, &[x, be, en, st, m[0], m[1], m[2]], &[o]);
    let p = PreparedGraph::new(b.g).unwrap();
    let (xd, bd) = (fb(&[1., 2., 3.]), enc(T::TensorInt32, &[0., 0.]));
    let args = [
        InputArg::Value {
            data: &xd,
            dimensions: vec![],
        },
        InputArg::Value {
            data: &bd,
            dimensions: vec![2],
        },
    ];
    let mut out = [0u8; 64];
    match p.execute(&[], &args, &mut [&mut out[..]]) {
        Err(ExecError::InvalidArgument(m)) => assert_has(&m, "begin must have shape [1], has [2]"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn gather_negative_index_from_an_input_fails_at_execution() {
    let g = with_inputs(
        O::Gather,
        &[3],
        &[(T::Int32, &[]), (T::TensorInt32, &[2])],
        1,
    );
    assert_has(
        &exec_err(g, &[&[1., 2., 3.], &[0.], &[0., -1.]]),
        "index -1 outside [0, 3)",
    );
}

#[test]
fn split_outputs_feed_later_operations() {
    // SPLIT's second output feeds EXPAND_DIMS: multi-output values reach their readers.
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[4]);
    let a = b.int(0);
    let n = b.int(2);
    let s0 = b.output(T::TensorFloat32, &[]);
    let s1 = b.temp(T::TensorFloat32, &[0]);
    b.op(O::Split, &[x, a, n], &[s0, s1]);
    let ax = b.int(0);
    let e = b.output(T::TensorFloat32, &[]);
    b.op(O::ExpandDims, &[s1, ax], &[e]);
    let outs = run_all(b.g, &[&[1., 2., 3., 4.]]);
    assert_eq!(
        outs,
        vec![(vec![1., 2.], vec![2]), (vec![3., 4.], vec![1, 2])]
    );
}
