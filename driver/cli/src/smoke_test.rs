//! A smoke test of the `nnaccelctl` executable. Being an integration test of this package, it
//! also makes `cargo test` build that executable (`target/<profile>/nnaccelctl`), which the
//! end-to-end tests in `tests/nnaccelctl.rs` run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

const CTL: &str = env!("CARGO_BIN_EXE_nnaccelctl");

#[test]
fn help_and_a_cpu_run_work() {
    let help = Command::new(CTL).arg("--help").output().unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("Exit status"));
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let out = Command::new(CTL)
        .arg("run")
        .arg(examples.join("add.json"))
        .arg("--inputs")
        .arg(examples.join("add.inputs.json"))
        .args(["--cpu", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(r#"{"status":"NONE","outputs":[{"dimensions":[1,2,2,1],"isSufficient":true,"data":[2.0,4.0,6.0,8.0]}],"timing":{"timeOnDeviceUs":"#),
        "{stdout}"
    );
}
