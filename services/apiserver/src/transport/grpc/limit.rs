//! The request size limit, enforced on the gRPC frames before tonic decodes them, so that an
//! oversized request gets keel's typed `RequestEntityTooLarge` (`RESOURCE_EXHAUSTED`) whatever
//! its size, rather than tonic's `OUT_OF_RANGE`, the code keel uses for `Expired`.
//!
//! Every gRPC message on the wire is a 5-byte prefix (a compression flag, then the length, big
//! endian) and the message. The body is read through [`LimitedBody`], which follows those
//! prefixes as the bytes pass and fails the body with the typed error on the first prefix that
//! announces more than the limit: nothing past it is read, so memory stays bounded whatever
//! the client sends. tonic hands a body error that is a `Status` to the client as it is.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use keel_api::{ApiError, Target};
use tonic::body::Body as TonicBody;

/// The layer in front of every gRPC service: requests whose messages are at most `limit`
/// bytes pass; the first message over it fails the call.
#[derive(Debug, Clone, Copy)]
pub struct MessageLimitLayer {
    pub limit: usize,
}

impl<S> tower::Layer<S> for MessageLimitLayer {
    type Service = MessageLimit<S>;

    fn layer(&self, inner: S) -> MessageLimit<S> {
        MessageLimit {
            inner,
            limit: self.limit,
        }
    }
}

#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
    limit: usize,
}

impl<S> tower::Service<http::Request<TonicBody>> for MessageLimit<S>
where
    S: tower::Service<http::Request<TonicBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<TonicBody>) -> S::Future {
        // Only gRPC bodies are length-prefixed messages; the REST transport reads its own.
        let grpc = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|ct| ct.as_bytes().starts_with(b"application/grpc"));
        if !grpc {
            return self.inner.call(req);
        }
        let limit = self.limit;
        self.inner
            .call(req.map(|body| TonicBody::new(LimitedBody::new(body, limit))))
    }
}

/// Where the reader is in the stream of length-prefixed messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// In a prefix: this many of its 5 bytes seen, the length's bytes so far.
    Prefix { seen: usize, length: u64 },
    /// In a message: this many bytes of it still to come.
    Message { left: u64 },
}

/// A request body that fails at the first message announcing more than `limit` bytes.
pub struct LimitedBody<B> {
    inner: B,
    limit: usize,
    at: Position,
    failed: bool,
}

impl<B> LimitedBody<B> {
    pub fn new(inner: B, limit: usize) -> Self {
        LimitedBody {
            inner,
            limit,
            at: Position::Prefix { seen: 0, length: 0 },
            failed: false,
        }
    }

    /// Follows the prefixes through `data`; the length of the first message over the limit.
    fn scan(&mut self, mut data: &[u8]) -> Option<u64> {
        while !data.is_empty() {
            match self.at {
                Position::Prefix { seen, length } => {
                    // Byte 0 is the compression flag; bytes 1 to 4 the length.
                    let length = if seen == 0 {
                        0
                    } else {
                        (length << 8) | u64::from(data[0])
                    };
                    data = &data[1..];
                    self.at = if seen + 1 == 5 {
                        if length > self.limit as u64 {
                            return Some(length);
                        }
                        if length == 0 {
                            Position::Prefix { seen: 0, length: 0 }
                        } else {
                            Position::Message { left: length }
                        }
                    } else {
                        Position::Prefix {
                            seen: seen + 1,
                            length,
                        }
                    };
                }
                Position::Message { left } => {
                    let take = left.min(data.len() as u64);
                    // `take` is at most `data.len()`, a usize.
                    data = &data[take as usize..];
                    let left = left - take;
                    self.at = if left == 0 {
                        Position::Prefix { seen: 0, length: 0 }
                    } else {
                        Position::Message { left }
                    };
                }
            }
        }
        None
    }
}

/// The error an oversized message gets: the client learns the size it sent and the limit.
fn too_large(length: u64, limit: usize) -> tonic::Status {
    keel_wire::status(ApiError::too_large(
        Target::default(),
        format!(
            "Request entity too large: the request message is {length} bytes, the limit is {limit} bytes"
        ),
    ))
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes, Error = tonic::Status> + Unpin,
{
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref()
            && let Some(length) = self.scan(data.chunk())
        {
            self.failed = true;
            return Poll::Ready(Some(Err(too_large(length, self.limit))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.failed {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(length: u32) -> Vec<u8> {
        let mut p = vec![0];
        p.extend_from_slice(&length.to_be_bytes());
        p
    }

    #[test]
    fn messages_within_the_limit_pass_however_the_bytes_are_split() {
        let mut wire = prefix(3);
        wire.extend_from_slice(b"abc");
        wire.extend(prefix(0));
        wire.extend(prefix(10));
        wire.extend_from_slice(&[7; 10]);
        for split in 0..wire.len() {
            let mut b = LimitedBody::new((), 10);
            let (a, rest) = wire.split_at(split);
            assert_eq!(b.scan(a), None);
            assert_eq!(b.scan(rest), None);
            assert_eq!(b.at, Position::Prefix { seen: 0, length: 0 });
        }
    }

    #[test]
    fn the_first_prefix_over_the_limit_is_caught_even_split_byte_by_byte() {
        let mut wire = prefix(2);
        wire.extend_from_slice(b"ok");
        wire.extend(prefix(u32::MAX));
        let mut b = LimitedBody::new((), 1024);
        let found: Vec<_> = wire.iter().filter_map(|x| b.scan(&[*x])).collect();
        assert_eq!(found, [u64::from(u32::MAX)]);
        let mut b = LimitedBody::new((), 1024);
        assert_eq!(b.scan(&prefix(1025)), Some(1025));
    }
}
