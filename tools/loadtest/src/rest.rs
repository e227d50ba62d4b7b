//! `--protocol rest`: the writers speak Kubernetes' REST dialect instead of gRPC, PATCH on
//! `/api/v1/namespaces/{ns}/configmaps/{name}` with JSON bodies, as kubectl and client-go do.
//! HTTP/2 in clear text (prior knowledge) on the API server's one port, one connection per
//! server like a gRPC client's, so that the two protocols are compared on the same footing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use keel_client::{ApiError, PatchType};
use serde_json::Value;

/// The most of an answer read: a ConfigMap of the load is far smaller; a bigger answer is an
/// error, not a reason to buffer without bound.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// A connection to each API server; requests go round-robin over them.
pub struct RestClient {
    servers: Vec<(String, SendRequest<Full<Bytes>>)>,
    next: AtomicUsize,
    timeout: Duration,
}

fn unavailable(server: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("{server}: {e}"))
}

impl RestClient {
    /// Connects to every server (`http://host:port`; TLS is not spoken here).
    pub async fn connect(servers: &[String], timeout: Duration) -> Result<RestClient, ApiError> {
        let mut out = Vec::new();
        for server in servers {
            let Some(authority) = server.strip_prefix("http://") else {
                return Err(ApiError::bad_request(
                    Default::default(),
                    format!(
                        "--protocol rest speaks plain http:// only, not {server}: run it against a \
                         server listening in plain text"
                    ),
                ));
            };
            let authority = authority.trim_end_matches('/').to_string();
            let tcp = tokio::net::TcpStream::connect(&authority)
                .await
                .map_err(|e| unavailable(server, e))?;
            tcp.set_nodelay(true).map_err(|e| unavailable(server, e))?;
            let (send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .map_err(|e| unavailable(server, e))?;
            // Ends with the connection; a request on a dead one fails with the cause.
            tokio::spawn(conn);
            out.push((authority, send));
        }
        if out.is_empty() {
            return Err(ApiError::bad_request(
                Default::default(),
                "no --server to connect to",
            ));
        }
        Ok(RestClient {
            servers: out,
            next: AtomicUsize::new(0),
            timeout,
        })
    }

    /// PATCHes a ConfigMap; the answer's object is read and dropped. An apply is sent as
    /// kubectl sends one: a JSON body as `application/apply-patch+yaml`, its manager in the
    /// `fieldManager` query parameter (sent as given: the loadtest's `writer-<i>` needs no
    /// escaping).
    pub async fn patch_configmap(
        &self,
        ns: &str,
        name: &str,
        kind: PatchType,
        patch: &Value,
        field_manager: &str,
    ) -> Result<(), ApiError> {
        let content_type = match kind {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
            _ => "application/strategic-merge-patch+json",
        };
        let query = match kind {
            PatchType::Apply => format!("?fieldManager={field_manager}"),
            _ => String::new(),
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.servers.len();
        let (authority, send) = &self.servers[i];
        let body = serde_json::to_vec(patch).map_err(|e| ApiError::internal(e.to_string()))?;
        let request = http::Request::patch(format!(
            "http://{authority}/api/v1/namespaces/{ns}/configmaps/{name}{query}"
        ))
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ApiError::internal(e.to_string()))?;
        let mut send = send.clone();
        let call = async move {
            let answer = send
                .send_request(request)
                .await
                .map_err(|e| unavailable(authority, e))?;
            let code = answer.status().as_u16();
            let body = Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| unavailable(authority, e))?
                .to_bytes();
            // 201: an apply that created the object.
            if code == 200 || code == 201 {
                Ok(())
            } else {
                Err(ApiError::from_http(code, &body))
            }
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| ApiError::timeout(Default::default(), "no answer in time"))?
    }
}

/// The most of one watch event line buffered: a ConfigMap of the load is far smaller.
const MAX_EVENT_BYTES: usize = 4 << 20;

/// One event of a REST watch: its type and the object's resourceVersion.
pub struct WatchEvent {
    pub kind: String,
    pub resource_version: i64,
}

impl RestClient {
    /// Watches the ConfigMaps of `ns` from `resource_version`: Kubernetes' newline-delimited
    /// `WatchEvent` JSON, read as it comes. An `ERROR` event is the server's Status.
    pub async fn watch_configmaps(
        &self,
        ns: &str,
        resource_version: &str,
    ) -> Result<impl futures::Stream<Item = Result<WatchEvent, ApiError>> + use<>, ApiError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.servers.len();
        let (authority, send) = &self.servers[i];
        let request = http::Request::get(format!(
            "http://{authority}/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={resource_version}"
        ))
        .header("accept", "application/json")
        .body(Full::new(Bytes::new()))
        .map_err(|e| ApiError::internal(e.to_string()))?;
        let answer = tokio::time::timeout(self.timeout, send.clone().send_request(request))
            .await
            .map_err(|_| ApiError::timeout(Default::default(), "no answer in time"))?
            .map_err(|e| unavailable(authority, e))?;
        let code = answer.status().as_u16();
        let body = answer.into_body();
        if code != 200 {
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(ApiError::from_http(code, &body));
        }
        let state = (body, Vec::<u8>::new(), authority.clone(), false);
        Ok(futures::stream::unfold(
            state,
            |(mut body, mut buf, authority, done)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=end).collect();
                        if line.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        return Some((event(&line), (body, buf, authority, false)));
                    }
                    if buf.len() > MAX_EVENT_BYTES {
                        let e = ApiError::internal(format!(
                            "{authority}: a watch event over {MAX_EVENT_BYTES} bytes"
                        ));
                        return Some((Err(e), (body, buf, authority, true)));
                    }
                    match body.frame().await {
                        None => return None,
                        Some(Err(e)) => {
                            let e = unavailable(&authority, e);
                            return Some((Err(e), (body, buf, authority, true)));
                        }
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                buf.extend_from_slice(&data);
                            }
                        }
                    }
                }
            },
        ))
    }
}

/// What the load reads of a watch line: its type and the object's resourceVersion; the rest
/// is skipped without building it (the watchers share these cores with the server measured).
#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: LineObject<'a>,
}

#[derive(serde::Deserialize)]
struct LineObject<'a> {
    #[serde(default, borrow)]
    metadata: LineMeta<'a>,
    #[serde(default)]
    code: Option<u16>,
}

#[derive(serde::Deserialize, Default)]
struct LineMeta<'a> {
    #[serde(rename = "resourceVersion", default, borrow)]
    resource_version: std::borrow::Cow<'a, str>,
}

/// One line of a watch: a `WatchEvent`, or the Status of an `ERROR` one.
fn event(line: &[u8]) -> Result<WatchEvent, ApiError> {
    let l: Line<'_> = serde_json::from_slice(line)
        .map_err(|e| ApiError::internal(format!("a watch event is not JSON: {e}")))?;
    if l.kind == "ERROR" {
        let code = l.object.code.unwrap_or(500);
        let status: Value = serde_json::from_slice(line).unwrap_or_default();
        let status = serde_json::to_vec(&status["object"]).unwrap_or_default();
        return Err(ApiError::from_http(code, &status));
    }
    Ok(WatchEvent {
        kind: l.kind.into_owned(),
        resource_version: l.object.metadata.resource_version.parse().unwrap_or(0),
    })
}
