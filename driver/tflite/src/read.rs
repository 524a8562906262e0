//! `.tflite` flatbuffers into the graph form ([`crate::graph`]).
//!
//! The file is read through the reader planus generated from the vendored `schema.fbs`
//! ([`crate::schema_generated`]): every offset, length, string and enum value is checked when it
//! is read, so a truncated or corrupted file is an error ([`ReadError::Malformed`]), never a
//! panic or an out-of-bounds read. On top of the flatbuffer's own validity this module checks
//! what the schema cannot say: indexes into the tensor, buffer, operator code and subgraph
//! tables, constants whose byte length does not match their shape and type, quantization
//! parameters that do not agree with each other, and buffers stored outside the flatbuffer
//! (models over 2 GiB) that point past the end of the file.
//!
//! Options follow TFLite's interpreter (`ParseOpData`): a node's parameters come from the
//! `*Options` table its builtin code implies, with the schema's defaults when the table is
//! absent or of another type.

use std::path::Path;

use crate::graph::{
    Activation, CUSTOM, DimensionMetadata, ElementType, Graph, LstmCell, LstmKernel, Node, Options,
    Padding, Quantization, Sparsity, Subgraph, Tensor,
};
use crate::schema_generated::tflite as fb;

/// The largest `.tflite` file read, in bytes (8 GiB). A bigger file is refused before anything
/// is read. The bound is above 2 GiB because TFLite stores the constants of bigger models after
/// the flatbuffer (`Buffer.offset`/`size`); the whole file is held in memory while it is read.
pub const MAX_FILE_BYTES: u64 = 8 << 30;

/// TFLite's file identifier, at bytes 4..8 of every `.tflite` flatbuffer.
const FILE_IDENTIFIER: &[u8; 4] = b"TFL3";

/// Why a `.tflite` file could not be read. Every message names the part of the model that is
/// wrong (subgraph, tensor, node, operator code, buffer; the path for I/O errors).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The path names a directory, FIFO, device or socket: refused before reading.
    #[error("{}: {kind}; a .tflite model must be a regular file", path.display())]
    NotRegularFile {
        /// The file.
        path: std::path::PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The model is larger than [`MAX_FILE_BYTES`].
    #[error("the model is {size} bytes, more than the limit of {MAX_FILE_BYTES} bytes")]
    TooLarge {
        /// Its size in bytes (at least; a growing file is cut off at the limit).
        size: u64,
    },
    /// Bytes 4..8 are not TFLite's file identifier `TFL3`.
    #[error("not a TFLite model: bytes 4..8 are {found}, not the file identifier \"TFL3\"")]
    NotTflite {
        /// The bytes found, escaped (or "missing" for a file shorter than 8 bytes).
        found: String,
    },
    /// The flatbuffer is truncated or corrupted where the named table was read.
    #[error("malformed flatbuffer at {at}: {source}")]
    Malformed {
        /// Which part of the model was being read.
        at: String,
        /// What planus's verifier found.
        #[source]
        source: planus::Error,
    },
    /// An index into one of the model's tables is out of range.
    #[error("{at}: {what} index {index} is out of range (there are {len})")]
    OutOfRange {
        /// Where the index is stored.
        at: String,
        /// Which table it indexes ("tensor", "buffer", "operator code", "subgraph").
        what: &'static str,
        /// The index.
        index: i64,
        /// The table's length.
        len: usize,
    },
    /// A well-formed flatbuffer whose content is inconsistent.
    #[error("{at}: {why}")]
    Invalid {
        /// Which part of the model.
        at: String,
        /// What is wrong.
        why: String,
    },
}

type Result<T> = std::result::Result<T, ReadError>;

/// Whether `head` (the first bytes of a file, at least 8) carries TFLite's file identifier.
pub fn looks_like_tflite(head: &[u8]) -> bool {
    head.get(4..8) == Some(FILE_IDENTIFIER.as_slice())
}

/// Reads a `.tflite` file. The file is opened without blocking and must be a regular file of at
/// most [`MAX_FILE_BYTES`]: a FIFO, a device such as `/dev/zero` or a directory is refused
/// before a byte is read, and the size is checked on the opened file, so nothing can swap it
/// between the check and the read.
pub fn read_file(path: &Path) -> Result<Graph> {
    use std::io::Read;
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (file, len) = nnaccel_protocol::modelfile::open_regular(path).map_err(io)?;
    let len = len.map_err(|kind| ReadError::NotRegularFile {
        path: path.to_path_buf(),
        kind,
    })?;
    if len > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge { size: len });
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    read_bytes(&bytes)
}

/// Reads a `.tflite` model held in memory (the whole file: buffers stored after the flatbuffer
/// are found by their offset from its first byte).
pub fn read_bytes(bytes: &[u8]) -> Result<Graph> {
    let len = bytes.len() as u64;
    if len > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge { size: len });
    }
    if !looks_like_tflite(bytes) {
        let found = match bytes.get(4..8) {
            Some(id) => format!("\"{}\"", id.escape_ascii()),
            None => format!("missing (the file is {len} bytes)"),
        };
        return Err(ReadError::NotTflite { found });
    }
    let model =
        <fb::ModelRef as planus::ReadAsRoot>::read_as_root(bytes).at(|| "the root table".into())?;
    Reader { bytes, model }.graph()
}

/// Attaches "where" to planus's errors.
trait At<T> {
    fn at(self, at: impl FnOnce() -> String) -> Result<T>;
}

impl<T> At<T> for planus::Result<T> {
    fn at(self, at: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| at_error(at(), source))
    }
}

/// A planus error as a [`ReadError`]: an enum value or union type the vendored schema does not
/// know is a model newer than the reader ([`ReadError::Invalid`], saying so), anything else a
/// damaged flatbuffer.
fn at_error(at: String, source: planus::Error) -> ReadError {
    use planus::errors::{ErrorKind, UnknownEnumTagKind};
    let what = |kind: &str, tag: i128| {
        let field = source.source_location;
        format!(
            "{}.{} holds {kind} {tag}, unknown to the vendored TFLite schema \
             (a newer model: see driver/tflite/schema/README.md)",
            field.type_,
            field.method.trim_end_matches('_')
        )
    };
    match source.error_kind {
        ErrorKind::UnknownEnumTag {
            source: UnknownEnumTagKind { tag },
        } => invalid(at, what("the value", tag)),
        ErrorKind::UnknownUnionTag { tag } => invalid(at, what("the union type", tag.into())),
        _ => ReadError::Malformed { at, source },
    }
}

fn invalid(at: impl Into<String>, why: impl Into<String>) -> ReadError {
    ReadError::Invalid {
        at: at.into(),
        why: why.into(),
    }
}

/// A vector of ints that may be absent (absent reads as empty, as in TFLite).
fn ints(v: planus::Result<Option<planus::Vector<'_, i32>>>) -> planus::Result<Vec<i32>> {
    Ok(match v? {
        Some(v) => v.iter().collect(),
        None => Vec::new(),
    })
}

/// Checks `index` against a table of `len` entries (`-1` allowed when `optional`).
fn check_index(
    index: i64,
    len: usize,
    what: &'static str,
    optional: bool,
    at: impl FnOnce() -> String,
) -> Result<usize> {
    match usize::try_from(index) {
        Ok(i) if i < len => Ok(i),
        _ if optional && index == -1 => Ok(usize::MAX),
        _ => Err(ReadError::OutOfRange {
            at: at(),
            what,
            index,
            len,
        }),
    }
}

fn check_tensor_list(
    list: &[i32],
    tensors: usize,
    optional: bool,
    at: impl Fn() -> String,
) -> Result<()> {
    for &t in list {
        check_index(t.into(), tensors, "tensor", optional, &at)?;
    }
    Ok(())
}

/// One model being read.
struct Reader<'a> {
    /// The whole file (external buffers are addressed from its start).
    bytes: &'a [u8],
    model: fb::ModelRef<'a>,
}

/// A resolved operator code.
struct OpCode {
    builtin: i32,
    custom: Option<String>,
    version: i32,
}

impl<'a> Reader<'a> {
    fn graph(&self) -> Result<Graph> {
        let model = &self.model;
        let version = model.version().at(|| "Model.version".into())?;
        let description = model
            .description()
            .at(|| "Model.description".into())?
            .unwrap_or_default()
            .to_owned();
        let codes = self.operator_codes()?;
        let buffers = model.buffers().at(|| "Model.buffers".into())?;
        let subgraphs_fb = model.subgraphs().at(|| "Model.subgraphs".into())?;
        let count = subgraphs_fb.map_or(0, |s| s.len());
        if count == 0 {
            return Err(invalid("the model", "it has no subgraph"));
        }
        let mut subgraphs = Vec::with_capacity(count);
        for (index, sg) in subgraphs_fb.into_iter().flatten().enumerate() {
            let sg = sg.at(|| format!("subgraph {index}"))?;
            subgraphs.push(self.subgraph(index, sg, &codes, buffers, count)?);
        }
        Ok(Graph {
            subgraphs,
            version,
            description,
        })
    }

