//! `resourceVersion`: an etcd revision written as a decimal string, and the one parser of it
//! (as Kubernetes' `APIObjectVersioner.ParseResourceVersion` lives with its storage).

use keel_api::{ApiError, FieldCause, Target};

/// A `resourceVersion` that is not a revision. Where it was found decides the error: a request
/// parameter is a `BadRequest`, a field of an object or a patch is `Invalid` (as Kubernetes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid resourceVersion {0:?}: must be a non-negative integer")]
pub struct InvalidResourceVersion(String);

/// Parses a client's `resourceVersion`: empty is none, else a decimal revision (`"0"` included:
/// its meaning, "any version", is the verb's to decide).
pub fn parse(rv: &str) -> Result<Option<i64>, InvalidResourceVersion> {
    if rv.is_empty() {
        return Ok(None);
    }
    if !rv.bytes().all(|b| b.is_ascii_digit()) {
        return Err(InvalidResourceVersion(rv.to_string()));
    }
    rv.parse::<i64>()
        .map(Some)
        .map_err(|_| InvalidResourceVersion(rv.to_string()))
}

impl InvalidResourceVersion {
    /// As a request parameter (Get, List, Watch, Delete preconditions).
    pub fn bad_request(self, t: &Target) -> ApiError {
        ApiError::bad_request(t.clone(), self.to_string())
    }

    /// As `metadata.resourceVersion` of an object or a patch; `t` names the kind.
    pub fn invalid_field(self, t: Target) -> ApiError {
        ApiError::invalid(
            t,
            vec![FieldCause::invalid(
                "metadata.resourceVersion",
                &self.0,
                "must be a non-negative integer",
            )],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Reason;

    #[test]
    fn empty_is_none_and_revisions_parse() {
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("0"), Ok(Some(0)));
        assert_eq!(parse("42"), Ok(Some(42)));
    }

    #[test]
    fn anything_but_digits_is_refused() {
        for bad in ["-1", "+5", "1e3", " 1", "abc", "99999999999999999999"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let t = Target::new("", "configmaps", "a");
        let e = parse("x").unwrap_err().bad_request(&t);
        assert_eq!(e.reason, Reason::BadRequest);
        assert_eq!(
            e.message,
            "invalid resourceVersion \"x\": must be a non-negative integer"
        );
        let e = parse("x")
            .unwrap_err()
            .invalid_field(Target::new("", "ConfigMap", "a"));
        assert_eq!(e.reason, Reason::Invalid);
        assert_eq!(e.causes[0].field, "metadata.resourceVersion");
    }
}
