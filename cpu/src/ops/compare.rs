//! Comparisons, logic and elementwise math: EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS,
//! LESS_EQUAL, LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT, SELECT, CAST and POW.
//!
//! The comparisons broadcast their operands numpy-style and write TENSOR_BOOL8 (0 or 1);
//! quantized operands are compared by real value, so their scales and zero points may differ.

use super::broadcast::{broadcast, check_broadcastable};
use super::opdef::OpDef;
use super::reduce::{invalid, known_rank, out_fits, type_in, value};
use super::{KResult, OpCtx};
use crate::check::{Ck, Issue};
use crate::model::{OperandType, OperationType};
use crate::tensor::{Data, Tensor};

use OperandType as T;
use OperationType as O;

pub(crate) static DEFS: &[OpDef] = &[
    OpDef {
        op: O::Equal,
        types: COMPARE_TYPES,
        check: check_compare,
        run: equal,
    },
    OpDef {
        op: O::NotEqual,
        types: COMPARE_TYPES,
        check: check_compare,
        run: not_equal,
    },
    OpDef {
        op: O::Greater,
        types: COMPARE_TYPES,
        check: check_compare,
        run: greater,
    },
    OpDef {
        op: O::GreaterEqual,
        types: COMPARE_TYPES,
        check: check_compare,
        run: greater_equal,
    },
    OpDef {
        op: O::Less,
        types: COMPARE_TYPES,
        check: check_compare,
        run: less,
    },
    OpDef {
        op: O::LessEqual,
        types: COMPARE_TYPES,
        check: check_compare,
        run: less_equal,
    },
    OpDef {
        op: O::LogicalAnd,
        types: &[T::TensorBool8],
        check: check_logical_binary,
        run: logical_and,
    },
    OpDef {
        op: O::LogicalOr,
        types: &[T::TensorBool8],
        check: check_logical_binary,
        run: logical_or,
    },
    OpDef {
        op: O::LogicalNot,
        types: &[T::TensorBool8],
        check: check_logical_not,
        run: logical_not,
    },
    OpDef {
        op: O::Select,
        types: &[T::TensorBool8],
        check: check_select,
        run: select,
    },
    OpDef {
        op: O::Cast,
        types: CAST_TYPES,
        check: check_cast,
        run: cast,
    },
    OpDef {
        op: O::Pow,
        types: &[T::TensorFloat32, T::TensorFloat16],
        check: check_pow,
        run: pow,
    },
];

