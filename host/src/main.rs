//! `connector-host`: the command line of the host. See `connector-host --help`.

use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use connector_host::cli::{self, Cli, CliError, Command};
use connector_host::config::HostConfig;
use connector_trace::export::{Exporting, SetupError};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// mimalloc rather than glibc's allocator: a tool call or a webhook delivery makes
/// hundreds of short-lived allocations (HTTP, JSON, a fresh guest store), and glibc's
/// `malloc`/`free` were 8-10 % of the host's CPU under load. Measured in one process with
/// the host's HTTP load bench, same minutes: HTTP tool calls 39-42k -> 46-48k/s, durable
/// SQLite webhooks 6.9-7.0k -> 7.1-7.5k/s. Guests' linear memories are not affected: they
/// live in the instance pool's own mappings.
///
/// Built with `no_thp`: mimalloc would otherwise ask for transparent huge pages on its
/// regions (`MADV_HUGEPAGE`), and every first touch of one has the kernel zero 2 MiB.
/// Opening a platform-sized directory (100k units, 1M agents) allocates and frees its
/// way to ~450 MiB, and the zeroing came to 1.2–1.4 s of system CPU against 0.4 s
/// without; tool calls under load measured the same either way.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // clap prints help, versions and usage errors itself (usage errors exit with 2).
    let Cli {
        remote,
        output,
        command,
    } = Cli::parse();
    // Only a serving host exports traces; the other commands only log.
    let exporting = match init_tracing(matches!(command, Command::Serve(_))) {
        Ok(exporting) => exporting,
        Err(e) => {
            cli::print_err(&connector_remote_answer::error_chain(&e));
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Serve(args) => serve(args),
        Command::Inspect(args) => block_on(cli::inspect::run(args, output)),
        Command::New(args) => cli::new::run(args),
        Command::Pack(args) => cli::pack::run(args),
        Command::Push(args) => block_on(cli::registry::run_push(args)),
        Command::Keygen(args) => cli::registry::run_keygen(args),
        Command::Dev(args) => block_on(cli::dev::run(args, &remote)),
        Command::Call(args) if args.is_local() => block_on(cli::call::run_local(args, output)),
        Command::Mcp(args) => cli::mcp::run(&remote, args),
        command => cli::run_remote(&remote, output, command),
    };
    // Exports the spans still queued (waiting a few seconds at most).
    drop(exporting);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cli::print_err(&e.to_string());
            ExitCode::from(e.code)
        }
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `info`). With `export`, spans go to
/// the OTLP/HTTP collector the standard `OTEL_*` variables name, if they name one
/// (CONTRACT §11); they are `connector_trace` spans, never in the log lines.
fn init_tracing(export: bool) -> Result<Option<Exporting>, SetupError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    let _ = tracing_subscriber::registry().with(logs).try_init();
    match export {
        true => Exporting::from_env(),
        false => Ok(None),
    }
}

fn serve(args: cli::ServeArgs) -> Result<(), CliError> {
    let config = HostConfig::load_from_process(args.config.as_deref(), &args.flags())
        .map_err(|e| CliError::usage(e.to_string()))?;
    tracing::debug!(?config, "configuration loaded");
    block_on(async move {
        cli::serve::run(config)
            .await
            .map_err(|e| CliError::failed(connector_remote_answer::error_chain(&*e)))
    })
}

/// Runs `future` on a multi-threaded tokio runtime built for it.
fn block_on<F>(future: F) -> Result<(), CliError>
where
    F: Future<Output = Result<(), CliError>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("could not start the async runtime: {e}")))?;
    runtime.block_on(future)
}
