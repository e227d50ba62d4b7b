//! The token controller: Secrets of type `kubernetes.io/service-account-token` get their
//! ServiceAccount's token, `ca.crt` and `namespace`, as Kubernetes' `tokens-controller` fills
//! them (CI systems and Argo CD's cluster Secrets read them). The token is a legacy one (no
//! expiry) signed with `--service-account-private-key-file`, the API servers' signing key; it
//! works as long as the Secret holds it and the ServiceAccount exists.
//!
//! A Secret whose ServiceAccount does not exist (or has another uid than the Secret recorded)
//! is deleted, as Kubernetes does, once it is 10 s old: a manifest that creates the Secret
//! just before its ServiceAccount keeps it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, PatchType, Reason};
use keel_runtime::{
    Action, Controller, ObjectKey, ShardBy, Store, WatchOptions, WorkQueue, enqueue_handler,
};
use keel_token::SigningKey;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::{Context, SetupError, Start};
use crate::objects;

pub const NAME: &str = "serviceaccount-token";
pub const SECRET_TYPE: &str = "kubernetes.io/service-account-token";
pub const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
pub const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// How long a Secret may wait for its ServiceAccount to be created.
const GRACE: Duration = Duration::from_secs(10);

struct Tokens {
    client: Client,
    secrets: Store,
    accounts: Store,
    key: Arc<SigningKey>,
    root_ca: Option<Vec<u8>>,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let Some(path) = &ctx.config.service_account_private_key_file else {
        tracing::info!("{NAME}: no --service-account-private-key-file: token Secrets stay empty");
        return Ok(Box::new(|shutdown| {
            Box::pin(async move { shutdown.wait().await })
        }));
    };
    let pem = std::fs::read_to_string(path)
        .map_err(|e| SetupError::failed(NAME, format!("{}: {e}", path.display())))?;
    let key = SigningKey::from_pem(&pem)
        .map_err(|e| SetupError::failed(NAME, format!("{}: {e}", path.display())))?;
    let root_ca = match &ctx.config.root_ca_file {
        Some(p) => Some(
            std::fs::read(p)
                .map_err(|e| SetupError::failed(NAME, format!("{}: {e}", p.display())))?,
        ),
        None => None,
    };
    let secret_informer = ctx.factory.informer_with(
        &objects::secrets(),
        ctx.options(
            WatchOptions {
                field_selector: format!("type={SECRET_TYPE}"),
                ..WatchOptions::default()
            },
            ShardBy::Name,
        ),
    );
    let sa_informer = ctx
        .factory
        .informer_with(&objects::serviceaccounts(), WatchOptions::default());
    let queue = WorkQueue::default_controller_queue();
    secret_informer.add_handler(enqueue_handler(queue.clone()));
    // A ServiceAccount created or deleted wakes the Secrets that name it.
    let (secrets, q) = (secret_informer.store(), queue.clone());
    let wake = move |sa: &Value| {
        for s in secrets.by_index(keel_runtime::BY_NAMESPACE, sa.namespace()) {
            if s.annotation(NAME_ANNOTATION) == Some(sa.name())
                && let Ok(k) = ObjectKey::from_object(&s)
            {
                q.add(k);
            }
        }
    };
    let (w1, w2) = (wake.clone(), wake);
    sa_informer.add_handler(
        keel_runtime::HandlerFns::new()
            .added(move |sa| w1(sa))
            .deleted(move |sa| w2(sa)),
    );
    let this = Arc::new(Tokens {
        client: ctx.client.clone(),
        secrets: secret_informer.store(),
        accounts: sa_informer.store(),
        key: Arc::new(key),
        root_ca,
    });
    let controller = Controller::new(NAME, queue).workers(2).metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&secret_informer, &sa_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

fn decoded(secret: &Value, key: &str) -> Option<Vec<u8>> {
    secret["data"][key]
        .as_str()
        .and_then(|v| STANDARD.decode(v).ok())
}

impl Tokens {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(secret) = self.secrets.get(&key) else {
            return Ok(Action::await_change());
        };
        if secret.is_deleting() || secret["type"] != SECRET_TYPE {
            return Ok(Action::await_change());
        }
        let Some(sa_name) = secret.annotation(NAME_ANNOTATION).map(str::to_string) else {
            return Ok(Action::await_change());
        };
        let account = self
            .accounts
            .get(&ObjectKey::new(&key.namespace, &sa_name))
            .filter(|sa| {
                secret
                    .annotation(UID_ANNOTATION)
                    .is_none_or(|uid| uid.is_empty() || uid == sa.uid())
            });
        let Some(account) = account else {
            let age = secret
                .creation_timestamp()
                .and_then(objects::parse_time)
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or(GRACE);
            if age < GRACE {
                return Ok(Action::requeue(GRACE - age));
            }
            return self.delete(&secret).await;
        };
        let token_ok = decoded(&secret, "token")
            .and_then(|t| String::from_utf8(t).ok())
            .and_then(|t| self.key.verify(&t).ok())
            .is_some_and(|c| {
                c["kubernetes.io/serviceaccount/service-account.uid"] == account.uid()
                    && c["kubernetes.io/serviceaccount/secret.name"] == secret.name()
            });
        let ca_ok = self
            .root_ca
            .as_ref()
            .is_none_or(|ca| decoded(&secret, "ca.crt").as_ref() == Some(ca));
        let ns_ok = decoded(&secret, "namespace").as_deref() == Some(key.namespace.as_bytes());
        let uid_ok = secret.annotation(UID_ANNOTATION) == Some(account.uid());
        if token_ok && ca_ok && ns_ok && uid_ok {
            return Ok(Action::await_change());
        }
        let mut data = serde_json::Map::new();
        if !token_ok {
            let claims =
                keel_token::legacy_claims(&key.namespace, &sa_name, account.uid(), secret.name());
            let token = self.key.sign(&claims).map_err(ApiError::internal)?;
            data.insert("token".into(), json!(STANDARD.encode(token)));
        }
        if let Some(ca) = &self.root_ca {
            data.insert("ca.crt".into(), json!(STANDARD.encode(ca)));
        }
        data.insert("namespace".into(), json!(STANDARD.encode(&key.namespace)));
        let patch = json!({
            "metadata": {
                "resourceVersion": secret.resource_version(),
                "annotations": {UID_ANNOTATION: account.uid()},
            },
            "data": data,
        });
        match self
            .client
            .patch(
                &objects::secrets(),
                &key.namespace,
                &key.name,
                PatchType::Merge,
                &patch,
            )
            .await
        {
            Ok(_) => Ok(Action::await_change()),
            // Changed meanwhile: its event brings it back.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, secret: &Value) -> Result<Action, ApiError> {
        let params = DeleteParams {
            uid: secret.uid().to_string(),
            ..DeleteParams::default()
        };
        match self
            .client
            .delete(
                &objects::secrets(),
                secret.namespace(),
                secret.name(),
                &params,
            )
            .await
        {
            Ok(_) => Ok(Action::await_change()),
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        }
    }
}
