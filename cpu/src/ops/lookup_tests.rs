//! EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION and RANDOM_MULTINOMIAL. Expected values
//! are written by hand, taken from AOSP's LSHProjectionTest, or printed by
//! cpu/testdata/lookup_gen.py (FarmHash via pyfarmhash).

use super::{farmhash::fingerprint64, philox4x32};
use crate::test_support::*;
use crate::{Graph, Lifetime, OperandType as T, OperationType as O, PreparedGraph};

// ---------------------------------------------------------------- EMBEDDING_LOOKUP

/// EMBEDDING_LOOKUP of constant lookups `look` into an input `values` of type `vt`.
fn embedding(look: &[i32], vt: T, vdims: &[u32], q: (f32, i32)) -> Graph {
    let mut b = B::new();
    let l = b.i32c(&[look.len() as u32], look);
    let v = b.input(vt, vdims);
    b.q(v, q.0, q.1);
    let mut od = vdims.to_vec();
    od[0] = look.len() as u32;
    let o = b.output(vt, &od);
    b.q(o, q.0, q.1);
    b.op(O::EmbeddingLookup, &[l, v], &[o]);
    b.g
}

#[test]
fn embedding_lookup_float32_gathers_rows_in_lookup_order() {
    let g = embedding(&[2, 0, 2], T::TensorFloat32, &[3, 2], (0.0, 0));
    let r = run_outputs(g, &[fb(&[0.0, 0.1, 1.0, 1.1, 2.0, 2.1])]).unwrap();
    assert_eq!(r[0].1, vec![3, 2]);
    assert_eq!(bf(&r[0].0), vec![2.0, 2.1, 0.0, 0.1, 2.0, 2.1]);
}

#[test]
fn embedding_lookup_float16_rank3_values() {
    let g = embedding(&[1], T::TensorFloat16, &[2, 2, 2], (0.0, 0));
    let r = run_outputs(g, &[f16_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5])]).unwrap();
    assert_eq!(r[0].1, vec![1, 2, 2]);
    assert_eq!(f16_vals(&r[0].0), vec![5.0, 6.0, 7.0, 8.5]);
}

#[test]
fn embedding_lookup_int32_values() {
    let g = embedding(&[0, 1, 0], T::TensorInt32, &[2, 1], (0.0, 0));
    let r = run_outputs(g, &[i32_bytes(&[-7, i32::MAX])]).unwrap();
    assert_eq!(i32_vals(&r[0].0), vec![-7, i32::MAX, -7]);
}

#[test]
fn embedding_lookup_quant8_asymm_copies_bytes() {
    let g = embedding(&[1, 1], T::TensorQuant8Asymm, &[2, 3], (0.5, 128));
    let r = run_outputs(g, &[vec![1, 2, 3, 250, 0, 128]]).unwrap();
    assert_eq!(r[0].0, vec![250, 0, 128, 250, 0, 128]);
}

#[test]
fn embedding_lookup_quant8_signed_copies_bytes() {
    let g = embedding(&[0], T::TensorQuant8AsymmSigned, &[2, 2], (0.25, -3));
    let r = run_outputs(g, &[vec![0x80, 0x7f, 1, 2]]).unwrap();
    assert_eq!(r[0].0, vec![0x80, 0x7f]);
}

#[test]
fn embedding_lookup_index_at_row_count_fails_at_execution() {
    let g = embedding(&[0, 3], T::TensorFloat32, &[3, 1], (0.0, 0));
    let m = exec_message(run_outputs(g, &[fb(&[1.0, 2.0, 3.0])]));
    assert!(
        m.contains("lookup 3 at position 1 is outside [0, 3)"),
        "{m}"
    );
}

#[test]
fn embedding_lookup_negative_index_fails_at_execution() {
    let g = embedding(&[-1], T::TensorFloat32, &[3, 1], (0.0, 0));
    let m = exec_message(run_outputs(g, &[fb(&[1.0, 2.0, 3.0])]));
    assert!(m.contains("lookup -1"), "{m}");
}

