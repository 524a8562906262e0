//! The networks of `scripts/models/gen.py`, shared by the model bench (`benches/models.rs`)
//! and the LiteRT agreement test (`litert.rs`): making the LiteRT venv
//! (`scripts/litert-venv.sh`) and the models (into `target/models/`), loading a model's JSON
//! with `nnaccel_protocol::modelfile` and executing it on the CPU executor in this process,
//! counting its multiply-accumulates from the shapes, and running LiteRT on the same network's
//! `.tflite` (`scripts/models/litert_run.py`, `litert_bench.py`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use nnaccel_hal::{
    ErrorStatus, ExecutionPreference, HalDevice, HalPreparedModel, MeasureTiming, Memory,
    MemoryKind, Model, OperandType, OperationType, Priority, Request, RequestArgument,
};
use nnaccel_protocol::modelfile;

use crate::SharedBuf;
use crate::service::{arg, request};

/// The repository (this crate's parent directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
}

/// Where the generated models go: `target/models/` in the repository.
pub fn models_dir() -> PathBuf {
    repo_root().join("target").join("models")
}

/// The last lines of a failed command's stderr, for an error message.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// Runs `cmd` (its stdin closed), returning its stdout, or why it failed: `what`, the exit
/// status and the last lines of stderr (piped by the caller to be seen here).
pub fn output_of(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what}: {} ({})", out.status, tail(&out.stderr)));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("{what}: output is not UTF-8"))
}

/// Makes (or finds) the LiteRT venv with `scripts/litert-venv.sh`; returns its python.
pub fn litert_venv() -> Result<PathBuf, String> {
    tflite_venv("litert")
}

/// Makes (or finds) the venv of `scripts/litert-venv.sh FLAVOUR` (`litert` or
/// `tflite-runtime`); returns its python.
pub fn tflite_venv(flavour: &str) -> Result<PathBuf, String> {
    let what = format!("scripts/litert-venv.sh {flavour}");
    let mut cmd = Command::new(repo_root().join("scripts/litert-venv.sh"));
    let out = output_of(cmd.arg(flavour).stderr(Stdio::piped()), &what)?;
    let python = PathBuf::from(out.trim());
    if python.is_file() {
        Ok(python)
    } else {
        Err(format!("{what} printed {out:?}, not a python"))
    }
}

/// The installed ai-edge-litert's version, as the venv's pip metadata says.
pub fn litert_version(python: &Path) -> Result<String, String> {
    let mut cmd = Command::new(python);
    cmd.args([
        "-c",
        "import importlib.metadata as m; print(m.version('ai-edge-litert'))",
    ])
    .stderr(Stdio::piped());
    output_of(&mut cmd, "the LiteRT version").map(|v| v.trim().to_string())
}

/// Runs `scripts/models/gen.py` with `python` for `names` into `dir` (models already up to
/// date are kept); `json_only` leaves the `.tflite` files out (a python without the wheel).
pub fn generate(python: &Path, dir: &Path, names: &[&str], json_only: bool) -> Result<(), String> {
    let mut cmd = Command::new(python);
    cmd.arg(repo_root().join("scripts/models/gen.py"))
        .arg("--out")
        .arg(dir);
    if json_only {
        cmd.arg("--json-only");
    }
    cmd.args(names).stderr(Stdio::piped());
    output_of(&mut cmd, "scripts/models/gen.py").map(drop)
}

/// The files of one generated model.
#[derive(Debug, Clone)]
pub struct Files {
    /// The nnaccel JSON model.
    pub json: PathBuf,
    /// Its inputs file.
    pub inputs: PathBuf,
    /// The same network for LiteRT.
    pub tflite: PathBuf,
    /// What gen.py says about it.
    pub meta: PathBuf,
}

impl Files {
    /// The files of model `name` in `dir`.
    pub fn new(dir: &Path, name: &str) -> Self {
        let f = |ext: &str| dir.join(format!("{name}.{ext}"));
        Self {
            json: f("json"),
            inputs: f("inputs.json"),
            tflite: f("tflite"),
            meta: f("meta.json"),
        }
    }
}

