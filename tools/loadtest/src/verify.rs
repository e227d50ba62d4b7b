//! The lost-update check, kept pure so it can be tested on made-up histories.
//!
//! Each writer owns one field of one object and writes an increasing counter. After the run the
//! object must hold, for every writer, a value at least its last acknowledged one (a write that
//! was acknowledged is durable) and at most its last attempted one (a write whose answer was lost
//! may still have landed).

use std::collections::HashMap;

use serde::Serialize;

/// What one writer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterRecord {
    pub object: String,
    pub field: String,
    /// The highest counter the server acknowledged (0: none).
    pub last_acked: u64,
    /// The highest counter sent, acknowledged or not.
    pub last_attempted: u64,
}

/// A writer whose acknowledged write is missing from the final object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostUpdate {
    pub object: String,
    pub field: String,
    pub acknowledged: u64,
    /// What the object holds instead (None: the field is absent).
    pub found: Option<u64>,
}

/// Reads a counter written as `"<n>"` or `"<n>:<padding>"`.
pub fn parse_counter(v: &str) -> Option<u64> {
    v.split(':').next()?.parse().ok()
}

/// Compares what writers were told with what the objects hold. `observed` maps
/// (object, field) to the value found.
pub fn lost_updates(
    records: &[WriterRecord],
    observed: &HashMap<(String, String), u64>,
) -> Vec<LostUpdate> {
    records
        .iter()
        .filter(|r| r.last_acked > 0)
        .filter_map(|r| {
            let found = observed.get(&(r.object.clone(), r.field.clone())).copied();
            let ok = found.is_some_and(|v| v >= r.last_acked && v <= r.last_attempted);
            (!ok).then(|| LostUpdate {
                object: r.object.clone(),
                field: r.field.clone(),
                acknowledged: r.last_acked,
                found,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(field: &str, acked: u64, attempted: u64) -> WriterRecord {
        WriterRecord {
            object: "o".into(),
            field: field.into(),
            last_acked: acked,
            last_attempted: attempted,
        }
    }

    fn seen(pairs: &[(&str, u64)]) -> HashMap<(String, String), u64> {
        pairs
            .iter()
            .map(|(f, v)| (("o".to_string(), f.to_string()), *v))
            .collect()
    }

    #[test]
    fn a_complete_history_has_no_lost_update() {
        let records = [rec("w0", 10, 10), rec("w1", 7, 8)];
        // w1's eighth write timed out on the client but landed: fine.
        assert!(lost_updates(&records, &seen(&[("w0", 10), ("w1", 8)])).is_empty());
        assert!(lost_updates(&records, &seen(&[("w0", 10), ("w1", 7)])).is_empty());
    }

    #[test]
    fn an_overwritten_acknowledged_value_is_caught() {
        let records = [rec("w0", 10, 10), rec("w1", 7, 7)];
        let lost = lost_updates(&records, &seen(&[("w0", 9), ("w1", 7)]));
        assert_eq!(
            lost,
            [LostUpdate {
                object: "o".into(),
                field: "w0".into(),
                acknowledged: 10,
                found: Some(9)
            }]
        );
    }

    #[test]
    fn a_missing_field_is_caught_and_values_from_nowhere_too() {
        let records = [rec("w0", 3, 3), rec("w1", 2, 2), rec("w2", 0, 1)];
        let lost = lost_updates(&records, &seen(&[("w1", 5)]));
        let fields: Vec<&str> = lost.iter().map(|l| l.field.as_str()).collect();
        assert_eq!(
            fields,
            ["w0", "w1"],
            "w0 vanished; w1 holds a value never written"
        );
    }

    #[test]
    fn counters_parse_with_or_without_padding() {
        assert_eq!(parse_counter("42"), Some(42));
        assert_eq!(parse_counter("42:xxxx"), Some(42));
        assert_eq!(parse_counter("x"), None);
    }
}
