//! Execution inputs read, and outputs written, where the caller holds them (`tensor::Buf`,
//! `tensor::Place`), and the copies made when they cannot be.

use zerocopy::IntoBytes;

use crate::error::ExecError;
use crate::tensor::io_bytes_copied_on_this_thread;
use crate::test_support::*;
use crate::*;
use OperandType as T;
use OperationType as O;

/// Input channels, output channels and pixels of the 1×1 convolution below.
const C: usize = 8;
const OC: usize = 16;
const PIXELS: usize = 16;
const IN_DIMS: [u32; 4] = [1, 4, 4, C as u32];
const OUT_DIMS: [u32; 4] = [1, 4, 4, OC as u32];

fn weights() -> Vec<f32> {
    (0..OC * C).map(|i| ((i * 5) % 9) as f32 - 4.0).collect()
}

fn bias() -> Vec<f32> {
    (0..OC).map(|o| o as f32 - 8.0).collect()
}

fn input() -> Vec<f32> {
    (0..PIXELS * C)
        .map(|i| ((i * 3) % 7) as f32 - 3.0)
        .collect()
}

/// The convolution's output, summed plainly (small integers: exact in float32 and float16).
fn expected() -> Vec<f32> {
    let (x, w, bias) = (input(), weights(), bias());
    (0..PIXELS * OC)
        .map(|i| {
            let (p, o) = (i / OC, i % OC);
            let dot: f32 = (0..C).map(|c| x[p * C + c] * w[o * C + c]).sum();
            bias[o] + dot
        })
        .collect()
}

/// `CONV_2D` 1×1 (SAME padding, stride 1, no activation) of input `x` into a new operand.
fn conv_1x1(b: &mut B, ty: OperandType, x: u32, out: u32) {
    let f = b.konst(
        ty,
        &[OC as u32, 1, 1, C as u32],
        float_bytes(ty, &weights()),
    );
    let bi = b.konst(ty, &[OC as u32], float_bytes(ty, &bias()));
    let args = [1, 1, 1, 0].map(|v| b.int(v));
    b.op(
        O::Conv2d,
        &[x, f, bi, args[0], args[1], args[2], args[3]],
        &[out],
    );
}

/// A graph of one convolution from its input to its output.
fn conv_model(ty: OperandType) -> PreparedGraph {
    let mut b = B::new();
    let x = b.input(ty, &IN_DIMS);
    let o = b.output(ty, &OUT_DIMS);
    conv_1x1(&mut b, ty, x, o);
    PreparedGraph::new(b.g).unwrap()
}

/// Runs `p` on one input into `outs`; the execution's result and the bytes it copied.
fn run(
    p: &PreparedGraph,
    x: &[u8],
    outs: &mut [&mut [u8]],
) -> (Result<Vec<OutputShape>, ExecError>, usize) {
    let before = io_bytes_copied_on_this_thread();
    let args = [InputArg::Value {
        data: x,
        dimensions: vec![],
    }];
    let r = p.execute(&[], &args, outs);
    (r, io_bytes_copied_on_this_thread() - before)
}

/// `len` bytes at an address that is not a multiple of 4, inside `store`.
fn misaligned(store: &mut Vec<u8>, len: usize) -> &mut [u8] {
    store.resize(len + 4, 0);
    let skip = (0..4)
        .find(|k| (store.as_ptr() as usize + k) % 4 == 1)
        .unwrap();
    &mut store[skip..skip + len]
}

#[test]
fn a_convolution_reads_its_input_and_writes_its_output_where_the_caller_holds_them() {
    let p = conv_model(T::TensorFloat32);
    let x = input();
    let mut out = vec![f32::NAN; PIXELS * OC];
    let (r, copied) = run(&p, x.as_bytes(), &mut [out.as_mut_bytes()]);
    r.unwrap();
    assert_eq!(copied, 0);
    assert_eq!(out, expected());
}