/// What gen.py wrote about a model (`NAME.meta.json`).
#[derive(Debug, Clone)]
pub struct Meta {
    /// The network (`mobilenet_v1`, `mlp_b64`, ...).
    pub network: String,
    /// `float32` or `int8`.
    pub dtype: String,
    /// Multiply-accumulates of one run, counted by gen.py from its layer list.
    pub macs: u64,
    /// Whether gen.py wrote the `.tflite` too.
    pub tflite: bool,
}

impl Meta {
    /// Reads `files.meta`.
    pub fn read(files: &Files) -> Result<Self, String> {
        let path = &files.meta;
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let field = |k: &str| {
            v.get(k)
                .ok_or_else(|| format!("{}: no field {k:?}", path.display()))
        };
        let string = |k: &str| -> Result<String, String> {
            field(k)?
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{}: {k:?} is not a string", path.display()))
        };
        Ok(Self {
            network: string("network")?,
            dtype: string("dtype")?,
            macs: field("macs")?
                .as_u64()
                .ok_or_else(|| format!("{}: \"macs\" is not a count", path.display()))?,
            tflite: field("tflite")?.as_bool().unwrap_or(false),
        })
    }
}

/// Multiply-accumulates of one execution of `model`, from its shapes: CONV_2D (output
/// elements × filter height × width × input depth), DEPTHWISE_CONV_2D (output elements ×
/// filter height × width) and FULLY_CONNECTED (output elements × input size). Other
/// operations are not counted. Operands a model names but lacks count as nothing.
pub fn macs(model: &Model) -> u64 {
    let dims = |idx: Option<&u32>| -> &[u32] {
        idx.and_then(|&i| model.operands.get(i as usize))
            .map_or(&[], |o| o.dimensions.as_slice())
    };
    let product = |d: &[u32]| d.iter().fold(1u64, |n, &x| n.saturating_mul(u64::from(x)));
    model
        .operations
        .iter()
        .map(|op| {
            let out = product(dims(op.outputs.first()));
            let filter = dims(op.inputs.get(1));
            let per_output = match (op.operation_type, filter) {
                (OperationType::Conv2d, [_, h, w, depth]) => product(&[*h, *w, *depth]),
                (OperationType::DepthwiseConv2d, [_, h, w, _]) => product(&[*h, *w]),
                (OperationType::FullyConnected, [_, size]) => u64::from(*size),
                _ => 0,
            };
            out.saturating_mul(per_output)
        })
        .fold(0u64, u64::saturating_add)
}

/// Alignment of each argument in the request pool.
const ARG_ALIGN: usize = 64;

/// A generated model prepared on a driver, with a request whose arguments live in one memfd.
#[derive(Debug)]
pub struct Prepared {
    /// The model as loaded from its JSON.
    pub model: Model,
    prepared: Arc<dyn HalPreparedModel>,
    request: Request,
    buf: SharedBuf,
    /// Per output: (offset, length) in the pool.
    outputs: Vec<(usize, usize)>,
}

/// A model output read back.
#[derive(Debug, Clone)]
pub struct Output {
    /// Its operand type.
    pub ty: OperandType,
    /// Its values (FLOAT32 as is, quantized types as their raw integers).
    pub values: Vec<f64>,
}

impl Prepared {
    /// Loads `files.json` and `files.inputs`, prepares the model on `driver`, and lays out
    /// the request (inputs written, outputs sized from the model's dimensions).
    pub fn load(driver: &dyn HalDevice, files: &Files) -> Result<Self, String> {
        Self::load_with(driver, files, |_| {})
    }

    /// As [`Prepared::load`], with the model made relaxed (`relaxComputationFloat32toFloat16`)
    /// before it is prepared.
    pub fn load_relaxed(driver: &dyn HalDevice, files: &Files) -> Result<Self, String> {
        Self::load_with(driver, files, |m| {
            m.relax_computation_float32_to_float16 = true;
        })
    }

