//! Values shared by every holder of an equal one (issue 45: compiled schema nodes, which large
//! CRDs repeat by the thousand): a table of weak references by key, so that a value lives as
//! long as someone holds it and no longer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Values by a key that says all of what makes them what they are.
#[derive(Debug)]
pub struct Shared<T> {
    table: Mutex<Table<T>>,
}

#[derive(Debug)]
struct Table<T> {
    values: HashMap<Box<str>, Weak<T>>,
    /// The table's size after its last sweep: entries whose values are gone are swept as it
    /// doubles.
    swept: usize,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            table: Mutex::new(Table {
                values: HashMap::new(),
                swept: 0,
            }),
        }
    }
}

impl<T> Shared<T> {
    /// The value kept under `key` while anyone holds it, else `value`, kept from now on.
    pub fn share(&self, key: String, value: T) -> Arc<T> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = table.values.get(key.as_str()).and_then(Weak::upgrade) {
            return found;
        }
        let value = Arc::new(value);
        table.values.insert(key.into(), Arc::downgrade(&value));
        if table.values.len() > 2 * table.swept.max(1024) {
            table.values.retain(|_, v| v.strong_count() > 0);
            table.swept = table.values.len();
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_shared_while_held_and_replaced_once_dropped() {
        let shared = Shared::default();
        let first = shared.share("k".into(), 1);
        assert!(Arc::ptr_eq(&first, &shared.share("k".into(), 2)));
        assert_eq!(*shared.share("other".into(), 3), 3);
        drop(first);
        assert_eq!(*shared.share("k".into(), 4), 4);
    }

    #[test]
    fn entries_whose_values_are_gone_are_swept_as_the_table_doubles() {
        let shared = Shared::default();
        let kept = shared.share("kept".into(), 0);
        for i in 0..5000 {
            shared.share(format!("k{i}"), i);
        }
        let len = shared.table.lock().unwrap().values.len();
        assert!(len < 2100, "{len} entries");
        assert!(Arc::ptr_eq(&kept, &shared.share("kept".into(), 1)));
    }
}
