//! Packed weights in the cache (format 4): the data cache holds each entry's bytes after the
//! constants, each at a [`ALIGN`]-byte aligned offset; the model cache holds their directory
//! ([`CachedPacked`]: the CPU executor's facts about the entry, where its bytes are, and their
//! [`checksum`]). Reading back never fails a load: an entry whose place or checksum does not
//! check out is left out, and the CPU executor packs that operand afresh (it checks the
//! entries it is given again, against the model and its own build).

use serde::{Deserialize, Serialize};

use super::CacheError;
use super::files::MemfdBuffer;
use nnaccel_cpu::{PackedWeight, PackedWeights};

/// Alignment of each entry in the data cache.
pub(crate) const ALIGN: u64 = 64;

/// One packed-weight entry of the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CachedPacked {
    /// 0 for the main subgraph, `r + 1` for referenced subgraph `r`.
    pub subgraph: u32,
    pub operand: u32,
    /// The CPU executor's kind and layout version.
    pub kind: u32,
    pub layout: u32,
    /// Its shape facts: output channels and reduction length.
    pub n: u64,
    pub k: u64,
    /// Where the bytes are in the data cache.
    pub offset: u64,
    pub length: u64,
    /// [`checksum`] of the bytes.
    pub checksum: u64,
}

/// Appends the bytes of every entry of `packed` to `data` (each at an [`ALIGN`]-byte aligned
/// offset) and returns their directory.
pub(crate) fn lay_out(
    data: &mut Vec<u8>,
    packed: &PackedWeights,
) -> Result<Vec<CachedPacked>, CacheError> {
    let mut dir = Vec::with_capacity(packed.entries.len());
    for e in &packed.entries {
        let offset = data.len().next_multiple_of(ALIGN as usize);
        data.resize(offset, 0);
        data.extend_from_slice(&e.bytes);
        dir.push(CachedPacked {
            subgraph: e.subgraph,
            operand: e.operand,
            kind: e.kind,
            layout: e.layout,
            n: e.n,
            k: e.k,
            offset: offset as u64,
            length: e.bytes.len() as u64,
            checksum: checksum(&e.bytes),
        });
    }
    u32::try_from(data.len()).map_err(|_| CacheError::Encode("data cache exceeds 4 GiB".into()))?;
    Ok(dir)
}

/// The entries of `dir` read out of `data`: each within `data` and with the recorded checksum;
/// others are left out (logged). Entries of a well-formed cache do not overlap, so once the
/// lengths read add up to more than `data` holds the rest are left out too (a directory that
/// names the same bytes many times cannot make the load allocate without bound).
pub(crate) fn read_back(dir: Vec<CachedPacked>, data: &MemfdBuffer) -> PackedWeights {
    let mut entries = Vec::with_capacity(dir.len().min(1024));
    let mut budget = data.len();
    for (i, d) in dir.into_iter().enumerate() {
        let inside = d
            .offset
            .checked_add(d.length)
            .is_some_and(|end| end <= data.len())
            && d.length <= budget;
        if inside {
            budget -= d.length;
        }
        let bytes = inside
            .then(|| usize::try_from(d.length).ok())
            .flatten()
            .and_then(|len| {
                let mut bytes = vec![0u8; len];
                data.read_at(d.offset, &mut bytes).ok().map(|()| bytes)
            });
        match bytes {
            Some(bytes) if checksum(&bytes) == d.checksum => entries.push(PackedWeight {
                subgraph: d.subgraph,
                operand: d.operand,
                kind: d.kind,
                layout: d.layout,
                n: d.n,
                k: d.k,
                bytes,
            }),
            Some(_) => tracing::debug!("packed weights {i}: checksum mismatch; packed afresh"),
            None => tracing::debug!(
                "packed weights {i}: ({}, {}) outside the data cache; packed afresh",
                d.offset,
                d.length
            ),
        }
    }
    PackedWeights { entries }
}

