//! Tests of `packed`: one packed copy per constant however many operations read it, and
//! weights in constant pools packed at preparation so that executions never pack.

#![allow(clippy::unwrap_used)]

use crate::InputArg;
use crate::PreparedGraph;
use crate::model::Lifetime;
use crate::model::{OperandType as T, OperationType as O};
use crate::ops::{Derived, made_on_this_thread as made};
use crate::packed::packings_on_this_thread;
use crate::test_support::{B, bf, close, fb};

/// FULLY_CONNECTED `[5, 3] x [2, 3]ᵀ` (5 rows: the GEMM path, which reads packed weights)
/// with float weights, and operand 1 the weights.
fn float_fc() -> crate::Graph {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[5, 3]);
    let w = b.f32c(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bias = b.f32c(&[2], &[0.5, -1.0]);
    let act = b.int(0);
    let o = b.output(T::TensorFloat32, &[5, 2]);
    b.op(O::FullyConnected, &[x, w, bias, act], &[o]);
    b.g
}

/// Constant 8-bit weights `[2][3]` (zero point 128: centered (1, 2, 3) and (-1, -2, -3)) and
/// bias (0, 20) of a FULLY_CONNECTED.
fn q8_weights(b: &mut B) -> (u32, u32) {
    let w = b.konst(
        T::TensorQuant8Asymm,
        &[2, 3],
        vec![129, 130, 131, 127, 126, 125],
    );
    b.q(w, 1.0, 128);
    (w, b.i32c(&[2], &[0, 20]))
}

/// 8-bit FULLY_CONNECTED `[1, 3] x [2, 3]ᵀ` with [`q8_weights`].
fn q8_fc() -> crate::Graph {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 3]);
    b.q(x, 1.0, 0);
    let (w, bias) = q8_weights(&mut b);
    let act = b.int(0);
    let o = b.output(T::TensorQuant8Asymm, &[1, 2]);
    b.q(o, 1.0, 100);
    b.op(O::FullyConnected, &[x, w, bias, act], &[o]);
    b.g
}

fn run(p: &PreparedGraph, pools: &[&[u8]], input: &[u8], out_len: usize) -> Vec<u8> {
    let mut out = vec![0u8; out_len];
    let args = [InputArg::Value {
        data: input,
        dimensions: vec![],
    }];
    p.execute(pools, &args, &mut [&mut out[..]]).unwrap();
    out
}

/// `data` as an input of the model's dimensions.
fn arg(data: &[u8]) -> InputArg<'_> {
    InputArg::Value {
        data,
        dimensions: vec![],
    }
}

