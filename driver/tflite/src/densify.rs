//! Densifying TFLite's sparse constants (`SparsityParameters`), as TFLite's `FormatConverter`
//! does at DENSIFY: the stored values are visited in the traversal order, dimension by
//! dimension, each dimension either dense (every index present) or compressed (CSR: segments
//! into a list of present indices); block dimensions scale their original dimension's index.
//!
//! Everything comes from the model, so every inconsistency is an error: traversal orders that
//! are not permutations, block sizes that do not divide their dimension, dense sizes that do not
//! match the shape, segments or indices out of range, more or fewer stored values than the
//! metadata visits.

use crate::graph::{DimensionMetadata, Sparsity, Tensor};

/// Most traversed dimensions (original plus block) accepted: the walk recurses once per level.
const MAX_LEVELS: usize = 16;

/// Largest dense result, in bytes (2 GiB): a small sparse constant may claim a huge shape.
const MAX_DENSE_BYTES: usize = 2 << 30;

/// The dense little-endian bytes of a sparse constant (`tensor.sparsity` over `tensor.data`),
/// row-major in `tensor.shape`. Positions the sparse form does not store are zero.
pub fn densify(tensor: &Tensor) -> Result<Vec<u8>, String> {
    let err = |why: String| format!("tensor {:?}: cannot densify: {why}", tensor.name);
    let sparsity = tensor
        .sparsity
        .as_ref()
        .ok_or_else(|| err("it has no sparsity parameters".into()))?;
    let data = tensor
        .data
        .as_deref()
        .ok_or_else(|| err("it has no constant data".into()))?;
    let size = tensor
        .element_type
        .size()
        .ok_or_else(|| err(format!("{} has no fixed size", tensor.element_type.name())))?;
    let plan = Plan::new(&tensor.shape, sparsity).map_err(&err)?;
    if data.len() % size != 0 {
        return Err(err(format!(
            "{} bytes of data is not a whole number of {size}-byte elements",
            data.len()
        )));
    }
    let total = plan
        .dense_elements
        .checked_mul(size)
        .filter(|&b| b <= MAX_DENSE_BYTES)
        .ok_or_else(|| {
            err(format!(
                "shape {:?} is over the {MAX_DENSE_BYTES}-byte limit",
                tensor.shape
            ))
        })?;
    // A first walk checks the metadata against the data without writing, so an inconsistent
    // model costs no allocation of its dense size.
    let walk = |dest: Option<&mut Vec<u8>>| -> Result<(), String> {
        let mut walk = Walk {
            plan: &plan,
            src: data,
            size,
            next: 0,
            dest,
            indices: vec![0; plan.levels.len()],
        };
        walk.level(0, 0).map_err(&err)?;
        let used = walk.next;
        if used * size != data.len() {
            return Err(err(format!(
                "the metadata visits {used} values, the data holds {}",
                data.len() / size
            )));
        }
        Ok(())
    };
    walk(None)?;
    let mut out = Vec::new();
    out.try_reserve_exact(total)
        .map_err(|e| err(format!("{total} bytes: {e}")))?;
    out.resize(total, 0);
    walk(Some(&mut out))?;
    Ok(out)
}

/// The checked shape of the walk.
struct Plan<'a> {
    /// Per level (traversed dimension), in traversal order.
    levels: Vec<Level<'a>>,
    dense_elements: usize,
}

struct Level<'a> {
    /// How many indices the level spans.
    extent: usize,
    /// What one step of its index moves in the dense row-major result, in elements: the
    /// dimension's stride, times the block size for a blocked original dimension.
    step: usize,
    /// Segments and indices of a compressed level; `None` for a dense one.
    csr: Option<(&'a [i32], &'a [i32])>,
}

/// Whether `order` holds each of `range` exactly once.
fn is_permutation(order: &[usize], range: std::ops::Range<usize>) -> bool {
    let mut seen = vec![false; range.len()];
    order.len() == range.len()
        && order.iter().all(|&d| {
            d.checked_sub(range.start)
                .and_then(|i| seen.get_mut(i))
                .is_some_and(|s| !std::mem::replace(s, true))
        })
}

