//! Kubernetes' REST dialect, served beside gRPC on the same port (by path and content type: gRPC
//! calls are `POST /keel.v1.*/...` with `application/grpc`; everything else is this router), so
//! that one kubeconfig serves kubectl and keelctl. It is a second transport on the one request
//! path: the same handler, limits, authentication, authorization and audit as gRPC.

mod answer;
mod discovery;
mod objects;
mod openapi;
mod openapi_v2;
mod path;
mod protobuf;
mod query;
mod status;
mod table;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Response, StatusCode, header};
use axum::routing::{any, get};
use keel_api::{ApiError, Reason, Target};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::auth::{Authenticator, User};
use crate::request::Handler;
use path::ApiPath;
use status::{error_response, json_stream, no_such_path, value_response};

/// The largest request body read (Kubernetes: 3 MiB); an object is at most 1.5 MiB of JSON.
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// How long a client may take to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct RestState {
    pub handler: Arc<Handler>,
    pub auth: Arc<Authenticator>,
    /// The aggregated discovery answers, built once per change of the served resources.
    pub discovery: Arc<discovery::AggregatedCache>,
}

/// The REST routes; gRPC's services are added beside them.
pub fn router(state: RestState) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/api", get(api))
        .route("/apis", get(apis))
        .route("/api/{*rest}", any(resource))
        .route("/apis/{*rest}", any(resource))
        .route("/openapi/v2", get(openapi_v2))
        .route("/openapi/v3", get(openapi_root))
        .route("/openapi/v3/{*gv}", get(openapi_group_version))
        .route(
            "/.well-known/openid-configuration",
            get(openid_configuration),
        )
        .route("/openid/v1/jwks", get(openid_keys))
        .fallback(fallback)
        .with_state(state)
}

/// The user of a request: its bearer token, or its verified client certificate (none when
/// authentication is off).
fn authenticate(auth: &Authenticator, req: &Request) -> Result<Option<User>, ApiError> {
    if !auth.enabled() {
        return Ok(None);
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default());
    let certificate = req
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(|i| i.peer_certs())
        .and_then(|c| c.first().map(|d| d.to_vec()));
    auth.authenticate(header, certificate.as_deref()).map(Some)
}

/// The service account issuer's OpenID discovery document, as Kubernetes serves it (to any
/// authenticated user: keel has no `system:service-account-issuer-discovery` binding to check).
async fn openid_configuration(State(state): State<RestState>, req: Request) -> Response<Body> {
    if let Err(e) = authenticate(&state.auth, &req) {
        return error_response(&e);
    }
    let Some(tokens) = state.handler.tokens() else {
        return no_such_path();
    };
    let document = serde_json::json!({
        "issuer": tokens.issuer,
        "jwks_uri": format!("{}/openid/v1/jwks", tokens.issuer.trim_end_matches('/')),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [tokens.key.alg()],
    });
    value_response(StatusCode::OK, &document)
}

/// The public keys service account tokens are verified with (`application/jwk-set+json`).
async fn openid_keys(State(state): State<RestState>, req: Request) -> Response<Body> {
    if let Err(e) = authenticate(&state.auth, &req) {
        return error_response(&e);
    }
    let Some(tokens) = state.handler.tokens() else {
        return no_such_path();
    };
    let mut r = value_response(StatusCode::OK, &tokens.key.jwks());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/jwk-set+json"),
    );
    r
}

async fn version() -> Response<Body> {
    value_response(StatusCode::OK, &discovery::version())
}

/// The aggregated discovery version a client asks for in `Accept`, if any.
fn aggregated_version(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    accept.split(',').find_map(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if !has("g=apidiscovery.k8s.io") || !has("as=APIGroupDiscoveryList") {
            return None;
        }
        if has("v=v2") {
            Some("apidiscovery.k8s.io/v2")
        } else if has("v=v2beta1") {
            Some("apidiscovery.k8s.io/v2beta1")
        } else {
            None
        }
    })
}