/// A 64-bit checksum of `bytes` against damage (a bug, a version skew), not against an
/// adversary (the SHA-256 of the token's record covers the files): four lanes of
/// xor-multiply-rotate over little-endian u64 words, then the length and the lanes folded in.
/// Every step is a bijection of the lane it changes, so a change confined to one word (any one
/// flipped byte) always changes the result.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    const P: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes: [u64; 4] = [
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let mut mix = |chunk: &[u8]| {
        for (l, w) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            *l = (*l ^ u64::from_le_bytes(b)).wrapping_mul(P).rotate_left(29);
        }
    };
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        mix(c);
    }
    let mut tail = [0u8; 32];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    mix(&tail);
    let mut h = bytes.len() as u64;
    for l in lanes {
        h = (h ^ l).wrapping_mul(P).rotate_left(31);
    }
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_checksum_sees_every_single_byte_change_and_the_length() {
        let bytes: Vec<u8> = (0..200u32).map(|i| (i * 31 % 251) as u8).collect();
        let c = checksum(&bytes);
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[at] ^= 1 << bit;
                assert_ne!(checksum(&b), c, "byte {at} bit {bit}");
            }
        }
        // Trailing zeros are not the same bytes.
        let mut longer = bytes.clone();
        longer.push(0);
        assert_ne!(checksum(&longer), c);
        assert_ne!(checksum(&[]), checksum(&[0]));
    }

    fn weights() -> PackedWeights {
        let entry = |operand, bytes: Vec<u8>| PackedWeight {
            subgraph: 0,
            operand,
            kind: nnaccel_cpu::KIND_F32,
            layout: 1,
            n: 1,
            k: bytes.len() as u64 / 4,
            bytes,
        };
        PackedWeights {
            entries: vec![entry(3, vec![1; 12]), entry(5, vec![2; 40])],
        }
    }

    #[test]
    fn entries_are_laid_out_aligned_after_the_constants_and_read_back() {
        let mut data = vec![9u8; 10];
        let dir = lay_out(&mut data, &weights()).unwrap();
        assert_eq!((dir[0].offset, dir[0].length), (64, 12));
        assert_eq!((dir[1].offset, dir[1].length), (128, 40));
        assert_eq!(data.len(), 168);
        assert_eq!(&data[..10], &[9u8; 10]);
        let mut buf = MemfdBuffer::new();
        buf.append(&data).unwrap();
        assert_eq!(read_back(dir, &buf), weights());
    }

    #[test]
    fn entries_outside_the_data_or_with_another_checksum_are_left_out() {
        let mut data = Vec::new();
        let dir = lay_out(&mut data, &weights()).unwrap();
        let mut buf = MemfdBuffer::new();
        buf.append(&data).unwrap();
        let second = || weights().entries.remove(1);
        for (what, change) in [
            (
                "past the end",
                &(|d: &mut CachedPacked| d.length += 1) as &dyn Fn(&mut CachedPacked),
            ),
            ("offset overflow", &|d| d.offset = u64::MAX),
            ("length overflow", &|d| d.length = u64::MAX),
            ("shifted", &|d| d.offset += 1),
            ("checksum", &|d| d.checksum ^= 1),
        ] {
            let mut d = dir.clone();
            change(&mut d[0]);
            let back = read_back(d, &buf);
            assert_eq!(back.entries, vec![second()], "{what}");
        }
    }

    #[test]
    fn a_directory_naming_the_same_bytes_again_and_again_reads_no_more_than_the_data() {
        let mut data = Vec::new();
        let dir = lay_out(&mut data, &weights()).unwrap();
        let mut buf = MemfdBuffer::new();
        buf.append(&data).unwrap();
        // The 40-byte entry (at 64) 100 times over 104 bytes of data: two fit the budget.
        assert_eq!(data.len(), 104);
        let back = read_back(vec![dir[1].clone(); 100], &buf);
        assert_eq!(back.entries.len(), 2);
        assert!(back.entries.iter().all(|e| e.bytes == vec![2; 40]));
    }
}