#[test]
fn embedding_lookup_rank1_values_are_refused() {
    let g = embedding(&[0], T::TensorFloat32, &[3], (0.0, 0));
    assert!(refused(g).contains("rank 2 or more"));
}

#[test]
fn embedding_lookup_float_lookups_are_refused() {
    let mut b = B::new();
    let l = b.f32c(&[1], &[0.0]);
    let v = b.input(T::TensorFloat32, &[2, 2]);
    let o = b.output(T::TensorFloat32, &[1, 2]);
    b.op(O::EmbeddingLookup, &[l, v], &[o]);
    assert!(refused(b.g).contains("lookups"));
}

#[test]
fn embedding_lookup_output_quantization_must_match_values() {
    let mut g = embedding(&[0], T::TensorQuant8Asymm, &[2, 2], (0.5, 10));
    let out = g.output_indexes[0] as usize;
    g.operands[out].zero_point = 11;
    assert!(refused(g).contains("scale and zero point"));
}

#[test]
fn embedding_lookup_output_type_must_match_values() {
    let mut g = embedding(&[0], T::TensorFloat32, &[2, 2], (0.0, 0));
    let out = g.output_indexes[0] as usize;
    g.operands[out].ty = T::TensorFloat16;
    assert!(refused(g).contains("type"));
}

#[test]
fn embedding_lookup_bool_values_are_refused() {
    let g = embedding(&[0], T::TensorBool8, &[2, 2], (0.0, 0));
    assert!(refused(g).contains("values type"));
}

#[test]
fn embedding_lookup_three_inputs_are_refused() {
    let mut g = embedding(&[0], T::TensorFloat32, &[2, 2], (0.0, 0));
    let extra = g.operations[0].inputs[0];
    g.operations[0].inputs.push(extra);
    assert!(refused(g).contains("3 inputs given"));
}

// ---------------------------------------------------------------- HASHTABLE_LOOKUP

fn hashtable(look: &[i32], keys: &[i32], vt: T, vdims: &[u32], q: (f32, i32)) -> Graph {
    let mut b = B::new();
    let l = b.i32c(&[look.len() as u32], look);
    let k = b.i32c(&[keys.len() as u32], keys);
    let v = b.input(vt, vdims);
    b.q(v, q.0, q.1);
    let mut od = vdims.to_vec();
    od[0] = look.len() as u32;
    let o = b.output(vt, &od);
    b.q(o, q.0, q.1);
    let h = b.output(T::TensorQuant8Asymm, &[look.len() as u32]);
    b.q(h, 1.0, 0);
    b.op(O::HashtableLookup, &[l, k, v], &[o, h]);
    b.g
}

#[test]
fn hashtable_lookup_float32_hits_copy_rows_and_misses_give_zeros() {
    let g = hashtable(
        &[5, 7, -3, 9],
        &[-3, 5, 9],
        T::TensorFloat32,
        &[3, 2],
        (0.0, 0),
    );
    let r = run_outputs(g, &[fb(&[-3.0, -3.5, 5.0, 5.5, 9.0, 9.5])]).unwrap();
    assert_eq!(r[0].1, vec![4, 2]);
    assert_eq!(bf(&r[0].0), vec![5.0, 5.5, 0.0, 0.0, -3.0, -3.5, 9.0, 9.5]);
    assert_eq!(r[1].1, vec![4]);
    assert_eq!(r[1].0, vec![1, 0, 1, 1]);
}

#[test]
fn hashtable_lookup_int32_rank1_values() {
    let g = hashtable(&[2, 1, 4], &[1, 2, 3], T::TensorInt32, &[3], (0.0, 0));
    let r = run_outputs(g, &[i32_bytes(&[10, 20, 30])]).unwrap();
    assert_eq!(i32_vals(&r[0].0), vec![20, 10, 0]);
    assert_eq!(r[1].0, vec![1, 1, 0]);
}

