//! CEL types, and the type a CRD's structural schema gives `self` (Kubernetes'
//! `SchemaDeclType`, docs/cel.md §2.1): objects with one field per escapable property, maps from
//! `additionalProperties`, lists, formats, each with the size bound the cost estimator reads.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

/// Kubernetes' request size cap (`MaxRequestSizeBytes`), which bounds sizes the schema does not.
pub(crate) const MAX_REQUEST_SIZE: i64 = 3 * 1024 * 1024;

/// A CEL type, as the checker infers it.
#[derive(Debug, Clone)]
pub(crate) enum Type {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    Null,
    Dyn,
    /// What keel does not know: checked as `dyn`, but never the reason a rule is refused (an
    /// object that keeps unknown fields, a variable with no declared type).
    Unknown,
    /// The type of an expression already reported as wrong.
    Error,
    List(Box<Type>),
    Map(Box<Type>, Box<Type>),
    /// An object typed by a schema node.
    Object(Arc<DeclType>),
    /// A library type, with its parameters: `optional_type(int)`, `net.IP`, `kubernetes.Quantity`.
    Opaque(String, Vec<Type>),
    /// A type as a value: `int`, `type(self)`.
    Kind(Box<Type>),
    /// A type parameter of an overload, or a free variable of an empty literal.
    Param(u32),
}

impl Type {
    pub(crate) fn list(elem: Type) -> Type {
        Type::List(Box::new(elem))
    }

    pub(crate) fn map(key: Type, value: Type) -> Type {
        Type::Map(Box::new(key), Box::new(value))
    }

    pub(crate) fn optional(t: Type) -> Type {
        Type::Opaque("optional_type".into(), vec![t])
    }

    /// `optional_type(T)`'s `T`.
    pub(crate) fn unwrap_optional(&self) -> Option<&Type> {
        match self {
            Type::Opaque(name, params) if name == "optional_type" => params.first(),
            _ => None,
        }
    }

    pub(crate) fn is_dyn_or_error(&self) -> bool {
        matches!(self, Type::Dyn | Type::Unknown | Type::Error)
    }

    /// cel-go's `IsExactType`: the same type, parameters included (objects: the same node).
    pub(crate) fn exact(&self, other: &Type) -> bool {
        match (self, other) {
            (Type::List(a), Type::List(b)) | (Type::Kind(a), Type::Kind(b)) => a.exact(b),
            (Type::Map(k1, v1), Type::Map(k2, v2)) => k1.exact(k2) && v1.exact(v2),
            (Type::Object(a), Type::Object(b)) => Arc::ptr_eq(a, b),
            (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
                n1 == n2 && p1.len() == p2.len() && p1.iter().zip(p2).all(|(a, b)| a.exact(b))
            }
            (Type::Param(a), Type::Param(b)) => a == b,
            // keel's unknown is cel-go's dyn.
            (Type::Dyn | Type::Unknown, Type::Dyn | Type::Unknown) => true,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b) && a.is_simple(),
        }
    }

    fn is_simple(&self) -> bool {
        matches!(
            self,
            Type::Bool
                | Type::Int
                | Type::Uint
                | Type::Double
                | Type::String
                | Type::Bytes
                | Type::Duration
                | Type::Timestamp
                | Type::Null
                | Type::Error
        )
    }

    /// Types whose values have a constant size (cel-go's `isScalar`).
    pub(crate) fn is_scalar(&self) -> bool {
        matches!(
            self,
            Type::Bool | Type::Double | Type::Duration | Type::Int | Type::Timestamp | Type::Uint
        )
    }

    /// Whether this type, or one inside it, is dyn, unknown, an error or a free parameter.
    pub(crate) fn is_concrete(&self) -> bool {
        match self {
            Type::Dyn | Type::Unknown | Type::Error | Type::Param(_) => false,
            Type::List(t) | Type::Kind(t) => t.is_concrete(),
            Type::Map(k, v) => k.is_concrete() && v.is_concrete(),
            Type::Opaque(_, params) => params.iter().all(Type::is_concrete),
            _ => true,
        }
    }

    /// Whether keel's own ignorance is inside this type.
    pub(crate) fn has_unknown(&self) -> bool {
        match self {
            Type::Unknown => true,
            Type::List(t) | Type::Kind(t) => t.has_unknown(),
            Type::Map(k, v) => k.has_unknown() || v.has_unknown(),
            Type::Opaque(_, params) => params.iter().any(Type::has_unknown),
            _ => false,
        }
    }
}