    fn operator_codes(&self) -> Result<Vec<OpCode>> {
        let codes = self
            .model
            .operator_codes()
            .at(|| "Model.operator_codes".into())?;
        let mut out = Vec::new();
        for (i, code) in codes.into_iter().flatten().enumerate() {
            let at = || format!("operator code {i}");
            let code = code.at(at)?;
            let deprecated = i32::from(code.deprecated_builtin_code().at(at)?);
            // A code newer than the vendored schema is not an error here: the lowering
            // rejects it by number. planus reports it as an unknown enum tag.
            let extended = match code.builtin_code() {
                Ok(c) => c as i32,
                Err(planus::Error {
                    error_kind:
                        planus::errors::ErrorKind::UnknownEnumTag {
                            source: planus::errors::UnknownEnumTagKind { tag },
                        },
                    ..
                }) => i32::try_from(tag).map_err(|_| {
                    invalid(at(), format!("builtin code {tag} is not a 32-bit integer"))
                })?,
                Err(source) => return Err(at_error(at(), source)),
            };
            // TFLite's GetBuiltinCode: the larger of the two fields (old files only set the
            // byte-sized deprecated one, new ones set both for codes below 127).
            let builtin = deprecated.max(extended);
            let custom = code.custom_code().at(at)?.map(str::to_owned);
            let version = code.version().at(at)?;
            out.push(OpCode {
                builtin,
                custom,
                version,
            });
        }
        Ok(out)
    }

    fn subgraph(
        &self,
        index: usize,
        sg: fb::SubGraphRef<'a>,
        codes: &[OpCode],
        buffers: Option<planus::Vector<'a, planus::Result<fb::BufferRef<'a>>>>,
        subgraph_count: usize,
    ) -> Result<Subgraph> {
        let at = || format!("subgraph {index}");
        let name = sg.name().at(at)?.unwrap_or_default().to_owned();
        let mut tensors = Vec::new();
        for (t, tensor) in sg.tensors().at(at)?.into_iter().flatten().enumerate() {
            let at = || format!("subgraph {index} tensor {t}");
            tensors.push(self.tensor(&at, tensor.at(at)?, buffers)?);
        }
        let inputs = ints(sg.inputs()).at(at)?;
        let outputs = ints(sg.outputs()).at(at)?;
        check_tensor_list(&inputs, tensors.len(), false, || format!("{} inputs", at()))?;
        check_tensor_list(&outputs, tensors.len(), false, || {
            format!("{} outputs", at())
        })?;
        let mut nodes = Vec::new();
        for (n, op) in sg.operators().at(at)?.into_iter().flatten().enumerate() {
            let at = || format!("subgraph {index} node {n}");
            let op = op.at(at)?;
            nodes.push(node(&at, op, codes, tensors.len(), subgraph_count)?);
        }
        Ok(Subgraph {
            name,
            tensors,
            nodes,
            inputs,
            outputs,
        })
    }

    fn tensor(
        &self,
        at: &dyn Fn() -> String,
        t: fb::TensorRef<'a>,
        buffers: Option<planus::Vector<'a, planus::Result<fb::BufferRef<'a>>>>,
    ) -> Result<Tensor> {
        let name = t.name().at(at)?.unwrap_or_default().to_owned();
        let at = || format!("{} ({name:?})", at());
        let element_type = element_type(t.type_().at(at)?);
        let shape = ints(t.shape()).at(at)?;
        let shape_signature = ints(t.shape_signature()).at(at)?;
        let quantization = match t.quantization().at(at)? {
            Some(q) => quantization(&at, q, &shape)?,
            None => Quantization::default(),
        };
        let sparsity = t
            .sparsity()
            .at(at)?
            .map(|s| sparsity(s))
            .transpose()
            .at(at)?;
        let buffer_index = t.buffer().at(at)?;
        let buffer_count = buffers.map_or(0, |b| b.len());
        let data = if buffer_index == 0 {
            // Buffer 0 is the empty sentinel every non-constant tensor points at; a file
            // without a buffers table can only use it.
            None
        } else {
            let b = check_index(buffer_index.into(), buffer_count, "buffer", false, at)?;
            let buffer = buffers
                .and_then(|v| v.get(b))
                .ok_or_else(|| invalid(at(), format!("buffer {b} is missing")))?
                .at(|| format!("{} buffer {b}", at()))?;
            self.buffer_bytes(&|| format!("{} buffer {b}", at()), buffer)?
        };
        if let Some(data) = &data {
            if sparsity.is_none() {
                check_constant_length(&at, element_type, &shape, data.len())?;
            }
        }
        let is_variable = t.is_variable().at(at)?;
        Ok(Tensor {
            name,
            element_type,
            shape,
            shape_signature,
            quantization,
            sparsity,
            data,
            is_variable,
        })
    }

    /// A buffer's bytes: inline in the flatbuffer, or (models over 2 GiB) at `offset` from the
    /// start of the file. `None` for an empty buffer.
    fn buffer_bytes(
        &self,
        at: &dyn Fn() -> String,
        buffer: fb::BufferRef<'a>,
    ) -> Result<Option<Vec<u8>>> {
        let inline = buffer.data().at(at)?.unwrap_or_default();
        let offset = buffer.offset().at(at)?;
        let size = buffer.size().at(at)?;
        // TFLite: the offset is meaningful only when it is greater than 1.
        if offset > 1 {
            if !inline.is_empty() {
                return Err(invalid(
                    at(),
                    format!(
                        "has both {} inline bytes and an external offset {offset}",
                        inline.len()
                    ),
                ));
            }
            let end = offset.checked_add(size);
            let file = self.bytes.len() as u64;
            let range = match end {
                Some(end) if end <= file => usize::try_from(offset)
                    .ok()
                    .zip(usize::try_from(end).ok())
                    .and_then(|(s, e)| self.bytes.get(s..e)),
                _ => None,
            };
            let Some(range) = range else {
                return Err(invalid(
                    at(),
                    format!(
                        "its {size} bytes at offset {offset} are past the end of the {file}-byte file"
                    ),
                ));
            };
            return Ok((!range.is_empty()).then(|| range.to_vec()));
        }
        Ok((!inline.is_empty()).then(|| inline.to_vec()))
    }
}

/// The number of elements of a constant of this shape, or an error for a negative dimension
/// or an overflow.
fn element_count(at: &dyn Fn() -> String, shape: &[i32]) -> Result<usize> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d = usize::try_from(d).map_err(|_| {
            invalid(
                at(),
                format!("constant with dimension {d} in shape {shape:?}"),
            )
        })?;
        n.checked_mul(d)
            .ok_or_else(|| invalid(at(), format!("shape {shape:?} overflows")))
    })
}

fn check_constant_length(
    at: &dyn Fn() -> String,
    element_type: ElementType,
    shape: &[i32],
    len: usize,
) -> Result<()> {
    let count = element_count(at, shape)?;
    let expected = match element_type {
        // Packed two to a byte, as TFLite stores int4 constants.
        ElementType::Int4 => count.div_ceil(2),
        other => match other.size() {
            Some(size) => count
                .checked_mul(size)
                .ok_or_else(|| invalid(at(), format!("shape {shape:?} overflows")))?,
            // STRING, RESOURCE, VARIANT: variable-length encodings, nothing to compare.
            None => return Ok(()),
        },
    };
    if expected != len {
        return Err(invalid(
            at(),
            format!(
                "constant of {} {shape:?} needs {expected} bytes, its buffer has {len}",
                element_type.name()
            ),
        ));
    }
    Ok(())
}

fn element_type(t: fb::TensorType) -> ElementType {
    use fb::TensorType as T;
    match t {
        T::Float32 => ElementType::Float32,
        T::Float16 => ElementType::Float16,
        T::Int32 => ElementType::Int32,
        T::Uint8 => ElementType::UInt8,
        T::Int64 => ElementType::Int64,
        T::String => ElementType::String,
        T::Bool => ElementType::Bool,
        T::Int16 => ElementType::Int16,
        T::Complex64 => ElementType::Complex64,
        T::Int8 => ElementType::Int8,
        T::Float64 => ElementType::Float64,
        T::Complex128 => ElementType::Complex128,
        T::Uint64 => ElementType::UInt64,
        T::Resource => ElementType::Resource,
        T::Variant => ElementType::Variant,
        T::Uint32 => ElementType::UInt32,
        T::Uint16 => ElementType::UInt16,
        T::Int4 => ElementType::Int4,
        T::Bfloat16 => ElementType::BFloat16,
    }
}

fn quantization(
    at: &dyn Fn() -> String,
    q: fb::QuantizationParametersRef<'_>,
    shape: &[i32],
) -> Result<Quantization> {
    if let Some(details) = q.details().at(at)? {
        let kind = match details {
            fb::QuantizationDetailsRef::CustomQuantization(_) => "CustomQuantization",
            fb::QuantizationDetailsRef::BlockwiseQuantization(_) => "BlockwiseQuantization",
        };
        return Err(invalid(
            at(),
            format!("quantization details {kind} are not supported"),
        ));
    }
    let scales: Vec<f32> = q
        .scale()
        .at(at)?
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if scales.is_empty() {
        // TFLite: no scales means not quantized, whatever else the table holds.
        return Ok(Quantization::default());
    }
    let stored: Vec<i64> = q
        .zero_point()
        .at(at)?
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let zero_points = match stored.as_slice() {
        [z] => vec![*z; scales.len()],
        zs if zs.len() == scales.len() => stored,
        zs => {
            return Err(invalid(
                at(),
                format!(
                    "quantization has {} scales and {} zero points",
                    scales.len(),
                    zs.len()
                ),
            ));
        }
    };
    let axis = q.quantized_dimension().at(at)?;
    if scales.len() > 1 {
        let dim = usize::try_from(axis).ok().and_then(|a| shape.get(a));
        if dim.and_then(|&d| usize::try_from(d).ok()) != Some(scales.len()) {
            return Err(invalid(
                at(),
                format!(
                    "{} per-channel scales along dimension {axis} of shape {shape:?}",
                    scales.len()
                ),
            ));
        }
    }
    Ok(Quantization {
        scales,
        zero_points,
        axis,
    })
}