#[test]
fn hashtable_lookup_quant8_miss_is_byte_zero() {
    let g = hashtable(&[8, 4], &[4, 6], T::TensorQuant8Asymm, &[2, 2], (0.5, 100));
    let r = run_outputs(g, &[vec![1, 2, 3, 4]]).unwrap();
    assert_eq!(r[0].0, vec![0, 0, 1, 2]);
    assert_eq!(r[1].0, vec![0, 1]);
}

#[test]
fn hashtable_lookup_unsorted_keys_fail_at_execution() {
    let g = hashtable(&[1], &[3, 1], T::TensorFloat32, &[2, 1], (0.0, 0));
    let m = exec_message(run_outputs(g, &[fb(&[1.0, 2.0])]));
    assert!(m.contains("sorted"), "{m}");
}

#[test]
fn hashtable_lookup_declared_key_count_must_match_value_rows() {
    let g = hashtable(&[1], &[1, 2, 3], T::TensorFloat32, &[2, 1], (0.0, 0));
    assert!(refused(g).contains("keys must have one entry per row of values"));
}

#[test]
fn hashtable_lookup_key_count_must_match_value_rows_at_execution() {
    let g = hashtable(&[1], &[1, 2, 3], T::TensorFloat32, &[0, 1], (0.0, 0));
    let m = exec_message(run_outputs_dims(g, &[(fb(&[1.0, 2.0]), vec![2, 1])]));
    assert!(m.contains("3 keys for 2 rows"), "{m}");
}

#[test]
fn hashtable_lookup_hits_must_be_quant8_scale_one_zero_point_zero() {
    let mut g = hashtable(&[1], &[1], T::TensorFloat32, &[1, 1], (0.0, 0));
    let h = g.output_indexes[1] as usize;
    g.operands[h].scale = 0.5;
    assert!(refused(g).contains("hits"));
}

#[test]
fn hashtable_lookup_float16_values_are_refused() {
    let g = hashtable(&[1], &[1], T::TensorFloat16, &[1, 1], (0.0, 0));
    assert!(refused(g).contains("values type"));
}

#[test]
fn hashtable_lookup_quant8_signed_values_are_refused() {
    // NeuralNetworks.h lists FLOAT32, INT32 and QUANT8_ASYMM values only, even at FL4.
    let g = hashtable(&[1], &[1], T::TensorQuant8AsymmSigned, &[1, 1], (1.0, 0));
    assert!(refused(g).contains("values type"));
}

#[test]
fn hashtable_lookup_needs_two_outputs() {
    let mut g = hashtable(&[1], &[1], T::TensorFloat32, &[1, 1], (0.0, 0));
    g.operations[0].outputs.pop();
    // The hits operand is then written by no operation: refuse it as an invalid graph or
    // operation, never run it.
    assert!(PreparedGraph::new(g).is_err());
}

#[test]
fn hashtable_lookup_output_count_rule_names_two_outputs() {
    let mut b = B::new();
    let l = b.i32c(&[1], &[1]);
    let k = b.i32c(&[1], &[1]);
    let v = b.input(T::TensorFloat32, &[1, 1]);
    let o = b.output(T::TensorFloat32, &[1, 1]);
    b.op(O::HashtableLookup, &[l, k, v], &[o]);
    assert!(refused(b.g).contains("1 outputs given, expected 2"));
}

// ---------------------------------------------------------------- LSH_PROJECTION

