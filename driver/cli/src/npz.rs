//! NumPy arrays in and out: `--inputs IN.npz` (or one `.npy`) and `run --outputs OUT.npz`.
//!
//! An `.npz` is a zip archive of `.npy` files, one per array, named `NAME.npy` (what
//! `numpy.savez` writes; `numpy.savez_compressed` deflates them). The `.npy` headers are read
//! and written with `npyz`, the archive with `zip` (inflate only, no other codecs). An array's
//! raw data is the request's buffer: the bytes of an input or output are the same in TFLite,
//! NumPy (little-endian) and the NN HAL request, so nothing is converted except a big-endian
//! array's byte order and a Fortran-order array's layout.
//!
//! Everything here reads untrusted files: sizes are checked before anything is allocated,
//! inflated data is bounded, and every problem is an error naming the array (or archive entry)
//! and what is wrong.

use std::io::{Cursor, Read, Write};

use nnaccel_hal::OperandType;
use nnaccel_protocol::modelfile::InputValue;
use npyz::{DType, Endianness, Order, TypeStr, WriteOptions, WriterBuilder};

use crate::exec::MAX_REQUEST_BYTES;

/// The first bytes of a zip archive (a local file header, or the end record of an empty one).
pub fn is_zip(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
}

/// The first bytes of an `.npy` file.
pub fn is_npy(head: &[u8]) -> bool {
    head.starts_with(b"\x93NUMPY")
}

/// What one request input expects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// The tensor name that selects its array (None: only `arr_K` can).
    pub name: Option<String>,
    /// Its operand type in the model.
    pub ty: OperandType,
    /// Its dimensions in the model; 0 is an extent known only at execution, and an empty list
    /// a rank known only at execution (or a scalar operand type).
    pub dims: Vec<u32>,
}

/// One array of an archive, as stored (data in C order, little-endian after [`read_npy`]).
#[derive(Clone, Debug, PartialEq)]
struct Array {
    name: String,
    type_str: TypeStr,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// The `.npy` type string an operand type's bytes are (`<f4`, `|u1`, …); None for SUBGRAPH.
pub fn npy_type(ty: OperandType) -> Option<&'static str> {
    use OperandType::*;
    Some(match ty {
        Float32 | TensorFloat32 => "<f4",
        Float16 | TensorFloat16 => "<f2",
        Int32 | TensorInt32 => "<i4",
        Uint32 => "<u4",
        Bool | TensorBool8 => "|b1",
        TensorQuant8Asymm => "|u1",
        TensorQuant8AsymmSigned | TensorQuant8Symm | TensorQuant8SymmPerChannel => "|i1",
        TensorQuant16Symm => "<i2",
        TensorQuant16Asymm => "<u2",
        Subgraph => return None,
    })
}

/// [`npy_type`] parsed, the form the `.npy` reader and writer take.
fn type_str(ty: OperandType) -> Option<TypeStr> {
    npy_type(ty)?.parse().ok()
}

/// Whether `found` holds the same values as `expected` (byte order aside).
fn same_kind(found: &TypeStr, expected: &TypeStr) -> bool {
    found.type_char() == expected.type_char() && found.size_field() == expected.size_field()
}

/// Most bytes an `.npy` header may take: numpy writes a few hundred; this keeps a corrupt
/// length field from asking for gigabytes.
const MAX_HEADER_BYTES: usize = 1 << 16;

