//! Kubernetes' CEL, on a maintained CEL implementation (the `cel` crate): the environment
//! CRD validation rules (`x-kubernetes-validations`) are compiled in, and the rules themselves
//! (`rule`, `message`, `messageExpression`, `reason`, `fieldPath`, transition rules on
//! `oldSelf`, `optionalOldSelf`), judged on JSON values. No I/O: everything here is a pure
//! function of its inputs, tested by table.
//!
//! What is here so far (issue 44): compilation when a CRD is written, type-checked against the
//! rule's schema node (`types.rs`, `check.rs`, `decls.rs`) and held to Kubernetes' estimated
//! cost limits (`cost.rs`); evaluation on every write, charged to Kubernetes' runtime cost
//! budget ([`CostBudget`]); Kubernetes' words and libraries (docs/cel.md, the research).

/// `Val` for a type of Kubernetes' libraries held as an opaque CEL value (`net.IP`,
/// `kubernetes.authorization.Decision`): its type, equality by `PartialEq`, and cloning.
macro_rules! opaque {
    ($t:ty, $static:ident) => {
        impl cel::common::value::Val for $t {
            fn get_type(&self) -> &cel::common::types::Type {
                <Self as cel::common::value::Val>::cel_type()
            }
            fn cel_type() -> &'static cel::common::types::Type {
                &$static
            }
            fn equals(&self, other: &dyn cel::common::value::Val) -> bool {
                other.downcast_ref::<$t>().is_some_and(|o| o == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn cel::common::value::Val + 'v> {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }
        impl cel::common::value::StaticVal for $t {}
    };
}

mod authz;
mod check;
mod cost;
mod decls;
mod env;
mod format;
mod json;
mod library;
mod lists;
mod net;
mod quantity;
mod rule;
mod types;

pub use authz::{Authorize, Authorizer, Decision as AuthzDecision, Request as AuthzRequest};
pub use cel::Value;
pub use env::{Activation, Binding, CompileError, Compiled, EvalError, compile, compile_declared};
pub use rule::{
    CostBudget, CostTotal, Reason, Rule, RuleError, RuleErrorKind, RuleScope, Violation,
};
pub use types::is_identifier;
