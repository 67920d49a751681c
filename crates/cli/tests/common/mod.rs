//! Running the `peregrine` binary from integration tests.

use std::process::Command;

/// Runs `peregrine ARGS`: (success, stdout, stderr).
pub fn peregrine(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_peregrine")).args(args).output().expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}