const COMPARE_TYPES: &[OperandType] = &[
    T::TensorBool8,
    T::TensorFloat16,
    T::TensorFloat32,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

const SELECT_TYPES: &[OperandType] = &[
    T::TensorFloat16,
    T::TensorFloat32,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorQuant8AsymmSigned,
];

/// CAST converts between any two of these (TENSOR_QUANT8_ASYMM by its stored value).
const CAST_CONVERTIBLE: &[OperandType] = &[
    T::TensorFloat16,
    T::TensorFloat32,
    T::TensorInt32,
    T::TensorQuant8Asymm,
];

/// Every input type CAST accepts: the convertible ones, and those it only copies (identity
/// casts, since HAL 1.3).
const CAST_TYPES: &[OperandType] = &[
    T::TensorFloat16,
    T::TensorFloat32,
    T::TensorInt32,
    T::TensorQuant8Asymm,
    T::TensorBool8,
    T::TensorQuant16Asymm,
    T::TensorQuant16Symm,
    T::TensorQuant8AsymmSigned,
    T::TensorQuant8Symm,
];

fn out_is(c: &Ck<'_>, k: usize, want: OperandType) -> Result<(), Issue> {
    let o = c.out(k)?;
    if o.ty != want {
        return Err(invalid(format!(
            "output {k} must be {}, is {}",
            want.name(),
            o.ty.name()
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------- comparisons

/// EQUAL … LESS_EQUAL(input0, input1) -> TENSOR_BOOL8.
fn check_compare(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    let t0 = type_in(c, 0, COMPARE_TYPES)?;
    c.is(1, t0, "input1")?;
    out_is(c, 0, T::TensorBool8)?;
    check_broadcastable(c)
}

/// Input `i` as real values: floats as they are, integers and booleans exactly, quantized
/// values dequantized with their own scale and zero point.
fn reals<'a>(ctx: &OpCtx<'a>, i: usize) -> KResult<(&'a [u32], Vec<f64>)> {
    let t = value(ctx, i)?;
    let o = ctx.operand(i)?;
    let real = |q: i32| f64::from(q.saturating_sub(o.zero_point) as f32 * o.scale);
    let v = match (&t.data, o.ty) {
        (Data::F32(v), _) => v.iter().map(|&x| f64::from(x)).collect(),
        (Data::I32(v), _) => v.iter().map(|&x| f64::from(x)).collect(),
        (Data::U8(v), T::TensorBool8) => v.iter().map(|&x| f64::from(u8::from(x != 0))).collect(),
        // In f32, as NNAPI's reference computes them, so ties decide alike.
        (Data::U8(v), _) => v.iter().map(|&x| real(i32::from(x))).collect(),
        (Data::I8(v), _) => v.iter().map(|&x| real(i32::from(x))).collect(),
        _ => return Err(ctx.err(format!("input {i} type not supported"))),
    };
    Ok((&t.dims, v))
}

fn compare(ctx: &OpCtx<'_>, f: fn(f64, f64) -> bool) -> KResult<Vec<Tensor>> {
    let (ad, a) = reals(ctx, 0)?;
    let (bd, b) = reals(ctx, 1)?;
    let (od, v) = broadcast(ctx, (ad, &a), (bd, &b), |x, y| u8::from(f(x, y)))?;
    Ok(vec![Tensor::new(od, Data::U8(v.into()))])
}

fn equal(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    compare(ctx, |a, b| a == b)
}

fn not_equal(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    compare(ctx, |a, b| a != b)
}

fn greater(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    compare(ctx, |a, b| a > b)
}

fn greater_equal(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    compare(ctx, |a, b| a >= b)
}

fn less(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    compare(ctx, |a, b| a < b)
}

fn less_equal(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    compare(ctx, |a, b| a <= b)
}

// ---------------------------------------------------------------- logic

/// LOGICAL_AND / LOGICAL_OR(input0, input1): TENSOR_BOOL8 throughout.
fn check_logical_binary(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    c.is(0, T::TensorBool8, "input0")?;
    c.is(1, T::TensorBool8, "input1")?;
    out_is(c, 0, T::TensorBool8)?;
    check_broadcastable(c)
}

/// LOGICAL_NOT(input): TENSOR_BOOL8 in and out.
fn check_logical_not(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[1], 1)?;
    c.is(0, T::TensorBool8, "input")?;
    out_is(c, 0, T::TensorBool8)?;
    let dims = &c.inp(0)?.dimensions;
    if dims.is_empty() {
        Ok(())
    } else {
        out_fits(c, 0, dims)
    }
}

fn bools<'a>(ctx: &OpCtx<'a>, i: usize) -> KResult<(&'a [u32], &'a [u8])> {
    let t = value(ctx, i)?;
    match &t.data {
        Data::U8(v) => Ok((&t.dims, v)),
        _ => Err(ctx.err(format!("input {i} is not TENSOR_BOOL8"))),
    }
}

fn logical(ctx: &OpCtx<'_>, f: fn(bool, bool) -> bool) -> KResult<Vec<Tensor>> {
    let a = bools(ctx, 0)?;
    let b = bools(ctx, 1)?;
    let (od, v) = broadcast(ctx, a, b, |x, y| u8::from(f(x != 0, y != 0)))?;
    Ok(vec![Tensor::new(od, Data::U8(v.into()))])
}

fn logical_and(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    logical(ctx, |a, b| a && b)
}

fn logical_or(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    logical(ctx, |a, b| a || b)
}

fn logical_not(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (d, v) = bools(ctx, 0)?;
    let out = v.iter().map(|&x| u8::from(x == 0)).collect();
    Ok(vec![Tensor::new(d.to_vec(), Data::U8(out))])
}

// ---------------------------------------------------------------- SELECT

/// SELECT(condition, input1, input2): all three of one shape, output of the inputs' type.
fn check_select(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[3], 1)?;
    c.is(0, T::TensorBool8, "condition")?;
    let t1 = type_in(c, 1, SELECT_TYPES)?;
    c.is(2, t1, "input2")?;
    out_is(c, 0, t1)?;
    let dims: Vec<&Vec<u32>> = (0..3)
        .map(|i| c.inp(i).map(|o| &o.dimensions))
        .collect::<Result<_, _>>()?;
    if let (Some(_), Some(_)) = (known_rank(c, 0)?, known_rank(c, 1)?) {
        let compatible = |a: &[u32], b: &[u32]| {
            b.is_empty()
                || (a.len() == b.len()
                    && a.iter().zip(b).all(|(&x, &y)| x == 0 || y == 0 || x == y))
        };
        if !compatible(dims[0], dims[1]) || !compatible(dims[1], dims[2]) {
            return Err(invalid(format!(
                "condition {:?}, input1 {:?} and input2 {:?} must have the same shape",
                dims[0], dims[1], dims[2]
            )));
        }
    }
    if dims[1].is_empty() {
        Ok(())
    } else {
        out_fits(c, 0, dims[1])
    }
}

/// Re-expresses stored 8-bit `q` (quantized with `from`) in the output's quantization `to`
/// as NNAPI's reference does: the real value in f32, then `real / scale + zero_point` in f64,
/// saturated to `[lo, hi]`, rounded half away from zero.
fn requantize(q: i32, from: (f32, i32), to: (f32, i32), lo: i32, hi: i32) -> i32 {
    let real = f64::from(q.saturating_sub(from.1) as f32 * from.0);
    let v = real / f64::from(to.0) + f64::from(to.1);
    if v.is_nan() {
        return lo.max(0).min(hi);
    }
    v.clamp(f64::from(lo), f64::from(hi)).round() as i32
}

fn select(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (cd, cond) = bools(ctx, 0)?;
    let a = value(ctx, 1)?;
    let b = value(ctx, 2)?;
    if cd != a.dims.as_slice() || a.dims != b.dims {
        return Err(ctx.err(format!(
            "condition {:?}, input1 {:?} and input2 {:?} must have the same shape",
            cd, a.dims, b.dims
        )));
    }
    let (oa, ob, out) = (ctx.operand(1)?, ctx.operand(2)?, ctx.out(0)?);
    let qa = (oa.scale, oa.zero_point);
    let qb = (ob.scale, ob.zero_point);
    let qo = (out.scale, out.zero_point);
    fn pick<X: Copy>(
        cond: &[u8],
        a: &[X],
        b: &[X],
        fa: impl Fn(X) -> X,
        fb: impl Fn(X) -> X,
    ) -> Vec<X> {
        cond.iter()
            .zip(a.iter().zip(b))
            .map(|(&c, (&x, &y))| if c != 0 { fa(x) } else { fb(y) })
            .collect()
    }
    let data = match (&a.data, &b.data) {
        (Data::F32(x), Data::F32(y)) => Data::F32(pick(cond, x, y, |v| v, |v| v).into()),
        (Data::I32(x), Data::I32(y)) => Data::I32(pick(cond, x, y, |v| v, |v| v).into()),
        (Data::U8(x), Data::U8(y)) => {
            let rq = |from| move |v: u8| requantize(i32::from(v), from, qo, 0, 255) as u8;
            Data::U8(pick(cond, x, y, rq(qa), rq(qb)).into())
        }
        (Data::I8(x), Data::I8(y)) => {
            let rq = |from| move |v: i8| requantize(i32::from(v), from, qo, -128, 127) as i8;
            Data::I8(pick(cond, x, y, rq(qa), rq(qb)).into())
        }
        _ => return Err(ctx.err("input1 and input2 have different element types")),
    };
    Ok(vec![Tensor::new(a.dims.clone(), data)])
}

// ---------------------------------------------------------------- CAST

/// CAST(input): any pair of TENSOR_FLOAT16, TENSOR_FLOAT32, TENSOR_INT32 and
/// TENSOR_QUANT8_ASYMM; other types only to themselves.
fn check_cast(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[1], 1)?;
    let t0 = type_in(c, 0, CAST_TYPES)?;
    let to = c.out(0)?.ty;
    let ok = if CAST_CONVERTIBLE.contains(&t0) {
        CAST_CONVERTIBLE.contains(&to)
    } else {
        to == t0
    };
    if !ok {
        return Err(invalid(format!(
            "CAST from {} to {} is not a supported pair",
            t0.name(),
            to.name()
        )));
    }
    // NNAPI asks no quantization of the output: an identity cast copies the stored values.
    let (id, od) = (&c.inp(0)?.dimensions, &c.out(0)?.dimensions);
    if !id.is_empty()
        && !od.is_empty()
        && (id.len() != od.len() || id.iter().zip(od).any(|(&a, &b)| a != 0 && b != 0 && a != b))
    {
        return Err(invalid(format!(
            "output shape {od:?} differs from input shape {id:?}"
        )));
    }
    Ok(())
}

/// A float to u8 as NNAPI's CAST does: saturated to [0, 255], then truncated.
fn f_to_u8(x: f64) -> u8 {
    // `as` saturates and maps NaN to 0.
    x.clamp(0.0, 255.0) as u8
}

fn cast(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let t = value(ctx, 0)?;
    let (from, to) = (ctx.ty(0)?, ctx.out(0)?.ty);
    if from == to || !CAST_CONVERTIBLE.contains(&from) {
        if from != to {
            return Err(ctx.err(format!(
                "CAST from {} to {} is not a supported pair",
                from.name(),
                to.name()
            )));
        }
        return Ok(vec![t.clone()]);
    }
    // Each convertible value as f64 (exact for int32 and u8), then to the output's kind.
    let wide: Vec<f64> = match &t.data {
        Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        _ => return Err(ctx.err("input type not supported")),
    };
    let data = match to {
        // f64 -> f32 rounds to nearest; float16 outputs are rounded again on encode.
        T::TensorFloat32 | T::TensorFloat16 => Data::F32(wide.iter().map(|&x| x as f32).collect()),
        // Truncation toward zero, saturating at the int32 range (NaN gives 0).
        T::TensorInt32 => Data::I32(wide.iter().map(|&x| x as i32).collect()),
        T::TensorQuant8Asymm => Data::U8(wide.iter().map(|&x| f_to_u8(x)).collect()),
        t => return Err(ctx.err(format!("output type {} not supported", t.name()))),
    };
    Ok(vec![Tensor::new(t.dims.clone(), data)])
}

// ---------------------------------------------------------------- POW

/// POW(base, exponent): float tensors of one type, broadcast.
fn check_pow(c: &Ck<'_>) -> Result<(), Issue> {
    c.counts(&[2], 1)?;
    let t0 = type_in(c, 0, &[T::TensorFloat32, T::TensorFloat16])?;
    c.is(1, t0, "exponent")?;
    c.same_out(t0)?;
    check_broadcastable(c)
}

fn pow(ctx: &OpCtx<'_>) -> KResult<Vec<Tensor>> {
    let (ad, a) = ctx.f32s(0)?;
    let (bd, b) = ctx.f32s(1)?;
    let (od, v) = broadcast(ctx, (ad, a), (bd, b), f32::powf)?;
    Ok(vec![Tensor::new(od, Data::F32(v.into()))])
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