/// Two FULLY_CONNECTED (5 rows each, past the dot-product path, so both run the GEMM on the
/// packed weights) reading one constant `[2][3]` weights operand.
#[test]
fn shared_constant_weights_are_packed_once_and_serve_both_operations() {
    let mut b = B::new();
    let x1 = b.input(T::TensorFloat32, &[5, 3]);
    let x2 = b.input(T::TensorFloat32, &[5, 3]);
    let w = b.f32c(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bias = b.f32c(&[2], &[0.5, -1.0]);
    let act = b.int(0);
    let o1 = b.output(T::TensorFloat32, &[5, 2]);
    let o2 = b.output(T::TensorFloat32, &[5, 2]);
    b.op(O::FullyConnected, &[x1, w, bias, act], &[o1]);
    b.op(O::FullyConnected, &[x2, w, bias, act], &[o2]);
    let p = PreparedGraph::new(b.g).unwrap();
    // One packed copy (one panel of 16 columns × k = 3), not one per operation.
    assert_eq!(p.packed_weight_bytes(), 16 * 3 * 4);

    let in1 = fb(&[
        1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, -1.0,
    ]);
    let in2 = fb(&[
        1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, -1.0, 0.0, 1.0, 3.0, 1.0, 2.0,
    ]);
    let args = [arg(&in1), arg(&in2)];
    let (mut out1, mut out2) = (vec![0u8; 40], vec![0u8; 40]);
    p.execute(&[], &args, &mut [&mut out1[..], &mut out2[..]])
        .unwrap();
    // Row r: [x·(1,2,3) + 0.5, x·(4,5,6) - 1], worked by hand.
    close(
        &bf(&out1),
        &[1.5, 3.0, 2.5, 4.0, 3.5, 5.0, 6.5, 14.0, -0.5, 1.0],
    );
    close(
        &bf(&out2),
        &[-0.5, -2.0, 0.5, -1.0, 4.5, 9.0, 2.5, 1.0, 11.5, 28.0],
    );
}

/// A relaxed model's float weights are packed once, as halves, where the CPU computes in
/// float16 (here the portable float16 kernel, forced), and the executions read them: no
/// packing per execution, results within float16 rounding of the worked ones.
#[test]
fn a_relaxed_models_float_weights_are_packed_once_as_halves_for_the_float16_gemm() {
    use crate::ops::{HalfKernel, with_half_kernel};
    let relaxed = crate::Graph {
        relax_float32_to_float16: true,
        ..float_fc()
    };
    with_half_kernel(HalfKernel::Portable, || {
        let p = PreparedGraph::new(relaxed.clone()).unwrap();
        // One panel of 16 columns × k = 3 padded to 8, two bytes each.
        assert_eq!(p.packed_weight_bytes(), 16 * 8 * 2);
        let x = fb(&[
            1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.0, -1.0,
        ]);
        let before = packings_on_this_thread();
        let out = run(&p, &[], &x, 40);
        assert_eq!(
            packings_on_this_thread(),
            before,
            "no packing per execution"
        );
        // Row r: [x·(1,2,3) + 0.5, x·(4,5,6) - 1]; 0.1 is 0.0999755859375 as a half.
        let want = [1.5, 3.0, 2.5, 4.0, 3.5, 5.0, 6.5, 14.0, -2.4, -6.6];
        for (got, want) in bf(&out).iter().zip(want) {
            assert!((got - want).abs() <= 4e-3, "{got} vs {want}");
        }
    });
    // Without a float16 kernel a relaxed model packs for the float32 GEMM, as any other.
    if HalfKernel::detect().is_none() {
        let p = PreparedGraph::new(relaxed).unwrap();
        assert_eq!(p.packed_weight_bytes(), 16 * 3 * 4);
    }
}

/// Two 8-bit FULLY_CONNECTED reading one constant `[2][3]` weights operand: one packed copy
/// (one panel of 16 columns, K padded to 4: 2 pairs × 16 × 2 values, i8 since the centered
/// weights fit), results worked by hand.
#[test]
fn shared_constant_8bit_weights_are_packed_once_and_serve_both_operations() {
    let mut b = B::new();
    let x1 = b.input(T::TensorQuant8Asymm, &[1, 3]);
    let x2 = b.input(T::TensorQuant8Asymm, &[1, 3]);
    b.q(x1, 1.0, 0);
    b.q(x2, 1.0, 0);
    let (w, bias) = q8_weights(&mut b);
    let act = b.int(0);
    let o1 = b.output(T::TensorQuant8Asymm, &[1, 2]);
    let o2 = b.output(T::TensorQuant8Asymm, &[1, 2]);
    b.q(o1, 1.0, 100);
    b.q(o2, 1.0, 100);
    b.op(O::FullyConnected, &[x1, w, bias, act], &[o1]);
    b.op(O::FullyConnected, &[x2, w, bias, act], &[o2]);
    let p = PreparedGraph::new(b.g).unwrap();
    assert_eq!(p.packed_weight_bytes(), 2 * 16 * 2);
    let (in1, in2) = ([1u8, 2, 3], [0u8, 1, 2]);
    let args = [arg(&in1), arg(&in2)];
    let (mut out1, mut out2) = ([0u8; 2], [0u8; 2]);
    p.execute(&[], &args, &mut [&mut out1[..], &mut out2[..]])
        .unwrap();
    // Weights centered: (1, 2, 3) and (-1, -2, -3); output = 100 + dot + bias.
    assert_eq!(out1, [100 + 14, 100 - 14 + 20]);
    assert_eq!(out2, [100 + 8, 100 - 8 + 20]);
}

#[test]
fn distinct_constant_weights_are_packed_each() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[5, 3]);
    let w1 = b.f32c(&[2, 3], &[1.0; 6]);
    let w2 = b.f32c(&[1, 3], &[2.0; 3]);
    let b1 = b.f32c(&[2], &[0.0; 2]);
    let b2 = b.f32c(&[1], &[0.0]);
    let act = b.int(0);
    let t = b.temp(T::TensorFloat32, &[5, 2]);
    let o = b.output(T::TensorFloat32, &[5, 1]);
    b.op(O::FullyConnected, &[x, w1, b1, act], &[t]);
    b.op(O::FullyConnected, &[t, w2, b2, act], &[o]);
    let p = PreparedGraph::new(b.g).unwrap();
    // One panel of 16 columns × k = 3 each.
    assert_eq!(p.packed_weight_bytes(), (16 * 3 + 16 * 3) * 4);
}

