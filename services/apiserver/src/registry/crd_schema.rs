//! Custom resources' OpenAPI v3 schemas, as Kubernetes' apiextensions-apiserver applies them: a
//! CRD version's `openAPIV3Schema` checked and compiled once ([`CrdSchema::new`]), then every
//! object of that version pruned of the fields it does not declare ([`CrdSchema::prune`]) and
//! validated ([`CrdSchema::validate`]). Pure: no I/O.
//!
//! One tree of the schema ([`Node`]) serves pruning, defaulting, validation rules and value
//! validation, so all agree on which fields are declared; value validation is kube-openapi's,
//! written out ([`checks`]). The Draft 4 meta-schema (the `jsonschema` crate) checks each
//! schema's keywords when it is compiled, on a translation of the OpenAPI dialect that is
//! dropped then.
//!
//! Schemas come from users: every walk of a schema is bounded by [`MAX_DEPTH`], which
//! [`CrdSchema::new`] enforces, and no walk of an object recurses deeper than its schema.

mod checks;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use jsonschema::ValidationError;
use keel_api::FieldCause;
use keel_patch::{Properties, Shared};
use serde_json::{Map, Value};

use checks::{Check, Patterns};

/// How deep schemas may nest (one level per `properties` entry, `items`, `additionalProperties`,
/// `allOf`/`anyOf`/`oneOf` member or `not`). A deeper schema is refused when the CRD is
/// validated, so pruning and validation never recurse further. 64 schema levels are about the
/// 128 JSON levels serde_json parses at most; real CRDs stay far below.
pub const MAX_DEPTH: usize = 64;

/// Kubernetes' schema types (`JSONSchemaProps.type`).
const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// Fields every object (and every `x-kubernetes-embedded-resource`) keeps whatever its schema.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// JSON Schema keywords Kubernetes refuses in CRD schemas: references, and applicators a
/// structural schema cannot prune by.
const UNSUPPORTED: [&str; 7] = [
    "$ref",
    "$schema",
    "id",
    "definitions",
    "dependencies",
    "patternProperties",
    "additionalItems",
];

/// Value validations copied as they are into the Draft 4 schema; the meta-schema checks their
/// values (a negative `maxLength`, a `required` that is not a list).
const VALUE_KEYWORDS: [&str; 15] = [
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "maxProperties",
    "minProperties",
];

/// The formats Kubernetes validates (apiextensions' `supportedFormats`, normalized without
/// `-`); any other `format` is ignored.
const SUPPORTED_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// Longest value quoted in a message: a wrong object can be the whole spec.
const MAX_QUOTED: usize = 256;

/// A CRD version's schema, compiled once, applied to every object of that version.
#[derive(Debug, Clone)]
pub struct CrdSchema {
    /// The schema's tree: what pruning keeps, what defaulting adds, what validation checks.
    root: Node,
    /// Whether any node has a `default`: reads default only then.
    has_defaults: bool,
}

/// One schema node: its structure, as pruning reads it, and apart what few nodes have; the
/// logical junctors (`allOf`, ...) only validate, their branches nodes of their own.
#[derive(Debug, Clone, Default)]
struct Node {
    properties: Properties<Arc<Node>>,
    additional: Additional,
    items: Option<Arc<Node>>,
    /// `x-kubernetes-preserve-unknown-fields: true`.
    preserve_unknown: bool,
    /// `x-kubernetes-embedded-resource: true`: keeps apiVersion, kind and metadata.
    embedded: bool,
    /// `nullable: true`: a `null` stays.
    nullable: bool,
    /// `x-kubernetes-int-or-string: true`: an integer or a string, whatever `type` says.
    int_or_string: bool,
    /// Whether this node or one below it has validation rules: the rules' walk skips what has
    /// none.
    rules_below: bool,
    /// `type` (`""`: none), what a failed validation rule's message names.
    type_name: &'static str,
    /// What few nodes have, apart: a large schema has thousands of nodes, most with none of it.
    extra: Option<Box<Extra>>,
}

/// A node's default, format, value checks, validation rules and list-map keys.
#[derive(Debug, Clone, Default)]
struct Extra {
    /// `default`: what a missing field, or a `null` where none is allowed, becomes.
    default: Option<Value>,
    /// `format`, one Kubernetes supports, as written: a value of another JSON type than the
    /// schema's is refused as not of this format (kube-openapi's type validator).
    format: Option<String>,
    /// What the value must be beside its type ([`checks`]).
    checks: Box<[Check]>,
    /// `x-kubernetes-validations`, compiled (CEL, `keel-cel`).
    rules: Vec<Arc<keel_cel::Rule>>,
    /// `x-kubernetes-list-map-keys` of a `x-kubernetes-list-type: map` list: how its items
    /// correlate with the old list's, for transition rules.
    map_keys: Option<Vec<String>>,
}

impl Extra {
    fn is_empty(&self) -> bool {
        self.default.is_none()
            && self.format.is_none()
            && self.checks.is_empty()
            && self.rules.is_empty()
            && self.map_keys.is_none()
    }
}

impl Node {
    fn default_value(&self) -> Option<&Value> {
        self.extra.as_ref()?.default.as_ref()
    }

    fn format(&self) -> Option<&str> {
        self.extra.as_ref()?.format.as_deref()
    }

    fn checks(&self) -> &[Check] {
        self.extra.as_ref().map_or(&[], |e| &e.checks)
    }

    fn rules(&self) -> &[Arc<keel_cel::Rule>] {
        self.extra.as_ref().map_or(&[], |e| &e.rules)
    }

    fn map_keys(&self) -> Option<&[String]> {
        self.extra.as_ref()?.map_keys.as_deref()
    }