fn sparse_index_vector(v: Option<fb::SparseIndexVectorRef<'_>>) -> planus::Result<Vec<i32>> {
    Ok(match v {
        None => Vec::new(),
        Some(fb::SparseIndexVectorRef::Int32Vector(v)) => ints(v.values())?,
        Some(fb::SparseIndexVectorRef::Uint16Vector(v)) => v
            .values()?
            .map(|v| v.iter().map(i32::from).collect())
            .unwrap_or_default(),
        Some(fb::SparseIndexVectorRef::Uint8Vector(v)) => v
            .values()?
            .map(|v| v.iter().map(|&b| i32::from(b)).collect())
            .unwrap_or_default(),
    })
}

fn sparsity(s: fb::SparsityParametersRef<'_>) -> planus::Result<Sparsity> {
    let mut dim_metadata = Vec::new();
    for d in s.dim_metadata()?.into_iter().flatten() {
        let d = d?;
        dim_metadata.push(match d.format()? {
            fb::DimensionType::Dense => DimensionMetadata::Dense {
                size: d.dense_size()?,
            },
            fb::DimensionType::SparseCsr => DimensionMetadata::SparseCsr {
                array_segments: sparse_index_vector(d.array_segments()?)?,
                array_indices: sparse_index_vector(d.array_indices()?)?,
            },
        });
    }
    Ok(Sparsity {
        traversal_order: ints(s.traversal_order())?,
        block_map: ints(s.block_map())?,
        dim_metadata,
    })
}

fn node(
    at: &dyn Fn() -> String,
    op: fb::OperatorRef<'_>,
    codes: &[OpCode],
    tensors: usize,
    subgraphs: usize,
) -> Result<Node> {
    let opcode = op.opcode_index().at(at)?;
    let code = check_index(opcode.into(), codes.len(), "operator code", false, at)?;
    let code = &codes[code];
    let at = || {
        format!(
            "{} ({})",
            at(),
            code.custom
                .as_deref()
                .filter(|_| code.builtin == CUSTOM)
                .map_or_else(|| crate::graph::builtin_name(code.builtin), Into::into)
        )
    };
    let inputs = ints(op.inputs()).at(at)?;
    let outputs = ints(op.outputs()).at(at)?;
    let intermediates = ints(op.intermediates()).at(at)?;
    check_tensor_list(&inputs, tensors, true, || format!("{} inputs", at()))?;
    check_tensor_list(&outputs, tensors, true, || format!("{} outputs", at()))?;
    check_tensor_list(&intermediates, tensors, false, || {
        format!("{} intermediates", at())
    })?;
    let options = options(code.builtin, &op).at(at)?;
    for (what, index) in subgraph_refs(&options) {
        check_index(index.into(), subgraphs, "subgraph", false, || {
            format!("{} {what}", at())
        })?;
    }
    Ok(Node {
        builtin_code: code.builtin,
        custom_code: if code.builtin == CUSTOM {
            code.custom.clone()
        } else {
            None
        },
        version: code.version,
        inputs,
        outputs,
        intermediates,
        options,
    })
}

/// The subgraph indexes a node's options name, for the range check.
fn subgraph_refs(options: &Options) -> Vec<(&'static str, i32)> {
    match *options {
        Options::If {
            then_subgraph,
            else_subgraph,
        } => vec![
            ("then_subgraph_index", then_subgraph),
            ("else_subgraph_index", else_subgraph),
        ],
        Options::While {
            cond_subgraph,
            body_subgraph,
        } => vec![
            ("cond_subgraph_index", cond_subgraph),
            ("body_subgraph_index", body_subgraph),
        ],
        Options::CallOnce { init_subgraph } => vec![("init_subgraph_index", init_subgraph)],
        _ => Vec::new(),
    }
}

fn activation(a: fb::ActivationFunctionType) -> Activation {
    use fb::ActivationFunctionType as A;
    match a {
        A::None => Activation::None,
        A::Relu => Activation::Relu,
        A::ReluN1To1 => Activation::ReluN1To1,
        A::Relu6 => Activation::Relu6,
        A::Tanh => Activation::Tanh,
        A::SignBit => Activation::SignBit,
    }
}

fn padding(p: fb::Padding) -> Padding {
    match p {
        fb::Padding::Same => Padding::Same,
        fb::Padding::Valid => Padding::Valid,
    }
}

/// The builtin codes (`BuiltinOperator`): the graph form's one table.
use crate::graph::op as code;

/// The options table of `union` if it is a `$variant`, converted to its owned form, else the
/// table's defaults (TFLite reads an absent or mismatched table as all defaults).
macro_rules! table {
    ($union:expr, $variant:ident) => {
        match $union {
            Some(fb::BuiltinOptionsRef::$variant(r)) => fb::$variant::try_from(r)?,
            _ => fb::$variant::default(),
        }
    };
}

/// The parameters the LSTM options tables share.
fn lstm_cell(
    act: fb::ActivationFunctionType,
    cell_clip: f32,
    proj_clip: f32,
    asymmetric_quantize_inputs: bool,
) -> LstmCell {
    LstmCell {
        activation: activation(act),
        cell_clip,
        proj_clip,
        asymmetric_quantize_inputs,
    }
}

