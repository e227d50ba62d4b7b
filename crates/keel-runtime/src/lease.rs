//! The leader-election record kept in a `coordination.k8s.io/v1` `Lease`, and the pure rules
//! of who may take it.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::time::Instant;

/// A Lease's `spec`, as client-go's `LeaderElectionRecord` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    /// "" when nobody holds the lease (released).
    pub holder: String,
    pub lease_duration_seconds: i64,
    /// RFC 3339 with microseconds (Kubernetes' `MicroTime`).
    pub acquire_time: String,
    pub renew_time: String,
    pub transitions: i64,
}

impl LeaseRecord {
    pub fn from_lease(lease: &Value) -> LeaseRecord {
        let spec = &lease["spec"];
        let s = |f: &str| spec[f].as_str().unwrap_or("").to_string();
        LeaseRecord {
            holder: s("holderIdentity"),
            lease_duration_seconds: spec["leaseDurationSeconds"].as_i64().unwrap_or(0),
            acquire_time: s("acquireTime"),
            renew_time: s("renewTime"),
            transitions: spec["leaseTransitions"].as_i64().unwrap_or(0),
        }
    }

    /// Writes the record into a Lease's `spec`, leaving the rest (and `metadata`, with its
    /// `resourceVersion` precondition) as it is.
    pub fn write_to(&self, lease: &mut Value) {
        if !lease["spec"].is_object() {
            lease["spec"] = json!({});
        }
        let spec = &mut lease["spec"];
        spec["holderIdentity"] = json!(self.holder);
        spec["leaseDurationSeconds"] = json!(self.lease_duration_seconds);
        spec["acquireTime"] = json!(self.acquire_time);
        spec["renewTime"] = json!(self.renew_time);
        spec["leaseTransitions"] = json!(self.transitions);
    }

    /// A new Lease object holding this record.
    pub fn to_lease(&self, namespace: &str, name: &str) -> Value {
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"namespace": namespace, "name": name},
        });
        self.write_to(&mut lease);
        lease
    }

    /// A new lease's record: held by `identity` since `wall`, no transitions yet.
    pub fn created(identity: &str, lease_duration_seconds: i64, wall: String) -> LeaseRecord {
        LeaseRecord {
            holder: identity.to_string(),
            lease_duration_seconds,
            acquire_time: wall.clone(),
            renew_time: wall,
            transitions: 0,
        }
    }

    /// This record once `identity` has taken or renewed it at `wall`: a change of holder
    /// (from another, or from nobody) sets the acquire time and counts one more transition.
    pub fn claimed(
        &self,
        identity: &str,
        lease_duration_seconds: i64,
        wall: String,
    ) -> LeaseRecord {
        let mut record = LeaseRecord {
            holder: identity.to_string(),
            lease_duration_seconds,
            renew_time: wall.clone(),
            ..self.clone()
        };
        if self.holder != identity {
            record.acquire_time = wall;
            record.transitions = self.transitions.saturating_add(1);
        }
        record
    }

    /// This record released at `wall`: no holder, and a one-second duration, so that nobody
    /// waits on it.
    pub fn released(&self, wall: String) -> LeaseRecord {
        LeaseRecord {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: wall.clone(),
            renew_time: wall,
            transitions: self.transitions,
        }
    }

    /// How long the holder's claim lasts after it was last seen renewed: the record's own
    /// duration (the holder's setting), or `fallback` when the record has none.
    pub fn lease_duration(&self, fallback: Duration) -> Duration {
        u64::try_from(self.lease_duration_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .unwrap_or(fallback)
    }
}

/// What a candidate may do with a lease it has just read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It is ours: renew it.
    Renew,
    /// Free (released, or not renewed for a lease duration): take it.
    Acquire,
    /// Another holder renewed it less than a lease duration ago.
    HeldByOther,
}

/// A Lease as last read, and when its record was first seen as it is.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub record: LeaseRecord,
    /// When the record was first seen as it is (local clock): the start of its holder's
    /// lease duration.
    pub at: Instant,
    /// The object, for its `resourceVersion` precondition.
    pub lease: Value,
}

impl Observed {
    /// `lease` as read at `now`; the observation time moves only when the record differs from
    /// the `previous` observation's.
    pub fn new(lease: Value, now: Instant, previous: Option<&Observed>) -> Observed {
        let record = LeaseRecord::from_lease(&lease);
        let at = match previous {
            Some(p) if p.record == record => p.at,
            _ => now,
        };
        Observed { record, at, lease }
    }

    /// [`verdict`] on this observation.
    pub fn verdict(&self, now: Instant, identity: &str, default_duration: Duration) -> Verdict {
        verdict(&self.record, self.at, now, identity, default_duration)
    }

    /// When another holder's claim ends, unless renewed (or was released) first.
    pub fn expires(&self, default_duration: Duration) -> Instant {
        self.at + self.record.lease_duration(default_duration)
    }
}

/// Decides from the record and the local time it was first seen in this state
/// (`observed_at`). Expiry is judged by this process's own clock, from when it saw the record
/// change, never from the timestamps in the record: clocks of different machines disagree.
pub(crate) fn verdict(
    record: &LeaseRecord,
    observed_at: Instant,
    now: Instant,
    identity: &str,
    default_duration: Duration,
) -> Verdict {
    if record.holder == identity {
        return Verdict::Renew;
    }
    if record.holder.is_empty() {
        return Verdict::Acquire;
    }
    let expires = observed_at + record.lease_duration(default_duration);
    if now < expires {
        Verdict::HeldByOther
    } else {
        Verdict::Acquire
    }
}

