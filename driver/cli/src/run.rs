//! `nnaccelctl run`.

use std::path::{Path, PathBuf};

use nnaccel_hal::validate::{ValidationError, validate_request};
use nnaccel_hal::{ErrorStatus, MeasureTiming, Timing};
use nnaccel_protocol::modelfile::output_values;
use serde::Serialize;
use serde_json::Value;

use crate::exec::{self, OutputData, PooledRequest};
use crate::model::{self, LoadedModel};
use crate::npz::{self, OutputArray};
use crate::{CliError, Outcome, backend};

pub const AFTER_HELP: &str = "\
MODEL is a JSON model file or a TensorFlow Lite flatbuffer (.tflite, told by its TFL3
identifier, not its name), lowered to an NN HAL model as NNAPI's TFLite delegate maps it; an
operation with no NNAPI equivalent is an error naming it and its node index (docs/tflite.md).

INPUTS is a JSON inputs file, an .npz archive (numpy.savez) or one .npy file (the first
input). The arrays of an .npz are named by the model's input tensor names, or arr_0, arr_1, ...
in input order (all one way or all the other); each array's dtype must be the input's
(float32 <f4, float16 <f2, int32 <i4, uint8 |u1, int8 |i1, int16 <i2, bool |b1; big-endian
and Fortran-order arrays are converted), its shape the input's, where an open (-1) dimension
takes the array's. A TFLite model's state variables start from their initial values and are
not given in INPUTS.

--outputs OUT.npz writes the outputs as an .npz: arrays named by the output tensor names of a
TFLite model, arr_0, arr_1, ... for a JSON model (or when names repeat); state variables'
outputs are not written. An existing file is replaced.

With --json, stdout is exactly one JSON object:
  {\"status\": \"NONE\",
   \"outputs\": [{\"dimensions\": [1, 2, 2, 1], \"isSufficient\": true, \"data\": [2.0, 4.0, 6.0, 8.0]}],
   \"timing\": {\"timeOnDeviceUs\": 12, \"timeInDriverUs\": 30}}
Output data are flat row-major numbers: floats as numbers (null for NaN/infinity), quantized
and integer types as their raw integer values, booleans as 0/1. A TFLite model's outputs also
carry their tensor \"name\"; its state variables' outputs are left out. A timing field the
driver did not measure is 18446744073709551615 (UINT64_MAX), as in the NN HAL.

On an ErrorStatus other than NONE (preparing or executing) the same object carries that status
and no \"data\", and the exit status is 1. A malformed model or inputs file is reported on
stderr with exit status 2.";

/// Arguments of `run`.
#[derive(Debug)]
pub struct RunArgs {
    pub model: PathBuf,
    pub inputs: PathBuf,
    /// `--outputs`: an .npz to write the outputs to.
    pub outputs: Option<PathBuf>,
    pub json: bool,
    pub measure: bool,
    pub cache_dir: Option<PathBuf>,
    pub device: Option<PathBuf>,
    pub cpu: bool,
    pub service: Option<PathBuf>,
    /// `--threads`: the CPU executor's thread count in this process.
    pub threads: Option<u32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    dimensions: Vec<u32>,
    is_sufficient: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Vec<Value>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonTiming {
    time_on_device_us: u64,
    time_in_driver_us: u64,
}

#[derive(Debug, Serialize)]
struct JsonResult {
    status: &'static str,
    outputs: Vec<JsonOutput>,
    timing: JsonTiming,
}

/// The outputs shown and written: all but a TFLite model's state outputs, with their names.
fn shown<'a>(loaded: &'a LoadedModel, outputs: &'a [OutputData]) -> Vec<Shown<'a>> {
    loaded
        .user_outputs()
        .into_iter()
        .filter_map(|k| {
            Some(Shown {
                k,
                name: loaded.output_label(k),
                data: outputs.get(k)?,
            })
        })
        .collect()
}

/// One output as shown.
struct Shown<'a> {
    /// Its position among the model's outputs.
    k: usize,
    /// Its tensor name, for a TFLite model.
    name: Option<&'a str>,
    data: &'a OutputData,
}

fn json_result(status: ErrorStatus, outputs: &[Shown], timing: Timing) -> JsonResult {
    let ok = status == ErrorStatus::None;
    JsonResult {
        status: status.name(),
        outputs: outputs
            .iter()
            .map(|&Shown { name, data: o, .. }| JsonOutput {
                name: name.map(str::to_string),
                dimensions: o.dimensions.clone(),
                is_sufficient: o.is_sufficient,
                data: ok.then(|| output_values(o.ty, &o.bytes)),
            })
            .collect(),
        timing: JsonTiming {
            time_on_device_us: timing.time_on_device_us,
            time_in_driver_us: timing.time_in_driver_us,
        },
    }
}

/// `nnaccelctl run`.
pub fn run(args: &RunArgs) -> Result<Outcome, CliError> {
    let loaded = model::load(&args.model)?;
    let model = &loaded.model;
    let inputs = loaded.load_inputs(&args.inputs)?;
    exec::check_request_fits(model, &inputs)?;
    let selected = backend::select_with_threads(
        args.device.clone(),
        args.cpu,
        args.service.clone(),
        args.threads,
    )?;
    if !args.json {
        println!("backend: {}", selected.describe());
    }
    let prepared = match args.cache_dir.as_deref() {
        Some(dir) => crate::cache::prepare_in(&selected, model, dir, args.json),
        None => exec::prepare(&*selected.driver, model),
    };
    let prepared = match prepared {
        Ok(p) => p,
        Err(status) => {
            let why = selected.refusal_reason(model).map(ValidationError);
            return report_failure(
                args,
                status,
                &[],
                Timing::NOT_MEASURED,
                "preparing the model",
                why,
            );
        }
    };
    if !args.json {
        println!(
            "model: {} ({}, {})",
            args.model.display(),
            loaded.summary(),
            if prepared.runs_on_device() {
                "runs on the device"
            } else {
                "runs on the CPU executor"
            }
        );
    }
    let measure = if args.measure || args.json {
        MeasureTiming::Yes
    } else {
        MeasureTiming::No
    };
    let run = exec::execute(&*prepared, model, &inputs, measure)?;
    let status = run.result.status;
    if status != ErrorStatus::None {
        let why = (status == ErrorStatus::InvalidArgument)
            .then(|| {
                PooledRequest::new(model, &inputs, None)
                    .ok()
                    .and_then(|r| validate_request(&r.request, model).err())
            })
            .flatten();
        return report_failure(
            args,
            status,
            &shown(&loaded, &run.outputs),
            run.result.timing,
            "executing",
            why,
        );
    }
    let outputs = shown(&loaded, &run.outputs);
    if let Some(path) = &args.outputs {
        write_outputs(path, &outputs)?;
    }
    if args.json {
        print_json(&json_result(status, &outputs, run.result.timing))?;
        return Ok(Outcome::Ok);
    }
    println!("status: {}", status.name());
    for o in &outputs {
        print_output(&output_label(o.k, o.name), o.data);
    }
    for s in &loaded.state {
        if let Some(o) = run.outputs.get(s.output) {
            print_output(&format!("state '{}' after the run", s.name), o);
        }
    }
    if let Some(path) = &args.outputs {
        println!(
            "outputs written to {} ({} array{})",
            path.display(),
            outputs.len(),
            if outputs.len() == 1 { "" } else { "s" }
        );
    }
    if measure == MeasureTiming::Yes {
        println!("timing: {}", human_timing(run.result.timing));
    }
    Ok(Outcome::Ok)
}

fn print_json(result: &JsonResult) -> Result<(), CliError> {
    println!("{}", serde_json::to_string(result)?);
    Ok(())
}

/// Writes `outputs` as an .npz at `path` (replacing a file there).
fn write_outputs(path: &Path, outputs: &[Shown]) -> Result<(), CliError> {
    let names = npz::output_names(&outputs.iter().map(|o| o.name).collect::<Vec<_>>());
    let arrays: Vec<OutputArray> = outputs
        .iter()
        .zip(&names)
        .map(|(o, name)| OutputArray {
            name,
            ty: o.data.ty,
            dims: &o.data.dimensions,
            bytes: &o.data.bytes,
        })
        .collect();
    let bytes =
        npz::npz_bytes(&arrays).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    std::fs::write(path, bytes)
        .map_err(|e| CliError(format!("{}: cannot write the outputs: {e}", path.display())))
}

/// "output K" or "output K 'name'".
fn output_label(k: usize, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("output {k} '{n}'"),
        None => format!("output {k}"),
    }
}