/// A node's options from its builtin code and its `builtin_options` union.
fn options(builtin: i32, op: &fb::OperatorRef<'_>) -> planus::Result<Options> {
    use code::*;
    // An options type newer than the vendored schema reads as absent, as TFLite's
    // `builtin_options_as_*` do for a type they do not expect.
    let (u, unknown) = match op.builtin_options() {
        Ok(u) => (u, false),
        Err(planus::Error {
            error_kind: planus::errors::ErrorKind::UnknownUnionTag { .. },
            ..
        }) => (None, true),
        Err(e) => return Err(e),
    };
    Ok(match builtin {
        CONV_2D => {
            let o = table!(u, Conv2DOptions);
            Options::Conv2d {
                padding: padding(o.padding),
                stride_w: o.stride_w,
                stride_h: o.stride_h,
                dilation_w: o.dilation_w_factor,
                dilation_h: o.dilation_h_factor,
                activation: activation(o.fused_activation_function),
            }
        }
        DEPTHWISE_CONV_2D => {
            let o = table!(u, DepthwiseConv2DOptions);
            Options::DepthwiseConv2d {
                padding: padding(o.padding),
                stride_w: o.stride_w,
                stride_h: o.stride_h,
                depth_multiplier: o.depth_multiplier,
                dilation_w: o.dilation_w_factor,
                dilation_h: o.dilation_h_factor,
                activation: activation(o.fused_activation_function),
            }
        }
        TRANSPOSE_CONV => {
            let o = table!(u, TransposeConvOptions);
            Options::TransposeConv {
                padding: padding(o.padding),
                stride_w: o.stride_w,
                stride_h: o.stride_h,
                activation: activation(o.fused_activation_function),
            }
        }
        AVERAGE_POOL_2D | MAX_POOL_2D | L2_POOL_2D => {
            let o = table!(u, Pool2DOptions);
            Options::Pool2d {
                padding: padding(o.padding),
                stride_w: o.stride_w,
                stride_h: o.stride_h,
                filter_w: o.filter_width,
                filter_h: o.filter_height,
                activation: activation(o.fused_activation_function),
            }
        }
        FULLY_CONNECTED => {
            let o = table!(u, FullyConnectedOptions);
            Options::FullyConnected {
                activation: activation(o.fused_activation_function),
                keep_num_dims: o.keep_num_dims,
                shuffled_weights: o.weights_format
                    == fb::FullyConnectedOptionsWeightsFormat::Shuffled4x16Int8,
                asymmetric_quantize_inputs: o.asymmetric_quantize_inputs,
            }
        }
        ADD => Options::Activation(activation(table!(u, AddOptions).fused_activation_function)),
        SUB => Options::Activation(activation(table!(u, SubOptions).fused_activation_function)),
        MUL => Options::Activation(activation(table!(u, MulOptions).fused_activation_function)),
        DIV => Options::Activation(activation(table!(u, DivOptions).fused_activation_function)),
        L2_NORMALIZATION => Options::Activation(activation(
            table!(u, L2NormOptions).fused_activation_function,
        )),
        CONCATENATION => {
            let o = table!(u, ConcatenationOptions);
            Options::Concatenation {
                axis: o.axis,
                activation: activation(o.fused_activation_function),
            }
        }
        SOFTMAX => Options::Softmax {
            beta: table!(u, SoftmaxOptions).beta,
        },
        // The new shape may come as a second input instead; only a stored table is carried.
        RESHAPE => match u {
            Some(fb::BuiltinOptionsRef::ReshapeOptions(r)) => Options::Reshape {
                new_shape: fb::ReshapeOptions::try_from(r)?
                    .new_shape
                    .unwrap_or_default(),
            },
            _ => Options::None,
        },
        SQUEEZE => Options::Squeeze {
            squeeze_dims: table!(u, SqueezeOptions).squeeze_dims.unwrap_or_default(),
        },
        SPLIT => Options::Split {
            num_splits: table!(u, SplitOptions).num_splits,
        },
        SPLIT_V => Options::Split {
            num_splits: table!(u, SplitVOptions).num_splits,
        },
        STRIDED_SLICE => {
            let o = table!(u, StridedSliceOptions);
            Options::StridedSlice {
                begin_mask: o.begin_mask,
                end_mask: o.end_mask,
                ellipsis_mask: o.ellipsis_mask,
                new_axis_mask: o.new_axis_mask,
                shrink_axis_mask: o.shrink_axis_mask,
                offset: o.offset,
            }
        }
        LEAKY_RELU => Options::LeakyRelu {
            alpha: table!(u, LeakyReluOptions).alpha,
        },
        GATHER => {
            let o = table!(u, GatherOptions);
            Options::Gather {
                axis: o.axis,
                batch_dims: o.batch_dims,
            }
        }
        MEAN | SUM | REDUCE_MAX | REDUCE_MIN | REDUCE_PROD | REDUCE_ANY | REDUCE_ALL => {
            Options::Reducer {
                keep_dims: table!(u, ReducerOptions).keep_dims,
            }
        }
        RESIZE_BILINEAR => {
            let o = table!(u, ResizeBilinearOptions);
            Options::Resize {
                align_corners: o.align_corners,
                half_pixel_centers: o.half_pixel_centers,
            }
        }
        RESIZE_NEAREST_NEIGHBOR => {
            let o = table!(u, ResizeNearestNeighborOptions);
            Options::Resize {
                align_corners: o.align_corners,
                half_pixel_centers: o.half_pixel_centers,
            }
        }
        PACK => {
            let o = table!(u, PackOptions);
            Options::Pack {
                values_count: o.values_count,
                axis: o.axis,
            }
        }
        UNPACK => {
            let o = table!(u, UnpackOptions);
            Options::Unpack {
                num: o.num,
                axis: o.axis,
            }
        }
        SPACE_TO_DEPTH => Options::BlockSize(table!(u, SpaceToDepthOptions).block_size),
        DEPTH_TO_SPACE => Options::BlockSize(table!(u, DepthToSpaceOptions).block_size),
        LOCAL_RESPONSE_NORMALIZATION => {
            let o = table!(u, LocalResponseNormalizationOptions);
            Options::LocalResponseNormalization {
                radius: o.radius,
                bias: o.bias,
                alpha: o.alpha,
                beta: o.beta,
            }
        }
        ARG_MAX => Options::ArgMinMax {
            output_type: element_type(table!(u, ArgMaxOptions).output_type),
        },
        ARG_MIN => Options::ArgMinMax {
            output_type: element_type(table!(u, ArgMinOptions).output_type),
        },
        BATCH_MATMUL => {
            let o = table!(u, BatchMatMulOptions);
            Options::BatchMatMul {
                adj_x: o.adj_x,
                adj_y: o.adj_y,
            }
        }
        MIRROR_PAD => Options::MirrorPad {
            symmetric: table!(u, MirrorPadOptions).mode == fb::MirrorPadMode::Symmetric,
        },
        // TFLite sets the types only from a stored table.
        CAST => match u {
            Some(fb::BuiltinOptionsRef::CastOptions(r)) => {
                let o = fb::CastOptions::try_from(r)?;
                Options::Cast {
                    in_type: Some(element_type(o.in_data_type)),
                    out_type: Some(element_type(o.out_data_type)),
                }
            }
            _ => Options::Cast {
                in_type: None,
                out_type: None,
            },
        },
        // The schema documents int32 as SHAPE's output type when none is stored.
        SHAPE => match u {
            Some(fb::BuiltinOptionsRef::ShapeOptions(r)) => Options::Shape {
                out_type: element_type(fb::ShapeOptions::try_from(r)?.out_type),
            },
            _ => Options::Shape {
                out_type: ElementType::Int32,
            },
        },
        GELU => Options::Gelu {
            approximate: table!(u, GeluOptions).approximate,
        },
        IF => {
            let o = table!(u, IfOptions);
            Options::If {
                then_subgraph: o.then_subgraph_index,
                else_subgraph: o.else_subgraph_index,
            }
        }
        WHILE => {
            let o = table!(u, WhileOptions);
            Options::While {
                cond_subgraph: o.cond_subgraph_index,
                body_subgraph: o.body_subgraph_index,
            }
        }
        CALL_ONCE => Options::CallOnce {
            init_subgraph: table!(u, CallOnceOptions).init_subgraph_index,
        },
        RNN => {
            let o = table!(u, RnnOptions);
            Options::Rnn {
                activation: activation(o.fused_activation_function),
                asymmetric_quantize_inputs: o.asymmetric_quantize_inputs,
            }
        }
        SVDF => {
            let o = table!(u, SvdfOptions);
            Options::Svdf {
                rank: o.rank,
                activation: activation(o.fused_activation_function),
                asymmetric_quantize_inputs: o.asymmetric_quantize_inputs,
            }
        }
        UNIDIRECTIONAL_SEQUENCE_RNN => {
            let o = table!(u, SequenceRnnOptions);
            Options::SequenceRnn {
                time_major: o.time_major,
                activation: activation(o.fused_activation_function),
                asymmetric_quantize_inputs: o.asymmetric_quantize_inputs,
            }
        }
        BIDIRECTIONAL_SEQUENCE_RNN => {
            let o = table!(u, BidirectionalSequenceRnnOptions);
            Options::BidirectionalSequenceRnn {
                time_major: o.time_major,
                activation: activation(o.fused_activation_function),
                merge_outputs: o.merge_outputs,
                asymmetric_quantize_inputs: o.asymmetric_quantize_inputs,
            }
        }
        LSTM => {
            let o = table!(u, LstmOptions);
            Options::Lstm {
                cell: lstm_cell(
                    o.fused_activation_function,
                    o.cell_clip,
                    o.proj_clip,
                    o.asymmetric_quantize_inputs,
                ),
                kernel: match o.kernel_type {
                    fb::LstmKernelType::Full => LstmKernel::Full,
                    fb::LstmKernelType::Basic => LstmKernel::Basic,
                },
            }
        }
        UNIDIRECTIONAL_SEQUENCE_LSTM => {
            let o = table!(u, UnidirectionalSequenceLstmOptions);
            Options::UnidirectionalSequenceLstm {
                cell: lstm_cell(
                    o.fused_activation_function,
                    o.cell_clip,
                    o.proj_clip,
                    o.asymmetric_quantize_inputs,
                ),
                time_major: o.time_major,
                diagonal_recurrent_tensors: o.diagonal_recurrent_tensors,
            }
        }
        BIDIRECTIONAL_SEQUENCE_LSTM => {
            let o = table!(u, BidirectionalSequenceLstmOptions);
            Options::BidirectionalSequenceLstm {
                cell: lstm_cell(
                    o.fused_activation_function,
                    o.cell_clip,
                    o.proj_clip,
                    o.asymmetric_quantize_inputs,
                ),
                merge_outputs: o.merge_outputs,
                time_major: o.time_major,
            }
        }
        VAR_HANDLE => {
            let o = table!(u, VarHandleOptions);
            Options::VarHandle {
                container: o.container.unwrap_or_default(),
                shared_name: o.shared_name.unwrap_or_default(),
            }
        }
        _ => other_options(builtin, op, unknown)?,
    })
}

