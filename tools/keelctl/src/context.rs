//! What every command works with: the client, the discovered resources and the namespace rules.

use std::time::Duration;

use keel_api::Metadata;
use keel_client::{Client, ClientConfig};

use crate::error::Error;
use crate::manifest::Manifest;
use crate::resources::{Resource, Resources};

/// The namespace of namespaced objects when neither `-n` nor the file names one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The deadline of each request when `--timeout` is not given, or is 0.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection and the global flags.
pub struct Ctx {
    pub client: Client,
    /// `-n`, when given.
    pub namespace: Option<String>,
    /// The namespace when neither `-n` nor a file names one: the kubeconfig context's, else
    /// `default`.
    fallback_namespace: String,
    /// The deadline of each request, and of `delete`'s wait: `--timeout`, else 30s.
    pub timeout: Duration,
    /// `--timeout` as given. `rollout status` and `scale` wait only when it is given and not
    /// 0, as kubectl's own `--timeout` of theirs, whose default is 0 (forever, not at all).
    pub wait_timeout: Option<Duration>,
}

impl Ctx {
    pub async fn connect(
        config: ClientConfig,
        namespace: Option<String>,
        context_namespace: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<Ctx, Error> {
        let wait_timeout = timeout.filter(|t| !t.is_zero());
        let timeout = wait_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT);
        // Connecting sends nothing (connections are made lazily): its errors are ours.
        let client = Client::connect(&config.timeout(timeout))
            .await
            .map_err(|e| Error::Connection(e.message))?;
        Ok(Ctx {
            client,
            namespace,
            fallback_namespace: context_namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
            timeout,
            wait_timeout,
        })
    }

    /// The namespace commands act in when no file names one: `-n`, else `default`.
    pub fn default_namespace(&self) -> &str {
        self.namespace
            .as_deref()
            .unwrap_or(&self.fallback_namespace)
    }

    /// The served resources (keel-client fails over to the next endpoint when one is down).
    pub async fn resources(&self) -> Result<Resources, Error> {
        Resources::discover(&self.client).await
    }

    /// The namespace of objects named on the command line: `-n`, else `default`; "" for
    /// cluster-scoped resources.
    pub fn namespace_of(&self, resource: &Resource) -> String {
        if !resource.namespaced {
            return String::new();
        }
        self.namespace
            .clone()
            .unwrap_or_else(|| self.fallback_namespace.clone())
    }

    /// The namespace of an object from a file: its own, else `-n`, else `default`; a file
    /// and a `-n` that disagree are refused, as kubectl refuses them.
    pub fn namespace_for(&self, resource: &Resource, m: &Manifest) -> Result<String, Error> {
        if !resource.namespaced {
            return Ok(String::new());
        }
        match (m.namespace(), &self.namespace) {
            ("", _) => Ok(self.namespace_of(resource)),
            (own, Some(flag)) if own != flag => Err(Error::NamespaceMismatch {
                object: own.to_string(),
                flag: flag.clone(),
            }),
            (own, _) => Ok(own.to_string()),
        }
    }

    /// The resource of an object from a file, and its namespace; the object gets the
    /// namespace written into it, as kubectl does before it sends (and records) it.
    pub fn place<'r>(
        &self,
        resources: &'r Resources,
        m: &mut Manifest,
    ) -> Result<(&'r Resource, String), Error> {
        let resource = resources
            .for_kind(m.api_version(), m.kind())
            .ok_or_else(|| Error::NoKindMatch {
                name: m.name().to_string(),
                namespace: m.namespace().to_string(),
                source_name: m.source.clone(),
                kind: m.kind().to_string(),
                api_version: m.api_version().to_string(),
            })?;
        let namespace = self.namespace_for(resource, m)?;
        if resource.namespaced {
            set_namespace(&mut m.object, &namespace);
        }
        Ok((resource, namespace))
    }
}

/// Writes `metadata.namespace` (creating `metadata`); a non-object is left for the server
/// to refuse.
fn set_namespace(object: &mut serde_json::Value, namespace: &str) {
    let metadata = object.as_object_mut().and_then(|o| {
        o.entry("metadata")
            .or_insert_with(|| serde_json::Value::Object(Default::default()))
            .as_object_mut()
    });
    if let Some(metadata) = metadata {
        metadata.insert("namespace".into(), namespace.into());
    }
}

/// Requires `metadata.name` of an object read from a file.
pub fn require_name(m: &Manifest) -> Result<String, Error> {
    match m.name() {
        "" => Err(Error::MissingObjectName {
            source_name: m.source.clone(),
            document: m.document,
        }),
        name => Ok(name.to_string()),
    }
}
