//! keel-apiserver: parses flags, sets up logging, runs the server.

use clap::Parser;

/// glibc's allocator spent over a third of the server's CPU under load (many small, short-lived
/// JSON and HTTP/2 buffers across threads); mimalloc handles that pattern far better.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = keel_apiserver::Config::parse();
    match keel_apiserver::run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-apiserver: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
