//! The objects a command acts on, read from the server as they are now: named
//! (`TYPE NAME...`, `TYPE/NAME...`), every object of a type (optionally `-l`), or those of
//! `-f` files, as kubectl's resource builder finds them.

use keel_api::Metadata;
use keel_client::ListParams;
use serde_json::{Map, Value};

use crate::context::{Ctx, require_name};
use crate::error::Error;
use crate::manifest;
use crate::resources::{Resource, Resources};

/// One object found.
pub struct Found<'r> {
    pub resource: &'r Resource,
    pub namespace: String,
    pub object: Value,
}

/// A found object reads as its object: `found.name()`.
impl Metadata for Found<'_> {
    fn metadata(&self) -> Option<&Map<String, Value>> {
        self.object.metadata()
    }
}

impl Found<'_> {
    /// `Deployment.apps`, `Pod`: kubectl's `GroupKind`, which it names in "not implemented"
    /// messages.
    pub fn group_kind(&self) -> String {
        match self.resource.gvr.group.as_str() {
            "" => self.resource.kind.clone(),
            group => format!("{}.{group}", self.resource.kind),
        }
    }

    /// Whether this is an `apps` Deployment, the one kind `rollout` knows.
    pub fn is_deployment(&self) -> bool {
        self.resource.gvr.group == "apps" && self.resource.kind == "Deployment"
    }
}

/// How a command names its objects.
pub struct Query<'a> {
    pub targets: &'a [String],
    pub files: &'a [String],
    pub selector: Option<&'a str>,
    /// A type without names means every object of it (`rollout restart deployment`); else
    /// a name is required unless `-l` is given.
    pub type_means_all: bool,
    /// The error when nothing is named at all (kubectl's wording differs by command).
    pub missing: &'static str,
}

/// What [`find`] found, and the errors of objects it could not read (not found...): a
/// command acts on the others and reports these after them, as kubectl does.
pub struct Finding<'r> {
    pub found: Vec<Found<'r>>,
    pub errors: Vec<Error>,
}

/// Reads the objects `q` names. Fails as a whole only when the command line itself is wrong
/// or a list fails.
pub async fn find<'r>(
    ctx: &Ctx,
    resources: &'r Resources,
    q: &Query<'_>,
) -> Result<Finding<'r>, Error> {
    let mut finding = Finding {
        found: Vec::new(),
        errors: Vec::new(),
    };
    if !q.files.is_empty() {
        for mut m in manifest::read_all(q.files)? {
            let placed = ctx
                .place(resources, &mut m)
                .and_then(|(r, ns)| Ok((r, ns, require_name(&m)?)));
            match placed {
                Ok((resource, namespace, name)) => {
                    get(ctx, resource, namespace, &name, &mut finding).await
                }
                Err(e) => finding.errors.push(e),
            }
        }
        return Ok(finding);
    }
    let selections = super::parse_selection(q.targets)?;
    if selections.is_empty() {
        return Err(Error::Usage(q.missing.into()));
    }
    for selection in selections {
        let resource = resources.resolve(&selection.resource)?;
        let namespace = ctx.namespace_of(resource);
        if !selection.names.is_empty() {
            if q.selector.is_some() {
                return Err(Error::Usage(
                    "name cannot be provided when a selector is specified".into(),
                ));
            }
            for name in &selection.names {
                get(ctx, resource, namespace.clone(), name, &mut finding).await;
            }
            continue;
        }
        if q.selector.is_none() && !q.type_means_all {
            return Err(Error::MissingName);
        }
        let params = ListParams {
            label_selector: q.selector.unwrap_or_default().to_string(),
            limit: 500,
            ..Default::default()
        };
        let list = ctx
            .client
            .list_all(&resource.gvr, &namespace, &params)
            .await?;
        finding
            .found
            .extend(list.items.into_iter().map(|object| Found {
                resource,
                namespace: namespace.clone(),
                object,
            }));
    }
    Ok(finding)
}

async fn get<'r>(
    ctx: &Ctx,
    resource: &'r Resource,
    namespace: String,
    name: &str,
    finding: &mut Finding<'r>,
) {
    match ctx.client.get(&resource.gvr, &namespace, name).await {
        Ok(object) => finding.found.push(Found {
            resource,
            namespace,
            object,
        }),
        Err(e) => finding.errors.push(e.into()),
    }
}