/// Reads one `.npy` file (all of it in `bytes`) as array `name`: the data byte-swapped to
/// little-endian and reordered to C order when stored otherwise.
fn read_npy(name: &str, bytes: &[u8]) -> Result<Array, String> {
    if !is_npy(bytes) {
        return Err(format!(
            "array '{name}': not an .npy file (no \\x93NUMPY magic)"
        ));
    }
    // The header length field (bytes 8.., u16 in version 1, u32 after) is checked against
    // the data there before npyz allocates that much.
    let header_len = match bytes.get(6) {
        Some(1) => bytes
            .get(8..10)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))),
        Some(2 | 3) => bytes
            .get(8..12)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize),
        other => {
            return Err(format!(
                "array '{name}': .npy format version {} is not one numpy writes (1, 2 or 3)",
                other.map_or("(missing)".to_string(), |v| v.to_string())
            ));
        }
    };
    match header_len {
        Some(n) if n <= MAX_HEADER_BYTES && n <= bytes.len() => {}
        Some(n) => {
            return Err(format!(
                "array '{name}': the .npy header claims {n} bytes, more than the file holds \
                 or than {MAX_HEADER_BYTES}"
            ));
        }
        None => return Err(format!("array '{name}': the .npy header is cut short")),
    }
    let npy = npyz::NpyFile::new(bytes)
        .map_err(|e| format!("array '{name}': malformed .npy header: {e}"))?;
    let header = npy.header().clone();
    let type_str = match header.dtype() {
        DType::Plain(t) => t,
        other => {
            return Err(format!(
                "array '{name}': a structured dtype ({}); only plain numeric and bool arrays \
                 are inputs",
                other.descr()
            ));
        }
    };
    let shape = header.shape().to_vec();
    let size = type_str.num_bytes().unwrap_or(usize::MAX);
    if header.uses_pickled_array() || size == 0 || size > 16 {
        return Err(format!(
            "array '{name}': dtype {type_str} is not a plain number or bool type"
        ));
    }
    let len = shape
        .iter()
        .try_fold(size as u64, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_REQUEST_BYTES)
        .ok_or_else(|| {
            format!(
                "array '{name}': shape {shape:?} of {type_str} is more than nnaccelctl's \
                 limit of {MAX_REQUEST_BYTES} bytes for one request"
            )
        })? as usize;
    let rest = npy.into_inner();
    let mut data = rest
        .get(..len)
        .ok_or_else(|| {
            format!(
                "array '{name}': shape {shape:?} of {type_str} needs {len} bytes of data, the \
                 file holds {}",
                rest.len()
            )
        })?
        .to_vec();
    if rest.len() > len {
        return Err(format!(
            "array '{name}': {} bytes after the {len} bytes of data its shape {shape:?} needs",
            rest.len() - len
        ));
    }
    if type_str.endianness() == Endianness::Big && size > 1 {
        for element in data.chunks_exact_mut(size) {
            element.reverse();
        }
    }
    if header.order() == Order::Fortran {
        data = fortran_to_c(&data, &shape, size);
    }
    Ok(Array {
        name: name.to_string(),
        type_str,
        shape,
        data,
    })
}

/// The elements of a Fortran-order array (first index fastest) in C order (last fastest).
/// `data` holds exactly the product of `shape` elements of `size` bytes.
fn fortran_to_c(data: &[u8], shape: &[u64], size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    // Fortran strides in elements: 1, s0, s0*s1, … (bounded: the product is the data's length).
    let mut strides = Vec::with_capacity(shape.len());
    let mut s = 1u64;
    for &d in shape {
        strides.push(s);
        s = s.saturating_mul(d);
    }
    let count = data.len() / size.max(1);
    let mut index = vec![0u64; shape.len()];
    for _ in 0..count {
        let at: u64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        let at = at as usize * size;
        out.extend_from_slice(data.get(at..at + size).unwrap_or(&[]));
        // Next C-order index: the last dimension steps fastest.
        for (i, &d) in index.iter_mut().zip(shape).rev() {
            *i += 1;
            if *i < d {
                break;
            }
            *i = 0;
        }
    }
    out
}

/// Reads the arrays of an inputs file: an `.npz` archive, or one `.npy` file (array `arr_0`).
/// At most `limit` bytes of `.npy` members in all ([`MAX_REQUEST_BYTES`]), however well they
/// compress.
fn read_arrays(bytes: &[u8], limit: u64) -> Result<Vec<Array>, String> {
    if is_npy(bytes) {
        return Ok(vec![read_npy("arr_0", bytes)?]);
    }
    if !is_zip(bytes) {
        return Err("not an .npz archive (a zip file), an .npy file or JSON".to_string());
    }
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| format!("not a readable .npz (zip) archive: {e}"))?;
    let mut budget = limit;
    let mut arrays: Vec<Array> = Vec::with_capacity(archive.len());
    for k in 0..archive.len() {
        let mut entry = archive
            .by_index(k)
            .map_err(|e| format!("archive entry {k}: cannot be read: {e}"))?;
        let file_name = entry.name().to_string();
        let name = npyz::npz::array_name_from_file_name(&file_name)
            .filter(|_| entry.is_file())
            .ok_or_else(|| format!("archive entry '{file_name}' is not an array (NAME.npy)"))?
            .to_string();
        if arrays.iter().any(|a| a.name == name) {
            return Err(format!("array '{name}' appears twice in the archive"));
        }
        if entry.size() > budget {
            return Err(format!(
                "array '{name}': {} bytes uncompressed, more than nnaccelctl's limit of \
                 {limit} bytes for the arrays of one request",
                entry.size()
            ));
        }
        // The size stored in the archive is not trusted: the read stops one byte past it.
        let mut npy = Vec::new();
        (&mut entry)
            .take(budget + 1)
            .read_to_end(&mut npy)
            .map_err(|e| format!("array '{name}': cannot be inflated: {e}"))?;
        if npy.len() as u64 > budget {
            return Err(format!(
                "array '{name}': inflates to more than nnaccelctl's limit of \
                 {limit} bytes for the arrays of one request"
            ));
        }
        budget -= npy.len() as u64;
        arrays.push(read_npy(&name, &npy)?);
    }
    Ok(arrays)
}

