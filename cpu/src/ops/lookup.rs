//! Lookups and hashing: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION (with FarmHash
//! Fingerprint64) and RANDOM_MULTINOMIAL.

use super::opdef::OpDef;
use super::{KResult, OpCtx, count, to_u32};
use crate::check::{Ck, FLOAT, Issue, const_i32};
use crate::model::{Lifetime, OperandType, OperationType};
use crate::tensor::{Data, Tensor, kind_of};

use OperandType as T;
use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: O::EmbeddingLookup,
        types: &[T::TensorInt32],
        check: check_embedding_lookup,
        run: embedding_lookup,
    },
    OpDef {
        op: O::HashtableLookup,
        types: &[T::TensorInt32],
        check: check_hashtable_lookup,
        run: hashtable_lookup,
    },
    OpDef {
        op: O::LshProjection,
        types: FLOAT,
        check: check_lsh_projection,
        run: lsh_projection,
    },
    OpDef {
        op: O::RandomMultinomial,
        types: FLOAT,
        check: check_random_multinomial,
        run: random_multinomial,
    },
];

/// Value types of EMBEDDING_LOOKUP (FLOAT16 and QUANT8_ASYMM_SIGNED since NNAPI feature
/// levels 3 and 4).
const EMBEDDING_VALUES: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

/// Value types of HASHTABLE_LOOKUP.
const HASHTABLE_VALUES: &[OperandType] = &[T::TensorFloat32, T::TensorInt32, T::TensorQuant8Asymm];

/// Input (input 1) types of LSH_PROJECTION, as NeuralNetworks.h lists them.
const LSH_INPUTS: &[OperandType] = &[
    T::TensorFloat32,
    T::TensorFloat16,
    T::TensorInt32,
    T::TensorQuant8Asymm,
];

/// Declared rank of input `i`, when known (non-empty dimensions).
pub(crate) fn known_rank(c: &Ck<'_>, i: usize) -> Option<usize> {
    let d = &c.inp(i).ok()?.dimensions;
    (!d.is_empty()).then_some(d.len())
}

/// Extent `k` of input `i` as declared, when known (present, rank known, extent non-zero).
pub(crate) fn ext(c: &Ck<'_>, i: usize, k: usize) -> Option<u32> {
    let o = c.inp(i).ok()?;
    if o.lifetime == Lifetime::NoValue {
        return None;
    }
    o.dimensions.get(k).copied().filter(|&d| d != 0)
}

/// An (input, extent index) pair.
pub(crate) type Extent = (usize, usize);

/// Declared extents that are known must agree: `((input, extent), (input, extent), rule)`.
pub(crate) fn agree(c: &Ck<'_>, pairs: &[(Extent, Extent, &str)]) -> Result<(), Issue> {
    for &((i, k), (j, l), rule) in pairs {
        if let (Some(a), Some(b)) = (ext(c, i, k), ext(c, j, l)) {
            if a != b {
                return Err(invalid(format!("{rule} ({a} vs {b})")));
            }
        }
    }
    Ok(())
}

pub(crate) fn invalid(msg: impl Into<String>) -> Issue {
    Issue::Invalid(msg.into())
}

/// Output `k` must have type `ty` and, when quantized, input `i`'s scale and zero point.
fn out_like_input(c: &Ck<'_>, k: usize, i: usize) -> Result<(), Issue> {
    let (inp, out) = (c.inp(i)?, c.out(k)?);
    if out.ty != inp.ty {
        return Err(invalid(format!(
            "output {k} type {} differs from input {i} type {}",
            out.ty.name(),
            inp.ty.name()
        )));
    }
    if out.ty.is_quantized() && (out.scale != inp.scale || out.zero_point != inp.zero_point) {
        return Err(invalid(format!(
            "output {k} scale and zero point must equal input {i}'s"
        )));
    }
    Ok(())
}

