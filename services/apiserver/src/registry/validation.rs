//! Validation of whole objects: the metadata every object has, then the kind's own rules
//! (`kinds`), then the initializers' shape. Pure functions.

use keel_api::validation::{name_rule, object_meta};
use keel_api::{ApiError, Metadata, Object, ResourceInfo};

use super::errors::kind_target;
use super::initializers;
use super::kinds::Kind;

/// Validates a whole object of this resource: metadata, then the kind's own rules.
pub fn validate(info: &ResourceInfo, kind: &dyn Kind, obj: &Object) -> Result<(), ApiError> {
    let mut causes = object_meta(obj, info.namespaced, name_rule(info));
    kind.validate(obj, &mut causes);
    initializers::validate_pending(obj, &mut causes);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind_target(info, obj.name()), causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::kinds::testing::{info, kind};
    use serde_json::{Value, json};

    fn validate(i: &ResourceInfo, o: &Object) -> Result<(), ApiError> {
        super::validate(i, &*kind(&i.kind), o)
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn kinds_are_validated_with_field_paths() {
        let e = validate(
            &info("Pod"),
            &obj(json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "Bad"}]}})),
        )
        .unwrap_err();
        let fields: Vec<_> = e.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.containers[0].name", "spec.containers[0].image"]
        );
        let e = validate(&info("Deployment"), &obj(json!({"metadata": {"name": "d", "namespace": "x"},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                     "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})))
        .unwrap_err();
        assert_eq!(e.causes[0].field, "spec.template.metadata.labels");
        assert!(
            validate(
                &info("ConfigMap"),
                &obj(json!({"metadata": {"name": "c", "namespace": "x"}, "data": {"k": 1}}))
            )
            .is_err()
        );
    }

    fn deployment(spec: Value) -> Object {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "a"}});
        spec["template"] = json!({"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "x"}, "spec": spec}))
    }

    fn fields(e: &ApiError) -> Vec<&str> {
        e.causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn deployment_strategies_are_validated_by_field() {
        let i = info("Deployment");
        let invalid = |spec: Value| validate(&i, &deployment(spec)).unwrap_err();

        let e = invalid(json!({"strategy": {"type": "BlueGreen"}}));
        assert_eq!(fields(&e), ["spec.strategy.type"]);
        assert_eq!(e.causes[0].reason, "FieldValueNotSupported");
        assert_eq!(
            e.causes[0].message,
            "Unsupported value: \"BlueGreen\": supported values: \"Recreate\", \"RollingUpdate\""
        );

        let e = invalid(json!({"strategy": {"type": "Recreate",
            "rollingUpdate": {"maxSurge": 1}}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate"]);
        assert_eq!(e.causes[0].reason, "FieldValueForbidden");

        let e = invalid(json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate.maxUnavailable"]);
        assert!(
            e.message.contains("may not be 0 when `maxSurge` is 0"),
            "{}",
            e.message
        );

        let e = invalid(json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": -1, "maxUnavailable": "ten%"}}}));
        assert_eq!(
            fields(&e),
            [
                "spec.strategy.rollingUpdate.maxUnavailable",
                "spec.strategy.rollingUpdate.maxSurge"
            ]
        );

        let e = invalid(json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "150%"}}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate.maxUnavailable"]);

        let e = invalid(json!({"strategy": {"type": "RollingUpdate"}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate"]);

        let e = invalid(json!({"revisionHistoryLimit": -1, "minReadySeconds": 10,
            "progressDeadlineSeconds": 5}));
        assert_eq!(
            fields(&e),
            ["spec.revisionHistoryLimit", "spec.progressDeadlineSeconds"]
        );

        for ok in [
            json!({"strategy": {"type": "Recreate"}}),
            json!({"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}),
            json!({"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "100%"}}}),
        ] {
            validate(&i, &deployment(ok.clone())).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }
}
