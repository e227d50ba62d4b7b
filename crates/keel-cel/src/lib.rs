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