impl std::fmt::Display for Type {
    /// cel-go's `FormatCELType`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::Duration => f.write_str("google.protobuf.Duration"),
            Type::Timestamp => f.write_str("google.protobuf.Timestamp"),
            Type::Null => f.write_str("null_type"),
            Type::Dyn | Type::Unknown | Type::Param(_) => f.write_str("dyn"),
            Type::Error => f.write_str("!error!"),
            Type::List(t) => write!(f, "list({t})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Object(decl) => f.write_str(&decl.name),
            Type::Kind(t) => write!(f, "type({t})"),
            Type::Opaque(name, params) if params.is_empty() => f.write_str(name),
            Type::Opaque(name, params) => {
                let params: Vec<String> = params.iter().map(ToString::to_string).collect();
                write!(f, "{name}({})", params.join(", "))
            }
        }
    }
}

/// A schema node as CEL sees it (Kubernetes' `DeclType`): its type, and the bounds the cost
/// estimator reads.
#[derive(Debug)]
pub(crate) struct DeclType {
    /// The object type's name in messages: `selfType`, `selfType.spec`, `selfType.spec.x@idx`.
    pub name: String,
    pub kind: DeclKind,
    /// Longest string (bytes), most items or properties; 0 where it means nothing.
    pub max_elements: i64,
    /// Fewest bytes a value takes in JSON.
    pub min_size: i64,
}

#[derive(Debug)]
pub(crate) enum DeclKind {
    Scalar(Type),
    List(Arc<DeclType>),
    /// Keys are strings, never escaped.
    Map(Arc<DeclType>),
    Object {
        /// By escaped name.
        fields: BTreeMap<String, Arc<DeclType>>,
        /// `additionalProperties: true`: any field may be there (keel types it unknown).
        open: bool,
    },
}

/// A map's key type: Kubernetes' shared `string`, whose size bound is 0.
pub(crate) static MAP_KEY: LazyLock<Arc<DeclType>> = LazyLock::new(|| {
    Arc::new(DeclType {
        name: "string".into(),
        kind: DeclKind::Scalar(Type::String),
        max_elements: 0,
        min_size: 2,
    })
});

impl DeclType {
    pub(crate) fn cel_type(self: &Arc<Self>) -> Type {
        match &self.kind {
            DeclKind::Scalar(t) => t.clone(),
            DeclKind::List(elem) => Type::list(elem.cel_type()),
            DeclKind::Map(value) => Type::map(Type::String, value.cel_type()),
            DeclKind::Object { .. } => Type::Object(self.clone()),
        }
    }

    /// The field `name` (escaped, or a reserved word written plainly) of an object.
    pub(crate) fn field(&self, name: &str) -> Option<&Arc<DeclType>> {
        let DeclKind::Object { fields, .. } = &self.kind else {
            return None;
        };
        fields.get(name).or_else(|| {
            RESERVED
                .contains(&name)
                .then(|| fields.get(&format!("__{name}__")))
                .flatten()
        })
    }
}

/// CEL's reserved words, escaped as `__word__` in field names.
pub(crate) const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Whether `name` is a CEL identifier that is not a reserved word (what a policy's variable
/// may be named).
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&name)
}

/// A property name as CEL spells it (Kubernetes' `Escape`), or `None` if CEL cannot name it.
pub(crate) fn escape(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let first = chars.next()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    if first.is_ascii_digit() || !allowed(first) || !chars.all(allowed) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(r) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = r;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

fn int(schema: &Value, key: &str) -> Option<i64> {
    schema.get(key).and_then(Value::as_i64).map(|v| v.max(0))
}

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key) == Some(&Value::Bool(true))
}

