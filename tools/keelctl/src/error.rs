//! keelctl's one error type, and how each error reads on stderr and ends the process.
//!
//! The wording follows kubectl, so that scripts and people used to it recognise the messages:
//! `Error from server (Conflict): ...` for refusals by the server, `error: ...` for the rest.

use keel_client::{ApiError, Reason};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server refused a request.
    #[error("Error from server ({reason:?}): {message}", reason = .0.reason, message = .0.message)]
    Api(ApiError),

    /// The server refused a request about an object read from a file; kubectl names the file
    /// and the step (`error when replacing "nginx.yaml": ...`).
    #[error(
        "Error from server ({reason:?}): error when {action} {source_name:?}: {message}",
        reason = .error.reason,
        message = .error.message
    )]
    ApiFor {
        action: &'static str,
        source_name: String,
        error: ApiError,
    },

    /// No API server answered: the address is wrong or the server is down.
    #[error("Unable to connect to the server: {0}")]
    Unreachable(String),

    /// A connection that cannot be set up as given (a malformed certificate, an https server
    /// without a CA): nothing was sent.
    #[error("error: {0}")]
    Connection(String),

    /// A kubeconfig that cannot be used: the file and what is wrong.
    #[error("error: kubeconfig: {0}")]
    Kubeconfig(String),

    #[error("error: the path {0:?} does not exist")]
    PathNotFound(String),

    #[error("error: cannot read {path:?}: {error}")]
    Read { path: String, error: std::io::Error },

    /// A file is neither YAML nor JSON; `line` is 1-based, in the file.
    #[error("error: error parsing {source_name}: {}{message}", line_prefix(*.line))]
    Parse {
        source_name: String,
        line: Option<u64>,
        message: String,
    },

    /// A document of a file is not an object with `apiVersion` and `kind`.
    #[error("error: unable to decode {source_name:?}: {message}")]
    Decode {
        source_name: String,
        message: String,
    },

    /// No `-f` file held any object.
    #[error("error: no objects passed to {0}")]
    NoObjects(&'static str),

    #[error("error: the server doesn't have a resource type {0:?} (see \"keelctl api-resources\")")]
    UnknownResource(String),

    #[error(
        "error: resource mapping not found for name: {name:?} namespace: {namespace:?} from {source_name:?}: no matches for kind {kind:?} in version {api_version:?}"
    )]
    NoKindMatch {
        name: String,
        namespace: String,
        source_name: String,
        kind: String,
        api_version: String,
    },

    /// A command that acts on named objects was given a resource type and no name.
    #[error("error: resource(s) were provided, but no name was specified")]
    MissingName,

    /// An object of a file has no `metadata.name` (create may still take it: the server
    /// decides; the other verbs need the name to find the object).
    #[error("error: the object in {source_name:?} (document {document}) has no metadata.name")]
    MissingObjectName {
        source_name: String,
        document: usize,
    },

    #[error(
        "error: the namespace from the provided object {object:?} does not match the namespace {flag:?}. You must pass '--namespace={object}' to perform this operation."
    )]
    NamespaceMismatch { object: String, flag: String },

    /// The command line is well-formed for clap but not for the command.
    #[error("error: {0}")]
    Usage(String),

    /// `set image` named a container the object does not have.
    #[error("error: unable to find container named {0:?}")]
    ContainerNotFound(String),

    /// `apply --server-side` would change fields other managers own: the server's message
    /// (`Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`), then
    /// kubectl's advice, word for word.
    #[error("error: {0}\n{APPLY_CONFLICT_ADVICE}")]
    ApplyConflict(String),

    /// A three-way or two-way patch could not be computed (a document nests too deep...).
    #[error("error: cannot compute the patch for {object}: {error}")]
    Patch {
        object: String,
        error: keel_patch::PatchError,
    },

    #[error("error: {0}")]
    Editor(String),

    /// `edit` failed after the user changed the object: the edited file is kept.
    #[error("{error}\nA copy of your changes has been stored to {saved:?}")]
    EditSaved { error: Box<Error>, saved: String },

    /// `delete` waited for the object to disappear and it did not in time.
    #[error("error: timed out waiting for the deletion of {0}")]
    WaitTimeout(String),

    /// `create` or `apply` waited for an object's initializers and `--timeout` passed first.
    /// The object exists, uninitialized: is its initializer running? (`keelctl get
    /// --include-uninitialized -o yaml` shows `metadata.initializers.pending`.)
    #[error("error: timed out waiting for the condition")]
    InitializationTimeout,

    /// `create` or `apply` waited for an object's initializers and it was deleted first: an
    /// initializer with `failurePolicy: Fail` did not finish in its timeout (the API server
    /// records an Event), or someone deleted it. `0` is `pod "myapp-pod"`.
    #[error("error: {0} was deleted before it was initialized")]
    DeletedBeforeInitialized(String),

    /// A rollout command refused or failed, in kubectl's words.
    #[error("error: {0}")]
    Rollout(#[from] crate::rollout::RolloutError),

    /// `rollout undo`: the server refused the patch (a conflict: the Deployment changed since
    /// it was read; run the command again).
    #[error("error: failed restoring revision {revision}: {message}")]
    RollbackFailed { revision: i64, message: String },

    /// `rollout pause`, `resume` or `restart`: the server refused the patch.
    #[error("error: failed to patch: {0}")]
    PatchFailed(String),

    /// `scale --current-replicas` or `--resource-version` did not hold; nothing was changed.
    #[error("error: Expected {what} to be {expected}, was {actual}")]
    ScalePrecondition {
        what: &'static str,
        expected: String,
        actual: String,
    },

    /// `scale --timeout`: the object did not reach the new size in time (it was scaled).
    #[error("error: timed out waiting for {0:?} to be synced")]
    ScaleTimeout(String),

    #[error("error: {0}")]
    Io(#[from] std::io::Error),

    /// Several objects failed (apply, create, delete of a file with many documents); each is
    /// reported, as kubectl does, after the ones that succeeded.
    #[error("{}", join(.0))]
    Several(Vec<Error>),
}

/// What kubectl adds to a server-side apply's conflict (`kubectl/pkg/cmd/apply/apply.go`).
pub const APPLY_CONFLICT_ADVICE: &str = "\
Please review the fields above--they currently have other managers. Here
are the ways you can resolve this warning:
* If you intend to manage all of these fields, please re-run the apply
  command with the `--force-conflicts` flag.
* If you do not intend to manage all of the fields, please edit your
  manifest to remove references to the fields that should keep their
  current managers.
* You may co-own fields by updating your manifest to match the existing
  value; in this case, you'll become the manager if the other manager(s)
  stop managing the field (remove it from their configuration).
See https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts";

fn line_prefix(line: Option<u64>) -> String {
    line.map(|l| format!("line {l}: ")).unwrap_or_default()
}

fn join(errors: &[Error]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    /// The process exit status for this error: 1, as kubectl (usage errors included).
    pub fn exit_code(&self) -> u8 {
        1
    }

    /// Whether writing to stdout failed because its reader went away (`keelctl get | head`):
    /// then there is nobody to tell.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// Several errors as one; a single one as itself.
    pub fn from_many(mut errors: Vec<Error>) -> Result<(), Error> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Several(errors)),
        }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        if is_unreachable(&e) {
            return Error::Unreachable(e.message);
        }
        Error::Api(e)
    }
}