    /// As [`Prepared::load`], with `edit` applied to the model before it is prepared.
    fn load_with(
        driver: &dyn HalDevice,
        files: &Files,
        edit: impl FnOnce(&mut Model),
    ) -> Result<Self, String> {
        let mut model = modelfile::load_model(&files.json)
            .map_err(|e| e.to_string())?
            .model;
        edit(&mut model);
        let inputs = modelfile::load_inputs(&files.inputs, &model).map_err(|e| e.to_string())?;
        let prepared = driver
            .prepare_model(
                &model,
                ExecutionPreference::FastSingleAnswer,
                Priority::Medium,
                None,
            )
            .map_err(|s| format!("{}: preparing failed: {}", files.json.display(), s.name()))?;
        let mut end = 0usize;
        let mut place = |len: usize| -> Result<(usize, RequestArgument), String> {
            let offset = end.next_multiple_of(ARG_ALIGN);
            end = offset + len;
            let n =
                |v: usize| u32::try_from(v).map_err(|_| format!("request offset {v} too large"));
            Ok((offset, arg(0, n(offset)?, n(len)?)))
        };
        let mut in_args = Vec::new();
        let mut in_offsets = Vec::new();
        for input in &inputs {
            let (offset, a) = place(input.bytes.len())?;
            in_offsets.push(offset);
            in_args.push(a);
        }
        let mut outputs = Vec::new();
        let mut out_args = Vec::new();
        for &idx in &model.output_indexes {
            let o = model
                .operands
                .get(idx as usize)
                .ok_or_else(|| format!("output operand {idx} does not exist"))?;
            let len = o
                .dimensions
                .iter()
                .try_fold(o.operand_type.element_size(), |n, &d| {
                    n.checked_mul(d as usize)
                })
                .ok_or_else(|| format!("output operand {idx} is too large"))?;
            let (offset, a) = place(len)?;
            outputs.push((offset, len));
            out_args.push(a);
        }
        let buf = SharedBuf::new(end);
        for (input, &offset) in inputs.iter().zip(&in_offsets) {
            buf.map
                .write_at(offset, &input.bytes)
                .map_err(|e| e.to_string())?;
        }
        let memory = Memory {
            kind: MemoryKind::Ashmem,
            fd: Arc::new(buf.fd.try_clone().map_err(|e| e.to_string())?),
            size: buf.size(),
        };
        let request = request(in_args, out_args, &[&memory]);
        Ok(Self {
            model,
            prepared,
            request,
            buf,
            outputs,
        })
    }

    /// One synchronous execution.
    pub fn execute(&self) -> Result<(), String> {
        let r = self
            .prepared
            .execute_synchronously(&self.request, MeasureTiming::No, None);
        match r.status {
            ErrorStatus::None => Ok(()),
            s => Err(format!("the execution failed: {}", s.name())),
        }
    }

    /// Output `k` of the last execution.
    pub fn output(&self, k: usize) -> Result<Output, String> {
        let (&(offset, len), &idx) = self
            .outputs
            .get(k)
            .zip(self.model.output_indexes.get(k))
            .ok_or_else(|| format!("the model has no output {k}"))?;
        let ty = self
            .model
            .operands
            .get(idx as usize)
            .map(|o| o.operand_type)
            .ok_or_else(|| format!("output operand {idx} does not exist"))?;
        let mut bytes = vec![0u8; len];
        self.buf
            .map
            .read_at(offset, &mut bytes)
            .map_err(|e| e.to_string())?;
        let values = match ty {
            OperandType::TensorFloat32 => bytes
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            OperandType::TensorQuant8AsymmSigned => {
                bytes.iter().map(|&b| f64::from(b as i8)).collect()
            }
            OperandType::TensorQuant8Asymm => bytes.iter().map(|&b| f64::from(b)).collect(),
            other => return Err(format!("output type {other} is not read here")),
        };
        Ok(Output { ty, values })
    }
}

/// Which LiteRT kernels run (`litert_common.py`'s `--resolver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// LiteRT's default CPU path: the builtin kernels with the XNNPACK delegate.
    Default,
    /// TFLite's reference kernels (`OpResolverType.BUILTIN_REF`), no delegate.
    Reference,
}

impl Resolver {
    fn arg(self) -> &'static str {
        match self {
            Resolver::Default => "default",
            Resolver::Reference => "ref",
        }
    }
}

