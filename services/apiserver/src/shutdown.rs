//! The signals that stop the server: the first SIGTERM (or Ctrl-C) starts a graceful shutdown,
//! a second one cuts it short (as Kubernetes' API server does).

/// SIGTERM and Ctrl-C, received as often as they come.
pub struct Signals {
    /// `None` where SIGTERM cannot be listened for (not Unix, or the handler could not be
    /// installed): Ctrl-C only.
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening now, so that no signal sent from here on is missed.
    pub fn new() -> Signals {
        Signals {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    /// Resolves at the next SIGTERM or Ctrl-C.
    pub async fn next(&mut self) {
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
        if tokio::signal::ctrl_c().await.is_err() {
            // No way to be told: run until killed.
            std::future::pending::<()>().await;
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}
