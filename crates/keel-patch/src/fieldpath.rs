//! Sets of field paths: what server-side apply records each manager as owning
//! (structured-merge-diff's `fieldpath` package), and their wire form, `FieldsV1`
//! (`metadata.managedFields[].fieldsV1`). docs/server-side-apply.md §2.2 has the format.
//!
//! A path is a list of [`PathElement`]s from the object's root: a field or map key, an
//! associative list item by its key fields, a set item by its value, or a list index. A
//! [`Set`] is a trie of paths: a node's *members* are the paths that end there; its
//! *children* are the subtrees below. In `FieldsV1` a member is `{}`, a child is an object of
//! its own elements, and a path that is both opens its object with `".": {}`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde_json::{Map, Value};

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathElement {
    /// A struct field or map key (`f:name`).
    Field(String),
    /// An associative list's item by its key fields, sorted by name (`k:{"name":"nginx"}`).
    Key(Vec<(String, Value)>),
    /// A set's item by its value (`v:"x"`).
    Value(Value),
    /// A list item by its index (`i:3`): atomic lists are owned whole, so built-in kinds never
    /// write one.
    Index(usize),
}

/// Why a `FieldsV1` value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsV1Error {
    #[error("{at}: expected an object, found {found}")]
    NotAnObject { at: String, found: String },
    #[error("{at}: {key:?} is not a path element ({why})")]
    BadKey {
        at: String,
        key: String,
        why: String,
    },
}

impl PathElement {
    /// The element a `FieldsV1` key names: `f:`, `k:`, `v:` or `i:` and its content; `None`
    /// for a key of another type, which readers skip (structured-merge-diff's `readIterV1`).
    pub fn parse(key: &str) -> Result<Option<PathElement>, String> {
        let Some((kind, content)) = key.split_once(':') else {
            return Err("no type prefix".into());
        };
        Ok(Some(match kind {
            "f" => PathElement::Field(content.to_string()),
            "k" => {
                let Value::Object(fields) = serde_json::from_str::<Value>(content)
                    .map_err(|e| format!("key fields are not JSON: {e}"))?
                else {
                    return Err("key fields are not a JSON object".into());
                };
                PathElement::key(fields)
            }
            "v" => PathElement::Value(
                serde_json::from_str(content).map_err(|e| format!("value is not JSON: {e}"))?,
            ),
            "i" => PathElement::Index(
                content
                    .parse()
                    .map_err(|_| "index is not a non-negative integer".to_string())?,
            ),
            _ => return Ok(None),
        }))
    }

    /// An item's key from its key fields, in the order paths compare them (by name).
    pub fn key(fields: Map<String, Value>) -> PathElement {
        let mut fields: Vec<(String, Value)> = fields.into_iter().collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields)
    }

    /// The element as a `FieldsV1` key.
    pub fn to_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
                    .collect();
                format!("k:{{{}}}", body.join(","))
            }
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }
}

/// Paths' order, as structured-merge-diff's `PathElement.Compare`: fields, then keys, then
/// values, then indexes; fields by name, keys field by field, values as
/// [`compare_values`] orders them.
impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((an, av), (bn, bv)) in a.iter().zip(b) {
                    let c = an.cmp(bn).then_with(|| compare_values(av, bv));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Eq for PathElement {}

/// JSON values in structured-merge-diff's order: numbers (compared numerically, integers and
/// floats alike), then strings, booleans, lists, maps, and null last.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.total_cmp(&y)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (a, b) in x.iter().zip(y) {
                let c = compare_values(a, b);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<(&String, &Value)> = x.iter().collect();
            let mut ys: Vec<(&String, &Value)> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((xk, xv), (yk, yv)) in xs.iter().zip(&ys) {
                let c = xk.cmp(yk).then_with(|| compare_values(xv, yv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        (a, b) => rank(a).cmp(&rank(b)),
    }
}

/// How a path reads in a conflict message: `.spec.replicas`,
/// `.spec.containers[name="nginx"].image`, `[="x"]`, `[3]` (structured-merge-diff's
/// `Path.String`).
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object's root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|e| write!(f, "{e}"))
    }
}

