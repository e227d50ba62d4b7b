//! keel-controller-manager: parses flags, sets up logging, runs the controllers.

use clap::Parser;

/// The same allocator as the API server: many small, short-lived JSON values across threads.
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
    let config = keel_controller_manager::Config::parse();
    match keel_controller_manager::run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-controller-manager: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