impl<'a> Plan<'a> {
    fn new(shape: &[i32], sparsity: &'a Sparsity) -> Result<Self, String> {
        let shape: Vec<usize> = shape
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension in {shape:?}")))
            .collect::<Result<_, _>>()?;
        let n = shape.len();
        let k = sparsity.block_map.len();
        let levels = n + k;
        if levels > MAX_LEVELS {
            return Err(format!(
                "{levels} traversed dimensions, more than {MAX_LEVELS}"
            ));
        }
        let as_index = |v: i32| usize::try_from(v).unwrap_or(usize::MAX);
        let order: Vec<usize> = sparsity
            .traversal_order
            .iter()
            .map(|&d| as_index(d))
            .collect();
        if order.len() != levels
            || !is_permutation(&order[..n.min(order.len())], 0..n)
            || !is_permutation(&order[n.min(order.len())..], n..levels)
        {
            return Err(format!(
                "traversal order {:?} is not a permutation of the {n} dimensions followed by one of the {k} block dimensions",
                sparsity.traversal_order
            ));
        }
        if sparsity.dim_metadata.len() != levels {
            return Err(format!(
                "{} dimension metadata for {levels} traversed dimensions",
                sparsity.dim_metadata.len()
            ));
        }
        // Block sizes: a block dimension's metadata is dense, its size divides its original
        // dimension.
        let mut blocks = Vec::with_capacity(k);
        for (b, &orig) in sparsity.block_map.iter().enumerate() {
            let orig = as_index(orig);
            let dim = shape.get(orig).copied().ok_or_else(|| {
                format!(
                    "block map {:?} names dimension {orig} of a rank-{n} shape",
                    sparsity.block_map
                )
            })?;
            let level = order.iter().position(|&d| d == n + b).unwrap_or(levels);
            let block = match sparsity.dim_metadata.get(level) {
                Some(DimensionMetadata::Dense { size }) => as_index(*size),
                _ => return Err(format!("block dimension {b} is not dense")),
            };
            if block == 0 || block == usize::MAX || dim % block != 0 {
                return Err(format!(
                    "block size {block} does not divide dimension {orig} of size {dim}"
                ));
            }
            if blocks.iter().any(|&(o, _)| o == orig) {
                return Err(format!(
                    "block map {:?} blocks dimension {orig} twice",
                    sparsity.block_map
                ));
            }
            blocks.push((orig, block));
        }
        // The block size of original dimension d (1 when it is not blocked).
        let block_of = |d: usize| {
            blocks
                .iter()
                .find(|(orig, _)| *orig == d)
                .map_or(1, |(_, b)| *b)
        };
        let extent_of = |d: usize| -> usize {
            if d < n {
                shape[d] / block_of(d)
            } else {
                blocks[d - n].1
            }
        };
        let overflow = || format!("shape {shape:?} overflows");
        let dense_elements = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(overflow)?;
        // Row-major strides (checked: with a zero dimension the element count bounds nothing).
        let mut strides = vec![1usize; n];
        for d in (0..n.saturating_sub(1)).rev() {
            strides[d] = strides[d + 1]
                .checked_mul(shape[d + 1])
                .ok_or_else(overflow)?;
        }
        let step_of = |d: usize| -> Option<usize> {
            if d < n {
                strides[d].checked_mul(block_of(d))
            } else {
                Some(strides[blocks[d - n].0])
            }
        };
        let mut plan_levels = Vec::with_capacity(levels);
        for (level, (meta, &d)) in sparsity.dim_metadata.iter().zip(&order).enumerate() {
            let extent = extent_of(d);
            let step = step_of(d).ok_or_else(overflow)?;
            let csr = match meta {
                DimensionMetadata::Dense { size } => {
                    if as_index(*size) != extent {
                        return Err(format!(
                            "level {level} is dense with size {size}, its dimension has {extent}"
                        ));
                    }
                    None
                }
                DimensionMetadata::SparseCsr {
                    array_segments,
                    array_indices,
                } => Some((array_segments.as_slice(), array_indices.as_slice())),
            };
            plan_levels.push(Level { extent, step, csr });
        }
        Ok(Plan {
            levels: plan_levels,
            dense_elements,
        })
    }

