//! The Deployment controller (to be written).

use futures::FutureExt;
use prometheus_client::registry::Registry;

use super::{Context, SetupError, Start};

pub fn setup(_ctx: &Context, _registry: &mut Registry) -> Result<Start, SetupError> {
    Ok(Box::new(move |shutdown| {
        async move { shutdown.wait().await }.boxed()
    }))
}
