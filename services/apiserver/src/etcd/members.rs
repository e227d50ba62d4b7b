//! The etcd members, each on its own connection, with a prober that tells which ones answer.
//!
//! etcd-client balances one channel over every endpoint and keeps sending calls to a member
//! that is gone or paused (DESIGN.md, "etcd member failover"). So each member gets a client of
//! its own (with `require_leader`: a member cut off from the leader refuses instead of serving
//! stale data), and a prober sends it a linearizable count-only read every
//! [`PROBE_INTERVAL`]: one failure or timeout marks the member down, [`UP_AFTER`] successes in
//! a row mark it up again. Calls go to one healthy member (sticky, so a connection stays warm)
//! and move to the next one when it fails or is marked down.
//!
//! A failed probe also replaces the member's connection: after a partition heals, a TCP
//! connection from before it only resumes at its next retransmission (backed off to seconds),
//! while a new one answers at once.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use tokio::sync::watch;
use tokio::time::Instant;

use super::EtcdTls;
use crate::metrics::Metrics;

/// How often each member is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// A probe not answered within this marks the member down: with [`PROBE_INTERVAL`], a member
/// that stops answering is out of rotation within a second.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(700);
/// Successful probes in a row before a member that was down gets calls again.
const UP_AFTER: u32 = 2;

/// One etcd member and the client that talks to it alone.
pub struct Member {
    pub endpoint: String,
    /// Replaced by the prober when a probe fails (calls in flight keep the old one).
    client: Mutex<Client>,
    /// Successful probes in a row since the last failure.
    successes: AtomicU32,
}

impl Member {
    /// The member's current client (a cheap clone: it shares the connection).
    pub fn client(&self) -> Client {
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Every member, which of them are up, and the one calls go to first.
pub struct Members {
    pub members: Vec<Member>,
    /// `up[i]`: member `i` answers. Changes wake calls waiting for a healthy member and end
    /// calls and watches on a member marked down.
    up: watch::Sender<Vec<bool>>,
    preferred: AtomicUsize,
    metrics: Metrics,
    options: ConnectOptions,
}

impl Members {
    /// Clients for every endpoint (connected lazily) and a prober for each.
    pub async fn connect(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
        metrics: Metrics,
    ) -> Result<Arc<Members>, etcd_client::Error> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        if let Some(tls) = tls {
            let mut options = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                options = options.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(options);
        }
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let client = Client::connect([endpoint.as_str()], Some(opts.clone())).await?;
            metrics.etcd_member_up(endpoint, true);
            members.push(Member {
                endpoint: endpoint.clone(),
                client: Mutex::new(client),
                successes: AtomicU32::new(UP_AFTER),
            });
        }
        // Every member counts as up until a probe or a call says otherwise.
        let (up, _) = watch::channel(vec![true; members.len()]);
        let members = Arc::new(Members {
            members,
            up,
            preferred: AtomicUsize::new(0),
            metrics,
            options: opts,
        });
        for i in 0..members.members.len() {
            tokio::spawn(probe(Arc::downgrade(&members), i));
        }
        Ok(members)
    }

    /// A receiver of the members' health, to wait on.
    pub fn health(&self) -> watch::Receiver<Vec<bool>> {
        self.up.subscribe()
    }

    /// The member a call should go to, and whether it is up: the preferred one if it is up,
    /// else the next one up. With none up (an election, a restart of the only member, a probe
    /// starved of CPU) the preferred one all the same: etcd queues what it cannot serve yet,
    /// and waiting for probes would only add their interval to every call.
    pub fn pick(&self) -> (usize, bool) {
        let n = self.members.len();
        let start = self.preferred.load(Ordering::Relaxed) % n.max(1);
        let up = self.up.borrow();
        match (0..n).map(|k| (start + k) % n).find(|&i| up[i]) {
            Some(i) => {
                if i != start {
                    self.preferred.store(i, Ordering::Relaxed);
                }
                (i, true)
            }
            None => (start, false),
        }
    }

    /// A member that is up, waiting for one until `deadline` (`None`: none came up).
    pub async fn pick_up(&self, deadline: Instant) -> Option<usize> {
        let mut health = self.health();
        loop {
            if let (i, true) = self.pick() {
                return Some(i);
            }
            match tokio::time::timeout_at(deadline, health.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Waits until a call or watch on member `i` should go elsewhere: `i` is marked down and
    /// another member is up. With none up there is nowhere better: a dead member's calls fail
    /// by themselves, a paused one's go on when it wakes. (Pending forever once the members
    /// are gone.)
    pub async fn better_elsewhere(health: &mut watch::Receiver<Vec<bool>>, i: usize) {
        let elsewhere = |v: &Vec<bool>| {
            !v.get(i).copied().unwrap_or(false) && v.iter().enumerate().any(|(k, up)| k != i && *up)
        };
        if health.wait_for(elsewhere).await.is_err() {
            std::future::pending::<()>().await
        }
    }

    /// A call to member `i` failed in a way another member may not: take it out of rotation
    /// until its probes pass again.
    pub fn mark_down(&self, i: usize, cause: &str) {
        if let Some(m) = self.members.get(i) {
            m.successes.store(0, Ordering::Relaxed);
        }
        // The next call tries the next member, even while none is up.
        let _ = self.preferred.compare_exchange(
            i,
            (i + 1) % self.members.len().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        self.set(i, false, cause);
    }

    fn set(&self, i: usize, up: bool, cause: &str) {
        let changed = self.up.send_if_modified(|v| match v.get_mut(i) {
            Some(u) if *u != up => {
                *u = up;
                true
            }
            _ => false,
        });
        if !changed {
            return;
        }
        let endpoint = self
            .members
            .get(i)
            .map(|m| m.endpoint.as_str())
            .unwrap_or("");
        self.metrics.etcd_member_up(endpoint, up);
        if up {
            tracing::info!(endpoint, "etcd member answers again: back in rotation");
        } else {
            tracing::warn!(endpoint, cause, "etcd member out of rotation");
        }
    }
}

/// Probes member `i` until the members are dropped.
async fn probe(members: Weak<Members>, i: usize) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(ms) = members.upgrade() else { return };
        let Some(m) = ms.members.get(i) else { return };
        let mut kv = m.client().kv_client();
        let read = kv.get("/", Some(GetOptions::new().with_count_only()));
        let result = match tokio::time::timeout(PROBE_TIMEOUT, read).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
        };
        match result {
            Ok(()) => {
                let before = m
                    .successes
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        Some(n.saturating_add(1))
                    })
                    .unwrap_or(0);
                if before + 1 >= UP_AFTER {
                    ms.set(i, true, "");
                }
            }
            Err(cause) => {
                ms.mark_down(i, &format!("health probe: {cause}"));
                // A fresh connection for the next probe and the calls after it (connected
                // lazily, so this cannot wait on the member).
                match Client::connect([m.endpoint.as_str()], Some(ms.options.clone())).await {
                    Ok(fresh) => *m.client.lock().unwrap_or_else(PoisonError::into_inner) = fresh,
                    Err(e) => {
                        tracing::warn!(endpoint = %m.endpoint, error = %e, "etcd: cannot make a new connection")
                    }
                }
            }
        }
    }
}
