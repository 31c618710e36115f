//! `connector-host context AGENT`: what an agent's container starts with.
//!
//! The env vars come from connectors: printed for a shell they are quoted so that no value
//! can ever set another variable, whether the output is `eval`ed or word-split by
//! `env -i $(...)`. Files are written under a directory opened once, segment by segment
//! without following a symbolic link, each through a temporary file renamed into place.

use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use rustix::fs::{Mode, OFlags};
use serde_json::{Map, Value};

use super::client::Client;
use super::output::{self, OutputArgs};
use super::CliError;

/// How `--env` prints the variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EnvFormat {
    /// `NAME='value'` lines for a POSIX shell (the default).
    Shell,
    /// `NAME="value"` lines for a `.env` file.
    Dotenv,
    /// One JSON object.
    Json,
}

/// `context`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  connector-host context ada                         # the env vars and files as tables (--json: the answer)\n  connector-host context ada --env                   # NAME='value' lines: eval \"$(connector-host context ada --env)\"\n  connector-host context ada --env --format dotenv   # NAME=\"value\" lines for an env file\n  connector-host context ada --write-files DIR       # writes .spring/connectors/<slug>/... under DIR (a placeholder)"
)]
pub struct ContextArgs {
    /// The agent.
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// Print the env vars for a shell (or --format) instead of the tables.
    #[arg(long)]
    pub env: bool,
    /// How `--env` prints them.
    #[arg(long, value_enum, default_value_t = EnvFormat::Shell, requires = "env")]
    pub format: EnvFormat,
    /// Write the files under DIR (created if missing) and print their paths.
    #[arg(long, value_name = "DIR")]
    pub write_files: Option<PathBuf>,
}

/// Runs `context`.
pub fn run(client: &Client, args: ContextArgs, out: OutputArgs) -> Result<(), CliError> {
    let reply = client.get(&["agents", &args.agent, "runtime-context"], &[])?;
    let body = reply.body.unwrap_or(Value::Null);
    if !args.env && args.write_files.is_none() {
        output::show(out, &body, || tables(&body));
        return Ok(());
    }
    if args.env {
        let empty = Map::new();
        let env = body["env"].as_object().unwrap_or(&empty);
        super::print_out(&render_env(env, args.format)?);
    }
    if let Some(dir) = args.write_files {
        write_files(
            &dir,
            body["files"].as_array().map_or(&[][..], Vec::as_slice),
        )?;
    }
    Ok(())
}

/// The context as two tables: env vars with their values (cut to one short line), and
/// files with their sizes.
fn tables(body: &Value) -> String {
    let env: Vec<[String; 2]> = body
        .get("env")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string);
            [output::cell(name), output::cut(&output::cell(&value), 60)]
        })
        .collect();
    let files: Vec<[String; 2]> = body
        .get("files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|f| {
            let bytes = f.get("content").and_then(Value::as_str).map_or(0, str::len);
            [output::field(f, "path"), bytes.to_string()]
        })
        .collect();
    format!(
        "{}\n{}",
        output::table(["ENV", "VALUE"], &env, "(no env vars)"),
        output::table(["FILE", "BYTES"], &files, "(no files)")
    )
}

/// The env vars in `format`. A name that is not `[A-Za-z_][A-Za-z0-9_]*` is refused.
fn render_env(env: &Map<String, Value>, format: EnvFormat) -> Result<String, CliError> {
    for name in env.keys() {
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(CliError::failed(format!(
                "refusing to print env var {name:?}: not a variable name"
            )));
        }
    }
    let value = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    Ok(match format {
        EnvFormat::Json => format!(
            "{}\n",
            super::json_for_terminals(&Value::Object(env.clone()).to_string())
        ),
        EnvFormat::Shell => env
            .iter()
            .map(|(k, v)| format!("{k}={}\n", shell_quote(&value(v))))
            .collect(),
        EnvFormat::Dotenv => env
            .iter()
            .map(|(k, v)| format!("{k}={}\n", dotenv_quote(&value(v))))
            .collect(),
    })
}