    /// The row-major element index in the dense shape of the traversal indices `indices`
    /// (each below its level's extent, so the sum stays below the element count).
    fn flat_index(&self, indices: &[usize]) -> Option<usize> {
        indices
            .iter()
            .zip(&self.levels)
            .try_fold(0usize, |flat, (&i, l)| {
                flat.checked_add(i.checked_mul(l.step)?)
            })
            .filter(|&flat| flat < self.dense_elements)
    }
}

/// One densification in progress.
struct Walk<'p, 'a> {
    plan: &'p Plan<'a>,
    src: &'p [u8],
    size: usize,
    /// The next stored value.
    next: usize,
    /// Where values go; `None` for the checking walk.
    dest: Option<&'p mut Vec<u8>>,
    /// The index chosen at each level so far.
    indices: Vec<usize>,
}

impl Walk<'_, '_> {
    /// Visits `level` below the position `prev` of the level above.
    fn level(&mut self, level: usize, prev: usize) -> Result<(), String> {
        let Some(l) = self.plan.levels.get(level) else {
            return self.store();
        };
        match l.csr {
            None => {
                for i in 0..l.extent {
                    self.indices[level] = i;
                    let pos = prev
                        .checked_mul(l.extent)
                        .and_then(|p| p.checked_add(i))
                        .ok_or("position overflow")?;
                    self.level(level + 1, pos)?;
                }
            }
            Some((segments, indices)) => {
                let seg = |p: usize| {
                    segments
                        .get(p)
                        .and_then(|&s| usize::try_from(s).ok())
                        .ok_or_else(|| {
                            format!(
                                "level {level}: segment {p} is missing or negative ({} segments)",
                                segments.len()
                            )
                        })
                };
                let (start, end) = (seg(prev)?, seg(prev + 1)?);
                let present = indices.get(start..end).ok_or_else(|| {
                    format!(
                        "level {level}: segment {start}..{end} is not within the {} indices",
                        indices.len()
                    )
                })?;
                for (pos, &index) in (start..end).zip(present) {
                    let i = usize::try_from(index)
                        .ok()
                        .filter(|&i| i < l.extent)
                        .ok_or_else(|| {
                            format!("level {level}: index {index} is outside 0..{}", l.extent)
                        })?;
                    self.indices[level] = i;
                    self.level(level + 1, pos)?;
                }
            }
        }
        Ok(())
    }

    /// Copies the next stored value to the position the indices name.
    fn store(&mut self) -> Result<(), String> {
        let flat = self
            .plan
            .flat_index(&self.indices)
            .ok_or("a position outside the shape")?;
        let from = self.next * self.size;
        let value = self.src.get(from..from + self.size).ok_or_else(|| {
            format!(
                "the metadata visits more than the {} stored values",
                self.src.len() / self.size
            )
        })?;
        if let Some(dest) = self.dest.as_deref_mut() {
            let to = flat * self.size;
            dest.get_mut(to..to + self.size)
                .ok_or("a position outside the shape")?
                .copy_from_slice(value);
        }
        self.next += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{ElementType, Quantization};

    fn sparse(
        element_type: ElementType,
        shape: &[i32],
        sparsity: Sparsity,
        data: Vec<u8>,
    ) -> Tensor {
        Tensor {
            name: "w".into(),
            element_type,
            shape: shape.to_vec(),
            shape_signature: Vec::new(),
            quantization: Quantization::default(),
            sparsity: Some(sparsity),
            data: Some(data),
            is_variable: false,
        }
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn dense(size: i32) -> DimensionMetadata {
        DimensionMetadata::Dense { size }
    }

    fn csr(segments: &[i32], indices: &[i32]) -> DimensionMetadata {
        DimensionMetadata::SparseCsr {
            array_segments: segments.to_vec(),
            array_indices: indices.to_vec(),
        }
    }

    /// [[1,0,0,0],[0,0,2,3],[0,0,0,0],[4,0,0,5]] as CSR: rows dense, columns compressed;
    /// row r's columns are indices[segments[r]..segments[r+1]].
    fn csr_4x4() -> Tensor {
        sparse(
            ElementType::Float32,
            &[4, 4],
            Sparsity {
                traversal_order: vec![0, 1],
                block_map: vec![],
                dim_metadata: vec![dense(4), csr(&[0, 1, 3, 3, 5], &[0, 2, 3, 0, 3])],
            },
            f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0]),
        )
    }