/// A time as Kubernetes writes a `MicroTime`: RFC 3339 in UTC with six fractional digits,
/// `2024-05-01T12:00:00.123456Z`.
pub(crate) fn micro_time(t: SystemTime) -> String {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86400, secs % 86400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_micros()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// client-go's jitter of acquire retries: a retry waits `retry_period · (1 + 1.2·rand)`.
pub(crate) const ACQUIRE_JITTER: f64 = 1.2;

/// The Leases' resource.
pub(crate) fn leases() -> keel_api::GroupVersionResource {
    keel_client::gvr("coordination.k8s.io", "v1", "leases")
}

/// Timing of Lease holding (client-go's leader-election rules, which the shard leases follow);
/// `lease_duration > renew_deadline > 1.2 · retry_period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long others wait, after they last saw the lease renewed, before taking it.
    pub lease_duration: Duration,
    /// How long a holder keeps trying to renew before it gives the lease up.
    pub renew_deadline: Duration,
    /// How often a holder renews and a candidate tries to acquire.
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    /// client-go's: 15 s, 10 s, 2 s.
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why a timing cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTimingError {
    /// A holder must give up before others may take over: the lease must outlast the renew
    /// deadline.
    #[error("the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?})")]
    LeaseNotLongerThanRenewDeadline { lease: Duration, renew: Duration },
    /// A holder needs more than one (jittered) retry within its renew deadline.
    #[error(
        "the renew deadline ({renew:?}) must be longer than 1.2 × the retry period ({retry:?})"
    )]
    RenewDeadlineTooShort { renew: Duration, retry: Duration },
    #[error("the retry period must be positive")]
    ZeroRetryPeriod,
}

impl LeaseTiming {
    pub fn validate(&self) -> Result<(), LeaseTimingError> {
        if self.retry_period.is_zero() {
            return Err(LeaseTimingError::ZeroRetryPeriod);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaseTimingError::LeaseNotLongerThanRenewDeadline {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(ACQUIRE_JITTER) {
            return Err(LeaseTimingError::RenewDeadlineTooShort {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }

    /// The lease duration written into the Lease, in whole seconds, rounded up: others must
    /// never wait less than this candidate's deadline allows for.
    pub(crate) fn lease_seconds(&self) -> i64 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, micros: u32) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::new(secs, micros * 1000)
    }

    #[test]
    fn micro_time_is_rfc3339_utc_with_six_digits() {
        assert_eq!(micro_time(at(0, 0)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            micro_time(at(1_700_000_000, 123_456)),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(
            micro_time(at(951_782_400, 7)),
            "2000-02-29T00:00:00.000007Z"
        );
        assert_eq!(
            micro_time(at(4_107_542_399, 999_999)),
            "2100-02-28T23:59:59.999999Z"
        );
        assert_eq!(
            micro_time(at(4_107_542_400, 0)),
            "2100-03-01T00:00:00.000000Z"
        );
        assert_eq!(
            micro_time(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn records_round_trip_through_a_lease() {
        let r = LeaseRecord {
            holder: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: "t1".into(),
            renew_time: "t2".into(),
            transitions: 3,
        };
        let lease = r.to_lease("ns", "lock");
        assert_eq!(lease["kind"], "Lease");
        assert_eq!(lease["metadata"]["name"], "lock");
        assert_eq!(lease["spec"]["holderIdentity"], "a");
        assert_eq!(LeaseRecord::from_lease(&lease), r);
        assert_eq!(LeaseRecord::from_lease(&json!({})), LeaseRecord::default());
    }

    #[tokio::test(start_paused = true)]
    async fn another_holders_lease_is_taken_only_a_lease_duration_after_it_was_seen() {
        let default = Duration::from_secs(15);
        let record = LeaseRecord {
            holder: "other".into(),
            lease_duration_seconds: 10,
            ..LeaseRecord::default()
        };
        let seen = Instant::now();
        let v = |after: u64| {
            verdict(
                &record,
                seen,
                seen + Duration::from_secs(after),
                "me",
                default,
            )
        };
        assert_eq!(v(0), Verdict::HeldByOther);
        assert_eq!(v(9), Verdict::HeldByOther);
        // The record's own duration counts, not ours.
        assert_eq!(v(10), Verdict::Acquire);

        let no_duration = LeaseRecord {
            lease_duration_seconds: 0,
            ..record.clone()
        };
        assert_eq!(
            verdict(
                &no_duration,
                seen,
                seen + Duration::from_secs(14),
                "me",
                default
            ),
            Verdict::HeldByOther
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_own_or_released_lease_is_ours_at_once() {
        let now = Instant::now();
        let d = Duration::from_secs(15);
        let mine = LeaseRecord {
            holder: "me".into(),
            ..LeaseRecord::default()
        };
        assert_eq!(verdict(&mine, now, now, "me", d), Verdict::Renew);
        assert_eq!(
            verdict(&LeaseRecord::default(), now, now, "me", d),
            Verdict::Acquire
        );
    }
}
