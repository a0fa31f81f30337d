//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` package does it for kube-scheduler: so that of several replicas
//! only one schedules, and a standby takes over when the leader stops renewing.
//!
//! * A candidate takes the Lease when it does not exist, is released (no holder), or
//!   has not changed for `leaseDuration` as *this* process observed it (local time,
//!   so clocks need not agree across nodes).
//! * Every write carries the resourceVersion it read, so two candidates can never
//!   both succeed: the loser gets 409 and tries again after `retryPeriod`.
//! * The leader renews every `retryPeriod` (one update of the Lease it last wrote,
//!   reading it only when that fails); if no renewal succeeded for
//!   `renewDeadline` it has lost the lease and must stop scheduling (kube-scheduler
//!   exits).
//! * On shutdown the leader releases the lease (no holder, duration 1 s), so a
//!   standby takes over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::config::LeaderElectionConfig;

/// Why leading ended.
#[derive(Debug, PartialEq, Eq)]
pub enum LeadingEnded {
    /// No renewal succeeded within `renewDeadline` (or another holder took it).
    Lost(String),
    /// The stop signal came.
    Stopped,
}

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    config: LeaderElectionConfig,
    /// The lease as last read, and when this process saw it change.
    observed: Option<(Lease, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// What identifies a lease version: holder, renew time, resourceVersion.
fn version(l: &Lease) -> (Option<String>, Option<String>, Option<String>) {
    let spec = l.spec.as_ref();
    (
        spec.and_then(|s| s.holder_identity.clone()),
        spec.and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string()),
        l.metadata.resource_version.clone(),
    )
}

impl LeaderElector {
    pub fn new(client: kube::Client, identity: String, config: LeaderElectionConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.resource_namespace),
            name: config.resource_name.clone(),
            identity,
            config,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One attempt to take or renew the lease (client-go `tryAcquireOrRenew`).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, String> {
        let duration_s = self.config.lease_duration.as_secs().max(1) as i32;
        // The fast path: a leader whose lease is still valid as last observed
        // updates the Lease it last wrote without reading it first (one request
        // per renewal, as client-go's leader does); a conflict or any failure falls
        // back to reading it.
        if let Some((last, at)) = &self.observed {
            let spec = last.spec.clone().unwrap_or_default();
            let valid = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str())
                && at.elapsed() < valid
            {
                let mut next = last.clone();
                next.spec = Some(LeaseSpec {
                    lease_duration_seconds: Some(duration_s),
                    renew_time: Some(now()),
                    ..spec
                });
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &next)
                    .await
                {
                    Ok(l) => {
                        self.observed = Some((l, Instant::now()));
                        return Ok(true);
                    }
                    Err(e) => {
                        tracing::debug!(lease = %self.lease_key(), error = %e, "optimistic renewal failed; reading the lease")
                    }
                }
            }
        }
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.failed("get", "reading", e))?;
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.config.resource_namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_s),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observed = Some((l, Instant::now()));
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.failed("create", "creating", e)),
            };
        };
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(l, _)| version(l) != version(&current));
        if changed {
            self.observed = Some((current.clone(), Instant::now()));
        }
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_by_me = holder == self.identity;
        let observed_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, t)| *t);
        // The holder's own duration counts (a released lease says 1 s).
        let their_duration = spec
            .lease_duration_seconds
            .map_or(self.config.lease_duration, |s| {
                Duration::from_secs(s.max(0) as u64)
            });
        if !holder.is_empty() && !held_by_me && observed_at.elapsed() < their_duration {
            return Ok(false);
        }
        let mut next = current.clone();
        let transitions = spec.lease_transitions.unwrap_or(0);
        next.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(duration_s),
            acquire_time: if held_by_me {
                spec.acquire_time.clone()
            } else {
                Some(now())
            },
            renew_time: Some(now()),
            lease_transitions: Some(if held_by_me {
                transitions
            } else {
                transitions + 1
            }),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(l) => {
                self.observed = Some((l, Instant::now()));
                Ok(true)
            }
            // Someone else wrote first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.failed("update", "updating", e)),
        }
    }

    /// Tries every `retryPeriod` until the lease is ours; false if `stop` fired
    /// first.
    pub async fn acquire(&mut self, stop: &mut tokio::sync::watch::Receiver<bool>) -> bool {
        let mut logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.lease_key(), identity = %self.identity, "acquired the lease; leading");
                    return true;
                }
                Ok(false) if !logged => {
                    logged = true;
                    let holder = self
                        .observed
                        .as_ref()
                        .and_then(|(l, _)| l.spec.as_ref()?.holder_identity.clone())
                        .unwrap_or_default();
                    tracing::info!(lease = %self.lease_key(), %holder, "another replica leads; standing by");
                }
                Ok(false) => {}
                // Logged (rate-limited) and counted where it failed.
                Err(e) => tracing::debug!(lease = %self.lease_key(), error = %e, "leader election"),
            }
            if wait_or_stop(stop, self.jittered_retry()).await {
                return false;
            }
        }
    }

    /// Renews every `retryPeriod` until a renewal deadline passes or `stop` fires.
    pub async fn renew_until_lost(
        &mut self,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> LeadingEnded {
        let mut last_renew = Instant::now();
        loop {
            if wait_or_stop(stop, self.config.retry_period).await {
                return LeadingEnded::Stopped;
            }
            let attempt = tokio::time::timeout(
                self.config
                    .renew_deadline
                    .saturating_sub(last_renew.elapsed()),
                self.try_acquire_or_renew(),
            )
            .await;
            match attempt {
                Ok(Ok(true)) => last_renew = Instant::now(),
                Ok(Ok(false)) => {
                    return LeadingEnded::Lost("another replica holds the lease".into())
                }
                Ok(Err(e)) => {
                    tracing::debug!(lease = %self.lease_key(), error = %e, "renewing the lease")
                }
                Err(_) => {}
            }
            if last_renew.elapsed() >= self.config.renew_deadline {
                return LeadingEnded::Lost(format!(
                    "no renewal within the renew deadline ({:?})",
                    self.config.renew_deadline
                ));
            }
        }
    }

    /// Gives the lease up so a standby need not wait for it to expire.
    pub async fn release(&mut self) {
        let Ok(Some(mut current)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = current.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.lease_key(), "released the lease"),
            Err(e) => {
                let _ = self.failed("update", "releasing", e);
            }
        }
    }

    /// Reports a failed Lease request (warn, rate-limited, and the
    /// `switchyard_api_errors_total` counter) and says what failed.
    fn failed(&self, verb: &str, doing: &str, e: kube::Error) -> String {
        let what = format!("lease {}", self.lease_key());
        crate::cluster::kubernetes::report_api_error(verb, "leases", &what, &e);
        format!("{doing} {what}: {e}")
    }

    fn lease_key(&self) -> String {
        format!("{}/{}", self.config.resource_namespace, self.name)
    }

    /// retryPeriod plus up to 20% (client-go's JitterFactor 1.2), so candidates do
    /// not retry in lockstep.
    fn jittered_retry(&self) -> Duration {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let frac = f64::from(nanos % 1000) / 1000.0 * 0.2;
        self.config.retry_period.mul_f64(1.0 + frac)
    }
}

/// Sleeps `d`; true if `stop` fired (or its sender is gone) first.
async fn wait_or_stop(stop: &mut tokio::sync::watch::Receiver<bool>, d: Duration) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        r = stop.changed() => r.is_err() || *stop.borrow(),
    }
}
