//! One signal that tells a part of the controller-manager to stop (on SIGTERM).

use tokio::sync::watch;

/// Cheap to clone; [`Shutdown::wait`] resolves once [`ShutdownTrigger::trigger`] is called (or
/// the trigger is dropped).
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub struct ShutdownTrigger(watch::Sender<bool>);

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    pub async fn wait(mut self) {
        // An error means the trigger is gone: that is a shutdown too.
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }
}
