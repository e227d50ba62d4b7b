//! Kubernetes' CEL, on a maintained CEL implementation (the `cel` crate): the environment
//! CRD validation rules (`x-kubernetes-validations`) are compiled in, and the rules themselves
//! (`rule`, `message`, `messageExpression`, `reason`, `fieldPath`, transition rules on
//! `oldSelf`, `optionalOldSelf`), judged on JSON values. No I/O: everything here is a pure
//! function of its inputs, tested by table.
//!
//! What is here so far (issue 44, first steps): compilation (syntax) when a CRD is written,
//! evaluation on every write, Kubernetes' words, the first of Kubernetes' libraries. The type
//! checker against the schema and the cost limits come next (docs/cel.md, the research).

mod check;
mod cost;
mod decls;
mod env;
mod format;
mod library;
mod lists;
mod net;
mod quantity;
mod rule;
mod types;

pub use env::{Binding, CompileError, Compiled, EvalError, compile, compile_declared};
pub use rule::{CostTotal, Reason, Rule, RuleError, RuleErrorKind, RuleScope, Violation};