/// A set of paths, as a trie.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Set {
    /// Elements ending a path here (a leaf, or a node that is itself owned: `"."`).
    members: BTreeSet<PathElement>,
    /// Subtrees below an element.
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Set {
        Set::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    /// Adds `path` (the empty path adds nothing: the root is never owned).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The elements that end a path here.
    pub(crate) fn members(&self) -> &BTreeSet<PathElement> {
        &self.members
    }

    /// The subtrees below each element.
    pub(crate) fn children(&self) -> &BTreeMap<PathElement, Set> {
        &self.children
    }

    /// Whether the set holds a path below `path` (not `path` itself).
    pub fn has_below(&self, path: &[PathElement]) -> bool {
        match path {
            [] => !self.is_empty(),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has_below(rest)),
        }
    }

    /// Every path in the set, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.walk(&mut Vec::new(), &mut out);
        out.sort();
        out
    }

    fn walk(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for e in &self.members {
            prefix.push(e.clone());
            out.push(Path(prefix.clone()));
            prefix.pop();
        }
        for (e, child) in &self.children {
            prefix.push(e.clone());
            child.walk(prefix, out);
            prefix.pop();
        }
    }

    /// The paths in either set.
    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    /// Adds the paths of `other`, in place.
    pub fn union_with(&mut self, other: &Set) {
        for e in &other.members {
            if !self.members.contains(e) {
                self.members.insert(e.clone());
            }
        }
        for (e, child) in &other.children {
            match self.children.get_mut(e) {
                Some(mine) => mine.union_with(child),
                None => {
                    self.children.insert(e.clone(), child.clone());
                }
            }
        }
    }

    /// The paths of `self` that are neither in `gone` nor below one of its paths: what is
    /// left of a manager's set once `gone` has left the object.
    pub fn without_below(&self, gone: &Set) -> Set {
        let mut out = Set::new();
        for e in &self.members {
            if !gone.members.contains(e) {
                out.members.insert(e.clone());
            }
        }
        for (e, child) in &self.children {
            if gone.members.contains(e) {
                continue;
            }
            let rest = match gone.children.get(e) {
                Some(below) => child.without_below(below),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(e.clone(), rest);
            }
        }
        out
    }

    /// The paths of `self` not in `other`.
    pub fn difference(&self, other: &Set) -> Set {
        let mut out = Set::new();
        for e in &self.members {
            if !other.members.contains(e) {
                out.members.insert(e.clone());
            }
        }
        for (e, child) in &self.children {
            let rest = match other.children.get(e) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(e.clone(), rest);
            }
        }
        out
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &Set) -> Set {
        let mut out = Set::new();
        for e in &self.members {
            if other.members.contains(e) {
                out.members.insert(e.clone());
            }
        }
        for (e, child) in &self.children {
            if let Some(theirs) = other.children.get(e) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(e.clone(), both);
                }
            }
        }
        out
    }

    /// The set a `FieldsV1` value holds. Keys of unknown types are skipped, as Kubernetes'
    /// reader skips them.
    pub fn from_fields_v1(v: &Value) -> Result<Set, FieldsV1Error> {
        let mut out = Set::new();
        read(v, "", &mut out)?;
        Ok(out)
    }

    /// [`Set::to_fields_v1`] as a JSON value, built directly.
    pub fn to_fields_v1_value(&self) -> Value {
        self.value(false)
    }

    fn value(&self, member: bool) -> Value {
        let mut m = Map::new();
        if member {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for e in &self.members {
            m.insert(e.to_key(), Value::Object(Map::new()));
        }
        for (e, child) in &self.children {
            if !child.is_empty() {
                m.insert(e.to_key(), child.value(self.members.contains(e)));
            }
        }
        Value::Object(m)
    }

    /// The set as `FieldsV1` text, byte for byte as Kubernetes writes it: `"."` first, then the
    /// elements in path order (a JSON map would sort them by their text instead).
    pub fn to_fields_v1(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, false);
        out
    }

    fn write(&self, out: &mut String, member: bool) {
        out.push('{');
        let mut first = true;
        let mut comma = |out: &mut String| {
            if !first {
                out.push(',');
            }
            first = false;
        };
        if member {
            comma(out);
            out.push_str("\".\":{}");
        }
        let mut elements: Vec<&PathElement> = self
            .members
            .iter()
            .chain(self.children.keys().filter(|e| !self.members.contains(*e)))
            .collect();
        elements.sort();
        elements.dedup();
        for e in elements {
            let child = self.children.get(e).filter(|c| !c.is_empty());
            comma(out);
            out.push_str(&Value::String(e.to_key()).to_string());
            out.push(':');
            match child {
                Some(c) => c.write(out, self.members.contains(e)),
                None => out.push_str("{}"),
            }
        }
        out.push('}');
    }
}

