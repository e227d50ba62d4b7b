//! A watch over HTTP: newline-delimited `WatchEvent` JSON on a chunked (or HTTP/2) stream, or
//! Kubernetes' protobuf frames (a 4-byte length, then a `WatchEvent`) when the client asked for
//! protobuf, as client-go reads them; an error ends it as an `ERROR` event carrying the
//! `Status`, and `timeoutSeconds` ends it quietly, as in Kubernetes.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Response, StatusCode, header};
use futures::{Stream, StreamExt};
use keel_api::ApiError;

use super::answer::Format;
use super::protobuf;
use super::table::Printer;
use crate::request::{OpenWatch, WatchEvent, WatchEventKind};

/// At most this many ready lines go out as one chunk.
const LINES_PER_CHUNK: usize = 64;

/// One event's line: the object's JSON is copied in as it is.
fn line(kind: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    out.into()
}

/// An event's line; with a `printer`, its object as a one-row Table (bookmarks stay as they
/// are, as in Kubernetes).
fn event_line(ev: WatchEvent, printer: Option<&Printer>) -> Bytes {
    if let Some(printer) = printer
        && ev.kind != WatchEventKind::Bookmark
        && let Ok(o) = serde_json::from_slice::<serde_json::Value>(&ev.object)
    {
        let rv = o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let table = printer.table(&[o], &rv, "");
        return line(
            ev.kind.as_str(),
            &serde_json::to_vec(&table).unwrap_or_default(),
        );
    }
    line(ev.kind.as_str(), &ev.object)
}

/// One event's protobuf frame: its object enveloped, in a length-prefixed `WatchEvent`.
fn event_frame(ev: WatchEvent) -> Result<Bytes, ApiError> {
    let object: serde_json::Value = serde_json::from_slice(&ev.object)
        .map_err(|e| ApiError::internal(format!("a watch event's object: {e}")))?;
    let enveloped = protobuf::value(&object)?
        .ok_or_else(|| ApiError::internal("a watch event's object has no protobuf form"))?;
    Ok(protobuf::watch_frame(ev.kind.as_str(), &enveloped).into())
}

/// The `ERROR` frame that ends a protobuf watch: the `Status`, enveloped.
fn error_frame(e: &ApiError) -> Bytes {
    let status = protobuf::value(&e.to_status_json())
        .ok()
        .flatten()
        .unwrap_or_default();
    protobuf::watch_frame("ERROR", &status).into()
}

/// The lines (or frames) of a watch, until it ends, fails (then one `ERROR` event) or times
/// out.
fn lines(
    events: OpenWatch,
    timeout: Option<Duration>,
    printer: Option<Printer>,
    format: Format,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let stop = async move {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    events.take_until(stop).scan(false, move |ended, item| {
        if *ended {
            return std::future::ready(None);
        }
        let out = match (format, item) {
            (Format::Json, Ok(ev)) => event_line(ev, printer.as_ref()),
            (Format::Json, Err(e)) => {
                *ended = true;
                let status = serde_json::to_vec(&e.to_status_json()).unwrap_or_default();
                line("ERROR", &status)
            }
            (Format::Protobuf, item) => match item.and_then(event_frame) {
                Ok(frame) => frame,
                Err(e) => {
                    *ended = true;
                    error_frame(&e)
                }
            },
        };
        std::future::ready(Some(Ok(out)))
    })
}

/// The answer to a watch request, in `format` (a Table's rows are JSON whatever was asked).
pub fn response(
    events: OpenWatch,
    timeout: Option<Duration>,
    printer: Option<Printer>,
    format: Format,
) -> Response<Body> {
    let format = if printer.is_some() {
        Format::Json
    } else {
        format
    };
    // The lines ready at once go out as one chunk (one HTTP/2 DATA frame, one write), as
    // tonic batches a gRPC stream's ready messages: with a thousand watchers, a frame per
    // event per watcher cost more than twice the CPU. Nothing waits for a batch to fill.
    let batched = lines(events, timeout, printer, format)
        .ready_chunks(LINES_PER_CHUNK)
        .map(|lines| {
            let mut lines: Vec<Bytes> = lines.into_iter().map(|Ok(l)| l).collect();
            let chunk = match lines.len() {
                1 => lines.pop().unwrap_or_default(),
                _ => Bytes::from(lines.concat()),
            };
            Ok::<_, std::convert::Infallible>(chunk)
        });
    let mut r = Response::new(Body::from_stream(batched));
    *r.status_mut() = StatusCode::OK;
    let content_type = match format {
        Format::Json => "application/json",
        Format::Protobuf => protobuf::WATCH_MEDIA_TYPE,
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Nothing between here and the client may hold events back.
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}
