//! A watch over HTTP: newline-delimited `WatchEvent` JSON on a chunked (or HTTP/2) stream, as
//! client-go reads it; an error ends it as an `ERROR` event carrying the `Status`, and
//! `timeoutSeconds` ends it quietly, as in Kubernetes.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Response, StatusCode, header};
use futures::{Stream, StreamExt};

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

/// The lines of a watch, until it ends, fails (then one `ERROR` line) or times out.
fn lines(
    events: OpenWatch,
    timeout: Option<Duration>,
    printer: Option<Printer>,
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
        let out = match item {
            Ok(ev) => event_line(ev, printer.as_ref()),
            Err(e) => {
                *ended = true;
                let status = serde_json::to_vec(&e.to_status_json()).unwrap_or_default();
                line("ERROR", &status)
            }
        };
        std::future::ready(Some(Ok(out)))
    })
}

/// The answer to a watch request.
pub fn response(
    events: OpenWatch,
    timeout: Option<Duration>,
    printer: Option<Printer>,
) -> Response<Body> {
    // The lines ready at once go out as one chunk (one HTTP/2 DATA frame, one write), as
    // tonic batches a gRPC stream's ready messages: with a thousand watchers, a frame per
    // event per watcher cost more than twice the CPU. Nothing waits for a batch to fill.
    let batched = lines(events, timeout, printer)
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
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Nothing between here and the client may hold events back.
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}