fn check_embedding_lookup(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    c.is(0, T::TensorInt32, "lookups")?;
    let vt = c.ty(1)?;
    if !EMBEDDING_VALUES.contains(&vt) {
        return Err(invalid(format!(
            "values type {} is not one EMBEDDING_LOOKUP takes",
            vt.name()
        )));
    }
    if known_rank(c, 0).is_some_and(|r| r != 1) {
        return Err(invalid("lookups must be 1-D"));
    }
    if known_rank(c, 1).is_some_and(|r| r < 2) {
        return Err(invalid("values must have rank 2 or more"));
    }
    out_like_input(c, 0, 1)
}

/// Copies rows of `data` (rows of `row` elements): `rows[i]` a row index, or None for a row of
/// zero elements.
fn gather_rows(data: &Data, row: usize, rows: &[Option<usize>]) -> Data {
    fn g<X: Copy + Default>(v: &[X], row: usize, rows: &[Option<usize>]) -> Vec<X> {
        let mut out = Vec::with_capacity(rows.len() * row);
        for r in rows {
            match r.and_then(|r| v.get(r * row..(r + 1) * row)) {
                Some(s) => out.extend_from_slice(s),
                None => out.resize(out.len() + row, X::default()),
            }
        }
        out
    }
    match data {
        Data::F32(v) => Data::F32(g(v, row, rows).into()),
        Data::I32(v) => Data::I32(g(v, row, rows).into()),
        Data::U8(v) => Data::U8(g(v, row, rows).into()),
        Data::I8(v) => Data::I8(g(v, row, rows).into()),
        Data::I16(v) => Data::I16(g(v, row, rows).into()),
        Data::U16(v) => Data::U16(g(v, row, rows).into()),
    }
}

/// Rows and row length of a `[n, ...]` tensor of rank >= `min_rank`.
fn rows_of(ctx: &OpCtx<'_>, t: &Tensor, min_rank: usize, what: &str) -> KResult<(usize, usize)> {
    if t.dims.len() < min_rank {
        return Err(ctx.err(format!(
            "{what} must have rank {min_rank} or more, got {:?}",
            t.dims
        )));
    }
    let n = count(ctx, &t.dims)?;
    if n != t.data.len() {
        return Err(ctx.err(format!("{what} data does not match {:?}", t.dims)));
    }
    let rows = t.dims[0] as usize;
    let row = count(ctx, &t.dims[1..])?;
    Ok((rows, row))
}

fn lookups_1d<'a>(ctx: &OpCtx<'a>, i: usize, what: &str) -> KResult<&'a [i32]> {
    let (d, v) = ctx.i32s(i)?;
    if d.len() != 1 || d[0] as usize != v.len() {
        return Err(ctx.err(format!("{what} must be 1-D, got {d:?}")));
    }
    Ok(v)
}

fn embedding_lookup(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let look = lookups_1d(ctx, 0, "lookups")?;
    let values = ctx.t(1)?;
    let (rows, row) = rows_of(ctx, values, 2, "values")?;
    let mut idx = Vec::with_capacity(look.len());
    for (k, &l) in look.iter().enumerate() {
        match usize::try_from(l) {
            Ok(r) if r < rows => idx.push(Some(r)),
            _ => {
                return Err(ctx.err(format!("lookup {l} at position {k} is outside [0, {rows})")));
            }
        }
    }
    let mut dims = values.dims.clone();
    dims[0] = to_u32(ctx, look.len())?;
    count(ctx, &dims)?;
    Ok(vec![Tensor::new(
        dims,
        gather_rows(&values.data, row, &idx),
    )])
}