/// `g` with operand 1 (the weights) moved out of its values into pool 0 at offset 8 (as
/// CONSTANT_REFERENCE), and that pool.
fn weights_in_pool(mut g: crate::Graph) -> (crate::Graph, Vec<u8>) {
    let Lifetime::ConstantCopy { offset, length } = g.operands[1].lifetime else {
        panic!("operand 1 is not a CONSTANT_COPY");
    };
    let pool = [&[0xAAu8; 8][..], &g.operand_values[offset..offset + length]].concat();
    g.operands[1].lifetime = Lifetime::ConstantReference {
        pool: 0,
        offset: 8,
        length,
    };
    (g, pool)
}

/// Weights passed by memory (CONSTANT_REFERENCE), as NNAPI apps pass large weights and as a
/// compilation-cache hit holds every large constant: packed once at preparation from the
/// pools, never by an execution, with the outputs of the same model holding them as values.
#[test]
fn weights_in_a_constant_pool_are_packed_at_preparation_and_never_by_executions() {
    let x = fb(&[
        1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, -1.0,
    ]);
    // Worked by hand: float rows [x·(1,2,3) + 0.5, x·(4,5,6) - 1]; 8-bit 100 + centered dot
    // + bias with centered weights (1, 2, 3) and (-1, -2, -3), bias (0, 20).
    let float_want = fb(&[1.5, 3.0, 2.5, 4.0, 3.5, 5.0, 6.5, 14.0, -0.5, 1.0]);
    for (g, input, want, packed_bytes) in [
        (float_fc(), x, float_want, 16 * 3 * 4),
        (
            q8_fc(),
            vec![1u8, 2, 3],
            vec![100 + 14, 100 - 14 + 20],
            2 * 16 * 2,
        ),
    ] {
        let (g, pool) = weights_in_pool(g);
        let pools: [&[u8]; 1] = [&pool];
        let before = packings_on_this_thread();
        let p = PreparedGraph::with_pools(g, &pools).unwrap();
        assert_eq!(
            packings_on_this_thread() - before,
            1,
            "packed at preparation"
        );
        assert_eq!(p.packed_weight_bytes(), packed_bytes);
        let before = packings_on_this_thread();
        for _ in 0..3 {
            assert_eq!(run(&p, &pools, &input, want.len()), want);
        }
        assert_eq!(
            packings_on_this_thread() - before,
            0,
            "packed by an execution"
        );
    }
}

/// The counter above can fail: an 8-bit model prepared without its pools (as before packing
/// at preparation) packs its pool weights on every execution.
#[test]
fn pool_weights_not_packed_at_preparation_are_packed_by_every_8bit_execution() {
    let (g, pool) = weights_in_pool(q8_fc());
    let p = PreparedGraph::new(g).unwrap();
    assert_eq!(p.packed_weight_bytes(), 0);
    let before = packings_on_this_thread();
    for _ in 0..3 {
        assert_eq!(run(&p, &[&pool], &[1, 2, 3], 2), [100 + 14, 100 - 14 + 20]);
    }
    assert_eq!(packings_on_this_thread() - before, 3);
}

/// A constant in a pool given at preparation is decoded there, once: executions check that
/// they pass the pool and the range, but read the value decoded at preparation (NNAPI forbids
/// changing it while the model is prepared), instead of copying it out of the pool each time.
/// Shown by passing, at execution, a pool whose weights were changed afterwards: the outputs
/// are still those of the weights given at preparation.
#[test]
fn pool_constants_given_at_preparation_are_decoded_there_and_not_read_again() {
    let x = fb(&[
        1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, -1.0,
    ]);
    // Worked by hand from the weights at preparation: rows [x·(1,2,3) + 0.5, x·(4,5,6) - 1].
    let want = fb(&[1.5, 3.0, 2.5, 4.0, 3.5, 5.0, 6.5, 14.0, -0.5, 1.0]);
    let (g, pool) = weights_in_pool(float_fc());
    let p = PreparedGraph::with_pools(g, &[&pool]).unwrap();
    let mut changed = pool.clone();
    changed[8..].fill(0);
    assert_eq!(run(&p, &[&changed], &x, want.len()), want);
    // The execution still checks what it is given: no pool, or a pool too short for the range.
    for pools in [&[][..], &[&pool[..8]][..]] {
        let mut out = vec![0u8; want.len()];
        let xs = [arg(&x)];
        let err = p.execute(pools, &xs, &mut [&mut out[..]]).unwrap_err();
        assert!(
            matches!(err, crate::ExecError::InvalidArgument(_)),
            "{err:?}"
        );
    }
}