#[test]
fn misaligned_input_and_output_bytes_are_copied_and_give_the_same_values() {
    let p = conv_model(T::TensorFloat32);
    let in_bytes = fb(&input());
    let mut in_store = Vec::new();
    let x = misaligned(&mut in_store, in_bytes.len());
    x.copy_from_slice(&in_bytes);
    let x = &*x;
    let mut out = vec![0f32; PIXELS * OC];
    let (r, copied) = run(&p, x, &mut [out.as_mut_bytes()]);
    r.unwrap();
    assert_eq!(
        copied,
        in_bytes.len(),
        "the input is copied, the output is not"
    );
    assert_eq!(out, expected());

    let mut out_store = Vec::new();
    let out = misaligned(&mut out_store, PIXELS * OC * 4);
    let (r, copied) = run(&p, input().as_bytes(), &mut [&mut *out]);
    r.unwrap();
    assert_eq!(
        copied,
        PIXELS * OC * 4,
        "the output is copied, the input is not"
    );
    assert_eq!(bf(out), expected());
}

#[test]
fn an_output_written_in_place_leaves_the_bytes_past_it_and_a_short_one_is_refused() {
    let p = conv_model(T::TensorFloat32);
    let x = input();
    let mut out = vec![12345.0f32; PIXELS * OC + 5];
    let (r, copied) = run(&p, x.as_bytes(), &mut [out.as_mut_bytes()]);
    r.unwrap();
    assert_eq!(copied, 0);
    assert_eq!(out[..PIXELS * OC], expected()[..]);
    assert_eq!(out[PIXELS * OC..], [12345.0; 5]);

    let mut short = vec![0f32; PIXELS * OC - 1];
    let (r, _) = run(&p, x.as_bytes(), &mut [short.as_mut_bytes()]);
    match r {
        Err(ExecError::OutputInsufficientSize(shapes)) => {
            assert_eq!(shapes[0].dimensions, OUT_DIMS);
            assert!(!shapes[0].is_sufficient);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_output_read_by_a_later_operation_is_computed_in_place_and_read_there() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &IN_DIMS);
    let conv = b.output(T::TensorFloat32, &OUT_DIMS);
    let relu = b.output(T::TensorFloat32, &OUT_DIMS);
    conv_1x1(&mut b, T::TensorFloat32, x, conv);
    b.op(O::Relu, &[conv], &[relu]);
    let p = PreparedGraph::new(b.g).unwrap();
    let (mut out0, mut out1) = (vec![0f32; PIXELS * OC], vec![0f32; PIXELS * OC]);
    let (r, copied) = run(
        &p,
        input().as_bytes(),
        &mut [out0.as_mut_bytes(), out1.as_mut_bytes()],
    );
    r.unwrap();
    assert_eq!(
        copied,
        PIXELS * OC * 4,
        "RELU's output is copied, the conv's is not"
    );
    assert_eq!(out0, expected());
    let relu_want: Vec<f32> = expected().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(out1, relu_want);
}

#[test]
fn float16_inputs_and_outputs_are_converted_through_copies() {
    let p = conv_model(T::TensorFloat16);
    let x = f16_bytes(&input());
    let mut out = vec![0u8; PIXELS * OC * 2];
    let (r, copied) = run(&p, &x, &mut [&mut out[..]]);
    r.unwrap();
    assert_eq!(copied, x.len() + out.len());
    assert_eq!(f16_vals(&out), expected());
}

#[test]
fn the_outputs_of_a_referenced_graph_are_copied_not_written_in_the_roots_places() {
    let branch = || {
        let mut b = B::new();
        let x = b.input(T::TensorFloat32, &IN_DIMS);
        let o = b.output(T::TensorFloat32, &OUT_DIMS);
        conv_1x1(&mut b, T::TensorFloat32, x, o);
        b.g
    };
    let mut b = B::new();
    let cond = b.input(T::TensorBool8, &[1]);
    let x = b.input(T::TensorFloat32, &IN_DIMS);
    let (then, els) = (b.subgraph(0), b.subgraph(1));
    let o = b.output(T::TensorFloat32, &OUT_DIMS);
    b.op(O::If, &[cond, then, els, x], &[o]);
    b.g.referenced = vec![branch(), branch()];
    let p = PreparedGraph::new(b.g).unwrap();
    let mut out = vec![0f32; PIXELS * OC];
    let x = input();
    let args = [
        InputArg::Value {
            data: &[1],
            dimensions: vec![],
        },
        InputArg::Value {
            data: x.as_bytes(),
            dimensions: vec![],
        },
    ];
    let before = io_bytes_copied_on_this_thread();
    p.execute(&[], &args, &mut [out.as_mut_bytes()]).unwrap();
    assert_eq!(io_bytes_copied_on_this_thread() - before, PIXELS * OC * 4);
    assert_eq!(out, expected());
}
