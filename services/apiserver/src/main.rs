//! keel-apiserver: parses flags, sets up logging, runs the server.

use clap::Parser;

/// glibc's allocator spent over a third of the server's CPU under load (many small, short-lived
/// JSON and HTTP/2 buffers across threads). jemalloc handles that pattern as well as mimalloc
/// did, and its background thread hands memory the server freed back to the OS within seconds
/// even when no request comes (mimalloc purges only while allocating: an idle server kept what a
/// burst of CRD writes had used, about 20 times their JSON). DESIGN.md, Performance decisions.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
