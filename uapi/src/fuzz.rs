//! Support for the seeded fuzz-style tests (docs/testing.md, tier 4): a small deterministic
//! generator, byte mutations of valid inputs, and a case loop that says which case failed.
//!
//! Only the stable toolchain is available (no libFuzzer), so every parser of untrusted bytes
//! gets a bounded number of seeded random cases per `cargo test` run. Built for the unit tests
//! of this crate and, through the `fuzz` feature, for those of the crates that depend on it
//! (their dev-dependencies turn the feature on; release builds never carry it).
//!
//! Environment: `NNACCEL_FUZZ_CASES=N` runs N cases per target instead of each target's
//! default; `NNACCEL_FUZZ_SEED=S` changes the base seed (default fixed, so runs repeat).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// The base seed when `NNACCEL_FUZZ_SEED` is not set.
pub const DEFAULT_SEED: u64 = 0x6e6e_6163_6365_6c21;

/// A xorshift64* generator: deterministic for a seed, fast, never zero.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value; 0 is moved off the fixed point).
    pub fn new(seed: u64) -> Self {
        // One splitmix64 step spreads close seeds (consecutive case numbers) apart.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Self(if z == 0 { 1 } else { z })
    }

    /// The next 64 random bits.
    pub fn u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The next 32 random bits.
    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.u64() % n as u64) as usize
        }
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u32, den: u32) -> bool {
        den != 0 && (self.u32() % den) < num
    }

    /// One element of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Random bytes into `out`.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }

    /// A 32-bit value that tends to break size and index arithmetic: 0, 1, small counts,
    /// powers of two and their neighbours, the signed and unsigned extremes, or random bits.
    pub fn edgy_u32(&mut self) -> u32 {
        match self.below(8) {
            0 => *self.pick(&[0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 64, 255, 256]),
            1 => *self.pick(&[
                u32::MAX,
                u32::MAX - 1,
                i32::MAX as u32,
                i32::MIN as u32,
                0xffff,
                0x1_0000,
            ]),
            2 => 1u32 << self.below(32),
            3 => (1u32 << self.below(32)).wrapping_sub(1),
            4 => (-(self.below(8) as i32) - 1) as u32,
            _ => self.u32(),
        }
    }

    /// A 64-bit value like [`Rng::edgy_u32`]'s.
    pub fn edgy_u64(&mut self) -> u64 {
        match self.below(6) {
            0 => u64::from(self.edgy_u32()),
            1 => *self.pick(&[u64::MAX, u64::MAX - 1, i64::MAX as u64, 1 << 32, 1 << 63]),
            2 => 1u64 << self.below(64),
            3 => (1u64 << self.below(64)).wrapping_sub(1),
            _ => self.u64(),
        }
    }
}

/// Cases per target: `NNACCEL_FUZZ_CASES` when set (and a number), else `default`.
pub fn cases(default: usize) -> usize {
    std::env::var("NNACCEL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The base seed: `NNACCEL_FUZZ_SEED` (decimal or 0x-hex) when set, else [`DEFAULT_SEED`].
pub fn base_seed() -> u64 {
    std::env::var("NNACCEL_FUZZ_SEED")
        .ok()
        .and_then(|v| {
            let v = v.trim();
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or(DEFAULT_SEED)
}

/// Runs `case` for [`cases`]`(default_cases)` cases, each with its own generator seeded from
/// the base seed, `target` and the case number. A panic (a failed assertion, or the code under
/// test panicking) is reported with the target, the seed and the case number before it
/// propagates, so the case can be replayed.
pub fn run(target: &str, default_cases: usize, mut case: impl FnMut(&mut Rng)) {
    let base = base_seed();
    let salt = target.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    for n in 0..cases(default_cases) {
        let mut rng = Rng::new(base ^ salt ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| case(&mut rng))) {
            eprintln!(
                "fuzz target {target}: case {n} failed (NNACCEL_FUZZ_SEED={base:#x}; \
                 NNACCEL_FUZZ_CASES={} replays it)",
                n + 1
            );
            resume_unwind(panic);
        }
    }
}

/// Applies one to four random mutations to `bytes`: bit flips, bytes set to random or
/// boundary values, a 32-bit little-endian field overwritten with an edgy value, random bytes
/// inserted, a range deleted or duplicated, the tail cut off.
pub fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..=rng.below(4) {
        let len = bytes.len();
        match rng.below(8) {
            0 if len > 0 => {
                let at = rng.below(len);
                bytes[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                let random = rng.u32() as u8;
                bytes[at] = *rng.pick(&[0, 1, 0x7f, 0x80, 0xff, random]);
            }
            2 if len >= 4 => {
                let at = rng.below(len - 3);
                let v = rng.edgy_u32().to_le_bytes();
                bytes[at..at + 4].copy_from_slice(&v);
            }
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let extra = rng.bytes(n);
                bytes.splice(at..at, extra);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(32));
                bytes.drain(at..at + n);
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(32));
                let chunk = bytes[at..at + n].to_vec();
                let to = rng.below(len + 1);
                bytes.splice(to..to, chunk);
            }
            6 if len > 0 => bytes.truncate(rng.below(len)),
            _ if len > 0 => {
                let at = rng.below(len);
                bytes[at] = rng.u32() as u8;
            }
            _ => bytes.push(rng.u32() as u8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_repeats_for_a_seed_and_differs_across_seeds() {
        let a: Vec<u64> = (0..4).scan(Rng::new(7), |r, _| Some(r.u64())).collect();
        let b: Vec<u64> = (0..4).scan(Rng::new(7), |r, _| Some(r.u64())).collect();
        let c: Vec<u64> = (0..4).scan(Rng::new(8), |r, _| Some(r.u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = Rng::new(0);
        assert_ne!(r.u64(), 0);
        assert!((0..1000).all(|_| r.below(10) < 10));
    }

    #[test]
    fn mutations_change_the_bytes_and_stay_bounded() {
        let mut rng = Rng::new(1);
        let original: Vec<u8> = (0..64).collect();
        let mut changed = 0;
        for _ in 0..1000 {
            let mut b = original.clone();
            mutate(&mut rng, &mut b);
            assert!(b.len() <= original.len() + 4 * 32);
            changed += usize::from(b != original);
        }
        assert!(
            changed > 900,
            "{changed} of 1000 mutations changed something"
        );
    }

    #[test]
    fn a_failing_case_propagates_its_panic() {
        let r = catch_unwind(|| run("self-test", 64, |rng| assert!(rng.below(4) != 3)));
        assert!(r.is_err() || cases(64) < 64);
        let mut seen = 0;
        run("self-test-count", 5, |_| seen += 1);
        assert_eq!(seen, cases(5));
    }
}