    #[test]
    fn a_csr_matrix_densifies_row_major() {
        let expected = f32_bytes(&[
            1.0, 0.0, 0.0, 0.0, //
            0.0, 0.0, 2.0, 3.0, //
            0.0, 0.0, 0.0, 0.0, //
            4.0, 0.0, 0.0, 5.0,
        ]);
        assert_eq!(densify(&csr_4x4()).unwrap(), expected);
    }

    /// [[0,0,1,2],[0,0,3,4],[5,6,0,0],[0,7,0,0]] in 2x2 blocks: block row 0 holds block
    /// column 1, block row 1 holds block column 0; each stored block is dense, row-major.
    fn block_4x4() -> Tensor {
        sparse(
            ElementType::Int8,
            &[4, 4],
            Sparsity {
                traversal_order: vec![0, 1, 2, 3],
                block_map: vec![0, 1],
                dim_metadata: vec![dense(2), csr(&[0, 1, 2], &[1, 0]), dense(2), dense(2)],
            },
            vec![1, 2, 3, 4, 5, 6, 0, 7],
        )
    }

    #[test]
    fn a_block_sparse_matrix_places_each_2x2_block() {
        assert_eq!(
            densify(&block_4x4()).unwrap(),
            vec![0, 0, 1, 2, 0, 0, 3, 4, 5, 6, 0, 0, 0, 7, 0, 0]
        );
    }

    #[test]
    fn a_column_major_traversal_is_transposed_back() {
        // [[1,2,3],[4,5,6]] stored column by column: 1,4,2,5,3,6.
        let t = sparse(
            ElementType::Int16,
            &[2, 3],
            Sparsity {
                traversal_order: vec![1, 0],
                block_map: vec![],
                dim_metadata: vec![dense(3), dense(2)],
            },
            [1i16, 4, 2, 5, 3, 6]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        );
        let expected: Vec<u8> = [1i16, 2, 3, 4, 5, 6]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(densify(&t).unwrap(), expected);
    }

    fn densify_error(edit: impl FnOnce(&mut Tensor)) -> String {
        let mut t = csr_4x4();
        edit(&mut t);
        densify(&t).unwrap_err()
    }

    fn sparsity_mut(t: &mut Tensor) -> &mut Sparsity {
        t.sparsity.as_mut().unwrap()
    }

