//! List: from the watch cache when any version will do, else from etcd in pages, every page at
//! the first page's revision, with opaque continue tokens.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use keel_api::{ApiError, Reason, ResourceInfo};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::Store;
use super::codec::{from_storage, target};
use super::filter::Filter;
use crate::etcd::prefix_end;

/// What a List asks for, parsed.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub filter: Filter,
    /// At most this many items (0: all); a cache-served list ignores it, as Kubernetes does.
    pub limit: i64,
    pub continue_token: String,
    /// `Some(0)`: any version will do, so the watch cache serves a first page.
    pub resource_version: Option<i64>,
    /// Read at exactly `resource_version` (Kubernetes' `resourceVersionMatch=Exact`).
    pub exact: bool,
}

/// What a List returns.
#[derive(Debug)]
pub struct ListResult {
    /// Each item's JSON (the watch cache's own buffers, when served from it).
    pub items: Vec<Bytes>,
    /// The revision the list is complete at.
    pub revision: i64,
    pub continue_token: String,
    /// Items after this page: known only for unfiltered lists (else -1).
    pub remaining: i64,
}

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    rv: i64,
    start: String,
}

/// Items read from etcd per round trip while filling a page.
const CHUNK: i64 = 1000;

impl Store {
    pub async fn list(
        &self,
        info: &Arc<ResourceInfo>,
        q: &ListQuery,
        deadline: Instant,
    ) -> Result<ListResult, ApiError> {
        let t = target(info, "");
        let filter = &q.filter;
        let prefix = self
            .keys
            .scope_prefix(info, filter.namespace.as_deref().unwrap_or(""));
        if q.resource_version == Some(0) && !q.exact && q.continue_token.is_empty() {
            // Served from the cache, like Kubernetes: any version is acceptable, `limit` is ignored.
            let cache = self.cache(info);
            cache.wait_ready(deadline).await?;
            let (objs, revision) = cache.list(&prefix);
            let items = objs
                .iter()
                .filter(|o| filter.matches(&***o))
                .map(|o| o.json().clone())
                .collect();
            return Ok(ListResult {
                items,
                revision,
                continue_token: String::new(),
                remaining: -1,
            });
        }
        let (mut start, mut revision) = if q.continue_token.is_empty() {
            let at = if q.exact {
                q.resource_version.unwrap_or(0)
            } else {
                0
            };
            (prefix.as_bytes().to_vec(), at)
        } else {
            let tok = decode_continue(&q.continue_token, &prefix)
                .map_err(|m| ApiError::bad_request(t.clone(), m))?;
            (tok.start.into_bytes(), tok.rv)
        };
        let end = prefix_end(&prefix);
        let unfiltered = filter.selects_all();
        let chunk = if q.limit > 0 {
            q.limit.min(CHUNK)
        } else {
            CHUNK
        };
        let mut items = Vec::new();
        let mut remaining = -1;
        let mut first = true;
        loop {
            let page = self.etcd.range(&start, end.clone(), revision, chunk, deadline).await.map_err(|e| {
                if e.reason == Reason::Expired && !q.continue_token.is_empty() {
                    ApiError::expired("the provided continue parameter is too old to display a consistent list result; list again without it")
                } else if e.reason == Reason::Expired && q.exact {
                    ApiError::expired(format!("resourceVersion {} is compacted: list again without resourceVersionMatch=Exact", q.resource_version.unwrap_or(0)))
                } else {
                    e.with_target(&t)
                }
            })?;
            revision = page.revision;
            if first && unfiltered {
                remaining = page.count;
            }
            first = false;
            let n = page.kvs.len();
            for (i, kv) in page.kvs.iter().enumerate() {
                let obj = from_storage(info, &kv.value, kv.mod_revision)?;
                if filter.matches(&obj) {
                    items.push(Bytes::from(obj.to_vec()));
                }
                if q.limit > 0 && items.len() as i64 >= q.limit {
                    let more = i + 1 < n || page.more;
                    let mut next = kv.key.clone().into_bytes();
                    next.push(0);
                    let token = if more {
                        encode_continue(revision, &next)
                    } else {
                        String::new()
                    };
                    let remaining = if more && unfiltered {
                        remaining - items.len() as i64
                    } else if more {
                        -1
                    } else {
                        0
                    };
                    return Ok(ListResult {
                        items,
                        revision,
                        continue_token: token,
                        remaining,
                    });
                }
            }
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => {
                    start = last.key.clone().into_bytes();
                    start.push(0);
                }
                _ => {
                    return Ok(ListResult {
                        items,
                        revision,
                        continue_token: String::new(),
                        remaining: 0,
                    });
                }
            }
        }
    }
}

fn encode_continue(rv: i64, start: &[u8]) -> String {
    let tok = ContinueToken {
        rv,
        start: String::from_utf8_lossy(start).into_owned(),
    };
    let json = serde_json::to_vec(&tok).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode_continue(token: &str, prefix: &str) -> Result<ContinueToken, String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| "the continue token is not valid (not base64)".to_string())?;
    let tok: ContinueToken = serde_json::from_slice(&bytes)
        .map_err(|_| "the continue token is not valid".to_string())?;
    if !tok.start.starts_with(prefix) || tok.rv <= 0 {
        return Err("the continue token belongs to another list".into());
    }
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_stay_in_their_list() {
        let t = encode_continue(42, b"/registry/core/pods/a/b\0");
        let back = decode_continue(&t, "/registry/core/pods/").unwrap();
        assert_eq!(
            (back.rv, back.start.as_str()),
            (42, "/registry/core/pods/a/b\0")
        );
        assert!(decode_continue(&t, "/registry/core/configmaps/").is_err());
        assert!(decode_continue("!!", "/").is_err());
    }
}
