//! JSON values as CEL reads them without copying them: an object is a CEL map whose fields are
//! converted only when a rule selects them ([`JsonMap`]); scalars and lists are converted as
//! they are reached (a list's elements at once, its objects again lazily). A rule on a large
//! object that reads two fields costs two fields, not the object.
//!
//! A field set to null is absent, as in Kubernetes' objects. The maps are what CRD rules see;
//! they are never a rule's result (a bool or a message), which is what keeps them out of
//! `cel::Value` (admission policies, whose variables may hold objects, bind copies).

use std::sync::OnceLock;

use cel::ExecutionError;
use cel::common::traits::{Container, Indexer, Iterable, Iterator as CelIterator, Sizer};
use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelNull, CelString, MAP_TYPE, Type};
use cel::common::value::{CowVal, Val};

/// `value` as a CEL value borrowing it.
pub(crate) fn val<'v>(value: &'v serde_json::Value) -> Box<dyn Val + 'v> {
    match value {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        serde_json::Value::String(s) => Box::new(CelString::from(s.as_str())),
        serde_json::Value::Array(items) => {
            Box::new(CelList::from(items.iter().map(val).collect::<Vec<_>>()))
        }
        serde_json::Value::Object(map) => Box::new(JsonMap::new(map)),
    }
}

/// A JSON object as a CEL map.
pub(crate) struct JsonMap<'v> {
    map: &'v serde_json::Map<String, serde_json::Value>,
    /// Its keys, made when it is first iterated.
    keys: OnceLock<Vec<CelString<'v>>>,
}

impl<'v> JsonMap<'v> {
    fn new(map: &'v serde_json::Map<String, serde_json::Value>) -> JsonMap<'v> {
        JsonMap {
            map,
            keys: OnceLock::new(),
        }
    }

    /// The fields that are set (not null).
    fn fields(&self) -> impl std::iter::Iterator<Item = (&'v String, &'v serde_json::Value)> {
        self.map.iter().filter(|(_, v)| !v.is_null())
    }

    fn field(&self, key: &dyn Val) -> Option<&'v serde_json::Value> {
        let key = <&str>::try_from(key).ok()?;
        self.map.get(key).filter(|v| !v.is_null())
    }
}

impl std::fmt::Debug for JsonMap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.map.fmt(f)
    }
}

impl<'v> Val for JsonMap<'v> {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }

    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }

    /// Equal to any map with the same keys and equal values.
    fn equals(&self, other: &dyn Val) -> bool {
        let (Some(sizer), Some(indexer)) = (other.as_sizer(), other.as_indexer()) else {
            return false;
        };
        if other.get_type() != &MAP_TYPE || *sizer.size().inner() != self.fields().count() as i64 {
            return false;
        }
        self.fields().all(|(k, v)| {
            indexer
                .get(&CelString::from(k.as_str()))
                .is_ok_and(|theirs| val(v).equals(theirs.as_ref()))
        })
    }

    fn as_indexer<'b, 'x>(&'b self) -> Option<&'b (dyn Indexer + 'x)>
    where
        Self: 'x,
    {
        Some(self)
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }

    fn as_iterable<'b, 'x>(&'b self) -> Option<&'b (dyn Iterable + 'x)>
    where
        Self: 'x,
    {
        Some(self)
    }

    fn clone_as_boxed<'x>(&self) -> Box<dyn Val + 'x>
    where
        Self: 'x,
    {
        Box::new(JsonMap::new(self.map))
    }
}

impl<'v> Indexer for JsonMap<'v> {
    fn get<'b, 'x>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'x>, ExecutionError>
    where
        Self: 'x,
    {
        match self.field(key) {
            Some(v) => Ok(CowVal::Owned(val(v))),
            None => Err(ExecutionError::NoSuchKey(std::sync::Arc::new(
                <&str>::try_from(key).unwrap_or_default().to_string(),
            ))),
        }
    }

    fn steal<'x>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'x>, ExecutionError>
    where
        Self: 'x,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

impl Container for JsonMap<'_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(self.field(key).is_some())
    }
}

impl Sizer for JsonMap<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.fields().count() as i64)
    }
}

impl<'v> Iterable for JsonMap<'v> {
    fn iter<'b, 'x>(&'b self) -> Box<dyn CelIterator<'b, 'x> + 'b>
    where
        Self: 'x,
    {
        let keys = self.keys.get_or_init(|| {
            self.fields()
                .map(|(k, _)| CelString::from(k.as_str()))
                .collect()
        });
        Box::new(Keys(keys.iter()))
    }
}

/// The keys of a [`JsonMap`], lent out.
struct Keys<'b, 'v>(std::slice::Iter<'b, CelString<'v>>);

impl<'b, 'v: 'w, 'w> CelIterator<'b, 'w> for Keys<'b, 'v> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'w)> {
        self.0.next().map(|k| k as &dyn Val)
    }
}