/// The 8-bit epilogue (per-channel multipliers, bias, bounds) of an operation whose inputs but
/// the first are constants is made by the first execution and kept: later executions make
/// none, and compute the same outputs.
#[test]
fn an_8bit_epilogue_of_constant_operands_is_made_once_and_kept() {
    let p = PreparedGraph::new(q8_fc()).unwrap();
    let before = made(Derived::Epilogue);
    for x in [[1u8, 2, 3], [0, 0, 0], [1, 2, 3]] {
        // Worked by hand: 100 + centered dot + bias, with (1, 2, 3), (-1, -2, -3), (0, 20).
        let dot = i32::from(x[0]) + 2 * i32::from(x[1]) + 3 * i32::from(x[2]);
        let want = [(100 + dot) as u8, (100 - dot + 20) as u8];
        assert_eq!(run(&p, &[], &x, 2), want);
    }
    assert_eq!(made(Derived::Epilogue) - before, 1);
}

/// An 8-bit DEPTHWISE_CONV_2D of constant operands lays its filter out for the kernel once,
/// on the first execution, and keeps it with the epilogue: later executions lay out none and
/// compute the same outputs.
#[test]
fn an_8bit_depthwise_filter_of_constant_operands_is_laid_out_once_and_kept() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 1, 1, 16]);
    b.q(x, 1.0, 0);
    // A 1×1 filter: channel c times c % 3 (centered on 128).
    let f = b.konst(
        T::TensorQuant8Asymm,
        &[1, 1, 1, 16],
        (0..16).map(|c| 128 + c % 3).collect(),
    );
    b.q(f, 1.0, 128);
    let bias = b.i32c(&[16], &[1; 16]);
    let mut ins = vec![x, f, bias];
    // No padding, stride 1, multiplier 1, no activation.
    for v in [0, 0, 0, 0, 1, 1, 1, 0] {
        ins.push(b.int(v));
    }
    let o = b.output(T::TensorQuant8Asymm, &[1, 1, 1, 16]);
    b.q(o, 1.0, 0);
    b.op(O::DepthwiseConv2d, &ins, &[o]);
    let p = PreparedGraph::new(b.g).unwrap();
    let before = made(Derived::DepthwiseFilter);
    for shift in [0u8, 7, 0] {
        let x: Vec<u8> = (0..16).map(|c| c + shift).collect();
        let want: Vec<u8> = x
            .iter()
            .enumerate()
            .map(|(c, &v)| v * (c as u8 % 3) + 1)
            .collect();
        assert_eq!(run(&p, &[], &x, 16), want);
    }
    assert_eq!(made(Derived::DepthwiseFilter) - before, 1);
}

/// The counter above can fail, and a bias that is a model input is never kept: each
/// execution makes its epilogue from the bias it passes.
#[test]
fn an_epilogue_whose_bias_is_a_model_input_is_made_by_every_execution() {
    let mut b = B::new();
    let x = b.input(T::TensorQuant8Asymm, &[1, 3]);
    b.q(x, 1.0, 0);
    let (w, _) = q8_weights(&mut b);
    let bias = b.input(T::TensorInt32, &[2]);
    b.q(bias, 1.0, 0);
    let act = b.int(0);
    let o = b.output(T::TensorQuant8Asymm, &[1, 2]);
    b.q(o, 1.0, 100);
    b.op(O::FullyConnected, &[x, w, bias, act], &[o]);
    let p = PreparedGraph::new(b.g).unwrap();
    let before = made(Derived::Epilogue);
    for bias in [[0i32, 20], [5, -5], [0, 20]] {
        let bias_bytes: Vec<u8> = bias.iter().flat_map(|v| v.to_le_bytes()).collect();
        let args = [
            InputArg::Value {
                data: &[1, 2, 3],
                dimensions: vec![],
            },
            InputArg::Value {
                data: &bias_bytes,
                dimensions: vec![],
            },
        ];
        let mut out = [0u8; 2];
        p.execute(&[], &args, &mut [&mut out[..]]).unwrap();
        // 100 ± 14 (the centered dots) plus the bias passed.
        assert_eq!(out, [(114 + bias[0]) as u8, (86 + bias[1]) as u8]);
    }
    assert_eq!(made(Derived::Epilogue) - before, 3);
}