#[test]
fn fingerprint64_matches_farmhash_on_every_length_branch() {
    // Printed by cpu/testdata/lookup_gen.py; "test", "alphabet" and "test"x8 also agree with
    // published FARM_FINGERPRINT / farmhash-dart values.
    let range = |n: u8| (0..n).collect::<Vec<u8>>();
    assert_eq!(fingerprint64(b""), 11160318154034397263);
    assert_eq!(fingerprint64(b"a"), 12917804110809363939);
    assert_eq!(fingerprint64(b"ab"), 12289600257749001502);
    assert_eq!(fingerprint64(b"test"), 8581389452482819506);
    assert_eq!(fingerprint64(b"alphabet"), 16019578149073203093);
    assert_eq!(fingerprint64(&range(20)), 10220892904819695849);
    assert_eq!(fingerprint64(&b"test".repeat(8)), 14250503356343785354);
    assert_eq!(fingerprint64(&range(50)), 12334112670463347188);
    assert_eq!(fingerprint64(&range(100)), 4395248839964844437);
    assert_eq!(fingerprint64(&range(200)), 525935771297148851);
}

const HASH: [f32; 8] = [0.123, 0.456, -0.321, -0.654, 1.234, 5.678, -4.321, -8.765];
const I32_IN: [i32; 6] = [12345, 54321, 67890, 9876, -12345678, -87654321];

/// LSH_PROJECTION of a constant hash `[4, 2]` (type `ht`) over input `input` of type `it`.
fn lsh(ht: T, it: T, idims: &[u32], weight: Option<&[f32]>, kind: i32, out_n: u32) -> Graph {
    let mut b = B::new();
    let h = if ht == T::TensorFloat16 {
        b.konst(ht, &[4, 2], f16_bytes(&HASH))
    } else {
        b.f32c(&[4, 2], &HASH)
    };
    let i = b.input(it, idims);
    if it.is_quantized() {
        b.q(i, 1.0, 0);
    }
    let w = match weight {
        Some(w) if ht == T::TensorFloat16 => b.konst(ht, &[w.len() as u32], f16_bytes(w)),
        Some(w) => b.f32c(&[w.len() as u32], w),
        None => b.add(ht, &[0], Lifetime::NoValue),
    };
    let k = b.int(kind);
    let o = b.output(T::TensorInt32, &[out_n]);
    b.op(O::LshProjection, &[h, i, w, k], &[o]);
    b.g
}

fn lsh_run(g: Graph, input: Vec<u8>) -> Vec<i32> {
    i32_vals(&run_outputs(g, &[input]).unwrap()[0].0)
}

#[test]
fn lsh_dense_int32_weighted_matches_aosp() {
    let g = lsh(
        T::TensorFloat32,
        T::TensorInt32,
        &[3, 2],
        Some(&[0.12, 0.34, 0.56]),
        2,
        8,
    );
    assert_eq!(lsh_run(g, i32_bytes(&I32_IN)), vec![1, 1, 1, 0, 1, 1, 1, 0]);
}

#[test]
fn lsh_sparse_deprecated_int32_matches_aosp() {
    let g = lsh(T::TensorFloat32, T::TensorInt32, &[3, 2], None, 1, 4);
    assert_eq!(lsh_run(g, i32_bytes(&I32_IN)), vec![1, 2, 2, 0]);
}

#[test]
fn lsh_sparse_int32_adds_table_offsets_matching_aosp() {
    let g = lsh(T::TensorFloat32, T::TensorInt32, &[3, 2], None, 3, 4);
    assert_eq!(lsh_run(g, i32_bytes(&I32_IN)), vec![1, 6, 10, 12]);
}

#[test]
fn lsh_dense_float32_input() {
    let g = lsh(T::TensorFloat32, T::TensorFloat32, &[2, 3], None, 2, 8);
    let x = fb(&[1.5, -2.0, 0.25, 3.0, 0.5, -1.0]);
    assert_eq!(lsh_run(g, x), vec![0, 0, 0, 1, 0, 1, 1, 1]);
}

#[test]
fn lsh_sparse_float32_input_weighted() {
    let g = lsh(
        T::TensorFloat32,
        T::TensorFloat32,
        &[2, 3],
        Some(&[-1.0, 0.5]),
        3,
        4,
    );
    let x = fb(&[1.5, -2.0, 0.25, 3.0, 0.5, -1.0]);
    assert_eq!(lsh_run(g, x), vec![3, 7, 11, 14]);
}