/// Discovery of `/api` or `/apis`, aggregated when asked for.
fn discovery_root(state: &RestState, req: &Request, core: bool) -> Response<Body> {
    if let Err(e) = authenticate(&state.auth, req) {
        return error_response(&e);
    }
    match aggregated_version(req.headers()) {
        Some(v) => {
            let body = state.discovery.get(&state.handler, core, v);
            let mut r = json_stream(StatusCode::OK, Body::from(body));
            let ct = format!(
                "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
                v.trim_start_matches("apidiscovery.k8s.io/")
            );
            if let Ok(ct) = ct.parse() {
                r.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            r
        }
        None if core => value_response(StatusCode::OK, &discovery::api_versions()),
        None => value_response(StatusCode::OK, &discovery::api_groups(&state.handler)),
    }
}

async fn api(State(state): State<RestState>, req: Request) -> Response<Body> {
    discovery_root(&state, &req, true)
}

async fn apis(State(state): State<RestState>, req: Request) -> Response<Body> {
    state.handler.catch_up().await;
    discovery_root(&state, &req, false)
}

async fn openapi_root(State(state): State<RestState>, req: Request) -> Response<Body> {
    match authenticate(&state.auth, &req) {
        Ok(_) => value_response(StatusCode::OK, &openapi::root(&state.handler)),
        Err(e) => error_response(&e),
    }
}

/// `/openapi/v2`: protobuf when `Accept` asks for it (client-go asks for nothing else), JSON
/// otherwise. The built-in schemas do not change while the server runs: made once.
async fn openapi_v2(State(state): State<RestState>, req: Request) -> Response<Body> {
    static DOCUMENT: std::sync::LazyLock<(serde_json::Value, Vec<u8>)> =
        std::sync::LazyLock::new(|| {
            let schemas = Handler::builtin_openapi()["schemas"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let document = openapi_v2::document(&schemas);
            let protobuf = openapi_v2::protobuf(&document);
            (document, protobuf)
        });
    if let Err(e) = authenticate(&state.auth, &req) {
        return error_response(&e);
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or_default();
    if accept.contains("com.github.proto-openapi.spec.v2") {
        let mut r = Response::new(Body::from(DOCUMENT.1.clone()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(openapi_v2::PROTOBUF_ANSWER),
        );
        r
    } else {
        value_response(StatusCode::OK, &DOCUMENT.0)
    }
}

async fn openapi_group_version(
    State(state): State<RestState>,
    axum::extract::Path(gv): axum::extract::Path<String>,
    req: Request,
) -> Response<Body> {
    if let Err(e) = authenticate(&state.auth, &req) {
        return error_response(&e);
    }
    match openapi::group_version(&state.handler, &gv) {
        Some(doc) => value_response(StatusCode::OK, &doc),
        None => no_such_path(),
    }
}

async fn resource(State(state): State<RestState>, req: Request) -> Response<Body> {
    // Errors in the form the client reads (Kubernetes' protobuf for typed clients).
    let format = answer::Format::of(req.headers());
    let user = match authenticate(&state.auth, &req) {
        Ok(u) => u,
        Err(e) => return format.error(&e),
    };
    let Some(path) = path::parse(req.uri().path()) else {
        return format.error(&status::not_found_path());
    };
    match path {
        ApiPath::Group(g) => {
            state.handler.catch_up().await;
            match discovery::api_group(&state.handler, &g) {
                Some(v) => value_response(StatusCode::OK, &v),
                None => no_such_path(),
            }
        }
        ApiPath::GroupVersion { group, version } => {
            if !group.is_empty() {
                state.handler.catch_up().await;
            }
            match discovery::resource_list(&state.handler, &group, &version) {
                Some(v) => value_response(StatusCode::OK, &v),
                None => no_such_path(),
            }
        }
        ApiPath::Resource(p) => {
            let query = query::Query::parse(req.uri().query());
            let (parts, body) = req.into_parts();
            let t = Target::new(
                &p.gvr.group,
                &p.gvr.resource,
                p.name.as_deref().unwrap_or(""),
            );
            let body = match read_body(body, &t).await {
                Ok(b) => b,
                Err(e) => return format.error(&e),
            };
            let call = objects::Call {
                method: parts.method,
                query,
                headers: parts.headers,
                body,
                user,
            };
            objects::serve(state.handler.clone(), p, call).await
        }
    }
}

/// The body, at most [`MAX_BODY_BYTES`], within [`BODY_TIMEOUT`].
async fn read_body(body: Body, t: &Target) -> Result<axum::body::Bytes, ApiError> {
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) if is_length_limit(&e) => Err(ApiError::too_large(
            t.clone(),
            format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
        )),
        Ok(Err(e)) => Err(ApiError::bad_request(
            t.clone(),
            format!("the request body could not be read: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            Reason::Timeout,
            t.clone(),
            format!("the request body did not arrive within {BODY_TIMEOUT:?}"),
        )),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Any other path: a gRPC call to a service keel does not have, or an HTTP path it does not
/// serve.
async fn fallback(req: Request) -> Response<Body> {
    let grpc = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    if grpc {
        let (parts, ()) = tonic::Status::unimplemented("")
            .into_http::<()>()
            .into_parts();
        return Response::from_parts(parts, Body::empty());
    }
    no_such_path()
}
