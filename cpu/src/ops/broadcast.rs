//! numpy-style broadcasting, shared by the elementwise, comparison and min/max families.

use super::reduce::out_fits;
use super::{KResult, OpCtx, advance, count};
use crate::check::{Ck, Issue};

/// Extent of `d` at output dimension `i` of a rank-`r` broadcast (1 where `d` has no such
/// dimension).
fn extent(d: &[u32], r: usize, i: usize) -> u32 {
    if i + d.len() >= r {
        d[i + d.len() - r]
    } else {
        1
    }
}

/// numpy-style broadcast of two shapes.
pub(crate) fn broadcast_shape(a: &[u32], b: &[u32]) -> Option<Vec<u32>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let (x, y) = (extent(a, r, i), extent(b, r, i));
            if x == y || y == 1 {
                Some(x)
            } else if x == 1 {
                Some(y)
            } else {
                None
            }
        })
        .collect()
}

/// When both inputs' shapes are fully declared, they must broadcast together, and output 0's
/// declared shape must fit the result.
pub(crate) fn check_broadcastable(c: &Ck<'_>) -> Result<(), Issue> {
    let (a, b) = (&c.inp(0)?.dimensions, &c.inp(1)?.dimensions);
    if a.is_empty() || b.is_empty() {
        return Ok(());
    }
    // The broadcast extents as far as the model tells them (0: unknown until execution).
    let r = a.len().max(b.len());
    let mut want = Vec::with_capacity(r);
    for i in 0..r {
        let (x, y) = (extent(a, r, i), extent(b, r, i));
        want.push(match (x, y) {
            _ if x == y => x,
            (0, 1) | (1, 0) => 0,
            (0, e) | (e, 0) | (1, e) | (e, 1) => e,
            _ => {
                return Err(Issue::Invalid(format!(
                    "input shapes {a:?} and {b:?} cannot be broadcast together"
                )));
            }
        });
    }
    out_fits(c, 0, &want)
}

/// `f(a, b)` over the broadcast of `a` (shaped `ad`) and `b` (shaped `bd`): the result's
/// shape and values.
pub(crate) fn broadcast<A: Copy, B: Copy, R>(
    ctx: &OpCtx<'_>,
    (ad, a): (&[u32], &[A]),
    (bd, b): (&[u32], &[B]),
    mut f: impl FnMut(A, B) -> R,
) -> KResult<(Vec<u32>, Vec<R>)> {
    if count(ctx, ad)? != a.len() || count(ctx, bd)? != b.len() {
        return Err(ctx.err("operand data does not match its dimensions"));
    }
    let od = broadcast_shape(ad, bd)
        .ok_or_else(|| ctx.err(format!("shapes {ad:?} and {bd:?} cannot be broadcast")))?;
    let n = count(ctx, &od)?;
    if ad == bd {
        return Ok((od, a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()));
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return Ok((od, a.iter().map(|&x| f(x, y)).collect()));
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return Ok((od, b.iter().map(|&y| f(x, y)).collect()));
    }
    let r = od.len();
    // Per-output-dimension strides into each operand (0 where it is broadcast).
    let stride_of = |d: &[u32]| {
        let mut s = vec![0usize; r];
        let mut acc = 1usize;
        for i in (0..d.len()).rev() {
            s[i + r - d.len()] = if d[i] == 1 { 0 } else { acc };
            acc = acc.saturating_mul(d[i] as usize);
        }
        s
    };
    let (sa, sb) = (stride_of(ad), stride_of(bd));
    let mut out = Vec::with_capacity(n);
    let mut pos = vec![0u32; r];
    let mut at = [0usize; 2];
    for _ in 0..n {
        let (Some(&x), Some(&y)) = (a.get(at[0]), b.get(at[1])) else {
            return Err(ctx.err("broadcast index out of range"));
        };
        out.push(f(x, y));
        advance(&mut pos, &od, [&sa, &sb], &mut at);
    }
    Ok((od, out))
}