fn check_hashtable_lookup(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 2)?;
    c.is(0, T::TensorInt32, "lookups")?;
    c.is(1, T::TensorInt32, "keys")?;
    let vt = c.ty(2)?;
    if !HASHTABLE_VALUES.contains(&vt) {
        return Err(invalid(format!(
            "values type {} is not one HASHTABLE_LOOKUP takes",
            vt.name()
        )));
    }
    if known_rank(c, 0).is_some_and(|r| r != 1) {
        return Err(invalid("lookups must be 1-D"));
    }
    if known_rank(c, 1).is_some_and(|r| r != 1) {
        return Err(invalid("keys must be 1-D"));
    }
    agree(
        c,
        &[((1, 0), (2, 0), "keys must have one entry per row of values")],
    )?;
    out_like_input(c, 0, 2)?;
    let hits = c.out(1)?;
    if hits.ty != T::TensorQuant8Asymm || hits.scale != 1.0 || hits.zero_point != 0 {
        return Err(invalid(
            "hits (output 1) must be TENSOR_QUANT8_ASYMM with scale 1 and zero point 0",
        ));
    }
    Ok(())
}

fn hashtable_lookup(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let look = lookups_1d(ctx, 0, "lookups")?;
    let keys = lookups_1d(ctx, 1, "keys")?;
    let values = ctx.t(2)?;
    let (rows, row) = rows_of(ctx, values, 1, "values")?;
    if keys.len() != rows {
        return Err(ctx.err(format!("{} keys for {rows} rows of values", keys.len())));
    }
    if keys.windows(2).any(|w| w[0] > w[1]) {
        return Err(ctx.err("keys must be sorted in ascending order"));
    }
    let idx: Vec<Option<usize>> = look.iter().map(|l| keys.binary_search(l).ok()).collect();
    let hits: Vec<u8> = idx.iter().map(|r| u8::from(r.is_some())).collect();
    let mut dims = values.dims.clone();
    dims[0] = to_u32(ctx, look.len())?;
    count(ctx, &dims)?;
    let n = to_u32(ctx, look.len())?;
    Ok(vec![
        Tensor::new(dims, gather_rows(&values.data, row, &idx)),
        Tensor::new(vec![n], Data::U8(hits.into())),
    ])
}

/// FarmHash Fingerprint64 (farmhashna::Hash64 of FarmHash 1.1), written from its published
/// definition: the hash NNAPI's LSH_PROJECTION applies to each (seed, input row) key.
pub(crate) mod farmhash {
    const K0: u64 = 0xc3a5_c85c_97cb_3127;
    const K1: u64 = 0xb492_b66f_be98_f273;
    const K2: u64 = 0x9ae1_6a3b_2f90_404f;

