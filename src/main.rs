//! The `llamatap` binary: parse flags, load config, start telemetry, build the
//! Pingora server, run. Every startup failure is one line and a non-zero exit.
//!
//! Try it: `llamatap --upstream http://127.0.0.1:8081` then
//! `curl -N 127.0.0.1:8080/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"stream":true}'`

use std::process::ExitCode;

use clap::Parser;
use llamatap::cli::Cli;
use llamatap::config::Config;
use llamatap::server;

/// jemalloc: less CPU per allocation than glibc's malloc on the per-chunk
/// path, and no allocator headers written into untouched buffer pages.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(path) = &cli.check_config {
        return match Config::load(Some(path), &cli.overrides()) {
            Ok(_) => {
                eprintln!("{}: ok", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        };
    }
    let config = match Config::load(cli.config.as_deref(), &cli.overrides()) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    llamatap_telemetry::logs::init();
    match server::run(config, &cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("llamatap: {e}");
    ExitCode::from(2)
}