/// Paths no manager ever owns (Kubernetes' `StripMeta`): the kind, and the metadata the
/// server keeps.
const NEVER_OWNED: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
];

/// Why a configuration has no field set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {why}")]
pub struct FieldSetError {
    pub path: String,
    pub why: String,
}

/// The fields an applier owns for sending `config` (structured-merge-diff's `ToFieldSet`):
/// every scalar and atomic list or map it sent, every item of a keyed list (by its key, with
/// the schema's defaults for omitted key fields) or of a set (by value) and what it sent
/// inside, every key of a map of items it sent ([`crate::MergeSchema::keys_are_items`]: `"f:s1":
/// {".": {}, ...}`); a field whose value is an empty map or a null as itself; but the structs
/// on the way are not owned, an empty set or keyed list owns nothing, and neither is what
/// [`NEVER_OWNED`] names. Lists merge, and maps are atomic or granular, as `schema` says.
pub fn to_field_set(config: &Value, schema: &dyn crate::MergeSchema) -> Result<Set, FieldSetError> {
    let mut out = Set::new();
    let Value::Object(m) = config else {
        return Err(FieldSetError {
            path: String::new(),
            why: "a configuration is an object".into(),
        });
    };
    let mut at = Vec::new();
    visit_map(
        m,
        schema,
        &mut Vec::new(),
        &mut at,
        &mut out,
        crate::MAX_DEPTH,
    )?;
    Ok(out.difference(never_owned()))
}

/// What a write from `live` to `new` changed (structured-merge-diff's `Compare`: added and
/// modified, not removed): what an Update manager comes to own. A map, struct, set or keyed
/// list that is new is owned itself (`"."`) with what it holds, and so is a list item; a
/// scalar, an atomic list or map, or an empty map or list that is new or differs is owned
/// itself; a map emptied is not (its keys are removed); the server's metadata never is.
pub fn changed(
    live: &Value,
    new: &Value,
    schema: &dyn crate::MergeSchema,
) -> Result<Set, FieldSetError> {
    match (live, new) {
        (Value::Object(live), Value::Object(new)) => changed_fields(live, new, schema),
        // The root is never owned, and nothing is below a value that is not an object.
        _ => Ok(Set::new()),
    }
}

/// What a write that created `obj` owns: [`changed`] from nothing to it, every map, list and
/// item with its `"."`. It is what Kubernetes records for `before-first-apply`, the Update it
/// runs from an empty object to the live one when an object nobody is recorded as owning is
/// applied (`skipNonApplied`), and what a create records.
pub fn field_set_of(
    obj: &Map<String, Value>,
    schema: &dyn crate::MergeSchema,
) -> Result<Set, FieldSetError> {
    changed_fields(&Map::new(), obj, schema)
}

/// [`changed`] between two objects' fields, with no copy of either.
pub fn changed_fields(
    live: &Map<String, Value>,
    new: &Map<String, Value>,
    schema: &dyn crate::MergeSchema,
) -> Result<Set, FieldSetError> {
    Ok(compare_fields(live, new, schema)?.changed)
}

/// What a write from `live` to `new` did, in one walk of both.
#[derive(Debug, Default)]
pub struct Diff {
    /// Added or modified ([`changed`]).
    pub changed: Set,
    /// Gone: each path of `live` that `new` lacks, the topmost only (what it held went with
    /// it: [`Set::without_below`]).
    pub removed: Set,
}