/// `value` single-quoted for a POSIX shell. A quote is written `'\''`; whitespace and any
/// control character are spliced in as `$'\xNN'`, so the line holds no whitespace at all:
/// word splitting (`env -i $(...)`) cannot cut it into a second `NAME=value`, and `eval`
/// gives back exactly `value`.
pub fn shell_quote(value: &str) -> String {
    let mut out = String::from("'");
    for c in value.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            c if c.is_whitespace() || connector_model::ids::is_terminal_control(c) => {
                let mut utf8 = [0u8; 4];
                out.push('\'');
                out.push_str("$'");
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                out.push_str("''");
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `value` double-quoted for a `.env` file (`\`, `"`, `$` and `` ` `` escaped, control
/// characters written as escapes).
fn dotenv_quote(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '\\' | '"' | '$' | '`' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if connector_model::ids::is_terminal_control(c) => {
                out.push_str(&c.escape_unicode().to_string())
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes each `{path, content}` under `dir`, never outside it and never through a link.
fn write_files(dir: &std::path::Path, files: &[Value]) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::failed(format!("cannot create {}: {e}", dir.display())))?;
    let root = rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| CliError::failed(format!("cannot open {}: {e}", dir.display())))?;
    for file in files {
        let rel = file["path"].as_str().unwrap_or_default();
        let content = file["content"].as_str().unwrap_or_default();
        write_one(&root, rel, content.as_bytes()).map_err(|why| {
            CliError::failed(format!(
                "refusing to write `{rel}` under {}: {why:#}",
                dir.display()
            ))
        })?;
        super::print_err(&format!("wrote {}", dir.join(rel).display()));
    }
    Ok(())
}

/// Writes `content` to `rel` under the directory `root`: every folder is opened (or
/// made) relative to its parent with `O_NOFOLLOW`, the file goes to a temporary name
/// first and is renamed into place, so a reader never sees half of it.
fn write_one(root: &OwnedFd, rel: &str, content: &[u8]) -> anyhow::Result<()> {
    let segments: Vec<&str> = rel.split('/').collect();
    let plain = |s: &&str| !s.is_empty() && *s != "." && *s != ".." && !s.contains('\0');
    if rel.starts_with('/') || !segments.iter().all(plain) {
        anyhow::bail!("not a plain relative path");
    }
    let Some((name, folders)) = segments.split_last() else {
        anyhow::bail!("an empty path");
    };
    let dir_flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut current: Option<OwnedFd> = None;
    for folder in folders {
        let parent = current.as_ref().unwrap_or(root).as_fd();
        match rustix::fs::mkdirat(parent, *folder, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create folder `{folder}`")),
        }
        let next = rustix::fs::openat(parent, *folder, dir_flags, Mode::empty())
            .with_context(|| format!("`{folder}` is not a folder of its own (a link?)"))?;
        current = Some(next);
    }
    let parent = current.as_ref().unwrap_or(root).as_fd();
    let temp = format!(".{name}.{}.tmp", std::process::id());
    let fd = rustix::fs::openat(
        parent,
        temp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .context("cannot create a temporary file")?;
    let mut out = std::fs::File::from(fd);
    let written = out.write_all(content).and_then(|()| out.sync_all());
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(parent, temp.as_str(), rustix::fs::AtFlags::empty());
        return Err(e).context("cannot write");
    }
    // `renameat` replaces a link named `name` itself; it never writes through it.
    rustix::fs::renameat(parent, temp.as_str(), parent, *name)
        .inspect_err(|_| {
            let _ = rustix::fs::unlinkat(parent, temp.as_str(), rustix::fs::AtFlags::empty());
        })
        .context("cannot move the file into place")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shell_lines_hold_no_whitespace_and_eval_back_exactly() {
        let quoted = shell_quote("x LD_PRELOAD=/e.so 'q'");
        assert!(!quoted.chars().any(char::is_whitespace), "{quoted}");
        // The shell gives back the value.
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("V={quoted}; printf %s \"$V\"")])
            .output()
            .expect("bash");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "x LD_PRELOAD=/e.so 'q'"
        );
        assert_eq!(shell_quote("plain"), "'plain'");
    }

    #[test]
    fn the_default_is_two_tables() {
        let body = json!({
            "env": {"SPRING_CONNECTOR_ACME_GREETING": "hi\u{1b}[2J"},
            "files": [{"path": ".spring/connectors/acme/a.txt", "content": "hello"}]
        });
        assert_eq!(
            tables(&body),
            "ENV                             VALUE\nSPRING_CONNECTOR_ACME_GREETING  hi\\u{1b}[2J\n\nFILE                           BYTES\n.spring/connectors/acme/a.txt  5\n"
        );
        assert_eq!(
            tables(&json!({"env": {}, "files": []})),
            "(no env vars)\n\n(no files)\n"
        );
    }

    #[test]
    fn env_formats_and_bad_names() {
        let env = json!({"A": "1 \"$x\"", "B_2": "y"});
        let env = env.as_object().expect("object");
        assert_eq!(
            render_env(env, EnvFormat::Dotenv).ok().as_deref(),
            Some("A=\"1 \\\"\\$x\\\"\"\nB_2=\"y\"\n")
        );
        let json: Value =
            serde_json::from_str(&render_env(env, EnvFormat::Json).unwrap_or_default())
                .expect("json");
        assert_eq!(json["B_2"], "y");
        let bad = json!({"A B": "x"});
        assert!(render_env(bad.as_object().expect("object"), EnvFormat::Shell).is_err());
    }

    #[test]
    fn files_are_written_atomically_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        let root = rustix::fs::open(
            dir.path(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .expect("open");
        write_one(&root, ".spring/connectors/acme/a.json", b"{}").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join(".spring/connectors/acme/a.json")).expect("read"),
            b"{}"
        );
        // A link already inside DIR pointing outside is not followed.
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".spring/connectors/evil"))
            .expect("symlink");
        assert!(write_one(&root, ".spring/connectors/evil/x", b"pwned").is_err());
        assert!(std::fs::read_dir(outside.path())
            .expect("outside")
            .next()
            .is_none());
        // A link as the file itself is replaced, not written through.
        let target = outside.path().join("target");
        std::fs::write(&target, b"original").expect("target");
        std::os::unix::fs::symlink(&target, dir.path().join(".spring/connectors/acme/b"))
            .expect("symlink");
        write_one(&root, ".spring/connectors/acme/b", b"new").expect("write");
        assert_eq!(std::fs::read(&target).expect("target"), b"original");
        for bad in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            assert!(write_one(&root, bad, b"x").is_err(), "{bad}");
        }
    }
}
