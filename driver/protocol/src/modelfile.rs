//! The JSON model format (versions 1 and 2) and its inputs file: parsing into [`hal::Model`], encoding
//! constant and input values per operand type, and decoding output bytes back into JSON
//! numbers. The format is documented in `docs/model-format.md`.
//!
//! Parsing is strict: unknown fields, wrong JSON types, unknown type names, value counts that
//! do not match the operand's element count and values that do not fit the operand type are
//! all errors naming the JSON path (`operands[3].value[7]`). Graph-level rules (index ranges,
//! argument lists, lifetimes against the input/output lists) are left to the HAL's validation,
//! which answers them with INVALID_ARGUMENT.

use std::ffi::CStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Number, Value};

use nnaccel_hal::{
    DataLocation, Memory, MemoryKind, Model, Operand, OperandLifetime, OperandType, Operation,
    OperationType, Subgraph, SymmPerChannelQuantParams,
};

/// The newest model format version. Version 1 files are read too: version 2 added referenced
/// subgraphs (`"referenced"`, SUBGRAPH operands), and means the same as 1 without them.
pub const FORMAT_VERSION: u64 = 2;

/// The first version with referenced subgraphs.
const SUBGRAPHS_VERSION: u64 = 2;

/// Alignment of each CONSTANT_COPY value in `operand_values`.
pub(crate) const COPY_ALIGN: usize = 4;

/// Alignment of each CONSTANT_REFERENCE value (and of the size) of the shared constant pool.
pub(crate) const POOL_ALIGN: usize = 64;

/// A model or inputs file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    /// The file cannot be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a regular file, or is larger than [`MAX_FILE_BYTES`].
    #[error("{}: {message}", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        message: String,
    },
    /// The text is not JSON.
    #[error(
        "{}malformed JSON at line {line}, column {column}: {message}",
        file_prefix(file)
    )]
    Json {
        /// The file, when parsed from one.
        file: Option<PathBuf>,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the JSON parser said.
        message: String,
    },
    /// The JSON does not follow the format.
    #[error("{}{path}: {message}", file_prefix(file))]
    Invalid {
        /// The file, when parsed from one.
        file: Option<PathBuf>,
        /// JSON path of the offending value (`operands[2].type`), `$` for the whole document.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The shared memory pool for CONSTANT_REFERENCE values cannot be created.
    #[error(
        "{}cannot create the constant pool ({size} bytes): {source}",
        file_prefix(file)
    )]
    Pool {
        /// The file, when parsed from one.
        file: Option<PathBuf>,
        /// Pool size.
        size: u64,
        /// Why.
        source: std::io::Error,
    },
}

fn file_prefix(file: &Option<PathBuf>) -> String {
    match file {
        Some(p) => format!("{}: ", p.display()),
        None => String::new(),
    }
}

impl ModelFileError {
    fn invalid(path: &str, message: impl Into<String>) -> Self {
        Self::Invalid {
            file: None,
            path: if path.is_empty() {
                "$".to_string()
            } else {
                path.to_string()
            },
            message: message.into(),
        }
    }

    fn json(e: &serde_json::Error) -> Self {
        // serde_json's message ends with " at line L column C"; that is said separately.
        let full = e.to_string();
        let message = match full.rfind(" at line ") {
            Some(i) => full[..i].to_string(),
            None => full,
        };
        Self::Json {
            file: None,
            line: e.line(),
            column: e.column(),
            message,
        }
    }

    /// The same error attributed to `path`.
    fn in_file(self, path: &Path) -> Self {
        let p = Some(path.to_path_buf());
        match self {
            Self::Json {
                line,
                column,
                message,
                ..
            } => Self::Json {
                file: p,
                line,
                column,
                message,
            },
            Self::Invalid { path, message, .. } => Self::Invalid {
                file: p,
                path,
                message,
            },
            Self::Pool { size, source, .. } => Self::Pool {
                file: p,
                size,
                source,
            },
            e @ (Self::Io { .. } | Self::NotRegular { .. }) => e,
        }
    }
}

type Result<T> = std::result::Result<T, ModelFileError>;

/// A parsed model file.
#[derive(Debug)]
pub struct LoadedModelFile {
    /// The file it came from (None for [`parse_model`]).
    pub path: Option<PathBuf>,
    /// The model, with its CONSTANT_COPY values in `operand_values` and its CONSTANT_REFERENCE
    /// values, if any, in `pools[0]` (a memfd).
    pub model: Model,
}

/// One input of a request, as given by an inputs file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputValue {
    /// The values encoded for the model input's operand type (little-endian).
    pub bytes: Vec<u8>,
    /// How many values the file gave.
    pub element_count: usize,
    /// Dimensions for this execution (`inputDimensions`), or empty to take the model's.
    pub dimensions: Vec<u32>,
    /// The input is omitted (`null` in the inputs file): an optional input with no value.
    pub has_no_value: bool,
}

// ---------------------------------------------------------------------------------------------
// Paths and field access

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An object whose keys must all be in `allowed`.
fn object<'a>(v: &'a Value, path: &str, allowed: &[&str]) -> Result<&'a Map<String, Value>> {
    let Value::Object(map) = v else {
        return Err(ModelFileError::invalid(
            path,
            format!("expected an object, found {}", kind_of(v)),
        ));
    };
    if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ModelFileError::invalid(
            &join(path, k),
            format!(
                "unknown field \"{k}\" (allowed here: {})",
                allowed
                    .iter()
                    .map(|a| format!("\"{a}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(map)
}

fn required<'a>(map: &'a Map<String, Value>, path: &str, key: &str) -> Result<&'a Value> {
    map.get(key)
        .ok_or_else(|| ModelFileError::invalid(path, format!("missing required field \"{key}\"")))
}

fn array<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        _ => Err(ModelFileError::invalid(
            path,
            format!("expected an array, found {}", kind_of(v)),
        )),
    }
}

fn string<'a>(v: &'a Value, path: &str) -> Result<&'a str> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(ModelFileError::invalid(
            path,
            format!("expected a string, found {}", kind_of(v)),
        )),
    }
}

/// An integral JSON number (a float with no fractional part counts).
fn integer(v: &Value) -> Option<i128> {
    let Value::Number(n) = v else { return None };
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    if f.fract() == 0.0 && f.abs() < 1e30 {
        // Exact: `f` is an integer well inside i128's range.
        #[allow(clippy::cast_possible_truncation)]
        return Some(f as i128);
    }
    None
}

fn int_in(v: &Value, path: &str, min: i128, max: i128, what: &str) -> Result<i128> {
    let Some(i) = integer(v) else {
        return Err(ModelFileError::invalid(
            path,
            format!("expected {what}, found {}", describe(v)),
        ));
    };
    if i < min || i > max {
        return Err(ModelFileError::invalid(
            path,
            format!("{i} is out of range for {what} ({min}..={max})"),
        ));
    }
    Ok(i)
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        _ => kind_of(v).to_string(),
    }
}

fn u32_of(v: &Value, path: &str) -> Result<u32> {
    let i = int_in(
        v,
        path,
        0,
        i128::from(u32::MAX),
        "an unsigned 32-bit integer",
    )?;
    u32::try_from(i).map_err(|_| ModelFileError::invalid(path, "out of range"))
}

fn u32_list(v: &Value, path: &str) -> Result<Vec<u32>> {
    array(v, path)?
        .iter()
        .enumerate()
        .map(|(i, e)| u32_of(e, &index(path, i)))
        .collect()
}

fn f32_of(v: &Value, path: &str, what: &str) -> Result<f32> {
    let Some(f) = v.as_f64() else {
        return Err(ModelFileError::invalid(
            path,
            format!("expected {what}, found {}", kind_of(v)),
        ));
    };
    let x = f as f32;
    if !x.is_finite() {
        return Err(ModelFileError::invalid(
            path,
            format!("{f} is out of range for a 32-bit float"),
        ));
    }
    Ok(x)
}

// ---------------------------------------------------------------------------------------------
// Strict JSON: a `serde_json::Value`, except that a key repeated in one object is an error
// (serde_json alone keeps the last one, so `{"type": "ADD", "type": "MUL"}` would quietly be a
// MUL). Nesting stays bounded by serde_json's recursion limit (128 levels).

/// One step from the document root to a value, kept on the stack and formatted only when a
/// duplicate is found.
struct At<'p> {
    parent: Option<&'p At<'p>>,
    step: Step<'p>,
}

enum Step<'p> {
    Key(&'p str),
    Index(usize),
}

/// The JSON path (`operands[2].type`) of `at`, then `key`.
fn path_of(at: Option<&At<'_>>, key: &str) -> String {
    let mut steps = Vec::new();
    let mut cur = at;
    while let Some(a) = cur {
        steps.push(&a.step);
        cur = a.parent;
    }
    let mut path = String::new();
    for s in steps.iter().rev() {
        path = match s {
            Step::Key(k) => join(&path, k),
            Step::Index(i) => index(&path, *i),
        };
    }
    join(&path, key)
}