fn has_type(schema: Option<&Value>, t: &str) -> bool {
    schema.and_then(|s| s.get("type")).and_then(Value::as_str) == Some(t)
}

/// A resource root's schema with `apiVersion`, `kind` and `metadata.{name,generateName}` as
/// Kubernetes' `WithTypeAndObjectMeta` makes them, unless all are declared so already.
fn with_type_and_object_meta(schema: &Value) -> Value {
    let props = schema.get("properties");
    let prop = |k: &str| props.and_then(|p| p.get(k));
    let meta_prop = |k: &str| prop("metadata").and_then(|m| m.get("properties")?.get(k));
    if has_type(prop("kind"), "string")
        && has_type(prop("apiVersion"), "string")
        && has_type(prop("metadata"), "object")
        && has_type(meta_prop("name"), "string")
        && has_type(meta_prop("generateName"), "string")
    {
        return schema.clone();
    }
    let mut schema = schema.clone();
    let string = serde_json::json!({"type": "string"});
    if let Value::Object(map) = &mut schema {
        let props = map
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(props) = props {
            props.insert("kind".into(), string.clone());
            props.insert("apiVersion".into(), string.clone());
            props.insert(
                "metadata".into(),
                serde_json::json!({"type": "object", "properties": {"name": string, "generateName": string}}),
            );
        }
    }
    schema
}