    /// The failures of the rules of this node and those below it on `value` at `path`, its old
    /// value (`old`, on an update) matched by field name, map key, and a map list's item keys
    /// (other lists' items have no old value: transition rules under them are judged only
    /// when `optionalOldSelf`).
    ///
    /// Ratcheting (Kubernetes' `CRDValidationRatcheting`, on by default since 1.30): on an
    /// update, a rule that does not read `oldSelf` and fails on a value equal to its old one
    /// (or, under a list whose items do not correlate, on an item of an unchanged list) is not
    /// held against the write: an object that a rule added later would refuse can still be
    /// changed elsewhere.
    ///
    /// Every evaluation is charged to `walk.budget`; once a violation stops the validation (the
    /// budget ran out, or an evaluation would cost more than the per-call limit), nothing
    /// further is judged. Such a violation is never ratcheted.
    fn check_rules(
        &self,
        path: &str,
        value: &Value,
        old: Option<&Value>,
        unchanged: bool,
        walk: &mut RuleWalk<'_>,
    ) {
        let RuleWalk {
            ratchet,
            budget,
            out,
        } = walk;
        let ratchet = *ratchet;
        if budget.stopped() {
            return;
        }
        if !self.rules().is_empty()
            && let Some(v) = budget.before_rules(path, self.type_name)
        {
            out.push(v.cause());
            return;
        }
        // Whether the value is as it was: asked only when a rule fails or a list's items
        // inherit it (a deep comparison at every node would cost more than the rules).
        let mut memo: Option<bool> = None;
        let mut is_unchanged = || {
            *memo.get_or_insert_with(|| ratchet && (unchanged || old.is_some_and(|o| o == value)))
        };
        for rule in self.rules() {
            if let Some(v) = rule.check(path, self.type_name, value, old, budget)
                && (v.stops || rule.is_transition() || !is_unchanged())
            {
                out.push(v.cause());
            }
            if budget.stopped() {
                return;
            }
        }
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let old_v = old.and_then(|o| o.get(k));
                    let (sub, at) = match (self.properties.get(k), &self.additional) {
                        (Some(sub), _) if sub.rules_below => (&**sub, format!("{path}.{k}")),
                        (None, Additional::Schema(sub)) if sub.rules_below => {
                            (&**sub, format!("{path}[{k}]"))
                        }
                        _ => continue,
                    };
                    sub.check_rules(&at, v, old_v, false, walk);
                    if walk.budget.stopped() {
                        return;
                    }
                }
            }
            Value::Array(items) => {
                if let Some(sub) = self.items.as_deref().filter(|s| s.rules_below) {
                    let inherited = self.map_keys().is_none() && is_unchanged();
                    for (i, v) in items.iter().enumerate() {
                        // A map list's item has the old item of the same keys as its old
                        // value; other lists' items have none, and ratchet with their list.
                        let old_v = self.map_keys().and_then(|keys| {
                            old.and_then(Value::as_array)?
                                .iter()
                                .find(|o| keys.iter().all(|k| o.get(k) == v.get(k)))
                        });
                        let at = format!("{path}[{i}]");
                        sub.check_rules(&at, v, old_v, inherited, walk);
                        if walk.budget.stopped() {
                            return;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn has_defaults(&self) -> bool {
        self.default_value().is_some()
            || self.properties.values().any(|p| p.has_defaults())
            || self.items.as_deref().is_some_and(Node::has_defaults)
            || matches!(&self.additional, Additional::Schema(sub) if sub.has_defaults())
    }
}

/// What a walk of the validation rules carries from node to node.
struct RuleWalk<'w> {
    /// Whether failures on unchanged values are let through (not on status writes).
    ratchet: bool,
    /// The validation's runtime cost budget, charged by every evaluation.
    budget: &'w mut keel_cel::CostBudget,
    /// The failures so far.
    out: &'w mut Vec<FieldCause>,
}

/// `additionalProperties`: what the keys not in `properties` are.
#[derive(Debug, Clone, Default)]
enum Additional {
    /// Absent or `false`: undeclared, so pruned.
    #[default]
    None,
    /// `true`: kept as they are.
    Any,
    /// Each value follows this schema.
    Schema(Arc<Node>),
}

impl CrdSchema {
    /// Checks and compiles `spec.versions[i].schema.openAPIV3Schema`. `Err` lists what is wrong
    /// with the schema itself, with paths under `field` (e.g.
    /// `spec.versions[0].schema.openAPIV3Schema.properties[spec].type`): a node that is not an
    /// object, a type Kubernetes does not know, `$ref` and the other keywords Kubernetes refuses,
    /// a pattern that is not a regular expression, `properties` beside `additionalProperties`,
    /// an array without `items`, nesting deeper than [`MAX_DEPTH`], a root whose type is not
    /// `object`, and whatever the Draft 4 meta-schema refuses.
    pub fn new(openapi_v3: &Value, field: &str) -> Result<CrdSchema, Vec<FieldCause>> {
        let root = checked(openapi_v3, field, true)?;
        let has_defaults = root.has_defaults();
        Ok(CrdSchema { root, has_defaults })
    }

    /// What a CRD's write refuses of a version's schema: what [`CrdSchema::new`] refuses, in
    /// its words, and for a schema it accepts, every `default` that its own node prunes or
    /// does not validate ([`check_defaults`]). The schema is compiled for the check and
    /// dropped: it is compiled to be kept on the first use of its resource.
    pub fn check(openapi_v3: &Value, field: &str) -> Vec<FieldCause> {
        match checked(openapi_v3, field, false) {
            Ok(root) => check_defaults(&root, field),
            Err(causes) => causes,
        }
    }

    /// Drops every field the schema does not declare, as Kubernetes prunes: keys of an object
    /// not in its `properties` go, unless `additionalProperties` (`true`, or a schema each value
    /// is pruned by) or `x-kubernetes-preserve-unknown-fields: true` keeps them (everything under
    /// such a node is kept, except below the properties and items it declares, which are pruned
    /// by their own schemas). An object with none of these, or with no schema at all (an array
    /// without `items`), loses every key. Arrays prune each item by `items`. At the root and in
    /// `x-kubernetes-embedded-resource` objects, apiVersion, kind and metadata stay; root
    /// metadata is never pruned. Returns the paths of the dropped fields, in the order met.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        let Value::Object(map) = obj else {
            return pruned;
        };
        if self.root.preserve_unknown {
            for (k, v) in map.iter_mut() {
                if !META_FIELDS.contains(&k.as_str()) {
                    keep_unknown_below(v, &self.root, "", k, &mut pruned);
                }
            }
        } else {
            prune_keys(map, &self.root, "", &mut pruned, true);
        }
        pruned
    }

    /// Defaults `obj` (pruned) as Kubernetes' apiextensions server does, in its order: first a
    /// `null` where the schema allows none and gives no default is dropped
    /// (`PruneNonNullableNullsWithoutDefaults`), then every missing property with a `default`,
    /// and every `null` where none is allowed, gets a copy of it, at every depth, defaults'
    /// own insides included (`Default`).
    pub fn default(&self, obj: &mut Value) {
        drop_disallowed_nulls(obj, &self.root);
        default_value(obj, &self.root);
    }

    /// The failures of the schema's validation rules (`x-kubernetes-validations`) on `obj`
    /// (pruned, defaulted) and, on an update, `old`, with Kubernetes' field paths; `ratchet`:
    /// failures on unchanged values are not held against the write (not on status writes).
    /// The rules' evaluations share Kubernetes' runtime cost budget of one validation.
    pub fn check_rules(&self, obj: &Value, old: Option<&Value>, ratchet: bool) -> Vec<FieldCause> {
        self.check_rules_within(obj, old, ratchet, keel_cel::CostBudget::default())
    }

    /// [`CrdSchema::check_rules`] with the evaluations charged to `budget` (and, when static
    /// estimates run it out, to a fresh one charging estimates with actual sizes).
    fn check_rules_within(
        &self,
        obj: &Value,
        old: Option<&Value>,
        ratchet: bool,
        mut budget: keel_cel::CostBudget,
    ) -> Vec<FieldCause> {
        let mut out = Vec::new();
        if !self.root.rules_below {
            return out;
        }
        let mut walk = RuleWalk {
            ratchet,
            budget: &mut budget,
            out: &mut out,
        };
        self.root.check_rules("", obj, old, false, &mut walk);
        if budget.judge_again() {
            // Static estimates ran the budget out: judge with what the values cost.
            out.clear();
            let mut budget = budget.with_actual_sizes();
            let mut walk = RuleWalk {
                ratchet,
                budget: &mut budget,
                out: &mut out,
            };
            self.root.check_rules("", obj, old, false, &mut walk);
        }
        for c in &mut out {
            c.field = c.field.trim_start_matches('.').to_string();
        }
        out
    }

    /// Whether any node has validation rules (`x-kubernetes-validations`).
    pub fn has_rules(&self) -> bool {
        self.root.rules_below
    }

    /// Whether [`CrdSchema::default`] can add anything: some node has a `default`.
    pub fn has_defaults(&self) -> bool {
        self.has_defaults
    }

    /// Validates a (pruned) object: every violation, with Kubernetes' field paths
    /// (`spec.ports[2].port`, `spec.labels.key` for the keys of a map) and reasons: a wrong
    /// type is `FieldValueTypeInvalid`, a missing required field `FieldValueRequired` at the
    /// field's path, a value outside `enum` `FieldValueNotSupported`, any other rule
    /// `FieldValueInvalid` with a message that says the rule. `metadata` is not validated here.
    pub fn validate(&self, obj: &Value) -> Vec<FieldCause> {
        let mut causes = self.root.failures(obj, String::new(), true);
        causes.retain(|c| {
            !(c.field == "metadata"
                || c.field.starts_with("metadata.")
                || c.field.starts_with("metadata["))
        });
        causes
    }
}