/// Options of builtins the graph form does not carry: named when the builtin has parameters,
/// [`Options::None`] when it has none.
fn other_options(
    builtin: i32,
    op: &fb::OperatorRef<'_>,
    unknown_table: bool,
) -> planus::Result<Options> {
    use code::*;
    let name = match builtin {
        LSH_PROJECTION => "LSHProjectionOptions",
        CONCAT_EMBEDDINGS => "ConcatEmbeddingsOptions",
        SKIP_GRAM => "SkipGramOptions",
        CALL => "CallOptions",
        EMBEDDING_LOOKUP_SPARSE => "EmbeddingLookupSparseOptions",
        SPARSE_TO_DENSE => "SparseToDenseOptions",
        FAKE_QUANT => "FakeQuantOptions",
        ONE_HOT => "OneHotOptions",
        UNIQUE => "UniqueOptions",
        REVERSE_SEQUENCE => "ReverseSequenceOptions",
        CUMSUM => "CumsumOptions",
        CONV_3D | CONV_3D_TRANSPOSE => "Conv3DOptions",
        HASHTABLE => "HashtableOptions",
        RANDOM_STANDARD_NORMAL | RANDOM_UNIFORM | MULTINOMIAL => "RandomOptions",
        BUCKETIZE => "BucketizeOptions",
        CUSTOM => {
            return Ok(match op.custom_options()? {
                Some(bytes) if !bytes.is_empty() => Options::Other("custom options"),
                _ => Options::None,
            });
        }
        _ => {
            // StableHLO operators keep their parameters in the second union; any other
            // builtin either has an empty options table or one this reader does not know.
            if op.builtin_options_2()?.is_some() {
                return Ok(Options::Other("BuiltinOptions2"));
            }
            return Ok(if unknown_table {
                Options::Other("unknown BuiltinOptions")
            } else {
                Options::None
            });
        }
    };
    Ok(Options::Other(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fb::BuiltinOperator as Op;

    /// The flatbuffer of `model` with TFLite's file identifier. planus 1.3.0's
    /// `Builder::finish` with an identifier puts the identifier at bytes 0..4 and the root
    /// offset (relative to byte 4) at 4..8, the reverse of the FlatBuffers layout every
    /// other implementation reads (root offset at 0, identifier at 4; planus-org/planus
    /// pull request 377, open, swaps them back); so the tests finish
    /// without one and put the root offset and the identifier in front, 8 bytes, which
    /// keeps every table's alignment.
    pub(super) fn sample_bytes() -> Vec<u8> {
        bytes_of(&sample())
    }

    fn bytes_of(model: &fb::Model) -> Vec<u8> {
        let plain = planus::Builder::new().finish(model, None).to_vec();
        let root = u32::from_le_bytes(plain[0..4].try_into().unwrap()) + 8;
        let mut out = root.to_le_bytes().to_vec();
        out.extend_from_slice(FILE_IDENTIFIER);
        out.extend_from_slice(&plain);
        out
    }

    fn tensor(name: &str, type_: fb::TensorType, shape: &[i32], buffer: u32) -> fb::Tensor {
        fb::Tensor {
            name: Some(name.into()),
            type_,
            shape: Some(shape.to_vec()),
            buffer,
            ..Default::default()
        }
    }

    fn buffer(data: &[u8]) -> fb::Buffer {
        fb::Buffer {
            data: Some(data.to_vec()),
            ..Default::default()
        }
    }

    fn code(deprecated: i8, builtin: Op, version: i32) -> fb::OperatorCode {
        fb::OperatorCode {
            deprecated_builtin_code: deprecated,
            builtin_code: builtin,
            version,
            custom_code: None,
        }
    }

    fn op(opcode_index: u32, inputs: &[i32], outputs: &[i32]) -> fb::Operator {
        fb::Operator {
            opcode_index,
            inputs: Some(inputs.to_vec()),
            outputs: Some(outputs.to_vec()),
            ..Default::default()
        }
    }

    /// A model touching every part of the form: two subgraphs, a per-channel int8 filter with
    /// one stored zero point, an int32 bias, a variable, a shape signature, old- and new-style
    /// operator codes, a custom operator, options present and absent.
    fn sample() -> fb::Model {
        let filter = fb::Tensor {
            quantization: Some(Box::new(fb::QuantizationParameters {
                scale: Some(vec![0.5, 0.25, 0.125]),
                zero_point: Some(vec![0]),
                quantized_dimension: 0,
                ..Default::default()
            })),
            ..tensor("filter", fb::TensorType::Int8, &[3, 1, 1, 2], 1)
        };
        let input = fb::Tensor {
            shape_signature: Some(vec![-1, 4, 4, 2]),
            quantization: Some(Box::new(fb::QuantizationParameters {
                scale: Some(vec![0.02]),
                zero_point: Some(vec![-3]),
                ..Default::default()
            })),
            ..tensor("in", fb::TensorType::Int8, &[1, 4, 4, 2], 0)
        };
        let state = fb::Tensor {
            is_variable: true,
            ..tensor("state", fb::TensorType::Float32, &[2], 0)
        };
        let conv = fb::Operator {
            builtin_options: Some(fb::BuiltinOptions::Conv2DOptions(Box::new(
                fb::Conv2DOptions {
                    padding: fb::Padding::Valid,
                    stride_w: 2,
                    stride_h: 1,
                    fused_activation_function: fb::ActivationFunctionType::Relu6,
                    dilation_w_factor: 3,
                    dilation_h_factor: 4,
                    ..Default::default()
                },
            ))),
            ..op(0, &[0, 1, 2], &[3])
        };
        let custom = fb::Operator {
            custom_options: Some(vec![1, 2, 3]),
            intermediates: Some(vec![4]),
            ..op(2, &[3, -1], &[4])
        };
        let call_once = fb::Operator {
            builtin_options: Some(fb::BuiltinOptions::CallOnceOptions(Box::new(
                fb::CallOnceOptions {
                    init_subgraph_index: 1,
                },
            ))),
            ..op(3, &[], &[])
        };
        let var_handle = fb::Operator {
            builtin_options: Some(fb::BuiltinOptions::VarHandleOptions(Box::new(
                fb::VarHandleOptions {
                    container: Some("c".into()),
                    shared_name: Some("v".into()),
                },
            ))),
            ..op(4, &[], &[0])
        };
        fb::Model {
            version: 3,
            description: Some("sample".into()),
            operator_codes: Some(vec![
                code(3, Op::Conv2d, 2),
                // An old file: only the byte-sized field is set.
                code(4, Op::Add, 1),
                fb::OperatorCode {
                    custom_code: Some("MyOp".into()),
                    ..code(32, Op::Custom, 1)
                },
                code(127, Op::CallOnce, 1),
                code(127, Op::VarHandle, 1),
            ]),
            buffers: Some(vec![
                buffer(&[]),
                buffer(&[1, 2, 3, 4, 5, 6]),
                buffer(&[7, 0, 0, 0, 8, 0, 0, 0, 0xf7, 0xff, 0xff, 0xff]),
            ]),
            subgraphs: Some(vec![
                fb::SubGraph {
                    name: Some("main".into()),
                    tensors: Some(vec![
                        input,
                        filter,
                        tensor("bias", fb::TensorType::Int32, &[3], 2),
                        tensor("out", fb::TensorType::Int8, &[1, 4, 2, 3], 0),
                        state,
                    ]),
                    inputs: Some(vec![0]),
                    outputs: Some(vec![3]),
                    operators: Some(vec![conv, op(1, &[3, 1], &[4]), custom, call_once]),
                    ..Default::default()
                },
                fb::SubGraph {
                    name: Some("init".into()),
                    tensors: Some(vec![tensor("h", fb::TensorType::Resource, &[], 0)]),
                    operators: Some(vec![var_handle]),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn every_field_of_a_built_model_lands_in_the_graph_form() {
        let g = read_bytes(&bytes_of(&sample())).unwrap();
        assert_eq!(g.version, 3);
        assert_eq!(g.description, "sample");
        assert_eq!(g.subgraphs.len(), 2);
        let main = &g.subgraphs[0];
        assert_eq!(main.name, "main");
        assert_eq!(
            (main.inputs.as_slice(), main.outputs.as_slice()),
            (&[0][..], &[3][..])
        );

        let input = &main.tensors[0];
        assert_eq!(input.name, "in");
        assert_eq!(input.element_type, ElementType::Int8);
        assert_eq!(input.shape, [1, 4, 4, 2]);
        assert_eq!(input.shape_signature, [-1, 4, 4, 2]);
        assert_eq!(input.quantization.scales, [0.02]);
        assert_eq!(input.quantization.zero_points, [-3]);
        assert_eq!(input.data, None);
        assert!(!input.is_variable);

        let filter = &main.tensors[1];
        assert_eq!(filter.quantization.scales, [0.5, 0.25, 0.125]);
        // One stored zero point, expanded to one per scale.
        assert_eq!(filter.quantization.zero_points, [0, 0, 0]);
        assert_eq!(filter.quantization.axis, 0);
        assert_eq!(filter.data.as_deref(), Some(&[1u8, 2, 3, 4, 5, 6][..]));
        assert!(filter.shape_signature.is_empty());
        assert_eq!(main.tensors[2].element_type, ElementType::Int32);
        assert_eq!(
            main.tensors[2].data.as_deref(),
            Some(&[7u8, 0, 0, 0, 8, 0, 0, 0, 0xf7, 0xff, 0xff, 0xff][..])
        );
        assert!(main.tensors[4].is_variable);
        assert_eq!(main.tensors[4].element_type, ElementType::Float32);

        let conv = &main.nodes[0];
        assert_eq!((conv.builtin_code, conv.version), (3, 2));
        assert_eq!(conv.inputs, [0, 1, 2]);
        assert_eq!(conv.outputs, [3]);
        assert_eq!(
            conv.options,
            Options::Conv2d {
                padding: Padding::Valid,
                stride_w: 2,
                stride_h: 1,
                dilation_w: 3,
                dilation_h: 4,
                activation: Activation::Relu6,
            }
        );
        // Old-style code 4 (DEPTHWISE_CONV_2D) with no options table: TFLite's defaults.
        let dw = &main.nodes[1];
        assert_eq!(dw.builtin_code, 4);
        assert_eq!(
            dw.options,
            Options::DepthwiseConv2d {
                padding: Padding::Same,
                stride_w: 0,
                stride_h: 0,
                depth_multiplier: 0,
                dilation_w: 1,
                dilation_h: 1,
                activation: Activation::None,
            }
        );
        let custom = &main.nodes[2];
        assert_eq!(custom.builtin_code, CUSTOM);
        assert_eq!(custom.custom_code.as_deref(), Some("MyOp"));
        assert_eq!(custom.inputs, [3, -1]);
        assert_eq!(custom.intermediates, [4]);
        assert_eq!(custom.options, Options::Other("custom options"));
        assert_eq!(main.nodes[3].builtin_code, 129);
        assert_eq!(
            main.nodes[3].options,
            Options::CallOnce { init_subgraph: 1 }
        );

        let init = &g.subgraphs[1];
        assert_eq!(init.name, "init");
        assert_eq!(init.tensors[0].element_type, ElementType::Resource);
        assert_eq!(init.nodes[0].builtin_code, 142);
        assert_eq!(
            init.nodes[0].options,
            Options::VarHandle {
                container: "c".into(),
                shared_name: "v".into(),
            }
        );
    }

    /// The node options of `opts` on a node of `builtin`, read back.
    fn options_of(builtin: Op, opts: Option<fb::BuiltinOptions>) -> Options {
        let model = fb::Model {
            operator_codes: Some(vec![code(
                i8::try_from(builtin as i32).unwrap_or(127),
                builtin,
                1,
            )]),
            subgraphs: Some(vec![fb::SubGraph {
                tensors: Some(vec![tensor("x", fb::TensorType::Float32, &[1], 0)]),
                operators: Some(vec![fb::Operator {
                    builtin_options: opts,
                    ..op(0, &[0], &[0])
                }]),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let g = read_bytes(&bytes_of(&model)).unwrap();
        g.subgraphs[0].nodes[0].options.clone()
    }

    #[test]
    fn options_tables_convert_to_their_variants() {
        use fb::BuiltinOptions as B;
        let cases: Vec<(Op, B, Options)> = vec![
            (
                Op::Rnn,
                B::RnnOptions(Box::new(fb::RnnOptions {
                    fused_activation_function: fb::ActivationFunctionType::Relu6,
                    asymmetric_quantize_inputs: true,
                })),
                Options::Rnn {
                    activation: Activation::Relu6,
                    asymmetric_quantize_inputs: true,
                },
            ),
            (
                Op::Svdf,
                B::SvdfOptions(Box::new(fb::SvdfOptions {
                    rank: 2,
                    fused_activation_function: fb::ActivationFunctionType::Relu,
                    asymmetric_quantize_inputs: false,
                })),
                Options::Svdf {
                    rank: 2,
                    activation: Activation::Relu,
                    asymmetric_quantize_inputs: false,
                },
            ),
            (
                Op::UnidirectionalSequenceRnn,
                B::SequenceRnnOptions(Box::new(fb::SequenceRnnOptions {
                    time_major: true,
                    fused_activation_function: fb::ActivationFunctionType::Tanh,
                    asymmetric_quantize_inputs: true,
                })),
                Options::SequenceRnn {
                    time_major: true,
                    activation: Activation::Tanh,
                    asymmetric_quantize_inputs: true,
                },
            ),
            (
                Op::BidirectionalSequenceRnn,
                B::BidirectionalSequenceRnnOptions(Box::new(fb::BidirectionalSequenceRnnOptions {
                    time_major: false,
                    fused_activation_function: fb::ActivationFunctionType::Relu,
                    merge_outputs: true,
                    asymmetric_quantize_inputs: false,
                })),
                Options::BidirectionalSequenceRnn {
                    time_major: false,
                    activation: Activation::Relu,
                    merge_outputs: true,
                    asymmetric_quantize_inputs: false,
                },
            ),
            (
                Op::Lstm,
                B::LstmOptions(Box::new(fb::LstmOptions {
                    fused_activation_function: fb::ActivationFunctionType::Tanh,
                    cell_clip: 2.5,
                    proj_clip: 0.75,
                    kernel_type: fb::LstmKernelType::Basic,
                    asymmetric_quantize_inputs: true,
                })),
                Options::Lstm {
                    cell: LstmCell {
                        activation: Activation::Tanh,
                        cell_clip: 2.5,
                        proj_clip: 0.75,
                        asymmetric_quantize_inputs: true,
                    },
                    kernel: LstmKernel::Basic,
                },
            ),
            (
                Op::UnidirectionalSequenceLstm,
                B::UnidirectionalSequenceLstmOptions(Box::new(
                    fb::UnidirectionalSequenceLstmOptions {
                        fused_activation_function: fb::ActivationFunctionType::Relu,
                        cell_clip: 1.5,
                        proj_clip: 0.0,
                        time_major: true,
                        asymmetric_quantize_inputs: false,
                        diagonal_recurrent_tensors: true,
                    },
                )),
                Options::UnidirectionalSequenceLstm {
                    cell: LstmCell {
                        activation: Activation::Relu,
                        cell_clip: 1.5,
                        proj_clip: 0.0,
                        asymmetric_quantize_inputs: false,
                    },
                    time_major: true,
                    diagonal_recurrent_tensors: true,
                },
            ),
            (
                Op::BidirectionalSequenceLstm,
                B::BidirectionalSequenceLstmOptions(Box::new(
                    fb::BidirectionalSequenceLstmOptions {
                        fused_activation_function: fb::ActivationFunctionType::Relu6,
                        cell_clip: 0.0,
                        proj_clip: 3.0,
                        merge_outputs: true,
                        time_major: false,
                        asymmetric_quantize_inputs: false,
                    },
                )),
                Options::BidirectionalSequenceLstm {
                    cell: LstmCell {
                        activation: Activation::Relu6,
                        cell_clip: 0.0,
                        proj_clip: 3.0,
                        asymmetric_quantize_inputs: false,
                    },
                    merge_outputs: true,
                    time_major: false,
                },
            ),
            (
                Op::MaxPool2d,
                B::Pool2DOptions(Box::new(fb::Pool2DOptions {
                    padding: fb::Padding::Valid,
                    stride_w: 2,
                    stride_h: 3,
                    filter_width: 4,
                    filter_height: 5,
                    fused_activation_function: fb::ActivationFunctionType::Relu,
                })),
                Options::Pool2d {
                    padding: Padding::Valid,
                    stride_w: 2,
                    stride_h: 3,
                    filter_w: 4,
                    filter_h: 5,
                    activation: Activation::Relu,
                },
            ),
            (
                Op::FullyConnected,
                B::FullyConnectedOptions(Box::new(fb::FullyConnectedOptions {
                    fused_activation_function: fb::ActivationFunctionType::ReluN1To1,
                    keep_num_dims: true,
                    weights_format: fb::FullyConnectedOptionsWeightsFormat::Shuffled4x16Int8,
                    asymmetric_quantize_inputs: true,
                    ..Default::default()
                })),
                Options::FullyConnected {
                    activation: Activation::ReluN1To1,
                    keep_num_dims: true,
                    shuffled_weights: true,
                    asymmetric_quantize_inputs: true,
                },
            ),
            (
                Op::Add,
                B::AddOptions(Box::new(fb::AddOptions {
                    fused_activation_function: fb::ActivationFunctionType::Tanh,
                    pot_scale_int16: true,
                })),
                Options::Activation(Activation::Tanh),
            ),
            (
                Op::Softmax,
                B::SoftmaxOptions(Box::new(fb::SoftmaxOptions { beta: 0.5 })),
                Options::Softmax { beta: 0.5 },
            ),
            (
                Op::Reshape,
                B::ReshapeOptions(Box::new(fb::ReshapeOptions {
                    new_shape: Some(vec![-1, 6]),
                })),
                Options::Reshape {
                    new_shape: vec![-1, 6],
                },
            ),
            (
                Op::Concatenation,
                B::ConcatenationOptions(Box::new(fb::ConcatenationOptions {
                    axis: -1,
                    fused_activation_function: fb::ActivationFunctionType::SignBit,
                })),
                Options::Concatenation {
                    axis: -1,
                    activation: Activation::SignBit,
                },
            ),
            (
                Op::StridedSlice,
                B::StridedSliceOptions(Box::new(fb::StridedSliceOptions {
                    begin_mask: 1,
                    end_mask: 2,
                    ellipsis_mask: 4,
                    new_axis_mask: 8,
                    shrink_axis_mask: 16,
                    offset: true,
                })),
                Options::StridedSlice {
                    begin_mask: 1,
                    end_mask: 2,
                    ellipsis_mask: 4,
                    new_axis_mask: 8,
                    shrink_axis_mask: 16,
                    offset: true,
                },
            ),
            (
                Op::SplitV,
                B::SplitVOptions(Box::new(fb::SplitVOptions { num_splits: 3 })),
                Options::Split { num_splits: 3 },
            ),
            (
                Op::Mean,
                B::ReducerOptions(Box::new(fb::ReducerOptions { keep_dims: true })),
                Options::Reducer { keep_dims: true },
            ),
            (
                Op::Cast,
                B::CastOptions(Box::new(fb::CastOptions {
                    in_data_type: fb::TensorType::Uint8,
                    out_data_type: fb::TensorType::Float16,
                })),
                Options::Cast {
                    in_type: Some(ElementType::UInt8),
                    out_type: Some(ElementType::Float16),
                },
            ),
            (
                Op::MirrorPad,
                B::MirrorPadOptions(Box::new(fb::MirrorPadOptions {
                    mode: fb::MirrorPadMode::Symmetric,
                })),
                Options::MirrorPad { symmetric: true },
            ),
            (
                Op::While,
                B::WhileOptions(Box::new(fb::WhileOptions {
                    cond_subgraph_index: 0,
                    body_subgraph_index: 0,
                })),
                Options::While {
                    cond_subgraph: 0,
                    body_subgraph: 0,
                },
            ),
            (
                Op::LshProjection,
                B::LshProjectionOptions(Box::default()),
                Options::Other("LSHProjectionOptions"),
            ),
            (
                Op::DepthwiseConv2d,
                B::DepthwiseConv2DOptions(Box::new(fb::DepthwiseConv2DOptions {
                    padding: fb::Padding::Valid,
                    stride_w: 1,
                    stride_h: 2,
                    depth_multiplier: 4,
                    fused_activation_function: fb::ActivationFunctionType::Relu,
                    dilation_w_factor: 2,
                    dilation_h_factor: 3,
                })),
                Options::DepthwiseConv2d {
                    padding: Padding::Valid,
                    stride_w: 1,
                    stride_h: 2,
                    depth_multiplier: 4,
                    dilation_w: 2,
                    dilation_h: 3,
                    activation: Activation::Relu,
                },
            ),
            (
                Op::TransposeConv,
                B::TransposeConvOptions(Box::new(fb::TransposeConvOptions {
                    padding: fb::Padding::Valid,
                    stride_w: 2,
                    stride_h: 3,
                    fused_activation_function: fb::ActivationFunctionType::Relu6,
                    ..Default::default()
                })),
                Options::TransposeConv {
                    padding: Padding::Valid,
                    stride_w: 2,
                    stride_h: 3,
                    activation: Activation::Relu6,
                },
            ),
            (
                Op::Squeeze,
                B::SqueezeOptions(Box::new(fb::SqueezeOptions {
                    squeeze_dims: Some(vec![0, 2]),
                })),
                Options::Squeeze {
                    squeeze_dims: vec![0, 2],
                },
            ),
            (
                Op::LeakyRelu,
                B::LeakyReluOptions(Box::new(fb::LeakyReluOptions { alpha: 0.25 })),
                Options::LeakyRelu { alpha: 0.25 },
            ),
            (
                Op::Gather,
                B::GatherOptions(Box::new(fb::GatherOptions {
                    axis: -2,
                    batch_dims: 1,
                })),
                Options::Gather {
                    axis: -2,
                    batch_dims: 1,
                },
            ),
            (
                Op::ResizeNearestNeighbor,
                B::ResizeNearestNeighborOptions(Box::new(fb::ResizeNearestNeighborOptions {
                    align_corners: false,
                    half_pixel_centers: true,
                })),
                Options::Resize {
                    align_corners: false,
                    half_pixel_centers: true,
                },
            ),
            (
                Op::Pack,
                B::PackOptions(Box::new(fb::PackOptions {
                    values_count: 3,
                    axis: 1,
                })),
                Options::Pack {
                    values_count: 3,
                    axis: 1,
                },
            ),
            (
                Op::Unpack,
                B::UnpackOptions(Box::new(fb::UnpackOptions { num: 2, axis: -1 })),
                Options::Unpack { num: 2, axis: -1 },
            ),
            (
                Op::DepthToSpace,
                B::DepthToSpaceOptions(Box::new(fb::DepthToSpaceOptions { block_size: 2 })),
                Options::BlockSize(2),
            ),
            (
                Op::LocalResponseNormalization,
                B::LocalResponseNormalizationOptions(Box::new(
                    fb::LocalResponseNormalizationOptions {
                        radius: 2,
                        bias: 1.5,
                        alpha: 0.5,
                        beta: 0.75,
                    },
                )),
                Options::LocalResponseNormalization {
                    radius: 2,
                    bias: 1.5,
                    alpha: 0.5,
                    beta: 0.75,
                },
            ),
            (
                Op::ArgMin,
                B::ArgMinOptions(Box::new(fb::ArgMinOptions {
                    output_type: fb::TensorType::Int64,
                })),
                Options::ArgMinMax {
                    output_type: ElementType::Int64,
                },
            ),
            (
                Op::BatchMatmul,
                B::BatchMatMulOptions(Box::new(fb::BatchMatMulOptions {
                    adj_x: false,
                    adj_y: true,
                    asymmetric_quantize_inputs: false,
                })),
                Options::BatchMatMul {
                    adj_x: false,
                    adj_y: true,
                },
            ),
            (
                Op::Gelu,
                B::GeluOptions(Box::new(fb::GeluOptions { approximate: true })),
                Options::Gelu { approximate: true },
            ),
            (
                Op::If,
                B::IfOptions(Box::new(fb::IfOptions {
                    then_subgraph_index: 0,
                    else_subgraph_index: 0,
                })),
                Options::If {
                    then_subgraph: 0,
                    else_subgraph: 0,
                },
            ),
            (
                Op::Div,
                B::DivOptions(Box::new(fb::DivOptions {
                    fused_activation_function: fb::ActivationFunctionType::Relu,
                })),
                Options::Activation(Activation::Relu),
            ),
            (
                Op::Shape,
                B::ShapeOptions(Box::new(fb::ShapeOptions {
                    out_type: fb::TensorType::Int64,
                })),
                Options::Shape {
                    out_type: ElementType::Int64,
                },
            ),
        ];
        for (builtin, table, expected) in cases {
            assert_eq!(options_of(builtin, Some(table)), expected, "{builtin:?}");
        }
    }

    #[test]
    fn absent_options_tables_read_as_tflite_defaults() {
        assert_eq!(
            options_of(Op::Conv2d, None),
            Options::Conv2d {
                padding: Padding::Same,
                stride_w: 0,
                stride_h: 0,
                dilation_w: 1,
                dilation_h: 1,
                activation: Activation::None,
            }
        );
        assert_eq!(
            options_of(Op::Gather, None),
            Options::Gather {
                axis: 0,
                batch_dims: 0
            }
        );
        assert_eq!(
            options_of(Op::Shape, None),
            Options::Shape {
                out_type: ElementType::Int32
            }
        );
        assert_eq!(
            options_of(Op::Cast, None),
            Options::Cast {
                in_type: None,
                out_type: None
            }
        );
        assert_eq!(
            options_of(Op::BidirectionalSequenceRnn, None),
            Options::BidirectionalSequenceRnn {
                time_major: false,
                activation: Activation::None,
                merge_outputs: false,
                asymmetric_quantize_inputs: false,
            }
        );
        assert_eq!(options_of(Op::Reshape, None), Options::None);
        assert_eq!(options_of(Op::Relu, None), Options::None);
        // A table of another type is ignored, as TFLite's builtin_options_as_*() do.
        assert_eq!(
            options_of(
                Op::Softmax,
                Some(fb::BuiltinOptions::AddOptions(Box::default()))
            ),
            Options::Softmax { beta: 0.0 }
        );
    }

    #[test]
    fn a_builtin_code_newer_than_the_schema_is_kept_by_number() {
        // planus cannot build an out-of-range enum, so build STABLEHLO_CASE (209, the last
        // code the vendored schema knows) and patch its one little-endian i32 to 300.
        let mut model = sample();
        model.operator_codes.as_mut().unwrap()[0] = code(127, Op::StablehloCase, 1);
        let mut bytes = bytes_of(&model);
        let at: Vec<usize> = (0..bytes.len() - 3)
            .filter(|&i| bytes[i..i + 4] == 209i32.to_le_bytes())
            .collect();
        assert_eq!(at.len(), 1, "209 occurs once");
        bytes[at[0]..at[0] + 4].copy_from_slice(&300i32.to_le_bytes());
        let g = read_bytes(&bytes).unwrap();
        assert_eq!(g.subgraphs[0].nodes[0].builtin_code, 300);
        // Its Conv2DOptions table means nothing for an unknown code: no options carried.
        assert_eq!(g.subgraphs[0].nodes[0].options, Options::None);
    }

    #[test]
    fn values_newer_than_the_schema_are_named_as_such() {
        use planus::errors::{ErrorKind, ErrorLocation, UnknownEnumTagKind};
        let location = ErrorLocation {
            type_: "Tensor",
            method: "type_",
            byte_offset: 0x40,
        };
        let err = at_error(
            "subgraph 0 tensor 3".into(),
            planus::Error {
                source_location: location,
                error_kind: ErrorKind::UnknownEnumTag {
                    source: UnknownEnumTagKind { tag: 19 },
                },
            },
        )
        .to_string();
        assert_eq!(
            err,
            "subgraph 0 tensor 3: Tensor.type holds the value 19, unknown to the vendored \
             TFLite schema (a newer model: see driver/tflite/schema/README.md)"
        );
        let damaged = at_error(
            "x".into(),
            planus::Error {
                source_location: location,
                error_kind: ErrorKind::InvalidOffset,
            },
        );
        assert!(matches!(damaged, ReadError::Malformed { .. }));
    }

    #[test]
    fn a_wrong_file_identifier_is_refused() {
        let mut bytes = bytes_of(&sample());
        bytes[4..8].copy_from_slice(b"TFL2");
        assert!(matches!(
            read_bytes(&bytes),
            Err(ReadError::NotTflite { found }) if found.contains("TFL2")
        ));
        assert!(matches!(
            read_bytes(b"TF"),
            Err(ReadError::NotTflite { .. })
        ));
        assert!(looks_like_tflite(&bytes_of(&sample())));
        assert!(!looks_like_tflite(&bytes));
    }

    #[test]
    fn a_truncated_file_is_malformed() {
        let bytes = bytes_of(&sample());
        for len in [8, 12, bytes.len() / 2, bytes.len() - 1] {
            let err = read_bytes(&bytes[..len]).unwrap_err();
            assert!(matches!(err, ReadError::Malformed { .. }), "{len}: {err}");
        }
    }

    #[test]
    fn a_corrupted_vtable_is_malformed() {
        let mut bytes = bytes_of(&sample());
        // The root offset (bytes 0..4) locates the Model table; its first 4 bytes are the
        // signed distance back to its vtable, whose first u16 is the vtable's length.
        let root = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
        let back = i32::from_le_bytes(bytes[root..root + 4].try_into().unwrap());
        let vtable = (root as i64 - i64::from(back)) as usize;
        bytes[vtable + 1] ^= 0x80;
        let err = read_bytes(&bytes).unwrap_err();
        assert!(matches!(err, ReadError::Malformed { .. }), "{err}");
    }

    #[test]
    fn out_of_range_indexes_are_errors_naming_the_table() {
        let check = |edit: &dyn Fn(&mut fb::Model), want: &str| {
            let mut model = sample();
            edit(&mut model);
            match read_bytes(&bytes_of(&model)) {
                Err(ReadError::OutOfRange { what, at, .. }) => {
                    assert_eq!(what, want, "{at}");
                }
                other => panic!("{want}: {other:?}"),
            }
        };
        fn main(m: &mut fb::Model) -> &mut fb::SubGraph {
            &mut m.subgraphs.as_mut().unwrap()[0]
        }
        check(
            &|m| main(m).tensors.as_mut().unwrap()[1].buffer = 3,
            "buffer",
        );
        check(
            &|m| main(m).operators.as_mut().unwrap()[0].inputs = Some(vec![0, 5]),
            "tensor",
        );
        check(
            &|m| main(m).operators.as_mut().unwrap()[0].inputs = Some(vec![-2]),
            "tensor",
        );
        check(&|m| main(m).outputs = Some(vec![-1]), "tensor");
        check(
            &|m| main(m).operators.as_mut().unwrap()[0].opcode_index = 5,
            "operator code",
        );
        check(
            &|m| {
                main(m).operators.as_mut().unwrap()[3].builtin_options = Some(
                    fb::BuiltinOptions::CallOnceOptions(Box::new(fb::CallOnceOptions {
                        init_subgraph_index: 2,
                    })),
                )
            },
            "subgraph",
        );
    }

    #[test]
    fn a_constant_of_the_wrong_length_is_an_error() {
        let mut model = sample();
        model.buffers.as_mut().unwrap()[2] = buffer(&[0; 8]);
        let err = read_bytes(&bytes_of(&model)).unwrap_err().to_string();
        assert!(
            err.contains("\"bias\"") && err.contains("needs 12 bytes"),
            "{err}"
        );
    }

    #[test]
    fn mismatched_zero_points_are_an_error() {
        let mut model = sample();
        let t = &mut model.subgraphs.as_mut().unwrap()[0]
            .tensors
            .as_mut()
            .unwrap()[1];
        t.quantization.as_mut().unwrap().zero_point = Some(vec![0, 0]);
        let err = read_bytes(&bytes_of(&model)).unwrap_err().to_string();
        assert!(err.contains("3 scales and 2 zero points"), "{err}");
    }

    #[test]
    fn buffers_stored_after_the_flatbuffer_are_read_from_their_offset() {
        // The filter's 6 bytes live after the flatbuffer, as in models over 2 GiB. The
        // offset depends on the flatbuffer's length, which does not depend on the offset's
        // value (a u64 field either way), so build twice.
        let external = |offset: u64| {
            let mut model = sample();
            model.buffers.as_mut().unwrap()[1] = fb::Buffer {
                data: None,
                offset,
                size: 6,
            };
            bytes_of(&model)
        };
        let len = external(2).len() as u64;
        let mut bytes = external(len);
        bytes.extend_from_slice(&[9, 8, 7, 6, 5, 4]);
        let g = read_bytes(&bytes).unwrap();
        assert_eq!(
            g.subgraphs[0].tensors[1].data.as_deref(),
            Some(&[9u8, 8, 7, 6, 5, 4][..])
        );
        // One byte short: past the end of the file.
        let err = read_bytes(&bytes[..bytes.len() - 1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("past the end"), "{err}");
    }

    #[test]
    fn only_bounded_regular_files_are_read() {
        for (path, kind) in [("/dev/zero", "character device"), ("/", "directory")] {
            let err = read_file(Path::new(path)).unwrap_err().to_string();
            assert!(err.contains(kind), "{path}: {err}");
        }
        let dir = std::env::temp_dir().join(format!("nnaccel-tflite-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let err = read_file(&fifo).unwrap_err().to_string();
            assert!(err.contains("FIFO"), "{err}");
        }
        let big = dir.join("big.tflite");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_FILE_BYTES + 1)
            .unwrap();
        assert!(matches!(
            read_file(&big),
            Err(ReadError::TooLarge { size }) if size == MAX_FILE_BYTES + 1
        ));
        let good = dir.join("good.tflite");
        std::fs::write(&good, bytes_of(&sample())).unwrap();
        assert_eq!(read_file(&good).unwrap().subgraphs.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod wheel_file {
    use super::*;

    /// `testdata/tiny.tflite`, written by `testdata/make_tiny.py` with the ai-edge-litert
    /// wheel's own schema module; the values below restate that script's literals.
    #[test]
    fn a_file_written_by_the_wheels_schema_module_reads() {
        let bytes = include_bytes!("../testdata/tiny.tflite");
        let g = read_bytes(bytes).unwrap();
        assert_eq!(g.version, 3);
        assert_eq!(g.description, "nnaccel driver/tflite/testdata/make_tiny.py");
        let main = &g.subgraphs[0];
        assert_eq!(main.name, "main");
        let names: Vec<&str> = main.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "input",
                "conv/filter",
                "conv/bias",
                "conv/out",
                "pool/out",
                "flat",
                "fc/weights_sparse",
                "fc/weights",
                "logits",
                "probs",
                "state"
            ]
        );
        assert_eq!(
            (main.inputs.as_slice(), main.outputs.as_slice()),
            (&[0][..], &[9][..])
        );
        let input = &main.tensors[0];
        assert_eq!(input.element_type, ElementType::Int8);
        assert_eq!(input.shape_signature, [-1, 4, 4, 2]);
        assert_eq!(
            (
                input.quantization.scales.as_slice(),
                input.quantization.zero_points.as_slice()
            ),
            (&[0.5f32][..], &[-1i64][..])
        );
        let filter = &main.tensors[1];
        assert_eq!(filter.quantization.scales, [0.25, 0.5, 1.0]);
        assert_eq!(filter.quantization.axis, 0);
        assert_eq!(
            filter.data.as_deref(),
            Some(&[1u8, 0xfe, 3, 0xfc, 5, 0xfa][..])
        );
        let bias: Vec<u8> = [10i32, -20, 30]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(main.tensors[2].data.as_deref(), Some(bias.as_slice()));
        assert_eq!(main.tensors[2].element_type, ElementType::Int32);
        assert!(main.tensors[10].is_variable);
        assert_eq!(main.tensors[10].element_type, ElementType::Float32);

        let sparse = &main.tensors[6];
        assert_eq!(
            sparse.sparsity,
            Some(Sparsity {
                traversal_order: vec![0, 1],
                block_map: vec![],
                dim_metadata: vec![
                    DimensionMetadata::Dense { size: 2 },
                    DimensionMetadata::SparseCsr {
                        array_segments: vec![0, 1, 3],
                        array_indices: vec![3, 0, 11],
                    },
                ],
            })
        );
        let mut dense = vec![0u8; 24];
        dense[3] = 7;
        dense[12] = (-8i8) as u8;
        dense[23] = 9;
        assert_eq!(crate::densify::densify(sparse).unwrap(), dense);

        let codes: Vec<i32> = main.nodes.iter().map(|n| n.builtin_code).collect();
        assert_eq!(codes, [3, 1, 22, 124, 9, 25]);
        let versions: Vec<i32> = main.nodes.iter().map(|n| n.version).collect();
        assert_eq!(versions, [3, 2, 1, 1, 4, 2]);
        assert_eq!(
            main.nodes[0].options,
            Options::Conv2d {
                padding: Padding::Same,
                stride_w: 1,
                stride_h: 1,
                dilation_w: 1,
                dilation_h: 1,
                activation: Activation::Relu6,
            }
        );
        assert_eq!(
            main.nodes[1].options,
            Options::Pool2d {
                padding: Padding::Valid,
                stride_w: 2,
                stride_h: 2,
                filter_w: 2,
                filter_h: 2,
                activation: Activation::None,
            }
        );
        assert_eq!(
            main.nodes[2].options,
            Options::Reshape {
                new_shape: vec![1, 12]
            }
        );
        assert_eq!(main.nodes[3].options, Options::None);
        assert_eq!(main.nodes[4].inputs, [5, 7, -1]);
        assert_eq!(
            main.nodes[4].options,
            Options::FullyConnected {
                activation: Activation::None,
                keep_num_dims: true,
                shuffled_weights: false,
                asymmetric_quantize_inputs: false,
            }
        );
        assert_eq!(main.nodes[5].options, Options::Softmax { beta: 1.0 });
    }
}

#[cfg(test)]
mod fuzz_tests {
    use nnaccel_uapi::fuzz;

    /// Mutated valid models (the planus-built sample and the wheel-built tiny.tflite) through
    /// `read_bytes`: each is a graph or an error, never a panic; a graph's sparse constants
    /// densify or give an error (only small ones: a mutated shape may claim gigabytes).
    #[test]
    fn mutated_tflite_files_read_or_fail_cleanly() {
        let seeds = [
            super::tests::sample_bytes(),
            include_bytes!("../testdata/tiny.tflite").to_vec(),
        ];
        let mut read = 0usize;
        fuzz::run("tflite", 3_000, |rng| {
            let mut bytes = rng.pick(&seeds).clone();
            fuzz::mutate(rng, &mut bytes);
            let Ok(graph) = super::read_bytes(&bytes) else {
                return;
            };
            read += 1;
            for t in graph.subgraphs.iter().flat_map(|s| &s.tensors) {
                let elements = t
                    .shape
                    .iter()
                    .try_fold(1i64, |n, &d| n.checked_mul(i64::from(d)));
                if t.sparsity.is_some() && elements.is_some_and(|n| (0..=1 << 16).contains(&n)) {
                    let _ = crate::densify::densify(t);
                }
            }
        });
        // Some mutations leave a readable model (a flipped bit in a constant, say): the
        // target reaches past the identifier and the verifier.
        assert!(read > 0);
    }
}

#[cfg(test)]
mod generated_models {
    /// The benchmark models `scripts/models/gen.py` writes with the wheel's schema module
    /// (present after `scripts/test.sh` or the bench has run; a clean clone has none, and the
    /// checked-in `testdata/` model covers the same path).
    #[test]
    fn the_generated_benchmark_models_read_when_present() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/models");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "tflite") {
                let g = super::read_file(&path).unwrap_or_else(|e| panic!("{e}"));
                assert!(!g.subgraphs[0].nodes.is_empty(), "{}", path.display());
            }
        }
    }
}