#[test]
fn lsh_sparse_quant8_input_hashes_raw_bytes() {
    let g = lsh(T::TensorFloat32, T::TensorQuant8Asymm, &[3, 4], None, 3, 4);
    let x = vec![1, 200, 3, 4, 250, 0, 17, 99, 5, 6, 7, 8];
    assert_eq!(lsh_run(g, x), vec![0, 6, 10, 12]);
}

#[test]
fn lsh_dense_float16_input_hashes_half_precision_bytes() {
    let g = lsh(T::TensorFloat32, T::TensorFloat16, &[2, 3], None, 2, 8);
    let x = f16_bytes(&[1.5, -2.0, 0.25, 3.0, 0.5, -1.0]);
    assert_eq!(lsh_run(g, x), vec![0, 1, 0, 0, 1, 1, 1, 1]);
}

#[test]
fn lsh_sparse_float16_hash_functions() {
    let g = lsh(T::TensorFloat16, T::TensorInt32, &[3, 2], None, 3, 4);
    assert_eq!(lsh_run(g, i32_bytes(&I32_IN)), vec![3, 7, 10, 12]);
}

#[test]
fn lsh_input_types_nnapi_does_not_list_are_refused() {
    // NeuralNetworks.h: the input is TENSOR_FLOAT16, TENSOR_FLOAT32, TENSOR_INT32 or
    // TENSOR_QUANT8_ASYMM; nothing else.
    for it in [
        T::TensorQuant8AsymmSigned,
        T::TensorQuant8Symm,
        T::TensorQuant16Asymm,
        T::TensorQuant16Symm,
        T::TensorBool8,
    ] {
        let g = lsh(T::TensorFloat32, it, &[3, 2], None, 3, 4);
        assert!(
            refused(g).contains("not one LSH_PROJECTION takes"),
            "{it:?}"
        );
    }
}

#[test]
fn lsh_unknown_type_is_refused() {
    let g = lsh(T::TensorFloat32, T::TensorInt32, &[3, 2], None, 4, 4);
    assert!(refused(g).contains("type 4"));
}

#[test]
fn lsh_more_than_32_bits_is_refused() {
    let mut b = B::new();
    let h = b.f32c(&[1, 33], &[0.5; 33]);
    let i = b.input(T::TensorInt32, &[1]);
    let w = b.add(T::TensorFloat32, &[0], Lifetime::NoValue);
    let k = b.int(2);
    let o = b.output(T::TensorInt32, &[33]);
    b.op(O::LshProjection, &[h, i, w, k], &[o]);
    assert!(refused(b.g).contains("at most 32"));
}

/// Sparse LSH_PROJECTION with 4 tables of 31 bits; the type constant, or a graph input.
fn lsh_4x31(type_input: bool) -> Graph {
    let mut b = B::new();
    let h = b.f32c(&[4, 31], &[0.5; 124]);
    let i = b.input(T::TensorInt32, &[1]);
    let w = b.add(T::TensorFloat32, &[0], Lifetime::NoValue);
    let k = if type_input {
        b.input(T::Int32, &[])
    } else {
        b.int(3)
    };
    let o = b.output(T::TensorInt32, &[4]);
    b.op(O::LshProjection, &[h, i, w, k], &[o]);
    b.g
}

#[test]
fn lsh_sparse_signature_overflowing_int32_is_refused() {
    assert!(refused(lsh_4x31(false)).contains("exceed 32"));
}

#[test]
fn lsh_sparse_signature_overflowing_int32_fails_at_execution() {
    let m = exec_message(run_outputs(
        lsh_4x31(true),
        &[i32_bytes(&[1]), i32_bytes(&[3])],
    ));
    assert!(m.contains("exceed 32"), "{m}");
}