    #[test]
    fn inconsistent_metadata_is_an_error() {
        type Edit = Box<dyn FnOnce(&mut Tensor)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|t| sparsity_mut(t).traversal_order = vec![0, 0]),
                "not a permutation",
            ),
            (
                Box::new(|t| sparsity_mut(t).traversal_order = vec![0]),
                "not a permutation",
            ),
            (
                Box::new(|t| sparsity_mut(t).dim_metadata[0] = dense(3)),
                "dense with size 3",
            ),
            (
                Box::new(|t| sparsity_mut(t).dim_metadata[1] = csr(&[0, 1, 3, 3], &[0, 2, 3])),
                "segment 4 is missing",
            ),
            (
                Box::new(|t| {
                    sparsity_mut(t).dim_metadata[1] = csr(&[0, 1, 3, 3, 9], &[0, 2, 3, 0, 3])
                }),
                "not within the 5 indices",
            ),
            (
                Box::new(|t| {
                    sparsity_mut(t).dim_metadata[1] = csr(&[0, 1, 3, 3, 5], &[0, 2, 4, 0, 3])
                }),
                "index 4 is outside 0..4",
            ),
            (
                Box::new(|t| t.data = Some(f32_bytes(&[1.0, 2.0, 3.0, 4.0]))),
                "more than the 4 stored values",
            ),
            (
                Box::new(|t| t.data = Some(f32_bytes(&[1.0; 6]))),
                "visits 5 values, the data holds 6",
            ),
            (
                Box::new(|t| t.data = Some(vec![0; 7])),
                "not a whole number",
            ),
            (
                Box::new(|t| t.element_type = ElementType::String),
                "no fixed size",
            ),
            (Box::new(|t| t.sparsity = None), "no sparsity"),
            (
                Box::new(|t| {
                    let s = sparsity_mut(t);
                    s.block_map = vec![1];
                    s.traversal_order = vec![0, 1, 2];
                    s.dim_metadata = vec![dense(4), dense(1), dense(3)];
                }),
                "block size 3 does not divide dimension 1 of size 4",
            ),
            (
                Box::new(|t| {
                    let s = sparsity_mut(t);
                    s.block_map = vec![1, 1];
                    s.traversal_order = vec![0, 1, 2, 3];
                    s.dim_metadata = vec![dense(4), dense(1), dense(2), dense(2)];
                }),
                "blocks dimension 1 twice",
            ),
            (
                // Zero elements, yet the strides of the other dimensions overflow.
                Box::new(|t| {
                    t.shape = vec![0, 1 << 30, 1 << 30, 1 << 30];
                    let s = sparsity_mut(t);
                    s.traversal_order = vec![0, 1, 2, 3];
                    s.dim_metadata = vec![dense(0), dense(1), dense(1), dense(1)];
                }),
                "overflows",
            ),
        ];
        for (edit, want) in cases {
            let err = densify_error(edit);
            assert!(err.contains(want), "want {want:?} in {err:?}");
            assert!(err.starts_with("tensor \"w\""), "{err}");
        }
    }

    /// The hand-worked examples with their metadata, shape and data mutated (edgy numbers,
    /// entries added and removed): densify gives the dense bytes of the shape or an error,
    /// never a panic.
    #[test]
    fn mutated_sparsity_metadata_densifies_or_fails_cleanly() {
        use nnaccel_uapi::fuzz;
        fn edit(rng: &mut fuzz::Rng, v: &mut Vec<i32>) {
            match rng.below(4) {
                0 if !v.is_empty() => {
                    let at = rng.below(v.len());
                    v[at] = rng.edgy_u32() as i32;
                }
                1 if !v.is_empty() => {
                    let at = rng.below(v.len());
                    v[at] = v[at].wrapping_add(if rng.chance(1, 2) { 1 } else { -1 });
                }
                2 => v.push(rng.below(6) as i32),
                _ => {
                    v.pop();
                }
            }
        }
        let seeds = [csr_4x4(), block_4x4()];
        fuzz::run("tflite-densify", 3_000, |rng| {
            let mut t = rng.pick(&seeds).clone();
            for _ in 0..=rng.below(3) {
                let s = t.sparsity.as_mut().unwrap();
                let levels = s.dim_metadata.len();
                match rng.below(6) {
                    0 => edit(rng, &mut t.shape),
                    1 => edit(rng, &mut s.traversal_order),
                    2 => edit(rng, &mut s.block_map),
                    3 if levels > 0 => match &mut s.dim_metadata[rng.below(levels)] {
                        DimensionMetadata::Dense { size } => {
                            let mut v = vec![*size];
                            edit(rng, &mut v);
                            *size = v.first().copied().unwrap_or(0);
                        }
                        DimensionMetadata::SparseCsr {
                            array_segments,
                            array_indices,
                        } => {
                            let v = if rng.chance(1, 2) {
                                array_segments
                            } else {
                                array_indices
                            };
                            edit(rng, v);
                        }
                    },
                    4 => {
                        let data = t.data.as_mut().unwrap();
                        fuzz::mutate(rng, data);
                    }
                    _ => {
                        s.dim_metadata.swap(0, levels.saturating_sub(1));
                    }
                }
            }
            // A mutated shape may be valid and claim up to MAX_DENSE_BYTES: not in a unit test.
            let bytes = t
                .shape
                .iter()
                .try_fold(1i64, |n, &d| n.checked_mul(i64::from(d)));
            if bytes.is_none_or(|b| b > 1 << 20) {
                return;
            }
            if let Ok(out) = densify(&t) {
                let elements: usize = t.shape.iter().map(|&d| d as usize).product();
                assert_eq!(out.len(), elements * t.element_type.size().unwrap());
            }
        });
    }
}