/// A schema's tree, or everything wrong with it that [`CrdSchema::new`] refuses: what
/// [`compile`] finds, and what the Draft 4 meta-schema refuses of its translation (root
/// `metadata` left out), which is dropped then.
/// [`CrdSchema::new`]'s checks and compilation; `share`: the nodes are to be kept, and so
/// shared with equal ones ([`share`]).
fn checked(openapi_v3: &Value, field: &str, share: bool) -> Result<Node, Vec<FieldCause>> {
    let mut causes = Vec::new();
    match openapi_v3.get("type") {
        // Not an object at all: `compile` says so.
        None if !openapi_v3.is_object() => {}
        None => causes.push(FieldCause::required(child(field, "type"))),
        Some(Value::String(t)) if t == "object" => {}
        Some(t) => causes.push(FieldCause::invalid(
            child(field, "type"),
            &quoted(t),
            "must be object at the root",
        )),
    }
    let mut c = Compiler {
        cost: keel_cel::CostTotal::default(),
        causes,
        patterns: Patterns::new(),
        share,
    };
    let scope = Some(keel_cel::RuleScope::root());
    let (root, mut translated) = compile(openapi_v3, field, 0, scope, &mut c);
    let Compiler {
        cost, mut causes, ..
    } = c;
    // The schema's rules together, over Kubernetes' limit for a whole schema.
    for (rule, message) in cost.errors(field) {
        causes.push(FieldCause::forbidden(rule, message));
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    // Root metadata is ObjectMeta, validated elsewhere whatever the schema says of it.
    if let Some(Value::Object(properties)) = translated.get_mut("properties") {
        properties.remove("metadata");
    }
    if let Some(Value::Array(required)) = translated.get_mut("required") {
        required.retain(|r| r != "metadata");
    }
    let translated = Value::Object(translated);
    let meta = jsonschema::draft4::meta::validator();
    let causes: Vec<FieldCause> = meta
        .iter_errors(&translated)
        .map(|e| schema_cause(field, &translated, &e))
        .collect();
    if !causes.is_empty() {
        return Err(causes);
    }
    Ok(root)
}

/// What compiling a schema carries from node to node.
struct Compiler {
    /// The estimated costs of the validation rules so far.
    cost: keel_cel::CostTotal,
    /// What is wrong with the schema so far.
    causes: Vec<FieldCause>,
    /// The patterns compiled so far, shared by the nodes that repeat one.
    patterns: Patterns,
    /// Whether the nodes are kept, and so shared with equal ones ([`share`]).
    share: bool,
}

/// Where a schema's `pattern` goes in the compiled schema: a keyword of keel's own, since the
/// Draft 4 meta-schema would judge `pattern` by ECMA-262's syntax, which refuses Go's `(?i)`.
const GO_PATTERN: &str = "x-keel-go-pattern";

/// Walks one schema node at `path`, `depth` levels below the root: its [`Node`] and its Draft 4
/// translation (for the meta-schema's check), with what is wrong in `c.causes`. `scope` places
/// the node in the structural tree (its validation rules are typed by it and their estimated
/// costs added to `c.cost`); `None` under `allOf`, `anyOf`, `oneOf` and `not`, whose rules are
/// compiled untyped to be checked, and not kept (nor defaults: Kubernetes neither evaluates
/// nor applies them there).
fn compile(
    schema: &Value,
    path: &str,
    depth: usize,
    scope: Option<keel_cel::RuleScope>,
    c: &mut Compiler,
) -> (Node, Map<String, Value>) {
    let mut node = Node::default();
    let mut out = Map::new();
    if depth > MAX_DEPTH {
        c.causes.push(FieldCause::forbidden(
            path,
            format!("schemas may nest at most {MAX_DEPTH} levels"),
        ));
        return (node, out);
    }
    let whole = schema;
    let Value::Object(schema) = schema else {
        c.causes.push(FieldCause::type_error(path, "an object"));
        return (node, out);
    };
    for keyword in UNSUPPORTED {
        if schema.contains_key(keyword) {
            c.causes.push(FieldCause::forbidden(
                child(path, keyword),
                format!("{keyword} is not supported"),
            ));
        }
    }
    let is_true = |key: &str| schema.get(key) == Some(&Value::Bool(true));
    node.preserve_unknown = is_true("x-kubernetes-preserve-unknown-fields");
    node.embedded = is_true("x-kubernetes-embedded-resource");
    let nullable = is_true("nullable");
    node.nullable = nullable;
    let mut extra = Extra {
        default: schema.get("default").cloned(),
        ..Extra::default()
    };
    node.type_name = match schema.get("type").and_then(Value::as_str) {
        Some(t) => TYPES
            .iter()
            .find(|known| **known == t)
            .copied()
            .unwrap_or(""),
        None => "",
    };
    compile_rules(
        whole,
        path,
        scope,
        c.share,
        &mut c.cost,
        &mut extra.rules,
        &mut c.causes,
    );
    let child_scope = scope.map(|s| s.child(whole));
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
        extra.map_keys = schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect()
            });
    }

    let mut types: Vec<Value> = Vec::new();
    match schema.get("type") {
        None => {}
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => types.push(t.as_str().into()),
        Some(Value::String(t)) => {
            c.causes
                .push(FieldCause::not_supported(child(path, "type"), t, &TYPES));
        }
        Some(_) => c
            .causes
            .push(FieldCause::type_error(child(path, "type"), "a string")),
    }
    if is_true("x-kubernetes-int-or-string") {
        node.int_or_string = true;
        types = vec!["integer".into(), "string".into()];
    }
    if nullable && !types.is_empty() {
        types.push("null".into());
    }
    match types.len() {
        0 => {}
        1 => {
            out.insert("type".into(), types.swap_remove(0));
        }
        _ => {
            out.insert("type".into(), Value::Array(types));
        }
    }
    if let Some(values) = schema.get("enum") {
        let mut values = values.clone();
        if let Value::Array(list) = &mut values
            && nullable
            && !list.contains(&Value::Null)
        {
            list.push(Value::Null);
        }
        out.insert("enum".into(), values);
    }
    for keyword in VALUE_KEYWORDS {
        if let Some(v) = schema.get(keyword) {
            out.insert(keyword.into(), v.clone());
        }
    }
    // Formats Kubernetes does not support are ignored, as its `StripUnsupportedFormatsPostProcess`
    // drops them (go-openapi's names: `-` does not count).
    if let Some(Value::String(format)) = out.get("format") {
        if SUPPORTED_FORMATS.contains(&format.replace('-', "").as_str()) {
            extra.format = Some(format.clone());
        } else {
            out.remove("format");
        }
    }
    // A string pattern is Go's (compiled with the checks); anything else stays `pattern` for
    // the meta-schema to refuse.
    if let Some(Value::String(p)) = out.remove("pattern") {
        out.insert(GO_PATTERN.into(), Value::String(p));
    }
    let mut checks = checks::value_checks(schema, &mut c.patterns);
    if let Some(Value::String(pattern)) = schema.get("pattern")
        && !checks.iter().any(|c| matches!(c, Check::Pattern(_)))
    {
        c.causes.push(FieldCause::invalid(
            child(path, "pattern"),
            pattern,
            "must be a valid regular expression",
        ));
    }

    match schema.get("properties") {
        None => {}
        Some(Value::Object(properties)) => {
            let mut translated = Map::new();
            let mut nodes = Vec::with_capacity(properties.len());
            for (name, sub) in properties {
                let sub_path = child(path, &format!("properties[{name}]"));
                let (sub_node, sub_out) = compile(sub, &sub_path, depth + 1, child_scope, c);
                nodes.push((
                    name.as_str(),
                    share(sub, child_scope.is_some(), sub_node, c),
                ));
                translated.insert(name.clone(), Value::Object(sub_out));
            }
            node.properties = nodes.into_iter().collect();
            out.insert("properties".into(), Value::Object(translated));
        }
        Some(_) => c.causes.push(FieldCause::type_error(
            child(path, "properties"),
            "an object",
        )),
    }
    let additional_path = child(path, "additionalProperties");
    match schema.get("additionalProperties") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => node.additional = Additional::Any,
        Some(sub @ Value::Object(_)) => {
            let (sub_node, sub_out) = compile(sub, &additional_path, depth + 1, child_scope, c);
            node.additional = Additional::Schema(share(sub, child_scope.is_some(), sub_node, c));
            out.insert("additionalProperties".into(), Value::Object(sub_out));
        }
        Some(_) => c.causes.push(FieldCause::type_error(
            additional_path.clone(),
            "a boolean or an object",
        )),
    }
    if !node.properties.is_empty() && !matches!(node.additional, Additional::None) {
        c.causes.push(FieldCause::forbidden(
            additional_path,
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    let items_path = child(path, "items");
    match schema.get("items") {
        None if schema.get("type") == Some(&Value::from("array")) => {
            c.causes.push(FieldCause::required(items_path));
        }
        None => {}
        Some(sub @ Value::Object(_)) => {
            let (sub_node, sub_out) = compile(sub, &items_path, depth + 1, child_scope, c);
            node.items = Some(share(sub, child_scope.is_some(), sub_node, c));
            out.insert("items".into(), Value::Object(sub_out));
        }
        Some(Value::Array(_)) => c.causes.push(FieldCause::forbidden(
            items_path,
            "items must be a schema object and not an array",
        )),
        Some(_) => c
            .causes
            .push(FieldCause::type_error(items_path, "an object")),
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        match schema.get(junctor) {
            None => {}
            Some(Value::Array(subs)) => {
                let mut translated = Vec::with_capacity(subs.len());
                let mut branches = Vec::with_capacity(subs.len());
                for (i, sub) in subs.iter().enumerate() {
                    let sub_path = child(path, &format!("{junctor}[{i}]"));
                    let (branch, sub_out) = compile(sub, &sub_path, depth + 1, None, c);
                    branches.push(branch);
                    translated.push(Value::Object(sub_out));
                }
                let branches = branches.into_boxed_slice();
                checks.push(match junctor {
                    "allOf" => Check::AllOf(branches),
                    "anyOf" => Check::AnyOf(branches),
                    _ => Check::OneOf(branches),
                });
                out.insert(junctor.into(), Value::Array(translated));
            }
            Some(_) => c.causes.push(FieldCause::type_error(
                child(path, junctor),
                "a list of schemas",
            )),
        }
    }
    if let Some(sub) = schema.get("not") {
        let (branch, sub_out) = compile(sub, &child(path, "not"), depth + 1, None, c);
        checks.push(Check::Not(Box::new(branch)));
        out.insert("not".into(), Value::Object(sub_out));
    }
    extra.checks = checks.into_boxed_slice();
    if scope.is_none() {
        extra.rules.clear();
        extra.default = None;
    }
    if !extra.is_empty() {
        node.extra = Some(Box::new(extra));
    }
    node.rules_below = !node.rules().is_empty()
        || node.properties.values().any(|p| p.rules_below)
        || node.items.as_ref().is_some_and(|i| i.rules_below)
        || matches!(&node.additional, Additional::Schema(sub) if sub.rules_below);
    (node, out)
}

/// Compiled nodes shared by every kept schema that repeats them (issue 45). A node without
/// validation rules below it is a function of its own keywords (`description` aside), of
/// whether it is placed in the structural tree (`scoped`: not under `allOf` and the like), and
/// of its children: the same `Container` schema in each pod template of every CRD that embeds
/// one, and `{"type": "string"}` everywhere, compile to one node. The Prometheus Operator's
/// 10 CRDs have about 11,900 schema nodes and 500 distinct ones. A node with rules below it is
/// never shared: its rules' cost estimates depend on where it is.
///
/// Keyed by the node's own keywords as canonical JSON, and its children by address: a live
/// entry's node holds its children, so no address in a live key is reused.
static SHARED: LazyLock<Shared<Node>> = LazyLock::new(Shared::default);

/// `node`, compiled from `schema`, or an equal node compiled before that is still in use. Not
/// once the schema is found at fault: a node compiled past a fault (one cut at the depth
/// limit) is not what its keywords say, and the schema is refused anyway.
fn share(schema: &Value, scoped: bool, node: Node, c: &Compiler) -> Arc<Node> {
    let key = match (node.rules_below, c.share && c.causes.is_empty(), schema) {
        (false, true, Value::Object(schema)) => node_key(schema, scoped, &node),
        _ => None,
    };
    match key {
        Some(key) => SHARED.share(key, node),
        None => Arc::new(node),
    }
}

/// What makes `node` what it is ([`share`]): its own keywords but `description` and those
/// naming children (canonical JSON: keys sorted), `scoped`, and its children's addresses.
fn node_key(schema: &Map<String, Value>, scoped: bool, node: &Node) -> Option<String> {
    let own: BTreeMap<&str, &Value> = schema
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "description" | "properties" | "items" | "additionalProperties"
            )
        })
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let address = |n: &Arc<Node>| Arc::as_ptr(n) as usize;
    let properties: Vec<(&str, usize)> = node
        .properties
        .iter()
        .map(|(name, sub)| (name, address(sub)))
        .collect();
    let additional = match &node.additional {
        Additional::None => None,
        Additional::Any => Some(0),
        Additional::Schema(sub) => Some(address(sub)),
    };
    let items = node.items.as_ref().map(address);
    serde_json::to_string(&(own, scoped, properties, additional, items)).ok()
}