#[test]
fn lsh_declared_weight_length_must_match_input_rows() {
    let w = Some(&[1.0, 2.0][..]);
    let g = lsh(T::TensorFloat32, T::TensorInt32, &[3, 2], w, 2, 8);
    assert!(refused(g).contains("weight must have one entry per input row"));
}

#[test]
fn lsh_weight_length_must_match_input_rows_at_execution() {
    let w = Some(&[1.0, 2.0][..]);
    let g = lsh(T::TensorFloat32, T::TensorInt32, &[0, 2], w, 2, 8);
    let m = exec_message(run_outputs_dims(g, &[(i32_bytes(&I32_IN), vec![3, 2])]));
    assert!(m.contains("weight"), "{m}");
}

#[test]
fn lsh_output_must_be_int32() {
    let mut g = lsh(T::TensorFloat32, T::TensorInt32, &[3, 2], None, 3, 4);
    let o = g.output_indexes[0] as usize;
    g.operands[o].ty = T::TensorFloat32;
    assert!(refused(g).contains("TENSOR_INT32"));
}

#[test]
fn lsh_int32_hash_functions_are_refused() {
    let mut g = lsh(T::TensorFloat32, T::TensorInt32, &[3, 2], None, 3, 4);
    let h = g.operations[0].inputs[0] as usize;
    g.operands[h].ty = T::TensorInt32;
    assert!(refused(g).contains("float tensor"));
}

// ---------------------------------------------------------------- RANDOM_MULTINOMIAL

#[test]
fn philox4x32_10_matches_random123_known_answer() {
    assert_eq!(
        philox4x32([0, 0], [0, 0, 0, 0]),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
}

fn multinomial(ty: T, dims: &[u32], samples: i32, seeds: [i32; 2]) -> Graph {
    let mut b = B::new();
    let x = b.input(ty, dims);
    let n = b.int(samples);
    let s = b.i32c(&[2], &seeds);
    let o = b.output(T::TensorInt32, &[dims[0], samples.max(0) as u32]);
    b.op(O::RandomMultinomial, &[x, n, s], &[o]);
    b.g
}

fn sample(logits: &[f32], dims: &[u32], samples: i32, seeds: [i32; 2]) -> Vec<i32> {
    let g = multinomial(T::TensorFloat32, dims, samples, seeds);
    i32_vals(&run_outputs(g, &[fb(logits)]).unwrap()[0].0)
}

#[test]
fn random_multinomial_same_seeds_give_the_same_samples() {
    let l = [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0];
    let a = sample(&l, &[2, 4], 64, [17, 42]);
    let b = sample(&l, &[2, 4], 64, [17, 42]);
    assert_eq!(a.len(), 128);
    assert_eq!(a, b);
    let c = sample(&l, &[2, 4], 64, [18, 42]);
    assert_ne!(a, c, "different seeds should change some of 128 samples");
}

#[test]
fn random_multinomial_never_samples_zero_probability_classes() {
    let ninf = f32::NEG_INFINITY;
    let s = sample(&[0.0, ninf, 0.5, ninf], &[1, 4], 500, [1, 2]);
    assert!(s.iter().all(|&k| k == 0 || k == 2), "{s:?}");
    assert!(s.contains(&0) && s.contains(&2));
}

#[test]
fn random_multinomial_follows_the_softmax_of_the_logits() {
    // p(class 1) = 3 / (1 + 3) = 0.75; 4000 samples: standard deviation ~0.007.
    let s = sample(&[0.0, 3f32.ln()], &[1, 2], 4000, [7, 9]);
    let ones = s.iter().filter(|&&k| k == 1).count() as f64 / 4000.0;
    assert!((ones - 0.75).abs() < 0.03, "{ones}");
    assert!(s.iter().all(|&k| k == 0 || k == 1));
}

#[test]
fn random_multinomial_float16_logits() {
    let g = multinomial(T::TensorFloat16, &[2, 3], 50, [3, 4]);
    let ninf = f32::NEG_INFINITY;
    let r = run_outputs(g, &[f16_bytes(&[ninf, 0.0, ninf, 1.0, ninf, ninf])]).unwrap();
    assert_eq!(r[0].1, vec![2, 50]);
    let s = i32_vals(&r[0].0);
    assert!(s[..50].iter().all(|&k| k == 1));
    assert!(s[50..].iter().all(|&k| k == 0));
}

#[test]
fn random_multinomial_zero_samples_are_refused() {
    let g = multinomial(T::TensorFloat32, &[1, 2], 0, [1, 1]);
    assert!(refused(g).contains("sample_count must be > 0"));
}

#[test]
fn random_multinomial_seeds_must_have_two_elements() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2]);
    let n = b.int(3);
    let s = b.i32c(&[3], &[1, 2, 3]);
    let o = b.output(T::TensorInt32, &[1, 3]);
    b.op(O::RandomMultinomial, &[x, n, s], &[o]);
    assert!(refused(b.g).contains("seeds"));
}