/// [`Diff`] of two objects' fields.
pub fn compare_fields(
    live: &Map<String, Value>,
    new: &Map<String, Value>,
    schema: &dyn crate::MergeSchema,
) -> Result<Diff, FieldSetError> {
    let mut out = Diff::default();
    diff_fields(
        new,
        Some(live),
        schema,
        &mut Vec::new(),
        &mut Vec::new(),
        &mut out,
        crate::MAX_DEPTH,
    )?;
    let never = never_owned();
    Ok(Diff {
        changed: out.changed.difference(never),
        removed: out.removed.difference(never),
    })
}

/// [`diff`] of each field of `new` against the same field of `live`.
fn diff_fields(
    new: &Map<String, Value>,
    live: Option<&Map<String, Value>>,
    schema: &dyn crate::MergeSchema,
    fields: &mut Vec<String>,
    at: &mut Vec<PathElement>,
    out: &mut Diff,
    depth: usize,
) -> Result<(), FieldSetError> {
    for (k, v) in new {
        let before = live.and_then(|l| l.get(k));
        if before == Some(v) {
            // Nothing changed at or below an equal field (a write changes few of many).
            continue;
        }
        at.push(PathElement::Field(k.clone()));
        fields.push(k.clone());
        let result = diff(v, before, schema, fields, at, out, depth - 1);
        fields.pop();
        at.pop();
        result?;
    }
    for k in live.into_iter().flat_map(|l| l.keys()) {
        if !new.contains_key(k) {
            at.push(PathElement::Field(k.clone()));
            out.removed.insert(at);
            at.pop();
        }
    }
    Ok(())
}

/// Compares one value of `new` with the same of `live` (`None`: `live` has none), as
/// structured-merge-diff's `Compare` walks them: a leaf (a scalar, an atomic list or map, or
/// empty containers on both sides) is changed when new or different; a granular map, set or
/// keyed list is compared item by item, and is changed itself only when it is new.
fn diff(
    new: &Value,
    live: Option<&Value>,
    schema: &dyn crate::MergeSchema,
    fields: &mut Vec<String>,
    at: &mut Vec<PathElement>,
    out: &mut Diff,
    depth: usize,
) -> Result<(), FieldSetError> {
    if depth == 0 {
        return Err(FieldSetError {
            path: Path(at.clone()).to_string(),
            why: format!("nested deeper than {}", crate::MAX_DEPTH),
        });
    }
    let leaf = |out: &mut Diff, at: &[PathElement]| {
        if live != Some(new) {
            out.changed.insert(at);
        }
    };
    match new {
        Value::Object(m) if atomic(schema, fields) || (m.is_empty() && empty_or_absent(live)) => {
            leaf(out, at);
        }
        Value::Object(m) => {
            let before = live.and_then(Value::as_object);
            if before.is_none() {
                out.changed.insert(at);
            }
            diff_fields(m, before, schema, fields, at, out, depth)?;
        }
        Value::Array(items) => {
            let names: Vec<String> = fields.clone();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let strategy = schema.list_strategy(&names);
            if strategy == crate::ListStrategy::Replace
                || (items.is_empty() && empty_or_absent(live))
            {
                leaf(out, at);
                return Ok(());
            }
            let live_items = live.and_then(Value::as_array);
            if live_items.is_none() {
                out.changed.insert(at);
            }
            match strategy {
                crate::ListStrategy::Replace => {}
                crate::ListStrategy::Set => {
                    let before: std::collections::HashSet<String> = live_items
                        .into_iter()
                        .flatten()
                        .map(Value::to_string)
                        .collect();
                    let mut now = std::collections::HashSet::with_capacity(items.len());
                    for item in items {
                        let text = item.to_string();
                        if !before.contains(&text) {
                            at.push(PathElement::Value(item.clone()));
                            out.changed.insert(at);
                            at.pop();
                        }
                        now.insert(text);
                    }
                    for l in live_items.into_iter().flatten() {
                        if !now.contains(&l.to_string()) {
                            at.push(PathElement::Value(l.clone()));
                            out.removed.insert(at);
                            at.pop();
                        }
                    }
                }
                crate::ListStrategy::MergeByKeys(keys) => {
                    let key_of = |item: &Value| item_key(item, &keys, schema, &names);
                    // The live items by key, the first of each.
                    let mut live_by_key: HashMap<String, &Value> = HashMap::new();
                    for l in live_items.into_iter().flatten() {
                        if let Some(k) = key_of(l) {
                            live_by_key.entry(Value::Object(k).to_string()).or_insert(l);
                        }
                    }
                    for item in items {
                        let Some(key) = key_of(item) else {
                            return Err(FieldSetError {
                                path: Path(at.clone()).to_string(),
                                why: "an item of a keyed list omits a key field".into(),
                            });
                        };
                        let before = live_by_key.remove(&Value::Object(key.clone()).to_string());
                        at.push(PathElement::key(key));
                        let whole = atomic(schema, fields);
                        if before.is_none() || (whole && before != Some(item)) {
                            out.changed.insert(at);
                        }
                        if let (Value::Object(m), false) = (item, whole)
                            && before != Some(item)
                        {
                            let before = before.and_then(Value::as_object);
                            diff_fields(m, before, schema, fields, at, out, depth)?;
                        }
                        at.pop();
                    }
                    // The live items `new` has no item of.
                    for l in live_by_key.into_values() {
                        if let Some(key) = key_of(l) {
                            at.push(PathElement::key(key));
                            out.removed.insert(at);
                            at.pop();
                        }
                    }
                }
            }
        }
        // A null where a granular map or an associative list was: structured-merge-diff reads
        // it as that container, empty, so its items are removed and it is not changed itself.
        Value::Null if !atomic(schema, fields) && !empty_or_absent(live) => match live {
            Some(Value::Object(before)) => {
                for k in before.keys() {
                    at.push(PathElement::Field(k.clone()));
                    out.removed.insert(at);
                    at.pop();
                }
            }
            Some(Value::Array(_)) => {
                let empty = Value::Array(Vec::new());
                diff(&empty, live, schema, fields, at, out, depth)?;
            }
            _ => leaf(out, at),
        },
        _ => leaf(out, at),
    }
    Ok(())
}