/// A node's `x-kubernetes-validations`, compiled into `rules`, typed by the node's
/// `schema` and held to Kubernetes' cost limits when `scope` places it (else untyped); what
/// cannot be kept is a cause under `<path>.x-kubernetes-validations[i]`.
fn compile_rules(
    schema: &Value,
    path: &str,
    scope: Option<keel_cel::RuleScope>,
    share: bool,
    cost: &mut keel_cel::CostTotal,
    compiled_rules: &mut Vec<Arc<keel_cel::Rule>>,
    causes: &mut Vec<FieldCause>,
) {
    let at = child(path, "x-kubernetes-validations");
    let rules = match schema.get("x-kubernetes-validations") {
        None | Some(Value::Null) => return,
        Some(Value::Array(rules)) => rules,
        Some(_) => {
            causes.push(FieldCause::type_error(at, "a list"));
            return;
        }
    };
    for (i, entry) in rules.iter().enumerate() {
        let entry_path = format!("{at}[{i}]");
        let compiled = match scope {
            Some(scope) => keel_cel::Rule::compile(entry, schema, scope, cost, &entry_path),
            None => keel_cel::Rule::new(entry),
        };
        match compiled {
            Ok(rule) => compiled_rules.push(match (share, scope) {
                (true, Some(scope)) => share_rule(entry, schema, scope, rule),
                _ => Arc::new(rule),
            }),
            Err(errors) => {
                for e in errors {
                    let field = format!("{entry_path}.{}", e.field);
                    causes.push(match e.kind {
                        keel_cel::RuleErrorKind::Required => FieldCause::required(field),
                        keel_cel::RuleErrorKind::Forbidden => {
                            FieldCause::forbidden(field, e.message)
                        }
                        keel_cel::RuleErrorKind::Invalid => FieldCause {
                            reason: "FieldValueInvalid".into(),
                            message: format!("Invalid value: {:?}: {}", e.value, e.message),
                            field,
                        },
                    });
                }
            }
        }
    }
}

/// Compiled validation rules by what they are compiled from ([`share_rule`]).
static SHARED_RULES: LazyLock<Shared<keel_cel::Rule>> = LazyLock::new(Shared::default);

/// `rule`, compiled from `entry` on the node whose schema is `schema` at `scope`, or an equal
/// rule compiled before that is still in use: a CRD repeats a rule in each version's schema,
/// and CRDs from one generator repeat each other's. A compiled rule is a function of those
/// three alone (its types are the schema's, its runtime cost theirs; where it sits only adds
/// to its CRD's total, counted at each compile). The key is their SHA-256, not the JSON: a
/// rule on a CRD's root would keep the whole schema's text as its key.
fn share_rule(
    entry: &Value,
    schema: &Value,
    scope: keel_cel::RuleScope,
    rule: keel_cel::Rule,
) -> Arc<keel_cel::Rule> {
    let Ok(text) = serde_json::to_vec(&(entry, schema, format!("{scope:?}"))) else {
        return Arc::new(rule);
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, &text);
    let key: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    SHARED_RULES.share(key, rule)
}

/// Kubernetes' checks of every `default` in a CRD version's schema (`root`, compiled without
/// errors), judged when the CRD is written only: a CRD stored before a check keeps being
/// served with its schema. Each default is pruned and validated by its own node.
fn check_defaults(root: &Node, field: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let mut todo = vec![(root, field.to_string())];
    while let Some((node, path)) = todo.pop() {
        if let Some(default) = node.default_value() {
            check_default(default, node, &path, &mut causes);
        }
        for (name, sub) in node.properties.iter() {
            todo.push((sub, child(&path, &format!("properties[{name}]"))));
        }
        if let Additional::Schema(sub) = &node.additional {
            todo.push((sub, child(&path, "additionalProperties")));
        }
        if let Some(items) = node.items.as_deref() {
            todo.push((items, child(&path, "items")));
        }
    }
    // In the schema's order, as they were found before.
    causes.sort_by(|a, b| a.field.cmp(&b.field));
    causes
}

/// Kubernetes' checks of a schema's `default` when its CRD is written: pruned by the schema
/// it defaults, it stays as it is (else "must not have unknown fields"), and it validates
/// against that schema, its errors at paths under `<path>.default`.
fn check_default(default: &Value, node: &Node, path: &str, causes: &mut Vec<FieldCause>) {
    let at = child(path, "default");
    let mut pruned = default.clone();
    prune(&mut pruned, Some(node), "", &mut Vec::new());
    if pruned != *default {
        causes.push(FieldCause::invalid(
            &at,
            &quoted(default),
            "must not have unknown fields",
        ));
        return;
    }
    causes.extend(node.failures(default, at, false));
}

/// Whether `v` is a `null` where `node` allows none.
fn disallowed_null(v: &Value, node: &Node) -> bool {
    v.is_null() && !node.nullable
}

/// Drops the `null`s of `value` where `node` allows none and gives no default (Kubernetes'
/// `PruneNonNullableNullsWithoutDefaults`): properties and map values; list items stay.
fn drop_disallowed_nulls(value: &mut Value, node: &Node) {
    match value {
        Value::Object(map) => {
            map.retain(|k, v| {
                let sub = match (node.properties.get(k), &node.additional) {
                    (Some(sub), _) => sub,
                    (None, Additional::Schema(sub)) => sub,
                    _ => return true,
                };
                if disallowed_null(v, sub) && sub.default_value().is_none() {
                    return false;
                }
                drop_disallowed_nulls(v, sub);
                true
            });
        }
        Value::Array(items) => {
            if let Some(sub) = node.items.as_deref() {
                for item in items {
                    drop_disallowed_nulls(item, sub);
                }
            }
        }
        _ => {}
    }
}