/// `arr_K` → K.
fn positional(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("arr_")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.parse().ok()
}

/// Which input each array feeds: by the inputs' names, or all by position (`arr_K`).
fn assign(arrays: &[Array], specs: &[InputSpec]) -> Result<Vec<usize>, String> {
    let by_name = |a: &Array| {
        let mut found = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name.as_deref() == Some(a.name.as_str()));
        match (found.next(), found.next()) {
            (Some((k, _)), None) => Some(Ok(k)),
            (Some((k, _)), Some((j, _))) => Some(Err(format!(
                "array '{}': inputs {k} and {j} are both named so; name the arrays arr_0, \
                 arr_1, … by position instead",
                a.name
            ))),
            _ => None,
        }
    };
    let names = || {
        let list: Vec<String> = specs
            .iter()
            .enumerate()
            .map(|(k, s)| match &s.name {
                Some(n) => format!("'{n}' (arr_{k})"),
                None => format!("arr_{k}"),
            })
            .collect();
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    };
    let named = arrays.iter().all(|a| by_name(a).is_some());
    if !named {
        // Neither an input's name nor arr_K: unknown, whatever the others are.
        if let Some(a) = arrays
            .iter()
            .find(|a| by_name(a).is_none() && positional(&a.name).is_none())
        {
            return Err(format!(
                "unknown array '{}': the model's inputs are {}",
                a.name,
                names()
            ));
        }
    }
    let mut taken: Vec<Option<&str>> = vec![None; specs.len()];
    let mut target = Vec::with_capacity(arrays.len());
    for a in arrays {
        let k = if named {
            by_name(a).ok_or_else(|| format!("unknown array '{}'", a.name))??
        } else {
            match positional(&a.name) {
                Some(k) if k < specs.len() => k,
                Some(_) => {
                    return Err(format!(
                        "extra array '{}': the model has {} input{} ({})",
                        a.name,
                        specs.len(),
                        if specs.len() == 1 { "" } else { "s" },
                        names()
                    ));
                }
                None => {
                    // Named by an input (the search above left no other kind), while some
                    // other array is arr_K.
                    let other = arrays
                        .iter()
                        .find(|b| by_name(b).is_none())
                        .map_or("", |b| b.name.as_str());
                    return Err(format!(
                        "array '{}' is named by its input and '{other}' by position: name \
                         every array by input name or every one arr_K by position, not a mix",
                        a.name
                    ));
                }
            }
        };
        if let Some(Some(first)) = taken.get(k) {
            return Err(format!(
                "arrays '{first}' and '{}' both give input {k}",
                a.name
            ));
        }
        if let Some(slot) = taken.get_mut(k) {
            *slot = Some(a.name.as_str());
        }
        target.push(k);
    }
    if let Some(k) = taken.iter().position(Option::is_none) {
        let wanted = match specs.get(k).and_then(|s| s.name.as_deref()) {
            Some(n) if named => format!("'{n}'"),
            Some(n) => format!("arr_{k} (or all arrays by name: '{n}')"),
            None => format!("arr_{k}"),
        };
        return Err(format!("no array for input {k}: expected {wanted}"));
    }
    Ok(target)
}

