//! Whether a failed call reached a server: decides which calls may be sent again elsewhere.
//!
//! Read from the error's `source()` chain (tonic keeps the transport's error there), never
//! from message text. A status the server sent has no source: it arrived as gRPC trailers.

use std::error::Error as _;

/// What a failed call proves about the server's handling of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// No server processed the request, so sending it again cannot apply it twice: the
    /// connection could not be made (`tonic::ConnectError`, a refused connect); the stream
    /// was refused (h2 `REFUSED_STREAM`, "not processed" by RFC 9113 §8.7); the server's
    /// GOAWAY named a last stream below ours, or came before ours was opened (h2 remote
    /// GOAWAY on the stream); or hyper never handed the request to a connection (canceled:
    /// "connection closed", "connection was not ready").
    NotProcessed,
    /// The transport failed after the request may have reached the server (a reset or closed
    /// connection mid-call, a keep-alive timeout): it may or may not have been applied.
    Unknown,
    /// The client's own deadline passed: unknown too, and there is no time left to retry.
    TimedOut,
    /// The server answered with this status.
    Answered,
}

/// Whether a call may be repeated when the first try's outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// Get, List, Watch, discovery: repeating them changes nothing.
    Read,
    /// Create, Update, Patch, Delete: only the caller knows whether a repeat is safe (an
    /// Update or pinned Patch would meet its own write as a Conflict, a Create as
    /// AlreadyExists, a merge Patch would simply apply twice).
    Write,
}

impl Delivery {
    /// Whether a call of this kind that failed this way may be sent again.
    pub fn may_retry(self, kind: Idempotency) -> bool {
        match self {
            Delivery::NotProcessed => true,
            Delivery::Unknown => kind == Idempotency::Read,
            Delivery::TimedOut | Delivery::Answered => false,
        }
    }
}

/// How the call that ended in `s` was delivered.
pub(crate) fn delivery(s: &tonic::Status) -> Delivery {
    let Some(first) = s.source() else {
        // tonic (0.14, `Status::from_hyper_error`) turns hyper's `Canceled` (a request hyper
        // dropped before any connection took it: "connection closed") into a `Cancelled`
        // status without its source; keel's API server never answers `Cancelled`, so one
        // without a source is that.
        if s.code() == tonic::Code::Cancelled {
            return Delivery::NotProcessed;
        }
        return Delivery::Answered;
    };
    if connection_refused(s) {
        return Delivery::NotProcessed;
    }
    let mut timed_out = false;
    let mut next = Some(first);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>()
            && (h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.is_remote()))
        {
            return Delivery::NotProcessed;
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>()
            && hyper.is_canceled()
        {
            return Delivery::NotProcessed;
        }
        timed_out |= e.is::<tonic::TimeoutExpired>();
        next = e.source();
    }
    if timed_out {
        Delivery::TimedOut
    } else {
        Delivery::Unknown
    }
}

/// Whether `s` failed because no connection could be made (nothing listens, or the host is
/// unreachable), as opposed to a server that went away under the call.
pub(crate) fn connection_refused(s: &tonic::Status) -> bool {
    let mut next = s.source();
    while let Some(e) = next {
        if e.is::<tonic::ConnectError>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn status_from(e: impl std::error::Error + Send + Sync + 'static) -> tonic::Status {
        tonic::Status::from_error(Box::new(e))
    }

    #[test]
    fn a_status_the_server_sent_was_answered() {
        let s = tonic::Status::unavailable("etcd is unreachable");
        assert_eq!(delivery(&s), Delivery::Answered);
        assert!(!delivery(&s).may_retry(Idempotency::Read));
    }

    #[test]
    fn a_connection_that_could_not_be_made_never_carried_the_request() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let s = status_from(tonic::ConnectError(Box::new(refused)));
        assert_eq!(delivery(&s), Delivery::NotProcessed);
        assert!(delivery(&s).may_retry(Idempotency::Write));
    }

    /// What tonic makes of hyper's `Canceled` (its `Status::from_hyper_error`): met behind
    /// HAProxy in a rolling update of a swarm's API servers (deploy/swarm-test.sh).
    #[test]
    fn a_request_hyper_canceled_before_sending_was_not_processed() {
        let s = tonic::Status::cancelled("operation was canceled");
        assert_eq!(delivery(&s), Delivery::NotProcessed);
        assert!(delivery(&s).may_retry(Idempotency::Write));
    }

    #[test]
    fn a_refused_stream_was_not_processed() {
        let s = status_from(h2::Error::from(h2::Reason::REFUSED_STREAM));
        assert_eq!(delivery(&s), Delivery::NotProcessed);
    }

    #[test]
    fn other_transport_failures_leave_the_outcome_unknown() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let s = status_from(reset);
        assert_eq!(delivery(&s), Delivery::Unknown);
        assert!(delivery(&s).may_retry(Idempotency::Read));
        assert!(!delivery(&s).may_retry(Idempotency::Write));
        let s = status_from(h2::Error::from(h2::Reason::INTERNAL_ERROR));
        assert_eq!(delivery(&s), Delivery::Unknown);
    }

    #[test]
    fn the_clients_own_deadline_is_not_retried() {
        let s = status_from(tonic::TimeoutExpired(()));
        assert_eq!(delivery(&s), Delivery::TimedOut);
        assert!(!delivery(&s).may_retry(Idempotency::Read));
    }

    /// A real h2 connection whose server sends GOAWAY: the client's next stream fails with
    /// the remote GOAWAY, which proves the server never saw it.
    #[tokio::test]
    async fn a_stream_after_the_servers_goaway_was_not_processed() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            conn.abrupt_shutdown(h2::Reason::NO_ERROR);
            while conn.accept().await.is_some() {}
        });
        let (mut send, conn) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let _ = server.await;
        let request = || {
            http::Request::builder()
                .uri("http://keel/keel.v1.Objects/Patch")
                .body(())
                .unwrap()
        };
        // The GOAWAY may still be in flight: until it lands, streams open (and then fail).
        let err = loop {
            match send.send_request(request(), true) {
                Err(e) => break e,
                Ok((response, _)) => {
                    if let Err(e) = response.await {
                        break e;
                    }
                }
            }
        };
        assert!(err.is_go_away() && err.is_remote(), "{err:?}");
        assert_eq!(delivery(&status_from(err)), Delivery::NotProcessed);
    }
}