    fn f64le(s: &[u8], i: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(b)
    }
    fn f32le(s: &[u8], i: usize) -> u64 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&s[i..i + 4]);
        u64::from(u32::from_le_bytes(b))
    }
    fn shift_mix(v: u64) -> u64 {
        v ^ (v >> 47)
    }
    fn len16(u: u64, v: u64, mul: u64) -> u64 {
        let mut a = (u ^ v).wrapping_mul(mul);
        a ^= a >> 47;
        let mut b = (v ^ a).wrapping_mul(mul);
        b ^= b >> 47;
        b.wrapping_mul(mul)
    }
    fn len0to16(s: &[u8]) -> u64 {
        let len = s.len();
        let l = len as u64;
        if len >= 8 {
            let mul = K2.wrapping_add(l * 2);
            let a = f64le(s, 0).wrapping_add(K2);
            let b = f64le(s, len - 8);
            let c = b.rotate_right(37).wrapping_mul(mul).wrapping_add(a);
            let d = a.rotate_right(25).wrapping_add(b).wrapping_mul(mul);
            return len16(c, d, mul);
        }
        if len >= 4 {
            let mul = K2.wrapping_add(l * 2);
            let a = f32le(s, 0);
            return len16(l.wrapping_add(a << 3), f32le(s, len - 4), mul);
        }
        if len > 0 {
            let (a, b, c) = (s[0] as u32, s[len >> 1] as u32, s[len - 1] as u32);
            let y = a.wrapping_add(b << 8);
            let z = (len as u32).wrapping_add(c << 2);
            return shift_mix(u64::from(y).wrapping_mul(K2) ^ u64::from(z).wrapping_mul(K0))
                .wrapping_mul(K2);
        }
        K2
    }
    fn len17to32(s: &[u8]) -> u64 {
        let len = s.len();
        let mul = K2.wrapping_add(len as u64 * 2);
        let a = f64le(s, 0).wrapping_mul(K1);
        let b = f64le(s, 8);
        let c = f64le(s, len - 8).wrapping_mul(mul);
        let d = f64le(s, len - 16).wrapping_mul(K2);
        len16(
            a.wrapping_add(b)
                .rotate_right(43)
                .wrapping_add(c.rotate_right(30))
                .wrapping_add(d),
            a.wrapping_add(b.wrapping_add(K2).rotate_right(18))
                .wrapping_add(c),
            mul,
        )
    }
    fn len33to64(s: &[u8]) -> u64 {
        let len = s.len();
        let mul = K2.wrapping_add(len as u64 * 2);
        let a = f64le(s, 0).wrapping_mul(K2);
        let b = f64le(s, 8);
        let c = f64le(s, len - 8).wrapping_mul(mul);
        let d = f64le(s, len - 16).wrapping_mul(K2);
        let y = a
            .wrapping_add(b)
            .rotate_right(43)
            .wrapping_add(c.rotate_right(30))
            .wrapping_add(d);
        let z = len16(
            y,
            a.wrapping_add(b.wrapping_add(K2).rotate_right(18))
                .wrapping_add(c),
            mul,
        );
        let e = f64le(s, 16).wrapping_mul(mul);
        let f = f64le(s, 24);
        let g = y.wrapping_add(f64le(s, len - 32)).wrapping_mul(mul);
        let h = z.wrapping_add(f64le(s, len - 24)).wrapping_mul(mul);
        len16(
            e.wrapping_add(f)
                .rotate_right(43)
                .wrapping_add(g.rotate_right(30))
                .wrapping_add(h),
            e.wrapping_add(f.wrapping_add(a).rotate_right(18))
                .wrapping_add(g),
            mul,
        )
    }
    fn weak32(w: u64, x: u64, y: u64, z: u64, mut a: u64, b: u64) -> (u64, u64) {
        a = a.wrapping_add(w);
        let mut b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
        let c = a;
        a = a.wrapping_add(x).wrapping_add(y);
        b = b.wrapping_add(a.rotate_right(44));
        (a.wrapping_add(z), b.wrapping_add(c))
    }
    fn weak32s(s: &[u8], i: usize, a: u64, b: u64) -> (u64, u64) {
        weak32(
            f64le(s, i),
            f64le(s, i + 8),
            f64le(s, i + 16),
            f64le(s, i + 24),
            a,
            b,
        )
    }

    /// Fingerprint64 of `s`.
    pub(crate) fn fingerprint64(s: &[u8]) -> u64 {
        let len = s.len();
        if len <= 16 {
            return len0to16(s);
        }
        if len <= 32 {
            return len17to32(s);
        }
        if len <= 64 {
            return len33to64(s);
        }
        const SEED: u64 = 81;
        let mut x = SEED;
        let mut y = SEED.wrapping_mul(K1).wrapping_add(113);
        let mut z = shift_mix(y.wrapping_mul(K2).wrapping_add(113)).wrapping_mul(K2);
        let (mut v, mut w) = ((0u64, 0u64), (0u64, 0u64));
        x = x.wrapping_mul(K2).wrapping_add(f64le(s, 0));
        let end = ((len - 1) / 64) * 64;
        let last64 = len - 64;
        let mut p = 0;
        while p != end {
            x = x
                .wrapping_add(y)
                .wrapping_add(v.0)
                .wrapping_add(f64le(s, p + 8))
                .rotate_right(37)
                .wrapping_mul(K1);
            y = y
                .wrapping_add(v.1)
                .wrapping_add(f64le(s, p + 48))
                .rotate_right(42)
                .wrapping_mul(K1);
            x ^= w.1;
            y = y.wrapping_add(v.0).wrapping_add(f64le(s, p + 40));
            z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(K1);
            v = weak32s(s, p, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
            w = weak32s(
                s,
                p + 32,
                z.wrapping_add(w.1),
                y.wrapping_add(f64le(s, p + 16)),
            );
            std::mem::swap(&mut z, &mut x);
            p += 64;
        }
        let mul = K1.wrapping_add((z & 0xff) << 1);
        let p = last64;
        w.0 = w.0.wrapping_add(((len - 1) & 63) as u64);
        v.0 = v.0.wrapping_add(w.0);
        w.0 = w.0.wrapping_add(v.0);
        x = x
            .wrapping_add(y)
            .wrapping_add(v.0)
            .wrapping_add(f64le(s, p + 8))
            .rotate_right(37)
            .wrapping_mul(mul);
        y = y
            .wrapping_add(v.1)
            .wrapping_add(f64le(s, p + 48))
            .rotate_right(42)
            .wrapping_mul(mul);
        x ^= w.1.wrapping_mul(9);
        y = y
            .wrapping_add(v.0.wrapping_mul(9))
            .wrapping_add(f64le(s, p + 40));
        z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(mul);
        v = weak32s(s, p, v.1.wrapping_mul(mul), x.wrapping_add(w.0));
        w = weak32s(
            s,
            p + 32,
            z.wrapping_add(w.1),
            y.wrapping_add(f64le(s, p + 16)),
        );
        std::mem::swap(&mut z, &mut x);
        len16(
            len16(v.0, w.0, mul)
                .wrapping_add(shift_mix(y).wrapping_mul(K0))
                .wrapping_add(z),
            len16(v.1, w.1, mul).wrapping_add(x),
            mul,
        )
    }
}