/// The CEL declaration of a schema node (Kubernetes' `SchemaDeclType`), or `None` when the node
/// is not exposed to CEL (no type, a list or map of unexposed values). `resource_root`: the CR
/// root or an `x-kubernetes-embedded-resource` object.
pub(crate) fn schema_decl_type(
    schema: &Value,
    resource_root: bool,
    name: &str,
    depth: usize,
) -> Option<Arc<DeclType>> {
    // Schemas are bounded by the apiserver; this bound only keeps a stray one from recursing.
    if depth > 256 {
        return None;
    }
    let decl = |kind, max_elements, min_size| {
        Some(Arc::new(DeclType {
            name: name.to_string(),
            kind,
            max_elements,
            min_size,
        }))
    };
    if is_true(schema, "x-kubernetes-int-or-string") {
        return decl(DeclKind::Scalar(Type::Dyn), MAX_REQUEST_SIZE - 2, 1);
    }
    let rooted;
    let schema = if resource_root {
        rooted = with_type_and_object_meta(schema);
        &rooted
    } else {
        schema
    };
    let child = |sub: &Value, name: String| {
        schema_decl_type(
            sub,
            is_true(sub, "x-kubernetes-embedded-resource"),
            &name,
            depth + 1,
        )
    };
    match schema.get("type").and_then(Value::as_str)? {
        "array" => {
            let items = child(schema.get("items")?, format!("{name}@idx"))?;
            let max =
                int(schema, "maxItems").unwrap_or((MAX_REQUEST_SIZE - 2) / (items.min_size + 1));
            decl(DeclKind::List(items), max, 2)
        }
        "object" => match schema.get("additionalProperties") {
            Some(sub @ Value::Object(_)) => {
                let values = child(sub, format!("{name}@elem"))?;
                let max = int(schema, "maxProperties")
                    .unwrap_or((MAX_REQUEST_SIZE - 2) / (values.min_size + 6));
                decl(DeclKind::Map(values), max, 2)
            }
            additional => {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut fields = BTreeMap::new();
                let mut min_size = 2i64;
                if let Some(Value::Object(props)) = schema.get("properties") {
                    for (prop_name, prop) in props {
                        let Some(t) = child(prop, format!("{name}.{prop_name}")) else {
                            continue;
                        };
                        if required.contains(&prop_name.as_str()) && prop.get("default").is_none() {
                            min_size = min_size
                                .saturating_add(prop_name.len() as i64)
                                .saturating_add(t.min_size)
                                .saturating_add(4);
                        }
                        if let Some(escaped) = escape(prop_name) {
                            fields.insert(escaped, t);
                        }
                    }
                }
                let open = additional == Some(&Value::Bool(true));
                decl(DeclKind::Object { fields, open }, 0, min_size)
            }
        },
        "string" => match schema.get("format").and_then(Value::as_str) {
            Some("byte") => decl(
                DeclKind::Scalar(Type::Bytes),
                int(schema, "maxLength").unwrap_or(MAX_REQUEST_SIZE - 2),
                2,
            ),
            Some("duration") => decl(DeclKind::Scalar(Type::Duration), 32, 3),
            Some("date") => decl(DeclKind::Scalar(Type::Timestamp), 12, 12),
            Some("date-time") => decl(DeclKind::Scalar(Type::Timestamp), 32, 21),
            _ => {
                let max = match int(schema, "maxLength") {
                    // maxLength counts code points; sizes are bytes.
                    Some(n) => n.saturating_mul(4),
                    None => match schema.get("enum").and_then(Value::as_array) {
                        Some(values) if !values.is_empty() => values
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|s| s.len() as i64)
                            .max()
                            .unwrap_or(0),
                        _ => MAX_REQUEST_SIZE - 2,
                    },
                };
                decl(DeclKind::Scalar(Type::String), max, 2)
            }
        },
        "boolean" => decl(DeclKind::Scalar(Type::Bool), 0, 4),
        "number" => decl(DeclKind::Scalar(Type::Double), 0, 1),
        "integer" => decl(DeclKind::Scalar(Type::Int), 0, 1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn property_names_escape_as_kubernetes_escapes_them() {
        let table = [
            ("name", Some("name")),
            ("x-prop", Some("x__dash__prop")),
            ("redact__d", Some("redact__underscores__d")),
            ("a.b/c", Some("a__dot__b__slash__c")),
            ("namespace", Some("__namespace__")),
            ("_x", Some("_x")),
            ("1x", None),
            ("", None),
            ("a b", None),
            ("a@b", None),
        ];
        for (name, want) in table {
            assert_eq!(escape(name).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn sizes_come_from_the_schema_or_the_request_cap() {
        let t = |schema: Value| schema_decl_type(&schema, false, "selfType", 0);
        let bounded = t(json!({"type": "string", "maxLength": 10}));
        assert_eq!(bounded.map(|d| d.max_elements), Some(40));
        let enumerated = t(json!({"type": "string", "enum": ["a", "abcd"]}));
        assert_eq!(enumerated.map(|d| d.max_elements), Some(4));
        let numbers = t(json!({"type": "array", "items": {"type": "number"}}));
        assert_eq!(numbers.map(|d| d.max_elements), Some(1572863));
        let map = t(json!({"type": "object", "additionalProperties": {"type": "boolean"}}));
        assert_eq!(map.map(|d| d.max_elements), Some((3145728 - 2) / 10));
        let object = t(json!({"type": "object", "required": ["ab", "c"],
            "properties": {"ab": {"type": "integer"}, "c": {"type": "string", "default": "x"}}}));
        assert_eq!(object.map(|d| d.min_size), Some(2 + 2 + 1 + 4));
        assert!(t(json!({"x-kubernetes-preserve-unknown-fields": true})).is_none());
        let dyn_ = t(json!({"x-kubernetes-int-or-string": true}));
        assert_eq!(dyn_.map(|d| d.max_elements), Some(3145726));
    }

    #[test]
    fn a_resource_root_has_only_name_and_generate_name_in_metadata() {
        let root = schema_decl_type(
            &json!({"type": "object", "properties": {"metadata": {"type": "object",
                "properties": {"namespace": {"type": "string"}}}}}),
            true,
            "selfType",
            0,
        );
        let metadata = root.as_ref().and_then(|r| r.field("metadata"));
        assert!(metadata.is_some_and(|m| m.field("name").is_some()
            && m.field("generateName").is_some()
            && m.field("namespace").is_none()));
        assert!(root.is_some_and(|r| r.field("kind").is_some()));
    }
}
