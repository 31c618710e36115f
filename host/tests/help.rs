//! The binary answers `--help` with every command (this integration test also makes
//! `cargo test` build the `connector-host` binary that the workspace tests drive).

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_connector-host"))
        .args(args)
        .output()
        .expect("run connector-host");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_lists_every_command() {
    let top = help(&["--help"]);
    for command in [
        "serve",
        "inspect",
        "call",
        "units",
        "agents",
        "bind",
        "unbind",
        "tools",
        "connectors",
        "messages",
        "context",
        "mcp",
        "new",
        "dev",
        "push",
        "keygen",
    ] {
        assert!(
            top.contains(command),
            "`{command}` missing from --help:\n{top}"
        );
    }
    let serve = help(&["serve", "--help"]);
    for flag in ["--config", "--listen", "--data-dir"] {
        assert!(
            serve.contains(flag),
            "`{flag}` missing from serve --help:\n{serve}"
        );
    }
}