/// LSH_PROJECTION types: 1 sparse without the per-table offset (deprecated), 2 dense,
/// 3 sparse.
const LSH_SPARSE_DEPRECATED: i32 = 1;
const LSH_DENSE: i32 = 2;
const LSH_SPARSE: i32 = 3;

fn check_lsh_projection(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[4], 1)?;
    let ht = c.ty(0)?;
    if !FLOAT.contains(&ht) {
        return Err(invalid(format!(
            "hash functions (input 0) must be a float tensor, is {}",
            ht.name()
        )));
    }
    let it = c.ty(1)?;
    if !LSH_INPUTS.contains(&it) {
        return Err(invalid(format!(
            "input (input 1) type {} is not one LSH_PROJECTION takes",
            it.name()
        )));
    }
    c.opt(2, ht, "weight")?;
    c.is(3, T::Int32, "type")?;
    let o = c.out(0)?;
    if o.ty != T::TensorInt32 {
        return Err(invalid(format!(
            "output must be TENSOR_INT32, is {}",
            o.ty.name()
        )));
    }
    if let Some(t) = const_i32(c, 3) {
        if !matches!(t, LSH_SPARSE_DEPRECATED | LSH_DENSE | LSH_SPARSE) {
            return Err(invalid(format!(
                "type {t} is not 1 (sparse, deprecated), 2 (dense) or 3 (sparse)"
            )));
        }
    }
    if known_rank(c, 0).is_some_and(|r| r != 2) {
        return Err(invalid("hash functions must be 2-D"));
    }
    if let Some(&bits) = c.inp(0)?.dimensions.get(1) {
        if bits > 32 {
            return Err(invalid(format!(
                "{bits} bits per hash function, at most 32"
            )));
        }
    }
    if known_rank(c, 2).is_some_and(|r| r != 1) {
        return Err(invalid("weight must be 1-D"));
    }
    agree(
        c,
        &[((2, 0), (1, 0), "weight must have one entry per input row")],
    )?;
    if let (Some(LSH_SPARSE), Some(tables), Some(bits)) =
        (const_i32(c, 3), ext(c, 0, 0), ext(c, 0, 1))
    {
        if (u64::from(tables) << bits.min(32)) > 1 << 31 {
            return Err(invalid(format!(
                "sparse projection: {bits} bits + ceil(log2({tables} tables)) exceed 32"
            )));
        }
    }
    Ok(())
}