/// Deserializes one value at `at`; a duplicate key's path goes to `dup`.
#[derive(Clone, Copy)]
struct StrictSeed<'p> {
    at: Option<&'p At<'p>>,
    dup: &'p std::cell::RefCell<Option<(String, String)>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let at = At {
                parent: self.at,
                step: Step::Index(out.len()),
            };
            let seed = StrictSeed {
                at: Some(&at),
                dup: self.dup,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                *self.dup.borrow_mut() = Some((path_of(self.at, &key), key.clone()));
                return Err(serde::de::Error::custom(format!("duplicate key \"{key}\"")));
            }
            let at = At {
                parent: self.at,
                step: Step::Key(&key),
            };
            let value = map.next_value_seed(StrictSeed {
                at: Some(&at),
                dup: self.dup,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Parses JSON text into a value, refusing a key that appears twice in one object (the error
/// names the key's JSON path, line and column).
fn parse_json(json: &str) -> Result<Value> {
    use serde::de::DeserializeSeed;
    let dup = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(json);
    let parsed = StrictSeed {
        at: None,
        dup: &dup,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| match dup.into_inner() {
        Some((path, key)) => ModelFileError::invalid(
                &path,
                format!(
                    "duplicate key \"{key}\" at line {}, column {} (a key may appear only once in an object)",
                    e.line(),
                    e.column()
                ),
            ),
        None => ModelFileError::json(&e),
    })
}

// ---------------------------------------------------------------------------------------------
// Half precision

// ---------------------------------------------------------------------------------------------
// Values

/// The element range of an integer operand type, or None for float types.
fn int_range(ty: OperandType) -> Option<(i128, i128)> {
    use OperandType as T;
    Some(match ty {
        T::Float32 | T::TensorFloat32 | T::Float16 | T::TensorFloat16 => return None,
        T::Int32 | T::TensorInt32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        T::Uint32 => (0, i128::from(u32::MAX)),
        T::Bool | T::TensorBool8 => (0, 1),
        T::TensorQuant8Asymm => (0, 255),
        T::TensorQuant8AsymmSigned | T::TensorQuant8Symm | T::TensorQuant8SymmPerChannel => {
            (-128, 127)
        }
        T::TensorQuant16Symm => (i128::from(i16::MIN), i128::from(i16::MAX)),
        T::TensorQuant16Asymm => (0, i128::from(u16::MAX)),
        // A SUBGRAPH operand has no elements to range-check.
        T::Subgraph => return None,
    })
}

/// Appends one JSON value encoded as an element of `ty`.
fn encode_value(ty: OperandType, v: &Value, path: &str, out: &mut Vec<u8>) -> Result<()> {
    use OperandType as T;
    match ty {
        T::Float32 | T::TensorFloat32 => {
            out.extend_from_slice(&f32_of(v, path, "a number")?.to_le_bytes());
        }
        T::Float16 | T::TensorFloat16 => {
            let x = f32_of(v, path, "a number")?;
            let h = nnaccel_cpu::f32_to_f16(x);
            if h & 0x7c00 == 0x7c00 {
                return Err(ModelFileError::invalid(
                    path,
                    format!("{} is out of range for {ty} (largest: 65504)", describe(v)),
                ));
            }
            out.extend_from_slice(&h.to_le_bytes());
        }
        T::Bool | T::TensorBool8 => {
            let b = match v {
                Value::Bool(b) => u8::from(*b),
                _ => int_in(v, path, 0, 1, &format!("0 or 1 (a {ty} element)"))? as u8,
            };
            out.push(b);
        }
        _ => {
            let Some((min, max)) = int_range(ty) else {
                return Err(ModelFileError::invalid(path, "unexpected operand type"));
            };
            let what = format!("an integer of {ty}");
            let i = int_in(v, path, min, max, &what)?;
            // In range of the type, checked just above: the casts are exact.
            match ty.element_size() {
                1 => out.push(i as u8),
                2 => out.extend_from_slice(&(i as u16).to_le_bytes()),
                _ => out.extend_from_slice(&(i as u32).to_le_bytes()),
            }
        }
    }
    Ok(())
}

/// Encodes a flat JSON array of elements of `ty`.
fn encode_values(ty: OperandType, values: &[Value], path: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(values.len() * ty.element_size());
    for (i, v) in values.iter().enumerate() {
        encode_value(ty, v, &index(path, i), &mut out)?;
    }
    Ok(out)
}

/// A JSON number for an f32 (its shortest decimal form), or null when not finite.
fn float_value(x: f32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    // The shortest decimal that reads back as this f32, as a JSON number.
    let f: f64 = format!("{x}").parse().unwrap_or(f64::from(x));
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Decodes output bytes of `ty` into JSON numbers: floats as numbers (null for NaN and
/// infinities, which JSON cannot spell), integers and quantized values as their raw integers
/// (not dequantized), booleans as 0/1. Trailing bytes short of an element are ignored.
pub fn output_values(ty: OperandType, bytes: &[u8]) -> Vec<Value> {
    use OperandType as T;
    let size = ty.element_size();
    if size == 0 {
        // SUBGRAPH: no elements (and chunks_exact(0) would panic).
        return Vec::new();
    }
    bytes
        .chunks_exact(size)
        .map(|c| match ty {
            T::Float32 | T::TensorFloat32 => {
                float_value(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            }
            T::Float16 | T::TensorFloat16 => {
                float_value(nnaccel_cpu::f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            }
            T::Int32 | T::TensorInt32 => Value::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            T::Uint32 => Value::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            T::Bool | T::TensorBool8 => Value::from(u8::from(c[0] != 0)),
            T::TensorQuant8Asymm => Value::from(c[0]),
            T::TensorQuant8AsymmSigned | T::TensorQuant8Symm | T::TensorQuant8SymmPerChannel => {
                Value::from(c[0] as i8)
            }
            T::TensorQuant16Symm => Value::from(i16::from_le_bytes([c[0], c[1]])),
            T::TensorQuant16Asymm => Value::from(u16::from_le_bytes([c[0], c[1]])),
            T::Subgraph => Value::Null,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The model

const MODEL_FIELDS: &[&str] = &[
    "version",
    "operands",
    "operations",
    "inputIndexes",
    "outputIndexes",
    "relaxComputationFloat32toFloat16",
    "referenced",
];
const SUBGRAPH_FIELDS: &[&str] = &["operands", "operations", "inputIndexes", "outputIndexes"];
const OPERAND_FIELDS: &[&str] = &[
    "type",
    "dimensions",
    "scale",
    "zeroPoint",
    "lifetime",
    "value",
    "channelQuant",
    "subgraph",
];
const CHANNEL_QUANT_FIELDS: &[&str] = &["channelDim", "scales"];
const OPERATION_FIELDS: &[&str] = &["type", "inputs", "outputs"];

/// Elements of an operand of `ty` with `dims`, for a constant (all extents known).
fn constant_element_count(ty: OperandType, dims: &[u32], path: &str) -> Result<usize> {
    if ty.is_scalar() {
        if !dims.is_empty() {
            return Err(ModelFileError::invalid(
                &join(path, "dimensions"),
                format!("{ty} is a scalar type: its dimensions must be []"),
            ));
        }
        return Ok(1);
    }
    if dims.is_empty() || dims.contains(&0) {
        return Err(ModelFileError::invalid(
            &join(path, "dimensions"),
            "a constant tensor needs every extent known (no [] and no 0)",
        ));
    }
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d as usize))
        .filter(|n| {
            n.checked_mul(ty.element_size())
                .is_some_and(|b| b <= u32::MAX as usize)
        })
        .ok_or_else(|| {
            ModelFileError::invalid(&join(path, "dimensions"), "the constant is too large")
        })
}

/// A constant's bytes, waiting for its place.
struct PendingConstant {
    /// None: the main subgraph; Some(k): `referenced[k]`.
    graph: Option<usize>,
    operand: usize,
    bytes: Vec<u8>,
}

/// What parsing one subgraph needs to know about the file, and where its constants go.
struct Parse {
    version: u64,
    /// How many referenced subgraphs the file has.
    subgraphs: usize,
    copies: Vec<PendingConstant>,
    refs: Vec<PendingConstant>,
}

/// The SUBGRAPH operand's `"subgraph"` field: required on lifetime SUBGRAPH (an index into
/// `"referenced"`), refused elsewhere. The location it gives (the HAL's: pool 0, offset =
/// the index, length 0).
fn subgraph_location(
    map: &Map<String, Value>,
    path: &str,
    lifetime: OperandLifetime,
    p: &Parse,
) -> Result<DataLocation> {
    let spath = join(path, "subgraph");
    match (map.get("subgraph"), lifetime == OperandLifetime::Subgraph) {
        (None, false) => Ok(DataLocation::default()),
        (Some(_), false) => Err(ModelFileError::invalid(
            &spath,
            "only an operand of lifetime SUBGRAPH names a subgraph",
        )),
        (None, true) => Err(ModelFileError::invalid(
            path,
            "a SUBGRAPH operand needs a \"subgraph\" (an index into \"referenced\")",
        )),
        (Some(v), true) => {
            let k = u32_of(v, &spath)?;
            if k as usize >= p.subgraphs {
                return Err(ModelFileError::invalid(
                    &spath,
                    format!(
                        "names referenced subgraph {k}, but the file has {} (\"referenced\" \
                         is indexed from 0)",
                        p.subgraphs
                    ),
                ));
            }
            Ok(DataLocation {
                pool_index: 0,
                offset: k,
                length: 0,
                padding: 0,
            })
        }
    }
}

fn parse_operand(
    v: &Value,
    path: &str,
    p: &mut Parse,
    graph: Option<usize>,
    i: usize,
) -> Result<Operand> {
    let map = object(v, path, OPERAND_FIELDS)?;
    let tpath = join(path, "type");
    let tname = string(required(map, path, "type")?, &tpath)?;
    let ty = OperandType::from_name(tname).ok_or_else(|| {
        ModelFileError::invalid(
            &tpath,
            format!(
                "unknown operand type \"{tname}\" (known: {})",
                OperandType::ALL
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    let dimensions = match map.get("dimensions") {
        Some(d) => u32_list(d, &join(path, "dimensions"))?,
        None => Vec::new(),
    };
    let scale = match map.get("scale") {
        Some(s) => f32_of(s, &join(path, "scale"), "a number")?,
        None => 0.0,
    };
    let zero_point = match map.get("zeroPoint") {
        Some(z) => {
            let zp = join(path, "zeroPoint");
            let i = int_in(
                z,
                &zp,
                i128::from(i32::MIN),
                i128::from(i32::MAX),
                "a 32-bit integer",
            )?;
            i32::try_from(i).map_err(|_| ModelFileError::invalid(&zp, "out of range"))?
        }
        None => 0,
    };
    let lpath = join(path, "lifetime");
    let lname = string(required(map, path, "lifetime")?, &lpath)?;
    let lifetime = OperandLifetime::from_name_or_alias(lname).ok_or_else(|| {
        ModelFileError::invalid(
            &lpath,
            format!(
                "unknown lifetime \"{lname}\" (known: TEMPORARY_VARIABLE, MODEL_INPUT, \
                 MODEL_OUTPUT, CONSTANT_COPY, CONSTANT_REFERENCE, NO_VALUE, SUBGRAPH; \
                 SUBGRAPH_INPUT and SUBGRAPH_OUTPUT as synonyms)"
            ),
        )
    })?;
    if lifetime == OperandLifetime::Subgraph && p.version < SUBGRAPHS_VERSION {
        return Err(ModelFileError::invalid(
            &lpath,
            format!("lifetime SUBGRAPH needs \"version\": {SUBGRAPHS_VERSION}"),
        ));
    }
    let location = subgraph_location(map, path, lifetime, p)?;
    let extra_params = match map.get("channelQuant") {
        None => None,
        Some(c) => {
            let cpath = join(path, "channelQuant");
            let cmap = object(c, &cpath, CHANNEL_QUANT_FIELDS)?;
            let channel_dim = u32_of(
                required(cmap, &cpath, "channelDim")?,
                &join(&cpath, "channelDim"),
            )?;
            let spath = join(&cpath, "scales");
            let scales = array(required(cmap, &cpath, "scales")?, &spath)?
                .iter()
                .enumerate()
                .map(|(k, s)| f32_of(s, &index(&spath, k), "a number"))
                .collect::<Result<Vec<f32>>>()?;
            Some(SymmPerChannelQuantParams {
                scales,
                channel_dim,
            })
        }
    };
    let is_constant = matches!(
        lifetime,
        OperandLifetime::ConstantCopy | OperandLifetime::ConstantReference
    );
    match (map.get("value"), is_constant) {
        (Some(value), true) => {
            let vpath = join(path, "value");
            let values = array(value, &vpath)?;
            let count = constant_element_count(ty, &dimensions, path)?;
            if values.len() != count {
                return Err(ModelFileError::invalid(
                    &vpath,
                    format!(
                        "{} values given, but a {ty} operand of dimensions {dimensions:?} has {count}",
                        values.len()
                    ),
                ));
            }
            let bytes = encode_values(ty, values, &vpath)?;
            let pending = PendingConstant {
                graph,
                operand: i,
                bytes,
            };
            if lifetime == OperandLifetime::ConstantCopy {
                p.copies.push(pending);
            } else {
                p.refs.push(pending);
            }
        }
        (None, true) => {
            return Err(ModelFileError::invalid(
                path,
                format!("a {lname} operand needs a \"value\""),
            ));
        }
        (Some(_), false) => {
            return Err(ModelFileError::invalid(
                &join(path, "value"),
                format!(
                    "only CONSTANT_COPY and CONSTANT_REFERENCE operands have a value, this one is {lname}"
                ),
            ));
        }
        (None, false) => {}
    }
    Ok(Operand {
        operand_type: ty,
        dimensions,
        scale,
        zero_point,
        lifetime,
        location,
        extra_params,
    })
}

fn parse_operation(v: &Value, path: &str) -> Result<Operation> {
    let map = object(v, path, OPERATION_FIELDS)?;
    let tpath = join(path, "type");
    let name = string(required(map, path, "type")?, &tpath)?;
    let operation_type = OperationType::from_name(name).ok_or_else(|| {
        ModelFileError::invalid(
            &tpath,
            format!("unknown operation type \"{name}\" (NN HAL names: ADD, CONV_2D, ...)"),
        )
    })?;
    Ok(Operation {
        operation_type,
        inputs: u32_list(required(map, path, "inputs")?, &join(path, "inputs"))?,
        outputs: u32_list(required(map, path, "outputs")?, &join(path, "outputs"))?,
    })
}

/// The lists of one subgraph (the main one: `path` "" and `graph` None; or `referenced[k]`).
fn parse_subgraph(
    map: &Map<String, Value>,
    path: &str,
    p: &mut Parse,
    graph: Option<usize>,
) -> Result<Subgraph> {
    let opath = join(path, "operands");
    let operands = array(required(map, path, "operands")?, &opath)?
        .iter()
        .enumerate()
        .map(|(i, o)| parse_operand(o, &index(&opath, i), p, graph, i))
        .collect::<Result<Vec<Operand>>>()?;
    let oppath = join(path, "operations");
    let operations = array(required(map, path, "operations")?, &oppath)?
        .iter()
        .enumerate()
        .map(|(i, o)| parse_operation(o, &index(&oppath, i)))
        .collect::<Result<Vec<Operation>>>()?;
    let list = |key: &str| u32_list(required(map, path, key)?, &join(path, key));
    Ok(Subgraph {
        operands,
        operations,
        input_indexes: list("inputIndexes")?,
        output_indexes: list("outputIndexes")?,
    })
}

/// Parses a model file's text. CONSTANT_REFERENCE values, if any, are placed in one new
/// memfd pool (`model.pools[0]`); CONSTANT_COPY values of every subgraph in
/// `model.operand_values`.
pub fn parse_model(json: &str) -> Result<LoadedModelFile> {
    let doc = parse_json(json)?;
    let map = object(&doc, "", MODEL_FIELDS)?;
    let version_value = required(map, "", "version")?;
    let version = match integer(version_value) {
        Some(v @ 1..=2) => v as u64,
        _ => {
            return Err(ModelFileError::invalid(
                "version",
                format!(
                    "unsupported model format version {} (this nnaccel reads versions 1 to \
                     {FORMAT_VERSION})",
                    describe(version_value)
                ),
            ));
        }
    };
    let referenced_values = match map.get("referenced") {
        None => &[][..],
        Some(_) if version < SUBGRAPHS_VERSION => {
            return Err(ModelFileError::invalid(
                "referenced",
                format!("referenced subgraphs need \"version\": {SUBGRAPHS_VERSION}"),
            ));
        }
        Some(r) => array(r, "referenced")?.as_slice(),
    };
    let mut p = Parse {
        version,
        subgraphs: referenced_values.len(),
        copies: Vec::new(),
        refs: Vec::new(),
    };
    let main = parse_subgraph(map, "", &mut p, None)?;
    let referenced = referenced_values
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let path = index("referenced", k);
            let smap = object(v, &path, SUBGRAPH_FIELDS)?;
            parse_subgraph(smap, &path, &mut p, Some(k))
        })
        .collect::<Result<Vec<Subgraph>>>()?;
    let relax = match map.get("relaxComputationFloat32toFloat16") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ModelFileError::invalid(
                "relaxComputationFloat32toFloat16",
                format!("expected true or false, found {}", kind_of(v)),
            ));
        }
    };
    let mut model = Model {
        operands: main.operands,
        operations: main.operations,
        input_indexes: main.input_indexes,
        output_indexes: main.output_indexes,
        referenced,
        operand_values: Vec::new(),
        pools: Vec::new(),
        relax_computation_float32_to_float16: relax,
    };
    place_copies(&mut model, p.copies)?;
    place_references(&mut model, p.refs)?;
    Ok(LoadedModelFile { path: None, model })
}

/// Where a pending constant's location goes.
fn pending_operand<'m>(model: &'m mut Model, c: &PendingConstant) -> Option<&'m mut Operand> {
    let operands = match c.graph {
        None => &mut model.operands,
        Some(k) => &mut model.referenced.get_mut(k)?.operands,
    };
    operands.get_mut(c.operand)
}

fn too_large() -> ModelFileError {
    ModelFileError::invalid("operands", "the constants exceed 4 GiB")
}

fn place_copies(model: &mut Model, copies: Vec<PendingConstant>) -> Result<()> {
    for c in copies {
        let offset = model.operand_values.len().next_multiple_of(COPY_ALIGN);
        model.operand_values.resize(offset, 0);
        model.operand_values.extend_from_slice(&c.bytes);
        let location = DataLocation {
            pool_index: 0,
            offset: u32::try_from(offset).map_err(|_| too_large())?,
            length: u32::try_from(c.bytes.len()).map_err(|_| too_large())?,
            padding: 0,
        };
        if let Some(o) = pending_operand(model, &c) {
            o.location = location;
        }
    }
    let end = model.operand_values.len().next_multiple_of(COPY_ALIGN);
    model.operand_values.resize(end, 0);
    Ok(())
}

fn place_references(model: &mut Model, refs: Vec<PendingConstant>) -> Result<()> {
    if refs.is_empty() {
        return Ok(());
    }
    let blobs: Vec<&[u8]> = refs.iter().map(|r| r.bytes.as_slice()).collect();
    let pool =
        ConstantPool::new(c"nnaccel-constants", &blobs).map_err(|e| ModelFileError::Pool {
            file: None,
            size: e.size,
            source: e.source,
        })?;
    if u32::try_from(pool.memory.size).is_err() {
        return Err(too_large());
    }
    for (r, &offset) in refs.iter().zip(&pool.offsets) {
        // Both below the pool's size, which fits u32.
        if let Some(o) = pending_operand(model, r) {
            o.location = DataLocation {
                pool_index: 0,
                offset: offset as u32,
                length: r.bytes.len() as u32,
                padding: 0,
            };
        }
    }
    model.pools.push(pool.memory);
    Ok(())
}

/// A memfd pool holding constants for CONSTANT_REFERENCE operands: each value at a multiple of
/// [`POOL_ALIGN`], the size rounded up to it. The JSON model format and the TFLite import
/// both place their large constants with it.
#[derive(Debug)]
pub struct ConstantPool {
    /// The pool (`ashmem`: a sealed-size memfd, written once here).
    pub memory: Memory,
    /// Where each value given to [`ConstantPool::new`] starts, in the same order.
    pub offsets: Vec<usize>,
}

/// Why a [`ConstantPool`] could not be made.
#[derive(Debug)]
pub struct ConstantPoolError {
    /// The pool size that was asked for.
    pub size: u64,
    /// Why.
    pub source: std::io::Error,
}

impl ConstantPool {
    /// Lays `values` out and copies them into a new memfd named `name`.
    pub fn new(name: &CStr, values: &[&[u8]]) -> std::result::Result<Self, ConstantPoolError> {
        let mut offsets = Vec::with_capacity(values.len());
        let mut end = 0usize;
        for v in values {
            let offset = end.next_multiple_of(POOL_ALIGN);
            offsets.push(offset);
            end = offset + v.len();
        }
        let size = end.max(1).next_multiple_of(POOL_ALIGN);
        let err = |source| ConstantPoolError {
            size: size as u64,
            source,
        };
        let fd = nnaccel_uapi::sys::memfd_create(name, size as u64).map_err(err)?;
        {
            let map =
                nnaccel_uapi::sys::Mapping::map_shared(fd.as_fd(), 0, size, true).map_err(err)?;
            for (v, &offset) in values.iter().zip(&offsets) {
                map.write_at(offset, v).map_err(err)?;
            }
        }
        Ok(Self {
            memory: Memory {
                kind: MemoryKind::Ashmem,
                fd: Arc::new(fd),
                size: size as u64,
            },
            offsets,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// The constant bytes of `o` (its location in `model.operand_values` or in a pool, pools
/// mapped once into `mapped`).
fn constant_bytes_of(
    model: &Model,
    o: &Operand,
    mapped: &mut [Option<nnaccel_hal::MappedPool>],
    path: &str,
) -> Result<Vec<u8>> {
    let loc = o.location;
    let (offset, length) = (loc.offset as usize, loc.length as usize);
    if o.lifetime == OperandLifetime::ConstantCopy {
        return offset
            .checked_add(length)
            .and_then(|end| model.operand_values.get(offset..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| ModelFileError::invalid(path, "the constant is outside operandValues"));
    }
    let p = loc.pool_index as usize;
    let (Some(slot), Some(memory)) = (mapped.get_mut(p), model.pools.get(p)) else {
        return Err(ModelFileError::invalid(
            path,
            format!("the constant names pool {p}, which the model does not have"),
        ));
    };
    if slot.is_none() {
        *slot =
            Some(nnaccel_hal::MappedPool::map_constants(memory).map_err(|s| {
                ModelFileError::invalid(path, format!("cannot read pool {p}: {s:?}"))
            })?);
    }
    slot.as_ref()
        .ok_or_else(|| ModelFileError::invalid(path, format!("cannot read pool {p}")))?
        .read(offset, length)
        .map_err(|s| {
            ModelFileError::invalid(path, format!("the constant is outside pool {p}: {s:?}"))
        })
}

/// One operand as a model-file object; `main` picks the MODEL_INPUT/MODEL_OUTPUT spelling.
fn operand_json(
    model: &Model,
    o: &Operand,
    main: bool,
    mapped: &mut [Option<nnaccel_hal::MappedPool>],
    path: &str,
) -> Result<Value> {
    let mut map = Map::new();
    map.insert("type".into(), Value::from(o.operand_type.name()));
    if !o.dimensions.is_empty() {
        map.insert("dimensions".into(), Value::from(o.dimensions.clone()));
    }
    if o.scale != 0.0 {
        map.insert("scale".into(), float_value(o.scale));
    }
    if o.zero_point != 0 {
        map.insert("zeroPoint".into(), Value::from(o.zero_point));
    }
    let lifetime = match o.lifetime {
        OperandLifetime::SubgraphInput if main => "MODEL_INPUT",
        OperandLifetime::SubgraphOutput if main => "MODEL_OUTPUT",
        l => l.name(),
    };
    map.insert("lifetime".into(), Value::from(lifetime));
    match o.lifetime {
        OperandLifetime::ConstantCopy | OperandLifetime::ConstantReference => {
            let bytes = constant_bytes_of(model, o, mapped, path)?;
            let values = output_values(o.operand_type, &bytes);
            if values.iter().any(Value::is_null) {
                return Err(ModelFileError::invalid(
                    &join(path, "value"),
                    "a NaN or infinite constant cannot be written in JSON",
                ));
            }
            map.insert("value".into(), Value::Array(values));
        }
        OperandLifetime::Subgraph => {
            map.insert("subgraph".into(), Value::from(o.location.offset));
        }
        _ => {}
    }
    if let Some(p) = &o.extra_params {
        let scales = p.scales.iter().map(|&x| float_value(x)).collect();
        let mut cq = Map::new();
        cq.insert("channelDim".into(), Value::from(p.channel_dim));
        cq.insert("scales".into(), Value::Array(scales));
        map.insert("channelQuant".into(), Value::Object(cq));
    }
    Ok(Value::Object(map))
}

/// One subgraph's four lists into `map`.
fn subgraph_json(
    model: &Model,
    g: &Subgraph,
    main: bool,
    path: &str,
    mapped: &mut [Option<nnaccel_hal::MappedPool>],
    map: &mut Map<String, Value>,
) -> Result<()> {
    let opath = join(path, "operands");
    let operands = g
        .operands
        .iter()
        .enumerate()
        .map(|(i, o)| operand_json(model, o, main, mapped, &index(&opath, i)))
        .collect::<Result<Vec<Value>>>()?;
    let operations = g
        .operations
        .iter()
        .map(|op| {
            let mut m = Map::new();
            m.insert("type".into(), Value::from(op.operation_type.name()));
            m.insert("inputs".into(), Value::from(op.inputs.clone()));
            m.insert("outputs".into(), Value::from(op.outputs.clone()));
            Value::Object(m)
        })
        .collect();
    map.insert("operands".into(), Value::Array(operands));
    map.insert("operations".into(), Value::Array(operations));
    map.insert("inputIndexes".into(), Value::from(g.input_indexes.clone()));
    map.insert(
        "outputIndexes".into(),
        Value::from(g.output_indexes.clone()),
    );
    Ok(())
}

/// Writes `model` as a model file that [`parse_model`] reads back into the same model:
/// version 1, or 2 when it has referenced subgraphs. Constants are read from
/// `operand_values` and from the pools (mapped for reading); one that cannot be read, or a
/// NaN or infinite float (JSON cannot spell it), is an error naming its JSON path.
pub fn model_to_json(model: &Model) -> Result<String> {
    let mut mapped: Vec<Option<nnaccel_hal::MappedPool>> =
        (0..model.pools.len()).map(|_| None).collect();
    let version = if model.referenced.is_empty() {
        1
    } else {
        SUBGRAPHS_VERSION
    };
    let mut map = Map::new();
    map.insert("version".into(), Value::from(version));
    let main = Subgraph {
        operands: model.operands.clone(),
        operations: model.operations.clone(),
        input_indexes: model.input_indexes.clone(),
        output_indexes: model.output_indexes.clone(),
    };
    subgraph_json(model, &main, true, "", &mut mapped, &mut map)?;
    map.insert(
        "relaxComputationFloat32toFloat16".into(),
        Value::from(model.relax_computation_float32_to_float16),
    );
    if !model.referenced.is_empty() {
        let referenced = model
            .referenced
            .iter()
            .enumerate()
            .map(|(k, g)| {
                let mut m = Map::new();
                subgraph_json(
                    model,
                    g,
                    false,
                    &index("referenced", k),
                    &mut mapped,
                    &mut m,
                )?;
                Ok(Value::Object(m))
            })
            .collect::<Result<Vec<Value>>>()?;
        map.insert("referenced".into(), Value::Array(referenced));
    }
    serde_json::to_string_pretty(&Value::Object(map))
        .map_err(|e| ModelFileError::invalid("", e.to_string()))
}

/// Largest model or inputs file read, in bytes (64 MiB). A bigger file is refused before
/// anything is read; the bound also holds for a file that grows while it is read.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Opens `path` for reading as [`read_bytes`] does: with `O_NONBLOCK` (a FIFO opens without
/// waiting for a writer) and its kind checked on the open fd. Gives the file and its length,
/// or in place of the length the kind of a file that is not regular ("a FIFO", ...). Shared
/// with the readers of other formats under their own size limits (the `.tflite` reader).
pub fn open_regular(
    path: &Path,
) -> std::io::Result<(std::fs::File, std::result::Result<u64, &'static str>)> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    let ft = meta.file_type();
    let len = if ft.is_file() {
        Ok(meta.len())
    } else if ft.is_dir() {
        Err("a directory")
    } else if ft.is_fifo() {
        Err("a FIFO")
    } else if ft.is_char_device() {
        Err("a character device")
    } else if ft.is_block_device() {
        Err("a block device")
    } else if ft.is_socket() {
        Err("a socket")
    } else {
        Err("not a regular file")
    };
    Ok((file, len))
}

/// Reads a model or inputs file: a regular file of at most [`MAX_FILE_BYTES`], else an error.
/// The file is opened with `O_NONBLOCK` (a FIFO opens without waiting for a writer) and its
/// kind is checked on the open fd, so a FIFO, a device such as `/dev/zero` or a directory is
/// refused before any byte is read, and nothing can swap the file between check and read.
/// Public for the other inputs formats of the same rules (`nnaccelctl`'s `.npz` inputs).
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io_err = |source| ModelFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let refuse = |message: String| ModelFileError::NotRegular {
        path: path.to_path_buf(),
        message,
    };
    let (file, len) = open_regular(path).map_err(io_err)?;
    let len = len.map_err(|kind| {
        refuse(format!(
            "{kind}; a model or inputs file must be a regular file"
        ))
    })?;
    if len > MAX_FILE_BYTES {
        return Err(refuse(format!(
            "{len} bytes, more than the limit of {MAX_FILE_BYTES} bytes (64 MiB)"
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(refuse(format!(
            "grew past the limit of {MAX_FILE_BYTES} bytes (64 MiB) while being read"
        )));
    }
    Ok(bytes)
}

/// [`read_bytes`], as UTF-8 text.
fn read(path: &Path) -> Result<String> {
    let io_err = |source| ModelFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    String::from_utf8(read_bytes(path)?).map_err(|e| {
        io_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text ({e})"),
        ))
    })
}

/// Reads and parses a model file.
pub fn load_model(path: &Path) -> Result<LoadedModelFile> {
    let text = read(path)?;
    let mut loaded = parse_model(&text).map_err(|e| e.in_file(path))?;
    loaded.path = Some(path.to_path_buf());
    Ok(loaded)
}

// ---------------------------------------------------------------------------------------------
// Inputs

const INPUTS_FIELDS: &[&str] = &["inputs", "inputDimensions"];

/// The operand type used to encode request input `i` of `model`: the model input's type.
/// Inputs beyond the model's (a request the driver will reject) are encoded as TENSOR_FLOAT32.
fn input_type(model: &Model, i: usize) -> OperandType {
    model
        .input_indexes
        .get(i)
        .and_then(|&idx| model.operands.get(idx as usize))
        .map_or(OperandType::TensorFloat32, |o| o.operand_type)
}

/// Parses an inputs file's text against `model`. Values are encoded with each model input's
/// operand type; counts and dimensions are left for the driver to check against the model
/// (a mismatch is an INVALID_ARGUMENT execution, not a malformed file).
pub fn parse_inputs(json: &str, model: &Model) -> Result<Vec<InputValue>> {
    let doc = parse_json(json)?;
    let map = object(&doc, "", INPUTS_FIELDS)?;
    let inputs = array(required(map, "", "inputs")?, "inputs")?;
    let dims: Vec<Vec<u32>> = match map.get("inputDimensions") {
        None => vec![Vec::new(); inputs.len()],
        Some(d) => {
            let list = array(d, "inputDimensions")?;
            if list.len() != inputs.len() {
                return Err(ModelFileError::invalid(
                    "inputDimensions",
                    format!(
                        "{} entries, but there are {} inputs (use [] to keep an input's model dimensions)",
                        list.len(),
                        inputs.len()
                    ),
                ));
            }
            list.iter()
                .enumerate()
                .map(|(i, e)| match e {
                    Value::Null => Ok(Vec::new()),
                    _ => u32_list(e, &index("inputDimensions", i)),
                })
                .collect::<Result<_>>()?
        }
    };
    inputs
        .iter()
        .zip(dims)
        .enumerate()
        .map(|(i, (v, dimensions))| {
            let path = index("inputs", i);
            if v.is_null() {
                return Ok(InputValue {
                    bytes: Vec::new(),
                    element_count: 0,
                    dimensions,
                    has_no_value: true,
                });
            }
            let values = array(v, &path)?;
            Ok(InputValue {
                bytes: encode_values(input_type(model, i), values, &path)?,
                element_count: values.len(),
                dimensions,
                has_no_value: false,
            })
        })
        .collect()
}

/// Reads and parses an inputs file against `model`.
pub fn load_inputs(path: &Path, model: &Model) -> Result<Vec<InputValue>> {
    let text = read(path)?;
    parse_inputs(&text, model).map_err(|e| e.in_file(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD: &str = r#"{
      "version": 1,
      "operands": [
        {"type": "TENSOR_FLOAT32", "dimensions": [1, 2, 2, 1], "lifetime": "MODEL_INPUT"},
        {"type": "TENSOR_FLOAT32", "dimensions": [1, 2, 2, 1], "lifetime": "CONSTANT_COPY",
         "value": [1.0, 2.0, 3.0, 4.0]},
        {"type": "INT32", "dimensions": [], "lifetime": "CONSTANT_COPY", "value": [0]},
        {"type": "TENSOR_QUANT8_ASYMM", "dimensions": [4], "scale": 0.5, "zeroPoint": 128,
         "lifetime": "TEMPORARY_VARIABLE"},
        {"type": "TENSOR_FLOAT32", "dimensions": [1, 2, 2, 1], "lifetime": "MODEL_OUTPUT"}
      ],
      "operations": [ {"type": "ADD", "inputs": [0, 1, 2], "outputs": [4]} ],
      "inputIndexes": [0],
      "outputIndexes": [4],
      "relaxComputationFloat32toFloat16": false
    }"#;

    fn one_operand(operand: &str) -> String {
        format!(
            r#"{{"version": 1, "operands": [{operand}], "operations": [],
                "inputIndexes": [], "outputIndexes": []}}"#
        )
    }

    fn err(json: &str) -> String {
        match parse_model(json) {
            Ok(m) => panic!("parsed: {:?}", m.model),
            Err(e) => e.to_string(),
        }
    }

    fn constant_bytes(ty: &str, dims: &str, values: &str) -> Result<Vec<u8>> {
        let m = parse_model(&one_operand(&format!(
            r#"{{"type": "{ty}", "dimensions": {dims}, "lifetime": "CONSTANT_COPY", "value": {values}}}"#
        )))?
        .model;
        let loc = m.operands[0].location;
        Ok(m.operand_values[loc.offset as usize..(loc.offset + loc.length) as usize].to_vec())
    }

    #[test]
    fn the_issue_example_parses() {
        let m = parse_model(ADD).unwrap().model;
        assert_eq!(m.operands.len(), 5);
        assert_eq!(m.operands[0].lifetime, OperandLifetime::SubgraphInput);
        assert_eq!(m.operands[4].lifetime, OperandLifetime::SubgraphOutput);
        assert_eq!(m.operands[3].operand_type, OperandType::TensorQuant8Asymm);
        assert_eq!(m.operands[3].scale, 0.5);
        assert_eq!(m.operands[3].zero_point, 128);
        assert_eq!(m.operations[0].operation_type, OperationType::Add);
        assert_eq!(m.operations[0].inputs, vec![0, 1, 2]);
        assert_eq!(
            m.operands[1].location,
            DataLocation {
                pool_index: 0,
                offset: 0,
                length: 16,
                padding: 0
            }
        );
        assert_eq!(m.operands[2].location.offset, 16);
        assert_eq!(m.operands[2].location.length, 4);
        assert_eq!(&m.operand_values[..4], &1.0f32.to_le_bytes());
        assert_eq!(m.operand_values.len(), 20);
        assert!(m.pools.is_empty());
        assert_eq!(m.input_indexes, vec![0]);
        assert_eq!(m.output_indexes, vec![4]);
        assert!(!m.relax_computation_float32_to_float16);
    }

    #[test]
    fn a_bad_version_is_rejected() {
        let j = ADD.replace("\"version\": 1", "\"version\": 3");
        let e = err(&j);
        assert!(
            e.contains("version: unsupported model format version 3"),
            "{e}"
        );
        let j = ADD.replace("\"version\": 1", "\"version\": 0");
        assert!(err(&j).contains("unsupported model format version 0"));
        let j = ADD.replace("\"version\": 1,", "");
        assert!(err(&j).contains("missing required field \"version\""));
        let j = ADD.replace("\"version\": 1", "\"version\": \"1\"");
        assert!(err(&j).contains("version"));
    }

    #[test]
    fn unknown_type_names_are_rejected_with_their_path() {
        let e = err(&ADD.replace("\"INT32\"", "\"INT64\""));
        assert!(
            e.starts_with("operands[2].type: unknown operand type \"INT64\""),
            "{e}"
        );
        let e = err(&ADD.replace("\"ADD\"", "\"ADDD\""));
        assert!(
            e.starts_with("operations[0].type: unknown operation type \"ADDD\""),
            "{e}"
        );
        let e = err(&ADD.replace("\"TEMPORARY_VARIABLE\"", "\"TEMPORARY\""));
        assert!(
            e.starts_with("operands[3].lifetime: unknown lifetime"),
            "{e}"
        );
        let e = err(&ADD.replace("\"TEMPORARY_VARIABLE\"", "\"SUBGRAPH\""));
        assert!(e.starts_with("operands[3].lifetime"), "{e}");
    }

    #[test]
    fn the_value_count_must_match_the_element_count() {
        let e = err(&ADD.replace("[1.0, 2.0, 3.0, 4.0]", "[1.0, 2.0, 3.0]"));
        assert!(e.starts_with("operands[1].value: 3 values given"), "{e}");
        assert!(e.contains("has 4"), "{e}");
        let e = err(&ADD.replace("\"value\": [0]", "\"value\": [0, 1]"));
        assert!(e.starts_with("operands[2].value: 2 values given"), "{e}");
        // A constant tensor needs known extents.
        let e = err(&one_operand(
            r#"{"type": "TENSOR_INT32", "dimensions": [0], "lifetime": "CONSTANT_COPY", "value": []}"#,
        ));
        assert!(e.starts_with("operands[0].dimensions"), "{e}");
        // A value on a non-constant, and no value on a constant.
        let e = err(&one_operand(
            r#"{"type": "INT32", "lifetime": "MODEL_INPUT", "value": [1]}"#,
        ));
        assert!(
            e.starts_with("operands[0].value: only CONSTANT_COPY"),
            "{e}"
        );
        let e = err(&one_operand(
            r#"{"type": "INT32", "lifetime": "CONSTANT_COPY"}"#,
        ));
        assert!(e.contains("needs a \"value\""), "{e}");
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        for (ty, bad) in [
            ("TENSOR_QUANT8_ASYMM", "256"),
            ("TENSOR_QUANT8_ASYMM", "-1"),
            ("TENSOR_QUANT8_ASYMM_SIGNED", "128"),
            ("TENSOR_QUANT8_SYMM", "-129"),
            ("TENSOR_QUANT8_SYMM_PER_CHANNEL", "200"),
            ("TENSOR_QUANT16_SYMM", "32768"),
            ("TENSOR_QUANT16_ASYMM", "65536"),
            ("TENSOR_INT32", "2147483648"),
            ("TENSOR_INT32", "1.5"),
            ("TENSOR_BOOL8", "2"),
            ("TENSOR_FLOAT32", "1e39"),
            ("TENSOR_FLOAT16", "65520"),
            ("TENSOR_FLOAT32", "\"1\""),
        ] {
            let e = constant_bytes(ty, "[2]", &format!("[0, {bad}]"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("operands[0].value[1]: "), "{ty} {bad}: {e}");
        }
        for (ty, bad) in [("UINT32", "-1"), ("INT32", "-2147483649"), ("BOOL", "-1")] {
            let e = constant_bytes(ty, "[]", &format!("[{bad}]"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("operands[0].value[0]: "), "{ty} {bad}: {e}");
        }
    }

    #[test]
    fn values_are_encoded_little_endian_per_type() {
        let b = |ty, dims, v| constant_bytes(ty, dims, v).unwrap();
        assert_eq!(b("FLOAT32", "[]", "[1.5]"), 1.5f32.to_le_bytes());
        assert_eq!(b("INT32", "[]", "[-2]"), (-2i32).to_le_bytes());
        assert_eq!(b("UINT32", "[]", "[4294967295]"), u32::MAX.to_le_bytes());
        assert_eq!(b("BOOL", "[]", "[1]"), [1]);
        assert_eq!(b("TENSOR_BOOL8", "[3]", "[0, 1, true]"), [0, 1, 1]);
        assert_eq!(b("TENSOR_QUANT8_ASYMM", "[2]", "[0, 255]"), [0, 255]);
        assert_eq!(
            b("TENSOR_QUANT8_ASYMM_SIGNED", "[2]", "[-128, 127]"),
            [0x80, 0x7f]
        );
        assert_eq!(b("TENSOR_QUANT16_SYMM", "[1]", "[-2]"), [0xfe, 0xff]);
        assert_eq!(b("TENSOR_QUANT16_ASYMM", "[1]", "[65535]"), [0xff, 0xff]);
        assert_eq!(b("TENSOR_INT32", "[1]", "[7.0]"), 7i32.to_le_bytes());
        assert_eq!(
            b("TENSOR_FLOAT16", "[2]", "[1.0, -2.0]"),
            [0x00, 0x3c, 0x00, 0xc0]
        );
        assert_eq!(b("FLOAT16", "[]", "[65504]"), [0xff, 0x7b]);
        // A scalar type with dimensions.
        assert!(constant_bytes("INT32", "[1]", "[1]").is_err());
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_path() {
        let e = err(&ADD.replace("\"version\": 1,", "\"version\": 1, \"extra\": 3,"));
        assert!(e.starts_with("extra: unknown field \"extra\""), "{e}");
        let e = err(&ADD.replace("\"scale\": 0.5", "\"scale\": 0.5, \"zero_point\": 1"));
        assert!(
            e.starts_with("operands[3].zero_point: unknown field \"zero_point\""),
            "{e}"
        );
        assert!(e.contains("\"zeroPoint\""), "{e}");
        let e = err(&ADD.replace("\"outputs\": [4]", "\"outputs\": [4], \"name\": \"add\""));
        assert!(e.starts_with("operations[0].name: unknown field"), "{e}");
        let e = err(&ADD.replace("\"inputIndexes\": [0]", "\"inputIndexes\": [-1]"));
        assert!(e.starts_with("inputIndexes[0]: -1 is out of range"), "{e}");
        let e = err(&ADD.replace("\"inputIndexes\": [0],", ""));
        assert!(e.contains("missing required field \"inputIndexes\""), "{e}");
        let e = err("[]");
        assert!(
            e.starts_with("$: expected an object, found an array"),
            "{e}"
        );
    }

    #[test]
    fn malformed_json_names_line_and_column() {
        let e = err("{\n  \"version\": 1,\n  \"operands\": [\n}");
        assert!(e.starts_with("malformed JSON at line 4, column 1"), "{e}");
        let e = err("");
        assert!(e.starts_with("malformed JSON at line 1"), "{e}");
    }

    #[test]
    fn lifetime_synonyms_are_accepted() {
        let j = ADD
            .replace("MODEL_INPUT", "SUBGRAPH_INPUT")
            .replace("MODEL_OUTPUT", "SUBGRAPH_OUTPUT");
        let m = parse_model(&j).unwrap().model;
        assert_eq!(m.operands[0].lifetime, OperandLifetime::SubgraphInput);
        assert_eq!(m.operands[4].lifetime, OperandLifetime::SubgraphOutput);
    }

    #[test]
    fn half_conversion_rounds_to_nearest_even() {
        let h = nnaccel_cpu::f32_to_f16;
        assert_eq!(h(0.0), 0x0000);
        assert_eq!(h(-0.0), 0x8000);
        assert_eq!(h(1.0), 0x3c00);
        assert_eq!(h(-2.0), 0xc000);
        assert_eq!(h(65504.0), 0x7bff);
        assert_eq!(h(65519.0), 0x7bff); // below the halfway point to 65536
        assert_eq!(h(65520.0), 0x7c00); // halfway: rounds to even = infinity
        assert_eq!(h(f32::INFINITY), 0x7c00);
        assert_eq!(h(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(h(f32::NAN) & 0x7c00, 0x7c00);
        assert_ne!(h(f32::NAN) & 0x3ff, 0);
        assert_eq!(h(0.1), 0x2e66);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(h(1.0 + 2f32.powi(-11)), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: to even, up.
        assert_eq!(h(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        // Just above halfway rounds up.
        assert_eq!(h(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 0x3c01);
        // Subnormals: the smallest is 2^-24; 2^-25 is halfway to 0 (even: 0); a bit more is 1.
        assert_eq!(h(2f32.powi(-24)), 0x0001);
        assert_eq!(h(2f32.powi(-25)), 0x0000);
        assert_eq!(h(2f32.powi(-25) * 1.5), 0x0001);
        assert_eq!(h(3.0 * 2f32.powi(-25)), 0x0002); // 1.5 ulp: ties to even
        assert_eq!(h(2f32.powi(-14)), 0x0400); // smallest normal
        assert_eq!(h(2f32.powi(-14) - 2f32.powi(-25)), 0x0400); // rounds up into normal
        assert_eq!(h(1e-10), 0x0000);
        // Every half round-trips.
        for bits in 0..=u16::MAX {
            let x = nnaccel_cpu::f16_to_f32(bits);
            if x.is_nan() {
                continue;
            }
            assert_eq!(h(x), bits, "{bits:#06x} -> {x}");
        }
    }

    #[test]
    fn constant_references_go_to_one_shared_pool() {
        let j = one_operand(
            r#"{"type": "TENSOR_FLOAT32", "dimensions": [3], "lifetime": "CONSTANT_REFERENCE",
                "value": [1, 2, 3]},
               {"type": "TENSOR_QUANT8_ASYMM", "dimensions": [2], "scale": 1.0,
                "lifetime": "CONSTANT_REFERENCE", "value": [7, 9]},
               {"type": "INT32", "lifetime": "CONSTANT_COPY", "value": [5]}"#,
        );
        let m = parse_model(&j).unwrap().model;
        assert_eq!(m.pools.len(), 1);
        assert_eq!(m.pools[0].kind, MemoryKind::Ashmem);
        assert_eq!(m.pools[0].size, 128);
        assert_eq!(
            m.operands[0].location,
            DataLocation {
                pool_index: 0,
                offset: 0,
                length: 12,
                padding: 0
            }
        );
        assert_eq!(m.operands[1].location.offset, 64);
        assert_eq!(m.operands[1].location.length, 2);
        assert_eq!(m.operands[2].location.offset, 0);
        assert_eq!(m.operand_values, 5i32.to_le_bytes());
        let map =
            nnaccel_uapi::sys::Mapping::map_shared(m.pools[0].fd.as_fd(), 0, 128, false).unwrap();
        let mut b = [0u8; 12];
        map.read_at(0, &mut b).unwrap();
        assert_eq!(&b[..4], &1.0f32.to_le_bytes());
        assert_eq!(&b[8..], &3.0f32.to_le_bytes());
        let mut q = [0u8; 2];
        map.read_at(64, &mut q).unwrap();
        assert_eq!(q, [7, 9]);
    }

    #[test]
    fn channel_quant_is_an_extension() {
        let j = one_operand(
            r#"{"type": "TENSOR_QUANT8_SYMM_PER_CHANNEL", "dimensions": [2, 1], "lifetime":
                "CONSTANT_COPY", "value": [1, -1], "channelQuant": {"channelDim": 0, "scales": [0.5, 0.25]}}"#,
        );
        let m = parse_model(&j).unwrap().model;
        assert_eq!(
            m.operands[0].extra_params,
            Some(SymmPerChannelQuantParams {
                scales: vec![0.5, 0.25],
                channel_dim: 0
            })
        );
        let e = err(&j.replace("\"channelDim\"", "\"dim\""));
        assert!(
            e.starts_with("operands[0].channelQuant.dim: unknown field"),
            "{e}"
        );
    }

    #[test]
    fn inputs_are_encoded_with_the_model_input_types() {
        let m = parse_model(ADD).unwrap().model;
        let v = parse_inputs(
            r#"{"inputs": [[1, 2, 3, 4.5]], "inputDimensions": [[1, 2, 2, 1]]}"#,
            &m,
        )
        .unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].element_count, 4);
        assert_eq!(v[0].dimensions, vec![1, 2, 2, 1]);
        assert_eq!(&v[0].bytes[12..], &4.5f32.to_le_bytes());
        let v = parse_inputs(r#"{"inputs": [[1], null]}"#, &m).unwrap();
        assert!(v[0].dimensions.is_empty());
        assert!(v[1].has_no_value);
        let e = parse_inputs(r#"{"inputs": [[1]], "inputDimensions": []}"#, &m)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("inputDimensions: 0 entries"), "{e}");
        let e = parse_inputs(r#"{"inputs": [["x"]]}"#, &m)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("inputs[0][0]: expected a number"), "{e}");
        let e = parse_inputs(r#"{"input": []}"#, &m)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("input: unknown field"), "{e}");
        // Quantized inputs are range checked.
        let q = parse_model(&ADD.replace(
            r#"{"type": "TENSOR_FLOAT32", "dimensions": [1, 2, 2, 1], "lifetime": "MODEL_INPUT"}"#,
            r#"{"type": "TENSOR_QUANT8_ASYMM", "dimensions": [4], "scale": 1, "lifetime": "MODEL_INPUT"}"#,
        ))
        .unwrap()
        .model;
        assert_eq!(
            parse_inputs(r#"{"inputs": [[0, 255]]}"#, &q).unwrap()[0].bytes,
            vec![0, 255]
        );
        assert!(parse_inputs(r#"{"inputs": [[256]]}"#, &q).is_err());
    }

    #[test]
    fn int32_and_bool8_inputs_and_zero_sized_values_are_encoded() {
        let m = parse_model(
            r#"{"version": 1, "operands": [
                {"type": "TENSOR_INT32", "dimensions": [2], "lifetime": "MODEL_INPUT"},
                {"type": "TENSOR_BOOL8", "dimensions": [3], "lifetime": "MODEL_INPUT"},
                {"type": "TENSOR_FLOAT32", "dimensions": [0, 2], "lifetime": "MODEL_INPUT"},
                {"type": "TENSOR_FLOAT32", "lifetime": "NO_VALUE"}
              ], "operations": [], "inputIndexes": [0, 1, 2], "outputIndexes": []}"#,
        )
        .unwrap()
        .model;
        // An omitted optional operand: NO_VALUE, no location.
        assert_eq!(m.operands[3].lifetime, OperandLifetime::NoValue);
        assert_eq!(m.operands[3].location, DataLocation::default());
        let v = parse_inputs(
            r#"{"inputs": [[-1, 2147483647], [true, 0, 1], []],
                "inputDimensions": [[], [], [0, 2]]}"#,
            &m,
        )
        .unwrap();
        let int32: Vec<u8> = [(-1i32).to_le_bytes(), i32::MAX.to_le_bytes()].concat();
        assert_eq!(v[0].bytes, int32);
        assert_eq!(v[1].bytes, vec![1, 0, 1]);
        // A zero-sized input: no values, no bytes, its dimensions kept for the driver.
        assert_eq!((v[2].element_count, v[2].bytes.len()), (0, 0));
        assert_eq!(v[2].dimensions, vec![0, 2]);
        assert!(!v[2].has_no_value);
        assert!(parse_inputs(r#"{"inputs": [[2147483648], [], []]}"#, &m).is_err());
        assert!(parse_inputs(r#"{"inputs": [[0], [2], []]}"#, &m).is_err());
        // A zero-sized output decodes to no values.
        assert!(output_values(OperandType::TensorFloat32, &[]).is_empty());
        assert_eq!(
            output_values(OperandType::TensorInt32, &int32),
            vec![Value::from(-1), Value::from(i32::MAX)]
        );
    }

    #[test]
    fn files_are_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("nnaccel-modelfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.json");
        std::fs::write(&p, "{\"version\": 1").unwrap();
        let e = load_model(&p).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: malformed JSON", p.display())),
            "{e}"
        );
        let e = load_model(&dir.join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.json: cannot read"), "{e}");
        std::fs::write(&p, ADD.replace("\"INT32\"", "\"I32\"")).unwrap();
        let e = load_model(&p).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: operands[2].type", p.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn outputs_decode_per_type() {
        let f: Vec<u8> = [0.1f32, -2.0, f32::NAN]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            output_values(OperandType::TensorFloat32, &f),
            vec![Value::from(0.1), Value::from(-2.0), Value::Null]
        );
        assert_eq!(
            serde_json::to_string(&output_values(OperandType::TensorFloat32, &f)).unwrap(),
            "[0.1,-2.0,null]"
        );
        assert_eq!(
            output_values(OperandType::TensorQuant8Asymm, &[0, 255]),
            vec![Value::from(0), Value::from(255)]
        );
        assert_eq!(
            output_values(OperandType::TensorQuant8AsymmSigned, &[0xff]),
            vec![Value::from(-1)]
        );
        assert_eq!(
            output_values(OperandType::TensorFloat16, &[0x00, 0x3c]),
            vec![Value::from(1.0)]
        );
        assert_eq!(
            output_values(OperandType::TensorInt32, &(-5i32).to_le_bytes()),
            vec![Value::from(-5)]
        );
        assert_eq!(
            output_values(OperandType::TensorBool8, &[0, 3]),
            vec![Value::from(0), Value::from(1)]
        );
    }

    #[test]
    fn a_duplicate_key_is_refused_with_its_path() {
        let e = err(&ADD.replace("\"version\": 1,", "\"version\": 1, \"version\": 1,"));
        assert!(
            e.starts_with("version: duplicate key \"version\" at line"),
            "{e}"
        );
        let e = err(&ADD.replace(
            "{\"type\": \"ADD\",",
            "{\"type\": \"MUL\", \"type\": \"ADD\",",
        ));
        assert!(
            e.starts_with("operations[0].type: duplicate key \"type\""),
            "{e}"
        );
        let e = err(&one_operand(
            r#"{"type": "TENSOR_QUANT8_SYMM_PER_CHANNEL", "dimensions": [1], "lifetime":
                "CONSTANT_COPY", "value": [1],
                "channelQuant": {"channelDim": 0, "scales": [0.5], "channelDim": 0}}"#,
        ));
        assert!(
            e.starts_with("operands[0].channelQuant.channelDim: duplicate key"),
            "{e}"
        );
        let m = parse_model(ADD).unwrap().model;
        let e = parse_inputs(
            r#"{"inputs": [[1, 2, 3, 4]], "inputs": [[5, 6, 7, 8]]}"#,
            &m,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("inputs: duplicate key \"inputs\""), "{e}");
        // The same key in two different objects is fine.
        assert!(parse_inputs(r#"{"inputs": [[1, 2, 3, 4]]}"#, &m).is_ok());
    }

    #[test]
    fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = err(&deep);
        assert!(e.starts_with("malformed JSON at line 1"), "{e}");
        assert!(e.contains("recursion limit"), "{e}");
    }

    #[test]
    fn only_bounded_regular_files_are_read() {
        let dir =
            std::env::temp_dir().join(format!("nnaccel-modelfile-kinds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (path, want) in [
            (PathBuf::from("/dev/zero"), "a character device"),
            (dir.clone(), "a directory"),
        ] {
            let e = load_model(&path).unwrap_err().to_string();
            assert!(e.contains(want), "{}: {e}", path.display());
        }
        // A FIFO with no writer: refused at once, never waited on.
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let start = std::time::Instant::now();
        let e = load_model(&fifo).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        // A sparse file past the limit: refused by its size, nothing read.
        let big = dir.join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_FILE_BYTES + 1)
            .unwrap();
        let e = load_model(&big).unwrap_err().to_string();
        assert!(e.contains("more than the limit"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // --- referenced subgraphs (version 2) -----------------------------------------------------

    /// Main: a SUBGRAPH operand naming subgraph `main_ref`; one referenced subgraph (a RELU)
    /// with a CONSTANT_COPY INT32 `7` and a CONSTANT_REFERENCE `[4]` of 0.5s.
    fn with_subgraph(version: u32, main_ref: &str) -> String {
        format!(
            r#"{{"version": {version},
              "operands": [
                {{"type": "INT32", "lifetime": "CONSTANT_COPY", "value": [3]}},
                {{"type": "SUBGRAPH", "lifetime": "SUBGRAPH", {main_ref}}}
              ],
              "operations": [], "inputIndexes": [], "outputIndexes": [],
              "referenced": [
                {{"operands": [
                   {{"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "SUBGRAPH_INPUT"}},
                   {{"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "SUBGRAPH_OUTPUT"}},
                   {{"type": "INT32", "lifetime": "CONSTANT_COPY", "value": [7]}},
                   {{"type": "TENSOR_FLOAT32", "dimensions": [4], "lifetime": "CONSTANT_REFERENCE",
                     "value": [0.5, 0.5, 0.5, 0.5]}}
                 ],
                 "operations": [{{"type": "RELU", "inputs": [0], "outputs": [1]}}],
                 "inputIndexes": [0], "outputIndexes": [1]}}
              ]}}"#
        )
    }

    #[test]
    fn referenced_subgraphs_parse_with_their_constants() {
        let m = parse_model(&with_subgraph(2, r#""subgraph": 0"#))
            .unwrap()
            .model;
        assert_eq!(m.operands[1].operand_type, OperandType::Subgraph);
        assert_eq!(m.operands[1].lifetime, OperandLifetime::Subgraph);
        assert_eq!(
            m.operands[1].location,
            DataLocation {
                pool_index: 0,
                offset: 0,
                length: 0,
                padding: 0
            }
        );
        assert_eq!(m.referenced.len(), 1);
        let s = &m.referenced[0];
        assert_eq!(s.input_indexes, vec![0]);
        assert_eq!(s.output_indexes, vec![1]);
        assert_eq!(s.operations[0].operation_type, OperationType::Relu);
        // Main's constant at 0, the subgraph's at the next 4-byte boundary, same buffer.
        assert_eq!(m.operands[0].location.offset, 0);
        let c = s.operands[2].location;
        assert_eq!((c.pool_index, c.offset, c.length), (0, 4, 4));
        assert_eq!(m.operand_values, [3, 0, 0, 0, 7, 0, 0, 0]);
        // The CONSTANT_REFERENCE went to the one shared pool.
        let r = s.operands[3].location;
        assert_eq!((r.pool_index, r.offset, r.length), (0, 0, 16));
        assert_eq!(m.pools.len(), 1);
        let pool = nnaccel_hal::MappedPool::map_constants(&m.pools[0]).unwrap();
        assert_eq!(pool.read(0, 4).unwrap(), 0.5f32.to_le_bytes());
    }

    #[test]
    fn a_subgraph_index_out_of_range_is_rejected_with_its_path() {
        let e = err(&with_subgraph(2, r#""subgraph": 1"#));
        assert!(
            e.starts_with("operands[1].subgraph: names referenced subgraph 1, but the file has 1"),
            "{e}"
        );
        let j = with_subgraph(2, r#""subgraph": 0"#).replace(
            r#""lifetime": "CONSTANT_COPY", "value": [7]}"#,
            r#""lifetime": "CONSTANT_COPY", "value": [7]},
               {"type": "SUBGRAPH", "lifetime": "SUBGRAPH", "subgraph": 4}"#,
        );
        let e = err(&j);
        assert!(
            e.starts_with("referenced[0].operands[3].subgraph: names referenced subgraph 4"),
            "{e}"
        );
        let e = err(&with_subgraph(2, r#""subgraph": -1"#));
        assert!(e.starts_with("operands[1].subgraph:"), "{e}");
    }

    #[test]
    fn a_subgraph_operand_needs_its_index_and_only_it_has_one() {
        let e = err(&with_subgraph(2, r#""dimensions": []"#));
        assert!(
            e.starts_with("operands[1]: a SUBGRAPH operand needs a \"subgraph\""),
            "{e}"
        );
        let e = err(&with_subgraph(2, r#""subgraph": 0"#).replace(
            r#""lifetime": "CONSTANT_COPY", "value": [3]"#,
            r#""lifetime": "CONSTANT_COPY", "value": [3], "subgraph": 0"#,
        ));
        assert!(
            e.starts_with("operands[0].subgraph: only an operand of lifetime SUBGRAPH"),
            "{e}"
        );
    }

    #[test]
    fn version_1_files_have_no_subgraphs() {
        let e = err(&one_operand(
            r#"{"type": "SUBGRAPH", "lifetime": "SUBGRAPH", "subgraph": 0}"#,
        ));
        assert!(
            e.starts_with("operands[0].lifetime: lifetime SUBGRAPH needs \"version\": 2"),
            "{e}"
        );
        let e = err(&with_subgraph(1, r#""subgraph": 0"#));
        assert!(
            e.starts_with("referenced: referenced subgraphs need \"version\": 2"),
            "{e}"
        );
        let j = ADD.replace(
            "\"relaxComputationFloat32toFloat16\": false",
            "\"relaxComputationFloat32toFloat16\": false, \"referenced\": []",
        );
        assert!(
            err(&j).starts_with("referenced: referenced subgraphs need \"version\": 2"),
            "{}",
            err(&j)
        );
        // Version 2 reads a version 1 file's content the same way.
        let v2 = parse_model(&ADD.replace("\"version\": 1", "\"version\": 2"))
            .unwrap()
            .model;
        let v1 = parse_model(ADD).unwrap().model;
        assert_eq!(v2.operands, v1.operands);
        assert_eq!(v2.operand_values, v1.operand_values);
        assert!(v2.referenced.is_empty());
    }

    #[test]
    fn a_referenced_subgraph_is_parsed_as_strictly_as_the_main_one() {
        let base = with_subgraph(2, r#""subgraph": 0"#);
        let e = err(&base.replace(r#""inputIndexes": [0], "outputIndexes": [1]"#, r#""inputIndexes": [0], "outputIndexes": [1], "relaxComputationFloat32toFloat16": true"#));
        assert!(
            e.starts_with("referenced[0].relaxComputationFloat32toFloat16: unknown field"),
            "{e}"
        );
        let e = err(&base.replace(r#""inputIndexes": [0], "#, ""));
        assert!(e.starts_with("referenced[0]"), "{e}");
        assert!(e.contains("inputIndexes"), "{e}");
        let e = err(&base.replace("\"RELU\"", "\"RELU9\""));
        assert!(e.starts_with("referenced[0].operations[0].type"), "{e}");
        let e = err(&base.replace("[0.5, 0.5, 0.5, 0.5]", "[0.5]"));
        assert!(e.starts_with("referenced[0].operands[3].value"), "{e}");
        let e = err(&base.replace(r#""referenced": ["#, r#""referenced": [1, "#));
        assert!(e.starts_with("referenced[0]"), "{e}");
    }

    /// The example models with control flow (examples/README.md): they parse, pass the HAL's
    /// structural validation and convert into graphs with the subgraphs in place. (Running
    /// them needs the executor's IF and WHILE.)
    #[test]
    fn the_control_flow_examples_parse_validate_and_convert() {
        use nnaccel_cpu::Lifetime;
        use nnaccel_hal::validate::validate_model_structure;

        let m = parse_model(include_str!("../../../examples/if_select.json"))
            .unwrap()
            .model;
        let g = validate_model_structure(&m).unwrap();
        assert_eq!(g.operations[0].op, OperationType::If);
        assert_eq!(g.referenced.len(), 2);
        assert_eq!(g.operands[3].lifetime, Lifetime::Subgraph { index: 0 });
        assert_eq!(g.operands[4].lifetime, Lifetime::Subgraph { index: 1 });
        assert_eq!(g.referenced[0].operations[0].op, OperationType::Add);
        assert_eq!(g.referenced[1].operations[0].op, OperationType::Mul);
        for r in &g.referenced {
            assert_eq!((r.input_indexes.len(), r.output_indexes.len()), (2, 1));
            // Each branch's fused-activation constant, rebased into its own values.
            assert_eq!(
                r.operands[2].lifetime,
                Lifetime::ConstantCopy {
                    offset: 0,
                    length: 4
                }
            );
            assert_eq!(r.operand_values, 0i32.to_le_bytes());
            assert!(r.referenced.is_empty());
        }

        let m = parse_model(include_str!("../../../examples/while_loop.json"))
            .unwrap()
            .model;
        let g = validate_model_structure(&m).unwrap();
        assert_eq!(g.operations[0].op, OperationType::While);
        assert_eq!(g.operations[0].inputs, vec![3, 4, 1, 2, 0]);
        assert_eq!(g.referenced.len(), 4);
        let shape: Vec<(usize, usize, usize)> = g
            .referenced
            .iter()
            .map(|r| {
                (
                    r.input_indexes.len(),
                    r.output_indexes.len(),
                    r.operations.len(),
                )
            })
            .collect();
        assert_eq!(shape, [(3, 1, 1), (3, 2, 3), (2, 1, 1), (2, 1, 2)]);
        let body = &g.referenced[1];
        assert_eq!(body.operations[2].op, OperationType::If);
        assert_eq!(body.operands[7].lifetime, Lifetime::Subgraph { index: 2 });
        assert_eq!(body.operands[8].lifetime, Lifetime::Subgraph { index: 3 });
        // The body's constants 1.0, 0 and 3.0, 8-byte aligned in its own values.
        assert_eq!(
            body.operand_values,
            [
                &1.0f32.to_le_bytes()[..],
                &[0; 4],
                &0i32.to_le_bytes(),
                &[0; 4],
                &3.0f32.to_le_bytes()
            ]
            .concat()
        );
    }

    #[test]
    fn a_file_with_subgraphs_round_trips_through_the_wire() {
        let m = parse_model(include_str!("../../../examples/while_loop.json"))
            .unwrap()
            .model;
        let mut fds = crate::FdList::default();
        let bytes = crate::encode(&crate::model_to_wire(&m, &mut fds)).unwrap();
        let back = crate::model_from_wire(
            crate::decode(&bytes).unwrap(),
            &mut crate::ReceivedFds::new(vec![]),
        )
        .unwrap();
        assert_eq!(back.operands, m.operands);
        assert_eq!(back.referenced, m.referenced);
        assert_eq!(back.operand_values, m.operand_values);
    }

    /// Everything a parsed model holds, constants read out of its pool.
    fn content(m: &Model) -> (String, Vec<u8>, Vec<Vec<u8>>) {
        let pools = m
            .pools
            .iter()
            .map(|p| {
                nnaccel_hal::MappedPool::map_constants(p)
                    .unwrap()
                    .read(0, p.size as usize)
                    .unwrap()
            })
            .collect();
        (
            format!(
                "{:?} {:?} {:?} {:?} {:?} {}",
                m.operands,
                m.operations,
                m.input_indexes,
                m.output_indexes,
                m.referenced,
                m.relax_computation_float32_to_float16
            ),
            m.operand_values.clone(),
            pools,
        )
    }

    #[test]
    fn every_example_round_trips_through_the_writer() {
        for (name, json) in [
            ("add", include_str!("../../../examples/add.json")),
            ("mlp", include_str!("../../../examples/mlp.json")),
            ("cnn", include_str!("../../../examples/cnn.json")),
            ("quant", include_str!("../../../examples/quant.json")),
            (
                "slice_int8",
                include_str!("../../../examples/slice_int8.json"),
            ),
            (
                "if_select",
                include_str!("../../../examples/if_select.json"),
            ),
            (
                "while_loop",
                include_str!("../../../examples/while_loop.json"),
            ),
        ] {
            let m = parse_model(json).unwrap().model;
            let written = model_to_json(&m).unwrap();
            let back = parse_model(&written)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{written}"))
                .model;
            assert_eq!(content(&back), content(&m), "{name}");
            let version = if m.referenced.is_empty() { 1 } else { 2 };
            assert!(
                written.contains(&format!("\"version\": {version}")),
                "{name}"
            );
        }
    }

    #[test]
    fn written_values_keep_every_type_and_the_per_channel_scales() {
        let m = parse_model(&one_operand(
            r#"{"type": "TENSOR_QUANT8_SYMM_PER_CHANNEL", "dimensions": [2], "lifetime": "CONSTANT_COPY",
                "value": [-128, 127], "channelQuant": {"channelDim": 0, "scales": [0.1, 3e-7]}}"#,
        ))
        .unwrap()
        .model;
        let back = parse_model(&model_to_json(&m).unwrap()).unwrap().model;
        assert_eq!(back.operands, m.operands);
        assert_eq!(back.operand_values, m.operand_values);
        for (ty, values) in [
            ("TENSOR_FLOAT16", "[65504, -0.000061035156, 0.1]"),
            ("TENSOR_FLOAT32", "[3.4028235e38, 1e-45, 0.1]"),
            ("TENSOR_INT32", "[-2147483648, 2147483647, 0]"),
            ("TENSOR_BOOL8", "[1, 0, 1]"),
            ("TENSOR_QUANT16_ASYMM", "[0, 65535, 7]"),
        ] {
            let m = parse_model(&one_operand(&format!(
                r#"{{"type": "{ty}", "dimensions": [3], "lifetime": "CONSTANT_COPY", "value": {values}}}"#
            )))
            .unwrap()
            .model;
            let back = parse_model(&model_to_json(&m).unwrap()).unwrap().model;
            assert_eq!(back.operand_values, m.operand_values, "{ty}");
        }
    }

    #[test]
    fn a_constant_json_cannot_spell_is_a_write_error() {
        let mut m = parse_model(&one_operand(
            r#"{"type": "TENSOR_FLOAT32", "dimensions": [2], "lifetime": "CONSTANT_COPY", "value": [1, 2]}"#,
        ))
        .unwrap()
        .model;
        m.operand_values[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
        let e = model_to_json(&m).unwrap_err().to_string();
        assert!(e.starts_with("operands[0].value: a NaN"), "{e}");
        m.operands[0].location.offset = 4;
        let e = model_to_json(&m).unwrap_err().to_string();
        assert!(e.starts_with("operands[0]: the constant is outside"), "{e}");
    }
}