fn report_failure(
    args: &RunArgs,
    status: ErrorStatus,
    outputs: &[Shown],
    timing: Timing,
    what: &str,
    why: Option<ValidationError>,
) -> Result<Outcome, CliError> {
    if args.json {
        print_json(&json_result(status, outputs, timing))?;
    } else {
        println!("status: {} ({what})", status.name());
        for &Shown { k, name, data: o } in outputs {
            println!(
                "{}: {} {:?}{}",
                output_label(k, name),
                o.ty,
                o.dimensions,
                if o.is_sufficient {
                    ""
                } else {
                    " (buffer too small for this shape)"
                }
            );
        }
    }
    eprintln!(
        "nnaccelctl: {} failed with {}{}",
        if what == "executing" {
            "the execution"
        } else {
            "preparing the model"
        },
        status.name(),
        why.map(|w| format!(": {}", w.0)).unwrap_or_default()
    );
    Ok(Outcome::Failed)
}

fn human_timing(t: Timing) -> String {
    let f = |us: u64| {
        if us == u64::MAX {
            "not measured".to_string()
        } else {
            format!("{us} us")
        }
    };
    format!(
        "on device {}, in driver {}",
        f(t.time_on_device_us),
        f(t.time_in_driver_us)
    )
}

fn print_output(label: &str, o: &OutputData) {
    let quant = if o.ty.is_quantized() {
        format!(" scale {} zeroPoint {} (raw values)", o.scale, o.zero_point)
    } else {
        String::new()
    };
    println!("{label}: {} {:?}{quant}", o.ty, o.dimensions);
    let values: Vec<String> = output_values(o.ty, &o.bytes)
        .iter()
        .map(|v| v.to_string())
        .collect();
    if values.is_empty() {
        println!("  (empty)");
        return;
    }
    let row = match o.dimensions.last() {
        Some(&d) if d > 0 && d <= 16 => d as usize,
        _ => 8,
    };
    let width = values.iter().map(String::len).max().unwrap_or(0);
    for chunk in values.chunks(row) {
        let line: Vec<String> = chunk.iter().map(|v| format!("{v:>width$}")).collect();
        println!("  {}", line.join("  "));
    }
}