/// A server error inside kubectl's wording for a step that failed (`failed to patch: ...`);
/// a transport failure stays one.
pub fn api_within(e: ApiError, wrap: impl FnOnce(String) -> Error) -> Error {
    if is_unreachable(&e) {
        return Error::Unreachable(e.message);
    }
    wrap(e.message)
}

/// Tags a server error with the file the object came from.
pub fn api_for(action: &'static str, source_name: &str, e: ApiError) -> Error {
    if is_unreachable(&e) {
        return Error::Unreachable(e.message);
    }
    Error::ApiFor {
        action,
        source_name: source_name.to_string(),
        error: e,
    }
}

/// A transport failure, as opposed to a server that answered `ServiceUnavailable` itself
/// (etcd down): the client maps both to the same reason, but only the server's own answer
/// names an object or carries keel's wording.
fn is_unreachable(e: &ApiError) -> bool {
    const TRANSPORT: [&str; 4] = [
        "transport error",
        "tcp connect error",
        "error trying to connect",
        "dns error",
    ];
    e.reason == Reason::ServiceUnavailable
        && e.target == keel_api::Target::default()
        && !e.message.starts_with("etcd")
        && TRANSPORT.iter().any(|t| e.message.contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Target;

    #[test]
    fn server_errors_read_like_kubectl() {
        let e = ApiError::stale(Target::new("apps", "deployments", "nginx"));
        let text = api_for("replacing", "nginx.yaml", e).to_string();
        assert_eq!(
            text,
            "Error from server (Conflict): error when replacing \"nginx.yaml\": Operation cannot be fulfilled on deployments.apps \"nginx\": the object has been modified; please apply your changes to the latest version and try again"
        );
    }

    #[test]
    fn an_apply_conflict_reads_like_kubectl_with_its_advice() {
        let e = Error::ApplyConflict(
            "Apply failed with 1 conflict: conflict with \"keelctl\": .spec.replicas".into(),
        );
        let text = e.to_string();
        assert!(
            text.starts_with(
                "error: Apply failed with 1 conflict: conflict with \"keelctl\": .spec.replicas\nPlease review the fields above--they currently have other managers. Here\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\nSee https://kubernetes.io/docs/reference/using-api/server-side-apply/#conflicts"
            ),
            "{text}"
        );
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn parse_errors_name_the_file_and_line() {
        let e = Error::Parse {
            source_name: "x.yaml".into(),
            line: Some(3),
            message: "mapping values are not allowed in this context".into(),
        };
        assert_eq!(
            e.to_string(),
            "error: error parsing x.yaml: line 3: mapping values are not allowed in this context"
        );
    }

    #[test]
    fn transport_failures_are_not_server_errors() {
        let e = ApiError::new(
            Reason::ServiceUnavailable,
            Target::default(),
            "transport error",
        );
        assert!(matches!(Error::from(e), Error::Unreachable(_)));
        let etcd_down = ApiError::unavailable("etcd: tcp connect error");
        assert!(matches!(Error::from(etcd_down), Error::Api(_)));
    }
}
