//! `leaderElection`: defaults, and component-base's `ValidateLeaderElectionConfiguration`
//! as kube-scheduler v1.36 runs it.

use std::time::Duration;

use super::types::LeaderElection;
use super::{parse_go_duration, LeaderElectionConfig};

/// A refused field: its path and upstream's words.
type Refusal = (String, String);

fn invalid(field: &str, message: String) -> Refusal {
    (field.to_string(), message)
}

pub(super) fn resolve(le: Option<&LeaderElection>) -> Result<LeaderElectionConfig, Refusal> {
    let dur = |v: Option<&String>, field: &str, default: u64| -> Result<Duration, Refusal> {
        match v {
            None => Ok(Duration::from_secs(default)),
            Some(s) => parse_go_duration(s).ok_or_else(|| {
                invalid(
                    field,
                    format!("Invalid value: {s:?}: not a duration such as \"15s\""),
                )
            }),
        }
    };
    let leader_election = LeaderElectionConfig {
        leader_elect: le.and_then(|l| l.leader_elect).unwrap_or(true),
        lease_duration: dur(
            le.and_then(|l| l.lease_duration.as_ref()),
            "leaderElection.leaseDuration",
            15,
        )?,
        renew_deadline: dur(
            le.and_then(|l| l.renew_deadline.as_ref()),
            "leaderElection.renewDeadline",
            10,
        )?,
        retry_period: dur(
            le.and_then(|l| l.retry_period.as_ref()),
            "leaderElection.retryPeriod",
            2,
        )?,
        resource_name: le
            .and_then(|l| l.resource_name.clone())
            .unwrap_or_else(|| "kube-scheduler".into()),
        resource_namespace: le
            .and_then(|l| l.resource_namespace.clone())
            .unwrap_or_else(|| "kube-system".into()),
    };
    // component-base `ValidateLeaderElectionConfiguration`, as v1.36 runs it.
    if leader_election.leader_elect {
        let zero = Duration::ZERO;
        for (d, field, raw_value) in [
            (
                leader_election.lease_duration,
                "leaseDuration",
                le.and_then(|l| l.lease_duration.clone()),
            ),
            (
                leader_election.renew_deadline,
                "renewDeadline",
                le.and_then(|l| l.renew_deadline.clone()),
            ),
            (
                leader_election.retry_period,
                "retryPeriod",
                le.and_then(|l| l.retry_period.clone()),
            ),
        ] {
            if d <= zero {
                return Err(invalid(
                    &format!("leaderElection.{field}"),
                    format!(
                        "Invalid value: {:?}: must be greater than zero",
                        raw_value.unwrap_or_default()
                    ),
                ));
            }
        }
        if leader_election.lease_duration <= leader_election.renew_deadline {
            return Err(invalid(
                "leaderElection.leaseDuration",
                format!(
                    "Invalid value: {:?}: LeaseDuration must be greater than RenewDeadline",
                    le.and_then(|l| l.renew_deadline.clone())
                        .unwrap_or_else(|| "10s".into())
                ),
            ));
        }
        for (v, field) in [
            (&leader_election.resource_name, "resourceName"),
            (&leader_election.resource_namespace, "resourceNamespace"),
        ] {
            if v.is_empty() {
                return Err(invalid(
                    &format!("leaderElection.{field}"),
                    format!("Invalid value: \"\": {field} is required"),
                ));
            }
        }
    }
    if let Some(lock) = le.and_then(|l| l.resource_lock.as_deref()) {
        if leader_election.leader_elect && lock != "leases" {
            return Err(invalid(
                "leaderElection.resourceLock",
                format!("Invalid value: {lock:?}: resourceLock value must be \"leases\""),
            ));
        }
    }
    Ok(leader_election)
}