#[test]
fn random_multinomial_output_must_be_int32() {
    let mut g = multinomial(T::TensorFloat32, &[1, 2], 3, [1, 1]);
    let o = g.output_indexes[0] as usize;
    g.operands[o].ty = T::TensorFloat32;
    assert!(refused(g).contains("TENSOR_INT32"));
}

#[test]
fn random_multinomial_all_impossible_classes_fail_at_execution() {
    let g = multinomial(T::TensorFloat32, &[1, 2], 3, [1, 1]);
    let ninf = f32::NEG_INFINITY;
    let m = exec_message(run_outputs(g, &[fb(&[ninf, ninf])]));
    assert!(m.contains("no finite probabilities"), "{m}");
}

#[test]
fn lsh_more_than_32_bits_known_only_at_execution_fail() {
    let mut b = B::new();
    let h = b.input(T::TensorFloat32, &[1, 0]);
    let i = b.input(T::TensorInt32, &[1]);
    let w = b.add(T::TensorFloat32, &[0], Lifetime::NoValue);
    let k = b.int(2);
    let o = b.output(T::TensorInt32, &[0]);
    b.op(O::LshProjection, &[h, i, w, k], &[o]);
    let m = exec_message(run_outputs_dims(
        b.g,
        &[(fb(&[0.5; 40]), vec![1, 40]), (i32_bytes(&[1]), vec![])],
    ));
    assert!(m.contains("40 bits per hash function, at most 32"), "{m}");
}

#[test]
fn random_multinomial_huge_sample_count_is_an_error_not_an_allocation() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[2, 2]);
    let n = b.input(T::Int32, &[]);
    let s = b.i32c(&[2], &[1, 2]);
    let o = b.output(T::TensorInt32, &[2, 0]);
    b.op(O::RandomMultinomial, &[x, n, s], &[o]);
    let m = exec_message(run_outputs(b.g, &[fb(&[0.0; 4]), i32_bytes(&[i32::MAX])]));
    assert!(m.contains("too large"), "{m}");
}

#[test]
fn random_multinomial_nan_logit_fails_at_execution() {
    let g = multinomial(T::TensorFloat32, &[1, 3], 2, [1, 1]);
    let m = exec_message(run_outputs(g, &[fb(&[0.0, f32::NAN, 1.0])]));
    assert!(m.contains("NaN"), "{m}");
}

#[test]
fn random_multinomial_negative_sample_count_fails_at_execution() {
    let mut b = B::new();
    let x = b.input(T::TensorFloat32, &[1, 2]);
    let n = b.input(T::Int32, &[]);
    let s = b.i32c(&[2], &[1, 2]);
    let o = b.output(T::TensorInt32, &[1, 0]);
    b.op(O::RandomMultinomial, &[x, n, s], &[o]);
    let m = exec_message(run_outputs(b.g, &[fb(&[0.0; 2]), i32_bytes(&[-4])]));
    assert!(m.contains("sample_count must be > 0"), "{m}");
}