/// The key of `item` in the keyed list at field path `names` (its `keys`, each from the item
/// or the schema's default); `None` when a key field has neither.
pub(crate) fn item_key(
    item: &Value,
    keys: &[String],
    schema: &dyn crate::MergeSchema,
    names: &[&str],
) -> Option<Map<String, Value>> {
    let item = item.as_object()?;
    keys.iter()
        .map(|k| {
            let v = item
                .get(k)
                .cloned()
                .or_else(|| schema.merge_key_default(names, k))?;
            Some((k.clone(), v))
        })
        .collect()
}

/// A configuration's list holding one item twice (Kubernetes refuses it).
fn duplicate(at: &[PathElement], item: &PathElement) -> FieldSetError {
    FieldSetError {
        path: Path(at.to_vec()).to_string(),
        why: format!("duplicate entries for key {item}"),
    }
}

/// Whether the map at the field path `fields` is one value to apply.
pub(crate) fn atomic(schema: &dyn crate::MergeSchema, fields: &[String]) -> bool {
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    schema.map_atomic(&names)
}

/// Whether the keys of the object at the field path `fields` are items (a map), not declared
/// fields (a struct).
pub(crate) fn keys_are_items(schema: &dyn crate::MergeSchema, fields: &[String]) -> bool {
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    schema.keys_are_items(&names)
}

/// Whether `v` is absent, null, or an empty map or list: what structured-merge-diff compares
/// as one value rather than item by item ("emptyPromoteToLeaf"), so that `{}` and `[]` are
/// owned and changed themselves.
fn empty_or_absent(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// [`NEVER_OWNED`] as a set, made once.
pub(crate) fn never_owned() -> &'static Set {
    static NEVER: std::sync::LazyLock<Set> = std::sync::LazyLock::new(|| {
        let mut s = Set::new();
        for path in NEVER_OWNED {
            let path: Vec<PathElement> = path
                .iter()
                .map(|f| PathElement::Field(f.to_string()))
                .collect();
            s.insert(&path);
        }
        s
    });
    &NEVER
}

