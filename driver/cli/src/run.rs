//! `nnaccelctl run`.

use std::path::PathBuf;

use nnaccel_hal::validate::{ValidationError, validate_request};
use nnaccel_hal::{ErrorStatus, MeasureTiming, Timing};
use nnaccel_protocol::modelfile::{self, output_values};
use serde::Serialize;
use serde_json::Value;

use crate::exec::{self, OutputData, PooledRequest};
use crate::{CliError, Outcome, backend};

pub const AFTER_HELP: &str = "\
With --json, stdout is exactly one JSON object:
  {\"status\": \"NONE\",
   \"outputs\": [{\"dimensions\": [1, 2, 2, 1], \"isSufficient\": true, \"data\": [2.0, 4.0, 6.0, 8.0]}],
   \"timing\": {\"timeOnDeviceUs\": 12, \"timeInDriverUs\": 30}}
Output data are flat row-major numbers: floats as numbers (null for NaN/infinity), quantized
and integer types as their raw integer values, booleans as 0/1. A timing field the driver did
not measure is 18446744073709551615 (UINT64_MAX), as in the NN HAL.

On an ErrorStatus other than NONE (preparing or executing) the same object carries that status
and no \"data\", and the exit status is 1. A malformed model or inputs file is reported on
stderr with exit status 2.";

/// Arguments of `run`.
#[derive(Debug)]
pub struct RunArgs {
    pub model: PathBuf,
    pub inputs: PathBuf,
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

fn json_result(status: ErrorStatus, outputs: &[OutputData], timing: Timing) -> JsonResult {
    let ok = status == ErrorStatus::None;
    JsonResult {
        status: status.name(),
        outputs: outputs
            .iter()
            .map(|o| JsonOutput {
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
    let loaded = modelfile::load_model(&args.model)?;
    let model = &loaded.model;
    let inputs = modelfile::load_inputs(&args.inputs, model)?;
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
            "model: {} ({} operation{}, {})",
            args.model.display(),
            model.operations.len(),
            if model.operations.len() == 1 { "" } else { "s" },
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
            &run.outputs,
            run.result.timing,
            "executing",
            why,
        );
    }
    if args.json {
        print_json(&json_result(status, &run.outputs, run.result.timing))?;
        return Ok(Outcome::Ok);
    }
    println!("status: {}", status.name());
    for (k, o) in run.outputs.iter().enumerate() {
        print_output(k, o);
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

fn report_failure(
    args: &RunArgs,
    status: ErrorStatus,
    outputs: &[OutputData],
    timing: Timing,
    what: &str,
    why: Option<ValidationError>,
) -> Result<Outcome, CliError> {
    if args.json {
        print_json(&json_result(status, outputs, timing))?;
    } else {
        println!("status: {} ({what})", status.name());
        for (k, o) in outputs.iter().enumerate() {
            println!(
                "output {k}: {} {:?}{}",
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

fn print_output(k: usize, o: &OutputData) {
    let quant = if o.ty.is_quantized() {
        format!(" scale {} zeroPoint {} (raw values)", o.scale, o.zero_point)
    } else {
        String::new()
    };
    println!("output {k}: {} {:?}{quant}", o.ty, o.dimensions);
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
