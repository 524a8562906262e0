//! `nnaccelctl import MODEL.tflite -o MODEL.json`: a TFLite model lowered and written as an
//! nnaccel JSON model file.

use std::io::Write;
use std::path::Path;

use nnaccel_protocol::modelfile;

use crate::model;
use crate::{CliError, Outcome};

pub const AFTER_HELP: &str = "\
The JSON model is the NN HAL model `nnaccelctl run MODEL.tflite` prepares: the same
operations, operands and constants (version 1 of the format, 2 with control flow), so running
it gives the same outputs. JSON has no tensor names: the lines printed say which model input
and output each TFLite tensor became, and an inputs file for the JSON model gives them in that
order (an .npz as arr_0, arr_1, ...). A TFLite state variable becomes an ordinary input and
output of the JSON model (the last ones); its initial value is not in the JSON file.

OUTPUT is not replaced unless --force is given: an existing file is an error (exit 2), so a
typo cannot overwrite a model. The file is written completely or not at all.";

/// `nnaccelctl import`.
pub fn import(model_path: &Path, output: &Path, force: bool) -> Result<Outcome, CliError> {
    if !model::is_tflite(model_path) {
        return Err(CliError(format!(
            "{}: not a TFLite flatbuffer (no TFL3 file identifier at bytes 4..8); import \
             reads .tflite files",
            model_path.display()
        )));
    }
    if !force && output.exists() {
        return Err(exists(output));
    }
    let loaded = model::load(model_path)?;
    let json = modelfile::model_to_json(&loaded.model).map_err(|e| {
        CliError(format!(
            "{}: cannot be written as JSON: {e}",
            output.display()
        ))
    })?;
    write_new(output, json.as_bytes(), force)?;
    println!(
        "imported {} ({}) to {}",
        model_path.display(),
        loaded.summary(),
        output.display()
    );
    loaded.print_ports();
    if !loaded.state.is_empty() {
        println!(
            "the JSON model has no initial values: an inputs file for it gives the state \
             inputs too (the last ones)"
        );
    }
    Ok(Outcome::Ok)
}

fn exists(output: &Path) -> CliError {
    CliError(format!(
        "{}: exists; give --force to replace it",
        output.display()
    ))
}

/// Writes `bytes` to a temporary file beside `output` and renames it there: a reader never
/// sees half a model. Without `force`, the rename does not replace a file that appeared
/// meanwhile (the link fails instead).
fn write_new(output: &Path, bytes: &[u8], force: bool) -> Result<(), CliError> {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let fail = |what: &str, e: std::io::Error| {
        CliError(format!("{}: cannot {what}: {e}", output.display()))
    };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        output
            .file_name()
            .map_or("model".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| fail("create a temporary file beside it", e))?;
        file.write_all(bytes).map_err(|e| fail("write", e))?;
        file.sync_all().map_err(|e| fail("write", e))?;
        if force {
            std::fs::rename(&tmp, output).map_err(|e| fail("write", e))
        } else {
            std::fs::hard_link(&tmp, output).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => exists(output),
                _ => fail("write", e),
            })
        }
    })();
    // After a rename there is nothing left to remove; otherwise the temporary file goes.
    let _ = std::fs::remove_file(&tmp);
    result
}