/// Element bytes of `t` encoded as operand type `ty` (FLOAT16 values re-encoded to 2 bytes).
fn raw_bytes(t: &Tensor, ty: OperandType) -> Option<Vec<u8>> {
    if kind_of(ty) != t.data.kind() {
        return None;
    }
    let mut b = vec![0u8; t.data.len().checked_mul(ty.element_size())?];
    t.data.encode(ty, &mut b);
    Some(b)
}

fn lsh_projection(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (hd, hash) = ctx.f32s(0)?;
    if hd.len() != 2 || count(ctx, hd)? != hash.len() {
        return Err(ctx.err(format!("hash functions must be 2-D, got {hd:?}")));
    }
    let (tables, bits) = (hd[0] as usize, hd[1] as usize);
    if bits > 32 {
        return Err(ctx.err(format!("{bits} bits per hash function, at most 32")));
    }
    let kind = ctx.scalar_i32(3)?;
    let input = ctx.t(1)?;
    if input.dims.is_empty() {
        return Err(ctx.err("input must have rank 1 or more"));
    }
    let bytes = raw_bytes(input, ctx.ty(1)?)
        .ok_or_else(|| ctx.err("input value does not match its operand type"))?;
    let rows = input.dims[0] as usize;
    if rows == 0 || bytes.len() % rows != 0 {
        return Err(ctx.err(format!("input {:?} has no rows", input.dims)));
    }
    let row_bytes = bytes.len() / rows;
    let weight = if ctx.has(2) {
        let (wd, w) = ctx.f32s(2)?;
        if wd.len() != 1 || w.len() != rows {
            return Err(ctx.err(format!(
                "weight {wd:?} must be 1-D with the input's {rows} rows"
            )));
        }
        Some(w)
    } else {
        None
    };
    // Sign bit of sum_i weight[i] * Fingerprint64(seed bytes ++ input row i bytes).
    let mut key = vec![0u8; 4 + row_bytes];
    let mut bit = |seed: f32| -> i32 {
        key[..4].copy_from_slice(&seed.to_le_bytes());
        let mut score = 0f64;
        for (r, chunk) in bytes.chunks_exact(row_bytes).enumerate() {
            key[4..].copy_from_slice(chunk);
            let h = farmhash::fingerprint64(&key) as i64 as f64;
            score += match weight {
                Some(w) => f64::from(w[r]) * h,
                None => h,
            };
        }
        i32::from(score > 0.0)
    };
    let out = match kind {
        LSH_DENSE => {
            let n = count(ctx, &[hd[0], hd[1]])?;
            let mut out = Vec::with_capacity(n);
            for &s in hash {
                out.push(bit(s));
            }
            out
        }
        LSH_SPARSE | LSH_SPARSE_DEPRECATED => {
            // Each signature, plus table * 2^bits, must fit in an INT32.
            let span = (tables as u64) << bits;
            if kind == LSH_SPARSE && span > 1 << 31 {
                return Err(ctx.err(format!(
                    "{bits} bits + ceil(log2({tables} tables)) exceed 32"
                )));
            }
            let mut out = Vec::with_capacity(tables);
            for t in 0..tables {
                let mut sig: u32 = 0;
                for &s in &hash[t * bits..(t + 1) * bits] {
                    sig = (sig << 1) | bit(s) as u32;
                }
                let off = if kind == LSH_SPARSE {
                    (t as u64) << bits
                } else {
                    0
                };
                out.push((u64::from(sig) + off) as u32 as i32);
            }
            out
        }
        t => {
            return Err(ctx.err(format!(
                "type {t} is not 1 (sparse, deprecated), 2 (dense) or 3 (sparse)"
            )));
        }
    };
    let n = to_u32(ctx, out.len())?;
    Ok(vec![Tensor::new(vec![n], Data::I32(out.into()))])
}