/// A dimension list for messages, `?` for an extent known only at execution.
fn dims_text(dims: &[u32]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|&d| {
            if d == 0 {
                "?".to_string()
            } else {
                d.to_string()
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The request input array `a` gives for `spec`: its type and shape checked against the
/// model's, its shape passed as the input's dimensions where the model leaves extents open.
fn input_value(a: Array, k: usize, spec: &InputSpec) -> Result<InputValue, String> {
    let label = match &spec.name {
        Some(n) => format!("array '{}' (input {k}, '{n}')", a.name),
        None => format!("array '{}' (input {k})", a.name),
    };
    let Some(expected) = type_str(spec.ty) else {
        return Err(format!("{label}: the input is a {}, not data", spec.ty));
    };
    if !same_kind(&a.type_str, &expected) {
        return Err(format!(
            "{label}: dtype {} does not match the input's {} (dtype {expected})",
            a.type_str, spec.ty
        ));
    }
    let size = spec.ty.element_size().max(1);
    let count = a.data.len() / size;
    if spec.ty.is_scalar() {
        if count != 1 {
            return Err(format!(
                "{label}: {count} values for a scalar {} (shape {:?})",
                spec.ty, a.shape
            ));
        }
        return Ok(InputValue {
            bytes: a.data,
            element_count: 1,
            dimensions: Vec::new(),
            has_no_value: false,
        });
    }
    // A 0-d array (a NumPy scalar) is one value: the shape [1] a lowered TFLite scalar has.
    let array_shape: &[u64] = if a.shape.is_empty() { &[1] } else { &a.shape };
    let shape: Vec<u32> = array_shape
        .iter()
        .map(|&d| u32::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            format!(
                "{label}: shape {:?} has an empty (0) or oversized dimension",
                a.shape
            )
        })?;
    let open = spec.dims.is_empty() || spec.dims.contains(&0);
    if !spec.dims.is_empty() {
        let fits = shape.len() == spec.dims.len()
            && shape
                .iter()
                .zip(&spec.dims)
                .all(|(&s, &m)| m == 0 || s == m);
        if !fits {
            return Err(format!(
                "{label}: shape {} does not match the input's {}",
                dims_text(&shape),
                dims_text(&spec.dims)
            ));
        }
    }
    Ok(InputValue {
        bytes: a.data,
        element_count: count,
        dimensions: if open { shape } else { Vec::new() },
        has_no_value: false,
    })
}

/// The request inputs an `.npz` (or `.npy`) file gives for `specs`, in the specs' order.
pub fn inputs_from_bytes(bytes: &[u8], specs: &[InputSpec]) -> Result<Vec<InputValue>, String> {
    let arrays = read_arrays(bytes, MAX_REQUEST_BYTES)?;
    let target = assign(&arrays, specs)?;
    let mut slots: Vec<Option<InputValue>> = vec![None; specs.len()];
    for (a, k) in arrays.into_iter().zip(target) {
        if let (Some(spec), Some(slot)) = (specs.get(k), slots.get_mut(k)) {
            *slot = Some(input_value(a, k, spec)?);
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(k, v)| v.ok_or_else(|| format!("no array for input {k}")))
        .collect()
}

/// One array to write.
#[derive(Clone, Copy, Debug)]
pub struct OutputArray<'a> {
    /// The array's name in the archive.
    pub name: &'a str,
    /// The operand type its bytes are.
    pub ty: OperandType,
    /// Its shape.
    pub dims: &'a [u32],
    /// The bytes, little-endian, row-major.
    pub bytes: &'a [u8],
}

/// The names the output arrays get: `names` when every one is given, non-empty and unique,
/// else `arr_0`, `arr_1`, … for all of them (as `numpy.savez` names positional arrays).
pub fn output_names(names: &[Option<&str>]) -> Vec<String> {
    let usable = names.iter().enumerate().all(|(k, n)| {
        n.is_some_and(|n| !n.is_empty() && !n.contains('\0') && !names[..k].contains(&Some(n)))
    });
    names
        .iter()
        .enumerate()
        .map(|(k, n)| match n {
            Some(n) if usable => n.to_string(),
            _ => format!("arr_{k}"),
        })
        .collect()
}

/// An `.npz` archive (stored, uncompressed, as `numpy.savez` writes) of `arrays`.
pub fn npz_bytes(arrays: &[OutputArray]) -> Result<Vec<u8>, String> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(
            arrays
                .iter()
                .any(|a| a.bytes.len() as u64 >= u64::from(u32::MAX)),
        );
    for a in arrays {
        let type_str = type_str(a.ty)
            .ok_or_else(|| format!("output '{}': a {} has no array form", a.name, a.ty))?;
        let shape: Vec<u64> = a.dims.iter().map(|&d| u64::from(d)).collect();
        let expected = shape
            .iter()
            .try_fold(a.ty.element_size() as u64, |n, &d| n.checked_mul(d));
        if expected != Some(a.bytes.len() as u64) {
            return Err(format!(
                "output '{}': {} bytes for shape {shape:?} of {}",
                a.name,
                a.bytes.len(),
                a.ty
            ));
        }
        let fail = |e: &dyn std::fmt::Display| format!("output '{}': {e}", a.name);
        zip.start_file(npyz::npz::file_name_from_array_name(a.name), options)
            .map_err(|e| fail(&e))?;
        let w = WriteOptions::<u8>::new()
            .dtype(DType::Plain(type_str))
            .shape(&shape)
            .writer(&mut zip)
            .write_header_only()
            .map_err(|e| fail(&e))?;
        w.write_all(a.bytes).map_err(|e| fail(&e))?;
    }
    zip.finish()
        .map(Cursor::into_inner)
        .map_err(|e| format!("cannot finish the archive: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixtures' model: 'x' float32 [1, 2, 2, 1] and 'y' int32 [3] (see
    /// testdata/gen_npz.py, which writes them with NumPy).
    fn specs() -> Vec<InputSpec> {
        vec![
            InputSpec {
                name: Some("x".into()),
                ty: OperandType::TensorFloat32,
                dims: vec![1, 2, 2, 1],
            },
            InputSpec {
                name: Some("y".into()),
                ty: OperandType::TensorInt32,
                dims: vec![3],
            },
        ]
    }

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/", $name)).as_slice()
        };
    }

    fn le_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn le_i32(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn err(bytes: &[u8], specs: &[InputSpec]) -> String {
        match inputs_from_bytes(bytes, specs) {
            Ok(v) => panic!("accepted: {v:?}"),
            Err(e) => e,
        }
    }

    fn assert_x_and_y(inputs: &[InputValue]) {
        assert_eq!(inputs.len(), 2);
        assert_eq!(inputs[0].bytes, le_f32(&[1.0, 2.0, 3.0, 4.0]));
        assert_eq!(inputs[0].element_count, 4);
        assert_eq!(inputs[0].dimensions, Vec::<u32>::new());
        assert_eq!(inputs[1].bytes, le_i32(&[7, -8, 9]));
        assert_eq!(inputs[1].element_count, 3);
    }

    #[test]
    fn arrays_named_by_input_names_feed_those_inputs() {
        let inputs = inputs_from_bytes(fixture!("named.npz"), &specs());
        assert_x_and_y(&inputs.unwrap_or_else(|e| panic!("{e}")));
    }

    #[test]
    fn deflated_members_in_another_order_are_read_by_name() {
        let inputs = inputs_from_bytes(fixture!("compressed.npz"), &specs());
        assert_x_and_y(&inputs.unwrap_or_else(|e| panic!("{e}")));
    }

    #[test]
    fn arr_k_arrays_feed_inputs_by_position_even_without_names() {
        let inputs = inputs_from_bytes(fixture!("positional.npz"), &specs());
        assert_x_and_y(&inputs.unwrap_or_else(|e| panic!("{e}")));
        let unnamed: Vec<InputSpec> = specs()
            .into_iter()
            .map(|s| InputSpec { name: None, ..s })
            .collect();
        let inputs = inputs_from_bytes(fixture!("positional.npz"), &unnamed);
        assert_x_and_y(&inputs.unwrap_or_else(|e| panic!("{e}")));
        // Without names, 'x' means nothing.
        let e = err(fixture!("named.npz"), &unnamed);
        assert!(e.contains("unknown array 'x'"), "{e}");
    }

    #[test]
    fn a_mix_of_names_and_positions_is_refused_naming_both() {
        let e = err(fixture!("mixed.npz"), &specs());
        assert!(
            e.contains("'y'") && e.contains("'arr_0'") && e.contains("mix"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_array_is_refused_with_the_model_input_names() {
        let e = err(fixture!("unknown.npz"), &specs());
        assert!(e.contains("unknown array 'z'"), "{e}");
        assert!(e.contains("'x' (arr_0), 'y' (arr_1)"), "{e}");
    }

    #[test]
    fn a_missing_array_names_the_input_it_leaves_empty() {
        let e = err(fixture!("missing.npz"), &specs());
        assert_eq!(e, "no array for input 1: expected 'y'");
    }

    #[test]
    fn an_extra_positional_array_is_refused() {
        let e = err(fixture!("extra.npz"), &specs());
        assert!(
            e.starts_with("extra array 'arr_2': the model has 2 inputs"),
            "{e}"
        );
    }

    #[test]
    fn a_dtype_that_is_not_the_inputs_is_refused() {
        let e = err(fixture!("wrong_dtype.npz"), &specs());
        assert!(e.contains("array 'x' (input 0, 'x')"), "{e}");
        assert!(e.contains("<f8") && e.contains("TENSOR_FLOAT32"), "{e}");
    }

    #[test]
    fn a_shape_that_is_not_the_inputs_is_refused() {
        let e = err(fixture!("wrong_shape.npz"), &specs());
        assert!(
            e.contains("shape [1, 4] does not match the input's [1, 2, 2, 1]"),
            "{e}"
        );
    }

    #[test]
    fn open_dimensions_take_the_arrays_and_become_input_dimensions() {
        let mut specs = specs();
        specs[0].dims = vec![0, 2, 0, 1];
        specs[1].dims = Vec::new();
        let inputs = inputs_from_bytes(fixture!("named.npz"), &specs);
        let inputs = inputs.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inputs[0].dimensions, vec![1, 2, 2, 1]);
        assert_eq!(inputs[1].dimensions, vec![3]);
        // A known extent still has to match.
        specs[0].dims = vec![0, 3, 0, 1];
        let e = err(fixture!("named.npz"), &specs);
        assert!(e.contains("does not match the input's [?, 3, ?, 1]"), "{e}");
    }

    #[test]
    fn a_zero_dimensional_array_is_one_value_of_shape_one() {
        // The .npy of np.array(5, dtype='<i4'): a 0-d array.
        let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (), }";
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
        npy.extend_from_slice(header.as_bytes());
        npy.extend_from_slice(&5i32.to_le_bytes());
        let spec = [InputSpec {
            name: None,
            ty: OperandType::TensorInt32,
            dims: vec![1],
        }];
        let inputs = inputs_from_bytes(&npy, &spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inputs[0].bytes, le_i32(&[5]));
        assert_eq!(inputs[0].dimensions, Vec::<u32>::new());
    }

    #[test]
    fn big_endian_arrays_are_byte_swapped() {
        let inputs = inputs_from_bytes(fixture!("big_endian.npz"), &specs());
        assert_x_and_y(&inputs.unwrap_or_else(|e| panic!("{e}")));
    }

    #[test]
    fn fortran_order_arrays_are_reordered_to_row_major() {
        let spec = [InputSpec {
            name: None,
            ty: OperandType::TensorInt32,
            dims: vec![2, 3],
        }];
        let inputs = inputs_from_bytes(fixture!("fortran.npz"), &spec);
        let inputs = inputs.unwrap_or_else(|e| panic!("{e}"));
        // np.arange(6).reshape(2, 3), row-major.
        assert_eq!(inputs[0].bytes, le_i32(&[0, 1, 2, 3, 4, 5]));
    }

    #[test]
    fn one_npy_file_is_the_first_input() {
        let spec = [specs()[1].clone()];
        let inputs = inputs_from_bytes(fixture!("single.npy"), &spec);
        let inputs = inputs.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inputs[0].bytes, le_i32(&[7, -8, 9]));
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_a_clear_error() {
        let named = fixture!("named.npz");
        let e = err(&named[..named.len() / 2], &specs());
        assert!(e.starts_with("not a readable .npz (zip) archive"), "{e}");
        let e = err(b"hello, not an archive", &specs());
        assert!(e.starts_with("not an .npz archive"), "{e}");
        // An .npy whose header length runs past the file.
        let e = err(b"\x93NUMPY\x01\x00\xff\x7f{}", &specs());
        assert!(e.contains("header claims 32767 bytes"), "{e}");
    }

    #[test]
    fn an_archive_member_that_is_not_an_array_is_refused_by_name() {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        zip.start_file("README.txt", options).unwrap();
        zip.write_all(b"not an array").unwrap();
        let bytes = zip.finish().unwrap().into_inner();
        let e = err(&bytes, &specs());
        assert_eq!(e, "archive entry 'README.txt' is not an array (NAME.npy)");
    }

    #[test]
    fn members_that_inflate_past_the_limit_are_refused() {
        // named.npz holds two members of 144 and 140 bytes (.npy header + data).
        let named = fixture!("named.npz");
        assert!(read_arrays(named, 284).is_ok());
        let e = read_arrays(named, 283).err().unwrap_or_default();
        assert!(
            e.contains("array 'y'") && e.contains("limit of 283 bytes"),
            "{e}"
        );
        let e = read_arrays(fixture!("compressed.npz"), 100)
            .err()
            .unwrap_or_default();
        assert!(e.contains("limit of 100 bytes"), "{e}");
    }

    #[test]
    fn a_shape_too_large_for_a_request_is_refused_before_allocating() {
        // shape (2**33, 2**33) of int32: the byte count overflows u64.
        let header =
            "{'descr': '<i4', 'fortran_order': False, 'shape': (8589934592, 8589934592), }";
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
        npy.extend_from_slice(header.as_bytes());
        let e = err(&npy, &specs()[1..]);
        assert!(e.contains("more than nnaccelctl's limit"), "{e}");
    }

    #[test]
    fn positional_names_are_arr_and_a_plain_number() {
        assert_eq!(positional("arr_0"), Some(0));
        assert_eq!(positional("arr_12"), Some(12));
        assert_eq!(positional("arr_01"), None);
        assert_eq!(positional("arr_"), None);
        assert_eq!(positional("arr_x"), None);
        assert_eq!(positional("x"), None);
    }

    #[test]
    fn output_names_fall_back_to_positions_when_not_unique() {
        assert_eq!(output_names(&[Some("a"), Some("b")]), ["a", "b"]);
        assert_eq!(output_names(&[Some("a"), Some("a")]), ["arr_0", "arr_1"]);
        assert_eq!(output_names(&[Some("a"), None]), ["arr_0", "arr_1"]);
        assert_eq!(output_names(&[Some(""), Some("b")]), ["arr_0", "arr_1"]);
    }

    #[test]
    fn written_archives_hold_npy_members_numpy_reads() {
        let x = le_f32(&[1.5, -2.0, 3.0, 4.25]);
        let q = [200u8, 7];
        let bytes = npz_bytes(&[
            OutputArray {
                name: "out/x",
                ty: OperandType::TensorFloat32,
                dims: &[2, 2],
                bytes: &x,
            },
            OutputArray {
                name: "q",
                ty: OperandType::TensorQuant8Asymm,
                dims: &[2],
                bytes: &q,
            },
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let mut archive = zip::ZipArchive::new(Cursor::new(&bytes)).unwrap();
        let names: Vec<&str> = archive.file_names().collect();
        assert_eq!(names.len(), 2);
        let mut member = Vec::new();
        archive
            .by_name("out/x.npy")
            .unwrap()
            .read_to_end(&mut member)
            .unwrap();
        // The .npy format: magic, version 1.0, header length, a Python dict, data last.
        assert!(member.starts_with(b"\x93NUMPY\x01\x00"));
        let text = String::from_utf8_lossy(&member);
        assert!(text.contains("'descr': '<f4'"), "{text}");
        assert!(text.contains("'fortran_order': False"), "{text}");
        assert!(text.contains("'shape': (2, 2"), "{text}");
        assert!(member.ends_with(&x));
        // Read back as inputs, by name.
        let specs = [
            InputSpec {
                name: Some("out/x".into()),
                ty: OperandType::TensorFloat32,
                dims: vec![2, 2],
            },
            InputSpec {
                name: Some("q".into()),
                ty: OperandType::TensorQuant8Asymm,
                dims: vec![2],
            },
        ];
        let back = inputs_from_bytes(&bytes, &specs).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back[0].bytes, x);
        assert_eq!(back[1].bytes, q);
    }

    #[test]
    fn an_output_whose_bytes_do_not_fill_its_shape_is_refused() {
        let e = npz_bytes(&[OutputArray {
            name: "o",
            ty: OperandType::TensorInt32,
            dims: &[3],
            bytes: &[0; 8],
        }]);
        assert_eq!(
            e.err().as_deref(),
            Some("output 'o': 8 bytes for shape [3] of TENSOR_INT32")
        );
    }
}