fn visit_map(
    m: &Map<String, Value>,
    schema: &dyn crate::MergeSchema,
    fields: &mut Vec<String>,
    at: &mut Vec<PathElement>,
    out: &mut Set,
    depth: usize,
) -> Result<(), FieldSetError> {
    if depth == 0 {
        return Err(FieldSetError {
            path: Path(at.clone()).to_string(),
            why: format!("nested deeper than {}", crate::MAX_DEPTH),
        });
    }
    let items = keys_are_items(schema, fields);
    for (k, v) in m {
        at.push(PathElement::Field(k.clone()));
        fields.push(k.clone());
        visit_value(v, schema, fields, at, out, depth - 1)?;
        // A map's key is owned as an item; a struct's field only as a leaf (above).
        if items {
            out.insert(at);
        }
        fields.pop();
        at.pop();
    }
    Ok(())
}

fn visit_value(
    v: &Value,
    schema: &dyn crate::MergeSchema,
    fields: &mut Vec<String>,
    at: &mut Vec<PathElement>,
    out: &mut Set,
    depth: usize,
) -> Result<(), FieldSetError> {
    match v {
        Value::Object(m) if !m.is_empty() && !atomic(schema, fields) => {
            visit_map(m, schema, fields, at, out, depth)
        }
        Value::Array(items) => {
            let strategy = {
                let names: Vec<&str> = fields.iter().map(String::as_str).collect();
                schema.list_strategy(&names)
            };
            match strategy {
                crate::ListStrategy::Replace => out.insert(at),
                crate::ListStrategy::Set => {
                    let mut seen = BTreeSet::new();
                    for item in items {
                        let pe = PathElement::Value(item.clone());
                        if !seen.insert(pe.clone()) {
                            return Err(duplicate(at, &pe));
                        }
                        at.push(pe);
                        out.insert(at);
                        at.pop();
                    }
                }
                crate::ListStrategy::MergeByKeys(keys) => {
                    let mut seen = BTreeSet::new();
                    for item in items {
                        let Value::Object(fields_of_item) = item else {
                            return Err(FieldSetError {
                                path: Path(at.clone()).to_string(),
                                why: "an item of a keyed list is an object".into(),
                            });
                        };
                        let mut key = Map::new();
                        for k in &keys {
                            let value = fields_of_item.get(k).cloned().or_else(|| {
                                let names: Vec<&str> = fields.iter().map(String::as_str).collect();
                                schema.merge_key_default(&names, k)
                            });
                            match value {
                                Some(v) => key.insert(k.clone(), v),
                                None => {
                                    return Err(FieldSetError {
                                        path: Path(at.clone()).to_string(),
                                        why: format!("an item omits its key field {k:?}"),
                                    });
                                }
                            };
                        }
                        let pe = PathElement::key(key);
                        if !seen.insert(pe.clone()) {
                            return Err(duplicate(at, &pe));
                        }
                        at.push(pe);
                        out.insert(at);
                        if atomic(schema, fields) {
                            at.pop();
                            continue;
                        }
                        visit_map(
                            fields_of_item,
                            schema,
                            fields,
                            at,
                            out,
                            depth.saturating_sub(1),
                        )?;
                        at.pop();
                    }
                }
            }
            Ok(())
        }
        _ => {
            out.insert(at);
            Ok(())
        }
    }
}

