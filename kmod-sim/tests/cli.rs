//! The `nnaccel-sim` command line. (Having an integration test here also makes
//! `cargo test --workspace` build the binary the FUSE tests in `tests/` start.)

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnaccel-sim"))
}

#[test]
fn help_names_every_option() {
    let out = sim().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--path",
        "--demo",
        "--device-memory",
        "--max-bo-size",
        "--max-bos",
        "--wait-mode",
        "--threads",
    ] {
        assert!(text.contains(opt), "--help lacks {opt}:\n{text}");
    }
}

#[test]
fn demo_runs_jobs_and_checks_their_results() {
    let out = sim().arg("--demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("SUBMIT+WAIT"), "{stdout}");
    assert!(
        stdout.contains("1000 jobs, every result checked"),
        "{stdout}"
    );
}

#[test]
fn path_and_demo_together_are_a_usage_error() {
    let out = sim().args(["--demo", "--path", "/tmp/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn no_mode_is_a_usage_error() {
    let out = sim().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--path"));
}

#[test]
fn a_path_that_is_a_directory_is_refused_clearly() {
    let dir = std::env::temp_dir().join(format!("nnaccel-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = sim().arg("--path").arg(&dir).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
}