/// Kubernetes' structural `Default`: a missing property with a default, or a `null` where none
/// is allowed (of a property, a map value or a list item) with a default, becomes a copy of
/// the default; then every value is defaulted by its own schema, copies included.
fn default_value(value: &mut Value, node: &Node) {
    match value {
        Value::Object(map) => {
            for (k, sub) in node.properties.iter() {
                let Some(default) = sub.default_value() else {
                    continue;
                };
                match map.get(k) {
                    Some(v) if !disallowed_null(v, sub) => {}
                    _ => {
                        map.insert(k.to_string(), default.clone());
                    }
                }
            }
            for (k, v) in map.iter_mut() {
                if let Some(sub) = node.properties.get(k) {
                    default_value(v, sub);
                } else if let Additional::Schema(sub) = &node.additional {
                    if let Some(default) = sub.default_value().filter(|_| disallowed_null(v, sub)) {
                        *v = default.clone();
                    }
                    default_value(v, sub);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = node.items.as_deref() {
                for item in items {
                    if let Some(default) =
                        sub.default_value().filter(|_| disallowed_null(item, sub))
                    {
                        *item = default.clone();
                    }
                    default_value(item, sub);
                }
            }
        }
        _ => {}
    }
}

/// Prunes the keys of `map`, an object that `node` describes, at `path` (`root`: the object
/// itself, whose apiVersion, kind and metadata always stay).
fn prune_keys(
    map: &mut Map<String, Value>,
    node: &Node,
    path: &str,
    pruned: &mut Vec<String>,
    root: bool,
) {
    map.retain(|k, v| {
        if (root || node.embedded) && META_FIELDS.contains(&k.as_str()) {
            return true;
        }
        if let Some(sub) = node.properties.get(k) {
            prune(v, Some(sub), &child(path, k), pruned);
            return true;
        }
        match &node.additional {
            Additional::Schema(sub) => {
                prune(v, Some(sub), &format!("{path}[{k}]"), pruned);
                true
            }
            Additional::Any => true,
            Additional::None => {
                pruned.push(child(path, k));
                false
            }
        }
    });
}

/// Prunes `value` at `path` by `node`; `None`: nothing under it is declared.
fn prune(value: &mut Value, node: Option<&Node>, path: &str, pruned: &mut Vec<String>) {
    let Some(node) = node else {
        prune_undeclared(value, path, pruned);
        return;
    };
    if node.preserve_unknown {
        keep_unknown(value, node, path, pruned);
        return;
    }
    match value {
        Value::Object(map) => prune_keys(map, node, path, pruned, false),
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                prune(item, node.items.as_deref(), &format!("{path}[{i}]"), pruned);
            }
        }
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown keys stay, the properties, map values
/// and items the node declares are pruned by their own schemas.
fn keep_unknown(value: &mut Value, node: &Node, path: &str, pruned: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if node.embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                keep_unknown_below(v, node, path, k, pruned);
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    keep_unknown(item, item_node, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

/// The value `v` of key `k` of an object at `path` that keeps unknown fields.
fn keep_unknown_below(v: &mut Value, node: &Node, path: &str, k: &str, pruned: &mut Vec<String>) {
    if let Some(sub) = node.properties.get(k) {
        prune(v, Some(sub), &child(path, k), pruned);
    } else if let Additional::Schema(sub) = &node.additional {
        prune(v, Some(sub), &format!("{path}[{k}]"), pruned);
    }
}

/// Prunes a value no schema describes (the items of an array without `items`): objects lose
/// every key, arrays are walked. Iterative: such a value may nest deeper than any schema.
fn prune_undeclared(value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    let mut stack = vec![(value, path.to_string())];
    while let Some((value, path)) = stack.pop() {
        match value {
            Value::Object(map) => {
                pruned.extend(map.keys().map(|k| child(&path, k)));
                map.clear();
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate().rev() {
                    stack.push((item, format!("{path}[{i}]")));
                }
            }
            _ => {}
        }
    }
}

/// A kube-openapi composite error as apiextensions reports it: at no field, with no value.
fn composite(message: String) -> FieldCause {
    FieldCause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: \"\": {message}"),
        field: "<nil>".into(),
    }
}

/// The cause of a schema the meta-schema (or the compiler) refuses; its instance path points
/// into the translated schema, whose keywords sit where the user's do.
fn schema_cause(field: &str, schema: &Value, e: &ValidationError<'_>) -> FieldCause {
    let mut path = field.to_string();
    let mut value = Some(schema);
    let mut in_properties = false;
    for raw in e.instance_path().as_str().split('/').skip(1) {
        let segment = unescape(raw);
        match value {
            Some(Value::Array(items)) => {
                path = format!("{path}[{segment}]");
                value = segment.parse::<usize>().ok().and_then(|i| items.get(i));
                in_properties = false;
            }
            _ if in_properties => {
                path = format!("{path}[{segment}]");
                value = value.and_then(|v| v.get(segment.as_str()));
                in_properties = false;
            }
            _ => {
                path = child(&path, &segment);
                value = value.and_then(|v| v.get(segment.as_str()));
                in_properties = segment == "properties";
            }
        }
    }
    FieldCause::invalid(path, &quoted(e.instance().as_ref()), e.masked().to_string())
}

/// `parent.key`, or `key` at the root.
fn child(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// A JSON pointer segment's text (RFC 6901: `~1` is `/`, `~0` is `~`).
fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// A value as messages quote it: a string as itself, anything else as JSON, cut to
/// [`MAX_QUOTED`] bytes.
fn quoted(value: &Value) -> String {
    let mut text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.len() > MAX_QUOTED {
        let mut end = MAX_QUOTED;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIELD: &str = "spec.versions[0].schema.openAPIV3Schema";

    /// The node of `root`'s property `name`.
    fn property<'a>(root: &'a Node, name: &str) -> &'a Arc<Node> {
        root.properties.get(name).unwrap()
    }

    #[test]
    fn equal_subschemas_compile_to_one_node_within_and_across_schemas_but_not_with_rules() {
        let container = json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 63},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "containerPort": {"type": "integer", "format": "int32"}}}}}});
        let mut described = container.clone();
        described["description"] = json!("A container, described: descriptions do not count.");
        let mut other = container.clone();
        other["properties"]["name"]["maxLength"] = json!(64);
        let mut ruled = container.clone();
        ruled["x-kubernetes-validations"] = json!([{"rule": "self.name != ''"}]);
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": container, "b": described, "c": other, "d": ruled.clone(), "e": ruled}}}});
        let first = CrdSchema::new(&schema, FIELD).unwrap();
        let spec = property(&first.root, "spec");
        let [a, b, c, d, e] = ["a", "b", "c", "d", "e"].map(|n| property(spec, n));
        assert!(
            Arc::ptr_eq(a, b),
            "equal schemas but for a description share a node"
        );
        assert!(!Arc::ptr_eq(a, c), "a different maxLength is another node");
        // Below the difference, they share again.
        assert!(Arc::ptr_eq(property(a, "ports"), property(c, "ports")));
        assert!(!Arc::ptr_eq(d, e), "nodes with rules are their own");
        assert!(d.rules_below && !a.rules_below);
        // Their rules, compiled from equal entries on equal schemas at equal scopes, are one.
        let rule = |n: &Arc<Node>| n.extra.as_ref().unwrap().rules[0].clone();
        assert!(Arc::ptr_eq(&rule(d), &rule(e)));
        // Another schema compiled while the first lives shares its nodes.
        let second = CrdSchema::new(&schema, FIELD).unwrap();
        let again = property(property(&second.root, "spec"), "a");
        assert!(Arc::ptr_eq(a, again));
        // And shared nodes still judge each value on its own.
        let obj = json!({"spec": {"a": {"name": "x".repeat(64)}, "c": {"name": "x".repeat(64)}}});
        let causes = first.validate(&obj);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.a.name");
    }

    /// A compiled rule is shared only with one compiled from the same entry, on the same
    /// schema, at the same scope: its types and runtime cost come from the schema.
    #[test]
    fn equal_rules_share_their_compiled_form_only_on_equal_schemas_and_scopes() {
        let with = |max_length: u64, rule: &str| {
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": max_length}},
                "x-kubernetes-validations": [{"rule": rule}]})
        };
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": with(63, "self.name != ''"),
            "b": with(63, "self.name != ''"),
            "c": with(64, "self.name != ''"),
            "d": with(63, "self.name != 'x'"),
            "list": {"type": "array", "maxItems": 10, "items": with(63, "self.name != ''")}}}}});
        let compiled = CrdSchema::new(&schema, FIELD).unwrap();
        let spec = property(&compiled.root, "spec");
        let rule = |n: &Arc<Node>| n.extra.as_ref().unwrap().rules[0].clone();
        let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| rule(property(spec, n)));
        let item = rule(property(spec, "list").items.as_ref().unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(
            !Arc::ptr_eq(&a, &c),
            "another maxLength is another runtime cost"
        );
        assert!(!Arc::ptr_eq(&a, &d), "another rule");
        assert!(!Arc::ptr_eq(&a, &item), "another scope (a list's items)");
        // The shared rule judges each value where it is.
        let obj = json!({"spec": {"a": {"name": "n"}, "b": {"name": ""}}});
        let causes = compiled.check_rules(&obj, None, false);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.b");
    }

    /// The seeds' Network schema (deploy/examples/network-crd.yaml), with a few more rules.
    fn network_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["cidr"],
                    "properties": {
                        "cidr": {
                            "type": "string",
                            "description": "The network's IPv4 range.",
                            "pattern": "^([0-9]{1,3}\\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])$"
                        },
                        "gateway": {"type": "string"},
                        "mode": {"type": "string", "enum": ["bridge", "overlay"]},
                        "mtu": {"type": "integer", "minimum": 576, "maximum": 9000},
                        "vlan": {
                            "type": "integer",
                            "minimum": 0, "exclusiveMinimum": true,
                            "maximum": 4095, "exclusiveMaximum": true
                        },
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["port"],
                            "maxItems": 3,
                            "items": {
                                "type": "object",
                                "required": ["port"],
                                "properties": {
                                    "port": {"type": "integer", "minimum": 1},
                                    "name": {"type": "string", "maxLength": 5}
                                }
                            }
                        },
                        "labels": {
                            "type": "object",
                            "additionalProperties": {
                                "type": "object",
                                "properties": {"value": {"type": "string", "minLength": 1}}
                            }
                        }
                    }
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        })
    }

    fn network() -> CrdSchema {
        CrdSchema::new(&network_schema(), FIELD).unwrap()
    }

    fn good_network() -> Value {
        json!({
            "apiVersion": "samplecrd.k8s.io/v1",
            "kind": "Network",
            "metadata": {"name": "example-network", "namespace": "default"},
            "spec": {"cidr": "192.168.0.0/16", "gateway": "192.168.0.1"}
        })
    }

    fn fields(causes: &[FieldCause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    /// What `CrdSchema::new` refuses of `schema`, which a CRD's write (`CrdSchema::check`,
    /// no validator built) must refuse in the same words.
    fn schema_errors(schema: Value) -> Vec<FieldCause> {
        match CrdSchema::new(&schema, FIELD) {
            Ok(_) => panic!("schema accepted: {schema}"),
            Err(causes) => {
                assert_eq!(CrdSchema::check(&schema, FIELD), causes, "{schema}");
                causes
            }
        }
    }

    #[test]
    fn a_good_network_passes() {
        let mut obj = good_network();
        obj["status"] = json!({"phase": "Ready", "anything": {"goes": [1, 2]}});
        assert_eq!(network().validate(&obj), vec![]);
    }

    #[test]
    fn a_missing_required_field_is_required_at_its_own_path() {
        let mut obj = good_network();
        obj["spec"] = json!({"gateway": "192.168.0.1"});
        assert_eq!(
            network().validate(&obj),
            vec![FieldCause::required("spec.cidr")]
        );
    }

    /// Kubernetes' words for each rule, as its apiextensions server turns kube-openapi's
    /// errors into field errors (`kubeOpenAPIResultToFieldErrors`): kube-openapi's messages
    /// (`validation/errors`: typeFailWithData `%s in %s must be of type %s: %q`, patternFail,
    /// minIncFail, maxExcFail, multipleOfFail, tooShortMessage, minItemsFail, uniqueFail)
    /// beside the value as apimachinery's `field.Error` prints it (`%v` for numbers, `%q` for
    /// strings); `TooLongMaxLength` ("may not be longer than %d"), `TooMany` ("must have at
    /// most %d items"), `NotSupported` and `Required` for their codes.
    #[test]
    fn schema_errors_are_in_kubernetes_words() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object",
                "required": ["name"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 100},
                    "step": {"type": "number", "multipleOf": 5, "exclusiveMaximum": true, "maximum": 50},
                    "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "minLength": 3, "maxLength": 10},
                    "id": {"type": "string", "format": "uuid"},
                    "surge": {"x-kubernetes-int-or-string": true},
                    "mode": {"type": "string", "enum": ["a", "b"]},
                    "level": {"type": "integer", "enum": [1, 2]},
                    "tags": {"type": "array", "items": {"type": "string"},
                             "minItems": 1, "maxItems": 2, "uniqueItems": true}}}}}),
            FIELD,
        )
        .unwrap();
        let words = |spec: Value| -> Vec<String> {
            schema
                .validate(&json!({"spec": spec}))
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect()
        };
        let base = json!({"name": "abc"});
        let with = |k: &str, v: Value| {
            let mut spec = base.clone();
            spec[k] = v;
            words(spec)
        };
        assert_eq!(
            with("size", json!(101)),
            [
                "spec.size: Invalid value: 101: spec.size in body should be less than or equal to 100"
            ]
        );
        assert_eq!(
            with("size", json!(0)),
            ["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"]
        );
        assert_eq!(
            with("size", json!("101")),
            [
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
            ]
        );
        assert_eq!(
            with("step", json!(7)),
            ["spec.step: Invalid value: 7: spec.step in body should be a multiple of 5"]
        );
        assert_eq!(
            with("step", json!(50)),
            ["spec.step: Invalid value: 50: spec.step in body should be less than 50"]
        );
        assert_eq!(
            with("name", json!("Ab")),
            // kube-openapi's string validator stops at its first failure: lengths, then pattern.
            ["spec.name: Invalid value: \"Ab\": spec.name in body should be at least 3 chars long"]
        );
        assert_eq!(
            with("name", json!("abcdefghijk")),
            ["spec.name: Too long: may not be longer than 10"]
        );
        assert_eq!(
            with("id", json!("not-a-uuid")),
            [
                "spec.id: Invalid value: \"not-a-uuid\": spec.id in body must be of type uuid: \"not-a-uuid\""
            ]
        );
        assert_eq!(
            with("surge", json!(true)),
            [
                "spec.surge: Invalid value: \"boolean\": spec.surge in body must be of type integer,string: \"boolean\""
            ]
        );
        assert_eq!(
            with("mode", json!("c")),
            ["spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\""]
        );
        assert_eq!(
            with("level", json!(3)),
            ["spec.level: Unsupported value: 3: supported values: \"1\", \"2\""]
        );
        assert_eq!(
            with("tags", json!([])),
            ["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"]
        );
        assert_eq!(
            with("tags", json!(["a", "b", "c"])),
            ["spec.tags: Too many: 3: must have at most 2 items"]
        );
        assert_eq!(
            with("tags", json!(["a", "a"])),
            ["spec.tags: Invalid value: \"\": spec.tags in body shouldn't contain duplicates"]
        );
        assert_eq!(words(json!({})), ["spec.name: Required value"]);
    }

    /// A `oneOf` nothing matches: kube-openapi's composite error, at no field as apiextensions
    /// reports it, then the causes of its best branch.
    #[test]
    fn a_one_of_that_nothing_matches_names_its_best_branch() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "sel": {"type": "object",
                        "properties": {"x": {"type": "string"}, "y": {"type": "string"}, "z": {"type": "string"}},
                        "oneOf": [{"required": ["x"]}, {"required": ["y", "z"]}]}}}}}),
            FIELD,
        )
        .unwrap();
        let messages: Vec<String> = schema
            .validate(&json!({"spec": {"sel": {"z": "1"}}}))
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            messages,
            [
                "<nil>: Invalid value: \"\": \"spec.sel\" must validate one and only one schema (oneOf). Found none valid",
                "spec.sel.x: Required value",
            ]
        );
    }

    #[test]
    fn a_wrong_type_is_a_type_error() {
        let mut obj = good_network();
        obj["spec"]["gateway"] = json!(7);
        let causes = network().validate(&obj);
        assert_eq!(fields(&causes), ["spec.gateway"]);
        assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
        // kube-openapi's InvalidType, the JSON type it got as the value.
        assert_eq!(
            causes[0].message,
            "Invalid value: \"integer\": spec.gateway in body must be of type string: \"integer\""
        );
    }

    /// Where a string of a format is declared, kube-openapi lets a list through unjudged (and
    /// a string where the type is not numeric); keel refuses the list, deliberately.
    #[test]
    fn a_list_where_a_string_of_a_format_is_declared_is_a_type_error() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "day": {"type": "string", "format": "date"},
                "flag": {"type": "boolean", "format": "date"}}}}}),
            FIELD,
        )
        .unwrap();
        let causes =
            schema.validate(&json!({"spec": {"day": ["2024-01-01"], "flag": "2024-01-01"}}));
        assert_eq!(
            causes,
            vec![FieldCause {
                reason: "FieldValueTypeInvalid".into(),
                message:
                    "Invalid value: \"array\": spec.day in body must be of type string: \"array\""
                        .into(),
                field: "spec.day".into(),
            }]
        );
    }

    #[test]
    fn a_value_not_matching_the_pattern_is_invalid() {
        let mut obj = good_network();
        obj["spec"]["cidr"] = json!("192.168.0.0/33");
        let causes = network().validate(&obj);
        assert_eq!(fields(&causes), ["spec.cidr"]);
        assert_eq!(causes[0].reason, "FieldValueInvalid");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"192.168.0.0/33\": spec.cidr in body should match \
             '^([0-9]{1,3}\\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])$'"
        );
    }

    #[test]
    fn a_value_outside_the_enum_is_not_supported() {
        let mut obj = good_network();
        obj["spec"]["mode"] = json!("mesh");
        assert_eq!(
            network().validate(&obj),
            vec![FieldCause::not_supported(
                "spec.mode",
                "mesh",
                &["bridge", "overlay"]
            )]
        );
    }

    #[test]
    fn bounds_are_checked_and_worded_as_the_rule() {
        let schema = network();
        let message = |field: &str, value: Value| {
            let mut obj = good_network();
            obj["spec"][field] = value;
            let causes = schema.validate(&obj);
            assert_eq!(fields(&causes), [format!("spec.{field}")], "{causes:?}");
            causes[0].message.clone()
        };
        assert_eq!(
            message("mtu", json!(100)),
            "Invalid value: 100: spec.mtu in body should be greater than or equal to 576"
        );
        assert_eq!(
            message("mtu", json!(9001)),
            "Invalid value: 9001: spec.mtu in body should be less than or equal to 9000"
        );
        assert_eq!(
            message("vlan", json!(0)),
            "Invalid value: 0: spec.vlan in body should be greater than 0"
        );
        assert_eq!(
            message("vlan", json!(4095)),
            "Invalid value: 4095: spec.vlan in body should be less than 4095"
        );
        let mut obj = good_network();
        obj["spec"]["mtu"] = json!(576);
        obj["spec"]["vlan"] = json!(4094);
        assert_eq!(schema.validate(&obj), vec![]);
    }

    #[test]
    fn every_error_is_reported_with_its_field_path() {
        let obj = json!({
            "apiVersion": "samplecrd.k8s.io/v1",
            "kind": "Network",
            "metadata": {"name": "bad"},
            "spec": {
                "gateway": 7,
                "mtu": 100,
                "ports": [{"port": 80}, {"port": 0, "name": "toolong"}, {"name": "x"}, {"port": 1}],
                "labels": {"tier": {"value": ""}}
            }
        });
        let causes = network().validate(&obj);
        let mut got = fields(&causes);
        got.sort_unstable();
        assert_eq!(
            got,
            [
                "spec.cidr",
                "spec.gateway",
                "spec.labels.tier.value",
                "spec.mtu",
                "spec.ports",
                "spec.ports[1].name",
                "spec.ports[1].port",
                "spec.ports[2].port",
            ],
            "{causes:#?}"
        );
        let cause = |f: &str| causes.iter().find(|c| c.field == f).unwrap();
        assert_eq!(
            cause("spec.ports[2].port"),
            &FieldCause::required("spec.ports[2].port")
        );
        // apiextensions' TooMany, TooLongMaxLength and kube-openapi's TooShort.
        assert_eq!(
            cause("spec.ports").message,
            "Too many: 4: must have at most 3 items"
        );
        assert_eq!(
            cause("spec.ports[1].name").message,
            "Too long: may not be longer than 5"
        );
        assert_eq!(
            cause("spec.labels.tier.value").message,
            "Invalid value: \"\": spec.labels.tier.value in body should be at least 1 chars long"
        );
    }

    #[test]
    fn metadata_is_not_validated_here() {
        let mut schema = network_schema();
        schema["properties"]["metadata"] = json!({
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 3}}
        });
        schema["required"] = json!(["metadata", "spec"]);
        let schema = CrdSchema::new(&schema, FIELD).unwrap();
        assert_eq!(schema.validate(&good_network()), vec![]);
        let mut no_meta = good_network();
        no_meta.as_object_mut().unwrap().remove("metadata");
        no_meta.as_object_mut().unwrap().remove("spec");
        assert_eq!(
            schema.validate(&no_meta),
            vec![FieldCause::required("spec")]
        );
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported() {
        let mut obj = good_network();
        obj["extra"] = json!(1);
        obj["spec"]["unknown"] = json!({"a": 1});
        obj["spec"]["ports"] = json!([{"port": 80, "protocol": "TCP"}, {"port": 81}]);
        let pruned = network().prune(&mut obj);
        assert_eq!(pruned, ["extra", "spec.ports[0].protocol", "spec.unknown"]);
        let mut want = good_network();
        want["spec"]["ports"] = json!([{"port": 80}, {"port": 81}]);
        assert_eq!(obj, want);
        assert_eq!(network().prune(&mut obj), Vec::<String>::new());
    }

    #[test]
    fn api_version_kind_and_metadata_are_kept_at_the_root() {
        let mut obj = good_network();
        obj["metadata"]["labels"] = json!({"app": "net"});
        obj["metadata"]["unknownToTheSchema"] = json!(true);
        let want = obj.clone();
        assert_eq!(network().prune(&mut obj), Vec::<String>::new());
        assert_eq!(obj, want);
    }

    #[test]
    fn preserve_unknown_fields_keeps_them_but_prunes_declared_properties() {
        let schema = CrdSchema::new(
            &json!({
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
                    "status": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "inner": {"type": "object", "properties": {"b": {"type": "integer"}}}
                        }
                    }
                }
            }),
            FIELD,
        )
        .unwrap();
        let mut obj = json!({
            "apiVersion": "v1", "kind": "K", "metadata": {},
            "free": {"x": [1, {"y": 2}]},
            "spec": {"a": "1", "dropped": true},
            "status": {"phase": "Ready", "inner": {"b": 1, "c": 2}}
        });
        let pruned = schema.prune(&mut obj);
        assert_eq!(pruned, ["spec.dropped", "status.inner.c"]);
        assert_eq!(obj["free"], json!({"x": [1, {"y": 2}]}));
        assert_eq!(obj["status"], json!({"phase": "Ready", "inner": {"b": 1}}));
    }

    #[test]
    fn additional_properties_keep_map_values_and_prune_within_them() {
        let mut obj = good_network();
        obj["spec"]["labels"] =
            json!({"tier": {"value": "web", "junk": 1}, "zone": {"value": "a"}});
        let pruned = network().prune(&mut obj);
        assert_eq!(pruned, ["spec.labels[tier].junk"]);
        assert_eq!(
            obj["spec"]["labels"],
            json!({"tier": {"value": "web"}, "zone": {"value": "a"}})
        );
        let free_map = CrdSchema::new(
            &json!({"type": "object", "properties": {
                "data": {"type": "object", "additionalProperties": true}
            }}),
            FIELD,
        )
        .unwrap();
        let mut obj = json!({"data": {"a": {"b": [1]}}});
        assert_eq!(free_map.prune(&mut obj), Vec::<String>::new());
        assert_eq!(obj, json!({"data": {"a": {"b": [1]}}}));
    }

    #[test]
    fn an_object_schema_without_properties_keeps_nothing() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object"}}}),
            FIELD,
        )
        .unwrap();
        let mut obj = json!({"spec": {"a": 1, "b": {"c": 2}}});
        assert_eq!(schema.prune(&mut obj), ["spec.a", "spec.b"]);
        assert_eq!(obj, json!({"spec": {}}));
    }

    #[test]
    fn embedded_resources_keep_api_version_kind_and_metadata() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}
                }
            }}),
            FIELD,
        )
        .unwrap();
        let mut obj = json!({"template": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"a": "x", "b": "y"}, "other": 1
        }});
        assert_eq!(
            schema.prune(&mut obj),
            ["template.other", "template.spec.b"]
        );
        assert_eq!(
            obj["template"],
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": "x"}})
        );
    }

    /// A schema with defaults at several depths: a scalar, an object whose own properties have
    /// defaults, a map's values and a list's items, nullable and not.
    fn defaulted() -> CrdSchema {
        CrdSchema::new(
            &json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "size": {"type": "string", "default": "medium"},
                    "replicas": {"type": "integer", "default": 1},
                    "ports": {"type": "array", "items": {"type": "integer"}},
                    "tls": {"type": "object", "default": {}, "properties": {
                        "enabled": {"type": "boolean", "default": false},
                        "secret": {"type": "string"}}},
                    "note": {"type": "string", "nullable": true, "default": "n"},
                    "limits": {"type": "object", "additionalProperties":
                        {"type": "string", "default": "unlimited"}},
                    "rules": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"},
                        "weight": {"type": "integer", "default": 10}}}}
                }}
            }}),
            FIELD,
        )
        .unwrap()
    }

    fn defaults_of(obj: Value) -> Value {
        let mut obj = obj;
        defaulted().default(&mut obj);
        obj
    }

    #[test]
    fn defaults_fill_missing_fields_at_every_depth_their_own_insides_too() {
        assert_eq!(
            defaults_of(json!({"spec": {"rules": [{"name": "a"}, {"name": "b", "weight": 3}]}})),
            json!({"spec": {"size": "medium", "replicas": 1, "tls": {"enabled": false},
                            "note": "n",
                            "rules": [{"name": "a", "weight": 10}, {"name": "b", "weight": 3}]}})
        );
        // What is there stays; nothing is added where the parent is missing.
        assert_eq!(
            defaults_of(json!({"spec": {"size": "large", "tls": {"secret": "s"}}})),
            json!({"spec": {"size": "large", "replicas": 1, "note": "n",
                            "tls": {"enabled": false, "secret": "s"}}})
        );
        assert_eq!(defaults_of(json!({})), json!({}));
    }

    #[test]
    fn a_null_where_none_is_allowed_is_defaulted_or_dropped_and_a_nullable_one_stays() {
        assert_eq!(
            defaults_of(json!({"spec": {"size": null, "ports": null, "note": null,
                                        "limits": {"cpu": null, "mem": "1Gi"}}})),
            json!({"spec": {"size": "medium", "replicas": 1, "tls": {"enabled": false},
                            "note": null, "limits": {"cpu": "unlimited", "mem": "1Gi"}}})
        );
    }

    /// Kubernetes drops a null where none is allowed before it validates: a required field
    /// given `null` is then missing, `Required value`, not a type error.
    #[test]
    fn a_required_field_given_null_is_required_not_of_the_wrong_type() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object",
                "required": ["ports"],
                "properties": {"ports": {"type": "array", "items": {"type": "integer"}}}}}}),
            FIELD,
        )
        .unwrap();
        let mut obj = json!({"spec": {"ports": null}});
        schema.default(&mut obj);
        assert_eq!(obj, json!({"spec": {}}));
        assert_eq!(
            schema.validate(&obj),
            vec![FieldCause::required("spec.ports")]
        );
    }

    #[test]
    fn a_default_must_validate_and_hold_no_unknown_field() {
        let causes = CrdSchema::check(
            &json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer", "default": "large"},
                "tls": {"type": "object", "properties": {"enabled": {"type": "boolean"}},
                        "default": {"enabled": true, "extra": 1}}}}}}),
            FIELD,
        );
        let at = |p: &str| format!("{FIELD}.properties[spec].properties[{p}].default");
        assert_eq!(
            causes,
            vec![
                FieldCause {
                    reason: "FieldValueTypeInvalid".into(),
                    message: format!(
                        "Invalid value: \"string\": {} in body must be of type integer: \"string\"",
                        at("size")
                    ),
                    field: at("size"),
                },
                FieldCause::invalid(
                    at("tls"),
                    r#"{"enabled":true,"extra":1}"#,
                    "must not have unknown fields"
                ),
            ]
        );
    }

    #[test]
    fn nullable_allows_null_besides_the_type() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {
                "a": {"type": "string", "nullable": true, "enum": ["x", "y"]},
                "b": {"type": "string"}
            }}),
            FIELD,
        )
        .unwrap();
        assert_eq!(schema.validate(&json!({"a": null, "b": "s"})), vec![]);
        assert_eq!(schema.validate(&json!({"a": "x"})), vec![]);
        let messages: Vec<String> = schema
            .validate(&json!({"a": 1, "b": null}))
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            messages,
            [
                "a: Invalid value: \"integer\": a in body must be of type string: \"integer\"",
                "a: Unsupported value: 1: supported values: \"x\", \"y\"",
                "b: Invalid value: \"null\": b in body must be of type string: \"null\"",
            ]
        );
    }

    #[test]
    fn int_or_string_takes_an_integer_or_a_string() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {
                "maxSurge": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}
            }}),
            FIELD,
        )
        .unwrap();
        assert_eq!(schema.validate(&json!({"maxSurge": 1})), vec![]);
        assert_eq!(schema.validate(&json!({"maxSurge": "25%"})), vec![]);
        let causes = schema.validate(&json!({"maxSurge": 1.5}));
        // The type, the `anyOf` nothing matched (at no field), its best branch's type.
        assert_eq!(
            fields(&causes),
            ["maxSurge", "<nil>", "maxSurge"],
            "{causes:?}"
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: \"number\": maxSurge in body must be of type integer,string: \"number\""
        );
    }

    #[test]
    fn formats_jsonschema_or_kubernetes_knows_are_checked_unknown_ones_ignored() {
        let schema = CrdSchema::new(
            &json!({"type": "object", "properties": {
                "at": {"type": "string", "format": "date-time"},
                "id": {"type": "string", "format": "uuid"},
                "data": {"type": "string", "format": "byte"},
                "count": {"type": "integer", "format": "int32"},
                "other": {"type": "string", "format": "no-such-format"}
            }}),
            FIELD,
        )
        .unwrap();
        let good = json!({
            "at": "2024-05-01T10:00:00Z", "id": "123e4567-e89b-12d3-a456-426614174000",
            "data": "aGVsbG8=", "count": 3, "other": "anything"
        });
        assert_eq!(schema.validate(&good), vec![]);
        let bad = json!({"at": "yesterday", "id": "123e4567", "data": "not base64!"});
        let causes = schema.validate(&bad);
        assert_eq!(fields(&causes), ["at", "data", "id"]);
        assert_eq!(
            causes[0].message,
            "Invalid value: \"yesterday\": at in body must be of type date-time: \"yesterday\""
        );
    }

    #[test]
    fn a_ref_is_refused_at_its_path() {
        let causes = schema_errors(json!({"type": "object", "properties": {
            "spec": {"$ref": "#/definitions/Spec"}
        }}));
        assert_eq!(
            causes,
            vec![FieldCause::forbidden(
                format!("{FIELD}.properties[spec].$ref"),
                "$ref is not supported"
            )]
        );
    }

    #[test]
    fn an_unknown_type_is_not_supported() {
        let causes = schema_errors(json!({"type": "object", "properties": {
            "spec": {"type": "hashmap"}
        }}));
        assert_eq!(fields(&causes), [format!("{FIELD}.properties[spec].type")]);
        assert_eq!(causes[0].reason, "FieldValueNotSupported");
    }

    #[test]
    fn a_bad_regex_is_invalid_at_its_pattern() {
        let causes = schema_errors(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "a": {"type": "string", "pattern": "^[0-9"},
                "b": {"type": "string", "pattern": "(unclosed"}
            }}
        }}));
        assert_eq!(
            fields(&causes),
            [
                format!("{FIELD}.properties[spec].properties[a].pattern"),
                format!("{FIELD}.properties[spec].properties[b].pattern"),
            ]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: \"^[0-9\": must be a valid regular expression"
        );
    }

    #[test]
    fn the_root_must_be_an_object_schema() {
        assert_eq!(
            fields(&schema_errors(json!({"type": "string"}))),
            [format!("{FIELD}.type")]
        );
        assert_eq!(
            schema_errors(json!({"properties": {}})),
            vec![FieldCause::required(format!("{FIELD}.type"))]
        );
        assert_eq!(
            schema_errors(json!(["not", "an", "object"])),
            vec![FieldCause::type_error(FIELD, "an object")]
        );
        assert_eq!(
            fields(&schema_errors(
                json!({"type": "object", "properties": {"a": "string"}})
            )),
            [format!("{FIELD}.properties[a]")]
        );
    }

    #[test]
    fn what_the_meta_schema_refuses_is_named() {
        let causes = schema_errors(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"n": {"type": "string", "maxLength": -1}}},
            "list": {"type": "array", "items": {"type": "string"}, "minItems": "one"}
        }}));
        let mut got = fields(&causes);
        got.sort_unstable();
        assert_eq!(
            got,
            [
                format!("{FIELD}.properties[list].minItems"),
                format!("{FIELD}.properties[spec].properties[n].maxLength"),
            ]
        );
    }

    #[test]
    fn kubernetes_structural_rules_are_enforced() {
        let causes = schema_errors(json!({"type": "object", "properties": {
            "m": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "l": {"type": "array"},
            "t": {"type": "array", "items": [{"type": "string"}]}
        }}));
        assert_eq!(
            fields(&causes),
            [
                format!("{FIELD}.properties[l].items"),
                format!("{FIELD}.properties[m].additionalProperties"),
                format!("{FIELD}.properties[t].items"),
            ]
        );
    }

    #[test]
    fn annotations_and_extensions_do_not_fail_compiling() {
        let schema = json!({
            "type": "object",
            "description": "d", "example": {"a": 1}, "externalDocs": {"url": "x"}, "title": "t",
            "properties": {
                "list": {
                    "type": "array", "default": [], "x-kubernetes-list-type": "set",
                    "items": {"type": "string", "default": "x"}
                },
                "map": {
                    "type": "object", "x-kubernetes-map-type": "granular",
                    "additionalProperties": {"type": "string"}
                },
                "any": {"x-kubernetes-preserve-unknown-fields": true},
                "when": {"type": "string", "format": "something-custom"}
            }
        });
        assert!(CrdSchema::new(&schema, FIELD).is_ok());
    }

    /// `{"type": "object", "properties": {"a": inner}}`, built without `json!`, which would
    /// copy `inner` recursively.
    fn nest(inner: Value) -> Value {
        let mut properties = Map::new();
        properties.insert("a".into(), inner);
        let mut schema = Map::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), Value::Object(properties));
        Value::Object(schema)
    }

    /// Takes a deep value apart level by level: serde_json drops recursively.
    fn dismantle(mut v: Value) {
        while let Some(next) = v
            .get_mut("properties")
            .and_then(|p| p.get_mut("a"))
            .map(Value::take)
        {
            v = next;
        }
    }

    #[test]
    fn a_deeply_nested_schema_is_refused_without_recursing_through_it() {
        let mut schema = json!({"type": "string"});
        for _ in 0..10_000 {
            schema = nest(schema);
        }
        let causes = CrdSchema::new(&schema, FIELD).err().unwrap_or_default();
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].reason, "FieldValueForbidden");
        assert_eq!(
            causes[0].field,
            format!("{FIELD}{}", ".properties[a]".repeat(MAX_DEPTH + 1))
        );
        dismantle(schema);

        // As deep as allowed still compiles, prunes and validates.
        let mut schema = json!({"type": "object", "properties": {"leaf": {"type": "integer"}}});
        let mut obj = json!({"leaf": "x", "drop": 1});
        for _ in 0..MAX_DEPTH - 1 {
            schema = nest(schema);
            obj = json!({ "a": obj });
        }
        let compiled = CrdSchema::new(&schema, FIELD).unwrap();
        let prefix = "a.".repeat(MAX_DEPTH - 1);
        assert_eq!(compiled.prune(&mut obj), [format!("{prefix}drop")]);
        assert_eq!(fields(&compiled.validate(&obj)), [format!("{prefix}leaf")]);
    }

    #[test]
    fn an_array_without_items_schema_loses_the_keys_of_its_objects() {
        let schema =
            CrdSchema::new(&json!({"type": "object", "properties": {"l": {}}}), FIELD).unwrap();
        let mut obj = json!({"l": [1, {"a": 1}, [{"b": 2}]]});
        assert_eq!(schema.prune(&mut obj), ["l[1].a", "l[2][0].b"]);
        assert_eq!(obj, json!({"l": [1, {}, [{}]]}));
    }

    fn with_rule_on_spec(spec: Value, rule: &str) -> Value {
        let mut spec = spec;
        spec["x-kubernetes-validations"] = json!([{"rule": rule}]);
        json!({"type": "object", "properties": {"spec": spec}})
    }

    #[test]
    fn a_rule_reading_an_undefined_field_is_refused_where_it_is_written() {
        let spec = json!({"type": "object", "properties": {"replicas": {"type": "integer"}}});
        let causes = schema_errors(with_rule_on_spec(spec.clone(), "self.nosuchfield == 1"));
        assert_eq!(
            causes,
            vec![FieldCause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"self.nosuchfield == 1\": compilation failed: ERROR: <input>:1:5: undefined field 'nosuchfield'\n | self.nosuchfield == 1\n | ....^".into(),
                field: format!("{FIELD}.properties[spec].x-kubernetes-validations[0].rule"),
            }]
        );
        assert!(CrdSchema::new(&with_rule_on_spec(spec, "self.replicas >= 0"), FIELD).is_ok());
    }

    #[test]
    fn a_rule_over_the_cost_limit_is_forbidden_unless_bounded() {
        let rule = "self.all(x, self.all(y, x == y))";
        let list = json!({"type": "array", "items": {"type": "string"}});
        let causes = schema_errors(with_rule_on_spec(list, rule));
        let rule_field = format!("{FIELD}.properties[spec].x-kubernetes-validations[0].rule");
        assert_eq!(
            causes.iter().map(|c| c.field.as_str()).collect::<Vec<_>>(),
            [rule_field.as_str(), rule_field.as_str(), FIELD]
        );
        assert!(causes[0].message.starts_with(
            "Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule"
        ));
        assert_eq!(
            causes[1].message,
            "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
        );
        let bounded =
            json!({"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10}});
        assert!(CrdSchema::new(&with_rule_on_spec(bounded, rule), FIELD).is_ok());
    }

    /// A schema whose `spec` holds `spec_properties`.
    fn spec_schema(spec_properties: Value) -> CrdSchema {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": spec_properties}}});
        match CrdSchema::new(&schema, FIELD) {
            Ok(s) => s,
            Err(e) => panic!("{e:?}"),
        }
    }

    fn strings(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i:06}")).collect()
    }

    /// A rule whose static estimate is over the per-call limit (but within the CRD's) is
    /// estimated again with the sizes of the value: on a long list it would cost more than
    /// 1,000,000, so it is not evaluated, the error is Kubernetes', and nothing else is judged;
    /// on a short one it runs.
    #[test]
    fn a_rule_too_costly_for_the_value_stops_validation_with_the_per_call_error() {
        let schema = spec_schema(json!({"list": {
            "type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 7},
            "x-kubernetes-validations": [
                {"rule": "self.all(x, self.exists(y, x == y))", "message": "each is there"},
                {"rule": "self.size() < 0", "message": "never holds"}]}}));
        let long = json!({"spec": {"list": strings(1000)}});
        let causes = schema.check_rules(&long, None, false);
        assert_eq!(
            causes
                .iter()
                .map(|c| (c.field.as_str(), c.message.as_str()))
                .collect::<Vec<_>>(),
            [(
                "spec.list",
                "Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: each is there"
            )]
        );
        let short = json!({"spec": {"list": strings(10)}});
        let causes = schema.check_rules(&short, None, false);
        assert_eq!(
            causes
                .iter()
                .map(|c| c.message.as_str())
                .collect::<Vec<_>>(),
            ["Invalid value: \"array\": never holds"]
        );
    }

    /// Each group's six rules cost about 200,000 an evaluation (a long string matched by a
    /// long regular expression; 800,000 estimated from the schema, which counts 4 bytes a
    /// character), but twelve groups with long strings need more than the 10,000,000 of one
    /// validation: the walk stops where the budget runs out, with
    /// Kubernetes' error, once. Twelve groups of short strings fit, though the rules' static
    /// estimates together would not.
    #[test]
    fn rules_together_over_the_budget_stop_validation_where_it_runs_out() {
        let rule = format!("self.s.matches('^(a*|{})$')", "z".repeat(392));
        let schema = spec_schema(json!({"groups": {
            "type": "array", "maxItems": 12, "items": {
                "type": "object",
                "properties": {"s": {"type": "string", "maxLength": 20000}},
                "x-kubernetes-validations": vec![json!({"rule": rule}); 6]}}}));
        let groups = |n: usize| {
            let group = json!({"s": "a".repeat(n)});
            json!({"spec": {"groups": vec![group; 12]}})
        };
        let causes = schema.check_rules(&groups(20000), None, false);
        assert_eq!(causes.len(), 1, "{causes:?}");
        // 200,102 an evaluation: eight groups take 9,604,896, the ninth's second rule no more fits.
        assert_eq!(causes[0].field, "spec.groups[8]");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": validation failed due to running out of cost budget, no further validation rules will be run"
        );
        assert_eq!(schema.check_rules(&groups(10), None, false), Vec::new());
    }

    /// A failing rule's messageExpression is charged too: with what remains too little for
    /// it, the violation is the budget's, on the rule's field.
    #[test]
    fn a_message_expression_over_the_remaining_budget_is_the_budget_error() {
        let schema = spec_schema(json!({"list": {
            "type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 7},
            "x-kubernetes-validations": [{"rule": "self.size() < 0",
                "messageExpression": "self.all(x, self.exists(y, x == y)) ? 'all there' : 'not'"}]}}));
        let causes = schema.check_rules(&json!({"spec": {"list": strings(5)}}), None, false);
        assert_eq!(
            causes
                .iter()
                .map(|c| c.message.as_str())
                .collect::<Vec<_>>(),
            ["Invalid value: \"array\": all there"]
        );
        let causes = schema.check_rules(&json!({"spec": {"list": strings(1000)}}), None, false);
        assert_eq!(
            causes
                .iter()
                .map(|c| c.message.as_str())
                .collect::<Vec<_>>(),
            [
                "Invalid value: \"array\": no further validation rules will be run due to call cost exceeds limit for messageExpression: \"self.all(x, self.exists(y, x == y)) ? 'all there' : 'not'\""
            ]
        );
    }
}