fn check_random_multinomial(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    let t = c.ty(0)?;
    if !FLOAT.contains(&t) {
        return Err(invalid(format!(
            "input must be a float tensor, is {}",
            t.name()
        )));
    }
    c.is(1, T::Int32, "sample_count")?;
    c.is(2, T::TensorInt32, "seeds")?;
    let o = c.out(0)?;
    if o.ty != T::TensorInt32 {
        return Err(invalid(format!(
            "output must be TENSOR_INT32, is {}",
            o.ty.name()
        )));
    }
    if known_rank(c, 0).is_some_and(|r| r != 2) {
        return Err(invalid("input must be 2-D [batches, classes]"));
    }
    if let Some(n) = const_i32(c, 1) {
        if n <= 0 {
            return Err(invalid(format!("sample_count must be > 0, got {n}")));
        }
    }
    let sd = &c.inp(2)?.dimensions;
    if !sd.is_empty() && (sd.len() != 1 || (sd[0] != 0 && sd[0] != 2)) {
        return Err(invalid(format!(
            "seeds must have shape [2], declared {sd:?}"
        )));
    }
    Ok(())
}

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): the
/// counter-based generator TensorFlow's and Android's multinomial sampling use, chosen because
/// each output is a pure function of (key, counter), so the samples depend only on the seeds
/// operand and the position of the sample, never on execution order or threads. (The mapping
/// from random words to a class is this executor's own, so samples are reproducible here but
/// not equal to Android's.)
pub(crate) fn philox4x32(key: [u32; 2], ctr: [u32; 4]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    const W0: u32 = 0x9E37_79B9;
    const W1: u32 = 0xBB67_AE85;
    let (mut k, mut c) = (key, ctr);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = M0 * u64::from(c[0]);
        let p1 = M1 * u64::from(c[2]);
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

fn random_multinomial(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, logits) = ctx.f32s(0)?;
    if d.len() != 2 || count(ctx, d)? != logits.len() {
        return Err(ctx.err(format!("input must be 2-D [batches, classes], got {d:?}")));
    }
    let (batches, classes) = (d[0] as usize, d[1] as usize);
    if classes == 0 {
        return Err(ctx.err("input has no classes"));
    }
    let samples = ctx.scalar_pos(1, "sample_count")?;
    let (sd, seeds) = ctx.i32s(2)?;
    if sd.len() != 1 || seeds.len() != 2 {
        return Err(ctx.err(format!("seeds must have shape [2], got {sd:?}")));
    }
    let od = vec![d[0], to_u32(ctx, samples)?];
    let n = count(ctx, &od)?;
    let key = [seeds[0] as u32, seeds[1] as u32];
    let mut out = Vec::with_capacity(n);
    let mut cdf = vec![0f64; classes];
    for b in 0..batches {
        let row = &logits[b * classes..(b + 1) * classes];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return Err(ctx.err(format!(
                "batch {b}: logits give no finite probabilities (max {max})"
            )));
        }
        let mut acc = 0f64;
        for (c, &l) in cdf.iter_mut().zip(row) {
            if l.is_nan() {
                return Err(ctx.err(format!("batch {b}: a logit is NaN")));
            }
            acc += f64::from(l - max).exp();
            *c = acc;
        }
        // The last class of positive weight: where a u rounded up to the total lands.
        let last = cdf.iter().rposition(|&c| c < acc).map_or(0, |p| p + 1);
        for s in 0..samples {
            let r = philox4x32(
                key,
                [s as u32, (s >> 32) as u32, b as u32, (b >> 32) as u32],
            );
            let bits = (u64::from(r[0]) << 32 | u64::from(r[1])) >> 11;
            let u = bits as f64 * (1.0 / (1u64 << 53) as f64) * acc;
            // First class whose cumulative weight exceeds u; a class of weight 0 is never
            // chosen because its cumulative weight equals its predecessor's.
            let k = cdf.partition_point(|&c| c <= u);
            out.push(if k < classes { k } else { last } as i32);
        }
    }
    Ok(vec![Tensor::new(od, Data::I32(out.into()))])
}

#[cfg(test)]
#[path = "lookup_tests.rs"]
mod tests;
