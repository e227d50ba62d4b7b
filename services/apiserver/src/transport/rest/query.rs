//! A request's query parameters, as Kubernetes names them, each parsed with a `BadRequest`
//! naming the parameter when it is malformed. Parameters keel does not know are ignored, as
//! Kubernetes ignores them (`pretty`, `fieldManager`, ...).
//!
//! keel's own: `includeUninitialized` (objects whose initializers are pending), and the shard
//! selector of a List or Watch: `shardCount`, `shardIds` (comma-separated) and `shardByOwner`.

use std::time::Duration;

use keel_api::shard::ShardSelector;
use keel_api::{ApiError, Target};

#[derive(Debug, Default, Clone)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parses a raw query string (`None`: no query).
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Query(pairs)
    }

    /// The first value of `name`, or `""`.
    pub fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    fn bad(t: &Target, name: &str, value: &str, want: &str) -> ApiError {
        ApiError::bad_request(
            t.clone(),
            format!(
                "invalid value of the query parameter {name}: {}: {want}",
                keel_api::echo(value)
            ),
        )
    }

    /// A boolean: `true`/`1` or `false`/`0`/absent.
    pub fn flag(&self, name: &str, t: &Target) -> Result<bool, ApiError> {
        match self.get(name) {
            "" | "false" | "0" | "False" => Ok(false),
            "true" | "1" | "True" => Ok(true),
            v => Err(Self::bad(t, name, v, "must be true or false")),
        }
    }

    /// A boolean the client may leave out (`None`), as Kubernetes' `*bool` options.
    pub fn optional_flag(&self, name: &str, t: &Target) -> Result<Option<bool>, ApiError> {
        if self.0.iter().any(|(k, _)| k == name) {
            self.flag(name, t).map(Some)
        } else {
            Ok(None)
        }
    }

    /// An integer (absent: 0).
    pub fn int(&self, name: &str, t: &Target) -> Result<i64, ApiError> {
        match self.get(name) {
            "" => Ok(0),
            v => v
                .parse()
                .map_err(|_| Self::bad(t, name, v, "must be an integer")),
        }
    }

    /// `watch=true`: a List path asks for a watch.
    pub fn watch(&self, t: &Target) -> Result<bool, ApiError> {
        self.flag("watch", t)
    }

    /// The request's `timeout` (a Go duration, as client-go sends it: `32s`).
    pub fn timeout(&self, t: &Target) -> Result<Option<Duration>, ApiError> {
        match self.get("timeout") {
            "" => Ok(None),
            v => go_duration(v)
                .map(Some)
                .ok_or_else(|| Self::bad(t, "timeout", v, "must be a duration such as 30s")),
        }
    }

    /// A watch's `timeoutSeconds`: it ends after that long.
    pub fn timeout_seconds(&self, t: &Target) -> Result<Option<Duration>, ApiError> {
        match self.int("timeoutSeconds", t)? {
            n if n > 0 => Ok(Some(Duration::from_secs(n.unsigned_abs()))),
            _ => Ok(None),
        }
    }

    /// keel's shard selector, if the request has one.
    pub fn shard(&self, t: &Target) -> Result<Option<ShardSelector>, ApiError> {
        let count = self.get("shardCount");
        if count.is_empty() {
            return Ok(None);
        }
        let count: u32 = count
            .parse()
            .map_err(|_| Self::bad(t, "shardCount", count, "must be a positive integer"))?;
        let ids = self.get("shardIds");
        let ids = ids
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u32>()
                    .map_err(|_| Self::bad(t, "shardIds", ids, "must be comma-separated integers"))
            })
            .collect::<Result<Vec<u32>, ApiError>>()?;
        Ok(Some(ShardSelector {
            count,
            ids,
            by_owner: self.flag("shardByOwner", t)?,
        }))
    }

    /// `dryRun=All`: answer what the write would do, and write nothing.
    pub fn dry_run(&self, t: &Target) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            "" => Ok(false),
            "All" => Ok(true),
            v => Err(Self::bad(t, "dryRun", v, "supported values: \"All\"")),
        }
    }
}

/// A Go duration (`1h2m3.5s`, `500ms`, `0`): what client-go's `timeout` parameter carries.
pub(super) fn go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|n| *n > 0)?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(go_duration("32s"), Some(Duration::from_secs(32)));
        assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "s", "5", "5x", "-1s"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn parameters_parse_and_name_themselves_when_malformed() {
        let t = Target::default();
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb&limit=10&watch=1&shardCount=4&shardIds=1,3",
        ));
        assert_eq!(q.get("labelSelector"), "app=web");
        assert_eq!(q.int("limit", &t).unwrap(), 10);
        assert!(q.watch(&t).unwrap());
        let s = q.shard(&t).unwrap().unwrap();
        assert_eq!((s.count, s.ids), (4, vec![1, 3]));
        let e = Query::parse(Some("limit=ten"))
            .int("limit", &t)
            .unwrap_err();
        assert!(e.message.contains("limit"), "{}", e.message);
        assert!(Query::parse(None).shard(&t).unwrap().is_none());
    }
}