fn read(v: &Value, at: &str, out: &mut Set) -> Result<(), FieldsV1Error> {
    let Value::Object(m) = v else {
        return Err(FieldsV1Error::NotAnObject {
            at: at.to_string(),
            found: v.to_string(),
        });
    };
    for (key, child) in m {
        if key == "." {
            continue;
        }
        let here = format!("{at}/{key}");
        let element = PathElement::parse(key).map_err(|why| FieldsV1Error::BadKey {
            at: at.to_string(),
            key: key.clone(),
            why,
        })?;
        let Some(element) = element else { continue };
        let Value::Object(inner) = child else {
            return Err(FieldsV1Error::NotAnObject {
                at: here,
                found: child.to_string(),
            });
        };
        if inner.is_empty() || inner.contains_key(".") {
            out.members.insert(element.clone());
        }
        if inner.keys().any(|k| k != ".") {
            let mut sub = Set::new();
            read(child, &here, &mut sub)?;
            out.children.insert(element, sub);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    fn key(v: Value) -> PathElement {
        let Value::Object(m) = v else {
            panic!("not an object")
        };
        PathElement::key(m)
    }

    /// docs/server-side-apply.md §2.2's example: a Deployment applied by kubectl.
    const DEPLOYMENT: &str = r#"{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}}}}"#;

    #[test]
    fn fields_v1_reads_and_writes_back_byte_for_byte() {
        let v: Value = serde_json::from_str(DEPLOYMENT).unwrap();
        let set = Set::from_fields_v1(&v).unwrap();
        assert_eq!(set.to_fields_v1(), DEPLOYMENT);
        assert_eq!(set.to_fields_v1_value(), v, "the same built as a value");
        let nginx = key(json!({"name": "nginx"}));
        let container = [
            f("spec"),
            f("template"),
            f("spec"),
            f("containers"),
            nginx.clone(),
        ];
        assert!(set.has(&container), "the item itself is owned (\".\")");
        assert!(set.has(&[&container[..], &[f("image")]].concat()));
        assert!(
            !set.has(&[f("spec"), f("template")]),
            "intermediate structs are not"
        );
        assert!(set.has(&[f("spec"), f("selector")]));
        let paths: Vec<String> = set.paths().iter().map(Path::to_string).collect();
        assert!(paths.contains(&".spec.template.spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].containerPort".to_string()), "{paths:?}");
        assert_eq!(paths.len(), 9, "{paths:?}");
    }

    #[test]
    fn an_appliers_fields_are_what_it_sent_keyed_as_the_schema_says() {
        let config = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "nginx", "labels": {"app": "nginx"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}},
                "template": {"metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}], "args": ["-g", "daemon off;"]}]}}},
        });
        let schema = crate::BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
        let set = to_field_set(&config, &schema).unwrap();
        let paths: Vec<String> = set.paths().iter().map(Path::to_string).collect();
        let c = ".spec.template.spec.containers[name=\"nginx\"]";
        for want in [
            ".metadata.labels.app".to_string(),
            ".spec.replicas".into(),
            ".spec.selector".into(),
            c.to_string(),
            format!("{c}.image"),
            format!("{c}.args"),
            format!("{c}.ports[containerPort=80,protocol=\"TCP\"]"),
            format!("{c}.ports[containerPort=80,protocol=\"TCP\"].containerPort"),
        ] {
            assert!(paths.contains(&want), "{want} in {paths:?}");
        }
        assert!(
            !paths
                .iter()
                .any(|p| p.starts_with(".apiVersion") || p == ".metadata.name")
        );
        assert!(!set.has(&[f("spec")]), "structs on the way are not owned");
        assert!(
            !paths.iter().any(|p| p.starts_with(".spec.selector.")),
            "a LabelSelector is atomic: {paths:?}"
        );
        let bad = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let e = to_field_set(&bad, &schema).unwrap_err();
        assert!(e.why.contains("\"name\""), "{e}");
    }

    #[test]
    fn an_update_owns_what_it_added_or_changed() {
        let schema = crate::BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
        let live = json!({"metadata": {"name": "web", "resourceVersion": "7"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "a", "image": "a:1"}]}}}});
        let new = json!({"metadata": {"name": "web", "resourceVersion": "8",
                "labels": {"team": "x"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "a", "image": "a:1"},
                {"name": "b", "image": "b:1", "ports": [{"containerPort": 80}]}]}}}});
        let set = changed(&live, &new, &schema).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            r#"{"f:metadata":{"f:labels":{".":{},"f:team":{}}},"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"b\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}}}}"#,
            "a new keyed list is owned itself, as smd's Compare adds it"
        );
        assert!(changed(&new, &new, &schema).unwrap().is_empty());
    }

    #[test]
    fn atomic_structs_and_maps_are_owned_and_changed_whole() {
        let rs = crate::BuiltinSchema::for_kind("apps/v1", "ReplicaSet").unwrap();
        let config = json!({"metadata": {"ownerReferences": [
            {"uid": "u1", "name": "web", "kind": "Deployment", "apiVersion": "apps/v1"}]}});
        let paths: Vec<String> = to_field_set(&config, &rs)
            .unwrap()
            .paths()
            .iter()
            .map(Path::to_string)
            .collect();
        assert_eq!(paths, [".metadata.ownerReferences[uid=\"u1\"]"]);
        let svc = crate::BuiltinSchema::for_kind("v1", "Service").unwrap();
        let live = json!({"spec": {"selector": {"app": "web", "tier": "a"}}});
        let new = json!({"spec": {"selector": {"app": "web", "tier": "b"}}});
        assert_eq!(
            changed(&live, &new, &svc).unwrap().to_fields_v1(),
            r#"{"f:spec":{"f:selector":{}}}"#
        );
        let mut renamed = config.clone();
        renamed["metadata"]["ownerReferences"][0]["name"] = json!("other");
        assert_eq!(
            changed(&config, &renamed, &rs).unwrap().to_fields_v1(),
            r#"{"f:metadata":{"f:ownerReferences":{"k:{\"uid\":\"u1\"}":{}}}}"#
        );
    }

    #[test]
    fn elements_sort_fields_keys_values_indexes_and_numbers_numerically() {
        let mut set = Set::new();
        for e in [
            PathElement::Index(0),
            PathElement::Value(json!("a")),
            key(json!({"port": 443})),
            key(json!({"port": 80})),
            f("b"),
            f("a"),
        ] {
            set.insert(&[f("x"), e]);
        }
        assert_eq!(
            set.to_fields_v1(),
            r#"{"f:x":{"f:a":{},"f:b":{},"k:{\"port\":80}":{},"k:{\"port\":443}":{},"v:\"a\"":{},"i:0":{}}}"#
        );
        assert!(compare_values(&json!(2), &json!(10.5)).is_lt());
        assert!(compare_values(&json!(10), &json!("1")).is_lt());
        assert!(compare_values(&json!("z"), &json!(false)).is_lt());
    }

    #[test]
    fn union_difference_and_intersection_follow_paths() {
        let path = |p: &[&str]| p.iter().map(|s| f(s)).collect::<Vec<_>>();
        let mut a = Set::new();
        a.insert(&path(&["spec", "replicas"]));
        a.insert(&path(&["spec", "template", "image"]));
        let mut b = Set::new();
        b.insert(&path(&["spec", "replicas"]));
        b.insert(&path(&["metadata", "labels", "app"]));
        let both = a.intersection(&b);
        assert_eq!(both.to_fields_v1(), r#"{"f:spec":{"f:replicas":{}}}"#);
        let only_a = a.difference(&b);
        assert_eq!(
            only_a.to_fields_v1(),
            r#"{"f:spec":{"f:template":{"f:image":{}}}}"#
        );
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
        assert_eq!(a.difference(&a).to_fields_v1(), "{}");
    }

    #[test]
    fn bad_fields_v1_is_an_error_naming_where_and_unknown_key_types_are_skipped() {
        let e = Set::from_fields_v1(&json!({"f:spec": {"k:[1]": {}}})).unwrap_err();
        assert!(
            matches!(e, FieldsV1Error::BadKey { ref at, .. } if at == "/f:spec"),
            "{e}"
        );
        let e = Set::from_fields_v1(&json!({"f:spec": 1})).unwrap_err();
        assert!(matches!(e, FieldsV1Error::NotAnObject { .. }), "{e}");
        let set = Set::from_fields_v1(&json!({"f:a": {}, "x:future": {}})).unwrap();
        assert_eq!(set.to_fields_v1(), r#"{"f:a":{}}"#);
        assert!(Set::from_fields_v1(&json!({"f:a": {}, "nocolon": {}})).is_err());
    }
}