/// Runs `files.tflite` once on LiteRT (one thread) with `files.inputs`; returns each output's
/// values (quantized ones as raw integers).
pub fn litert_outputs(
    python: &Path,
    files: &Files,
    resolver: Resolver,
) -> Result<Vec<Vec<f64>>, String> {
    let mut cmd = Command::new(python);
    cmd.arg(repo_root().join("scripts/models/litert_run.py"))
        .arg(&files.tflite)
        .arg(&files.inputs)
        .args(["--threads", "1", "--resolver", resolver.arg()])
        .stderr(Stdio::piped());
    let out = output_of(&mut cmd, "scripts/models/litert_run.py")?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("litert_run.py's output: {e}"))?;
    let outputs = v
        .get("outputs")
        .and_then(|o| o.as_array())
        .ok_or("litert_run.py printed no \"outputs\"")?;
    outputs
        .iter()
        .map(|o| {
            o.get("data")
                .and_then(|d| d.as_array())
                .ok_or_else(|| "an output without \"data\"".to_string())?
                .iter()
                .map(|x| x.as_f64().ok_or_else(|| format!("{x} is not a number")))
                .collect()
        })
        .collect()
}

/// Times `files.tflite` on LiteRT's default CPU path at each of `threads`
/// (`litert_bench.py`: warm-up, then the median of runs filling about `seconds`, at least
/// `min_runs`); returns the medians in milliseconds, in `threads`' order.
pub fn litert_bench(
    python: &Path,
    files: &Files,
    threads: &[usize],
    seconds: f64,
    min_runs: u32,
) -> Result<Vec<f64>, String> {
    let list: Vec<String> = threads.iter().map(usize::to_string).collect();
    let mut cmd = Command::new(python);
    cmd.arg(repo_root().join("scripts/models/litert_bench.py"))
        .arg(&files.tflite)
        .arg(&files.inputs)
        .arg("--threads")
        .arg(list.join(","))
        .arg("--seconds")
        .arg(seconds.to_string())
        .arg("--min-runs")
        .arg(min_runs.to_string())
        .stderr(Stdio::piped());
    let out = output_of(&mut cmd, "scripts/models/litert_bench.py")?;
    // Lines: `threads T median_ms M`.
    let medians: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
        .collect();
    if medians.len() == threads.len() {
        Ok(medians)
    } else {
        Err(format!("litert_bench.py printed {out:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnaccel_hal::{DataLocation, Operand, OperandLifetime, Operation};

    fn op(operation_type: OperationType, inputs: &[u32], output: u32) -> Operation {
        Operation {
            operation_type,
            inputs: inputs.to_vec(),
            outputs: vec![output],
        }
    }

    fn operand(dims: &[u32]) -> Operand {
        Operand {
            operand_type: OperandType::TensorFloat32,
            dimensions: dims.to_vec(),
            scale: 0.0,
            zero_point: 0,
            lifetime: OperandLifetime::TemporaryVariable,
            location: DataLocation::default(),
            extra_params: None,
        }
    }

    #[test]
    fn macs_count_conv_depthwise_and_fully_connected_from_the_shapes() {
        // A 3x3 CONV_2D 8->16 on a 10x10 output, a 3x3 depthwise on it, a FULLY_CONNECTED
        // 1600->10, and an ADD that is not counted.
        let model = Model {
            operands: vec![
                operand(&[16, 3, 3, 8]),   // 0 conv filter
                operand(&[1, 10, 10, 16]), // 1 conv output
                operand(&[1, 3, 3, 16]),   // 2 depthwise filter
                operand(&[1, 10, 10, 16]), // 3 depthwise output
                operand(&[10, 1600]),      // 4 fc weights
                operand(&[1, 10]),         // 5 fc output
            ],
            operations: vec![
                op(OperationType::Conv2d, &[9, 0], 1),
                op(OperationType::DepthwiseConv2d, &[1, 2], 3),
                op(OperationType::FullyConnected, &[3, 4], 5),
                op(OperationType::Add, &[1, 3], 3),
            ],
            ..Model::default()
        };
        // By hand: 1600 outputs * 72 = 115200; 1600 * 9 = 14400; 10 * 1600 = 16000.
        assert_eq!(macs(&model), 115_200 + 14_400 + 16_000);
    }
}
