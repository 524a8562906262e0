//! [`QWeights`] to and from little-endian bytes, for weights packed by an earlier preparation
//! (the compilation cache): the same layout, checked before use. A child of `qgemm` so the
//! layout stays private to it; a change of layout bumps [`super::LAYOUT_VERSION`].

use super::{NR, QWeights};

/// Bytes of one packed entry: `2 * NR` i16 values.
const ENTRY_BYTES: usize = 2 * NR * 2;

impl QWeights {
    /// Bytes of the packed form of `n` × `k` weights (None when the size overflows).
    pub(crate) fn stored_len(n: usize, k: usize) -> Option<usize> {
        let kp = k.checked_add(k % 2)?;
        n.div_ceil(NR).checked_mul(kp / 2)?.checked_mul(ENTRY_BYTES)
    }

    /// The packed values as i16 little-endian, in layout order.
    pub(crate) fn to_le_bytes(&self) -> Vec<u8> {
        self.data
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// Weights `n` × `k` in the form [`QWeights::to_le_bytes`] gives. None unless `n` and `k`
    /// are positive, `bytes` has exactly [`QWeights::stored_len`] bytes and every value is
    /// within the kernel's ±255 bound (the micro-kernel's i32 accumulators rely on it).
    pub(crate) fn from_le_bytes(n: usize, k: usize, bytes: &[u8]) -> Option<QWeights> {
        if n == 0 || k == 0 || n.checked_mul(k).is_none() {
            return None;
        }
        if Self::stored_len(n, k)? != bytes.len() {
            return None;
        }
        let mut data = vec![[0i16; 2 * NR]; bytes.len() / ENTRY_BYTES].into_boxed_slice();
        for (entry, chunk) in data.iter_mut().zip(bytes.chunks_exact(ENTRY_BYTES)) {
            for (v, b) in entry.iter_mut().zip(chunk.chunks_exact(2)) {
                let x = i16::from_le_bytes([b[0], b[1]]);
                if !(-255..=255).contains(&x) {
                    return None;
                }
                *v = x;
            }
        }
        Some(QWeights {
            k,
            n,
            kp: k + k % 2,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn packed_weights_round_trip_through_bytes_of_the_computed_length() {
        // n = 17 (two panels), k = 3 (padded to 4: two pairs): 2 panels × 2 pairs × 32 i16.
        let w: Vec<i32> = (0..17 * 3).map(|i| (i * 7 % 511) - 255).collect();
        let q = QWeights::pack(17, 3, |i| w[i]).unwrap();
        let bytes = q.to_le_bytes();
        assert_eq!(QWeights::stored_len(17, 3), Some(2 * 2 * 32 * 2));
        assert_eq!(bytes.len(), 2 * 2 * 32 * 2);
        let back = QWeights::from_le_bytes(17, 3, &bytes).unwrap();
        assert_eq!((back.n, back.k, back.kp), (17, 3, 4));
        assert_eq!(back.data, q.data);
    }

    #[test]
    fn bytes_of_another_length_or_outside_the_bound_are_refused() {
        let q = QWeights::pack(2, 2, |i| [1, -1, 255, -255][i]).unwrap();
        let bytes = q.to_le_bytes();
        assert!(QWeights::from_le_bytes(2, 2, &bytes[1..]).is_none());
        assert!(QWeights::from_le_bytes(2, 4, &bytes).is_none());
        assert!(QWeights::from_le_bytes(0, 2, &[]).is_none());
        let mut over = bytes.clone();
        over[..2].copy_from_slice(&256i16.to_le_bytes());
        assert!(QWeights::from_le_bytes(2, 2, &over).is_none());
        let mut under = bytes;
        under[..2].copy_from_slice(&(-256i16).to_le_bytes());
        assert!(QWeights::from_le_bytes(2, 2, &under).is_none());
    }
}
