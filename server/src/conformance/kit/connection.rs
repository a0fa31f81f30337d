//! The connection-level clauses: handshake and versions, health, reconnects, streams closed or dropped mid-call, stale and partial replication.

use super::*;

impl Kit {
    pub(super) async fn reconnect(&mut self) -> Option<Conn> {
        match Conn::open(&self.target, self.timeout).await {
            Ok(c) => Some(c),
            Err(e) => {
                self.checks
                    .fail("R6", format!("a second connection failed: {e}"));
                None
            }
        }
    }

    pub(super) async fn refuses_unknown_version(&mut self) {
        let mut c = match client(&self.target).await {
            Ok(c) => c,
            Err(e) => {
                self.checks.fail("H2", e);
                return;
            }
        };
        let r = handshake(&mut c, vec!["v0-conformance".into()], self.timeout).await;
        self.checks.check("H2", r.is_err(), || {
            format!(
                "offered only \"v0-conformance\", the sidecar answered {:?}",
                r.as_ref()
                    .map(|h| h.protocol_version.clone())
                    .unwrap_or_default()
            )
        });
    }

    pub(super) fn check_handshake(&mut self, hs: &pb::HandshakeResponse) {
        let offered = offered();
        self.checks.check(
            "H1",
            hs.protocol_version == switchyard_proto::PROTOCOL_VERSION,
            || format!("chose protocol {:?}", hs.protocol_version),
        );
        for c in &hs.capabilities {
            self.checks.check("H1", offered.contains(c), || {
                format!("answered capability {c:?}, which was not offered")
            });
        }
        self.checks.check("H3", !hs.plugins.is_empty(), || {
            "declares no plugin".to_string()
        });
        let mut names = std::collections::HashSet::new();
        for p in &hs.plugins {
            let n = &p.name;
            self.checks
                .check("H3", !n.is_empty(), || "a plugin has no name".into());
            self.checks.check("H3", names.insert(n.clone()), || {
                format!("plugin {n:?} is declared twice")
            });
            for &e in &p.extension_points {
                self.checks.check(
                    "H3",
                    matches!(Ep::try_from(e), Ok(x) if x != Ep::Unspecified),
                    || format!("plugin {n:?}: unknown extension point {e}"),
                );
            }
            let has = |x: Ep| p.extension_points.contains(&(x as i32));
            self.checks
                .check("H3", !(p.node_local && has(Ep::PreFilter)), || {
                    format!("plugin {n:?} is node-local but declares PreFilter")
                });
            self.checks
                .check("H3", !p.normalize_score || has(Ep::Score), || {
                    format!("plugin {n:?} declares NormalizeScore without Score")
                });
            self.checks
                .check("H3", !p.pre_filter_extensions || has(Ep::PreFilter), || {
                    format!("plugin {n:?} declares AddPod/RemovePod without PreFilter")
                });
            if let Err(e) = crate::remote::convert::events(&p.events) {
                self.checks.fail("H3", format!("plugin {n:?}: {e}"));
            }
        }
    }

    pub(super) async fn health(&mut self) {
        use switchyard_proto::health::health_check_response::ServingStatus;
        use switchyard_proto::health::{health_client::HealthClient, HealthCheckRequest};
        let ch =
            match crate::remote::client::channel(&self.target.endpoint, self.target.tls.as_ref())
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    self.checks.fail("HL1", e);
                    return;
                }
            };
        let mut h = HealthClient::new(ch);
        let r = tokio::time::timeout(
            self.timeout,
            h.check(HealthCheckRequest {
                service: String::new(),
            }),
        )
        .await;
        match r {
            Ok(Ok(r)) => {
                let s = r.into_inner().status;
                self.checks
                    .check("HL1", s == ServingStatus::Serving as i32, || {
                        format!("status {s}, not SERVING")
                    });
            }
            Ok(Err(s)) => self.checks.fail("HL1", switchyard_proto::status_text(&s)),
            Err(_) => self.checks.fail("HL1", "no answer".to_string()),
        }
    }

    /// R2: a message two generations ahead must close the Replicate stream.
    pub(super) async fn stale_replicate(&mut self, c: &mut Conn) {
        c.generation += 1; // skip one
        if c.send(
            pb::replicate_request::Kind::Delta(pb::SnapshotDelta::default()),
            true,
        )
        .is_err()
        {
            self.checks.fail(
                "R2",
                "the Replicate stream closed before the gap".to_string(),
            );
            return;
        }
        let closed = self.stream_closes(c).await;
        self.checks.check("R2", closed, || {
            format!(
                "generation {} followed {} and the stream stayed open",
                c.generation,
                c.generation - 2
            )
        });
    }

    /// Waits for the Replicate stream's end; false if it acknowledged instead or
    /// stayed open past the timeout.
    pub(super) async fn stream_closes(&self, c: &mut Conn) -> bool {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            match tokio::time::timeout_at(deadline, c.acks.recv()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    /// L2: the scheduler goes away with calls in flight (a cycle started, its Filter
    /// and every other call sent, nothing awaited): the sidecar must need no answer
    /// delivered, and a new connection must get the answers a fresh one got.
    pub(super) async fn dropped_mid_call(&mut self, f: &Fixture, baseline: &[PodAnswers]) {
        let Some(pod) = f.probes.first() else {
            return;
        };
        if let Ok(mut c) = Conn::open(&self.target, self.timeout).await {
            let plugins = Self::filter_plugins(&c);
            if self.full_snapshot(&mut c, f).await.is_err() {
                return;
            }
            let Ok((cycle, g)) = c.start_cycle(pod) else {
                return;
            };
            let nodes = capped(f, &c);
            for p in &plugins {
                let req = c.filter_request(&p.name, cycle, g, &nodes);
                let _ = c.filter.send(req);
            }
            drop(c);
        }
        let Some(mut again) = (match Conn::open(&self.target, self.timeout).await {
            Ok(c) => Some(c),
            Err(e) => {
                self.checks.fail(
                    "L2",
                    format!(
                        "after a connection dropped with calls in flight, a new one failed: {e}"
                    ),
                );
                None
            }
        }) else {
            return;
        };
        if self.full_snapshot(&mut again, f).await.is_err() {
            return;
        }
        let answers = self
            .all_pods(&mut again, f, "after a dropped connection")
            .await;
        self.checks.ok("L2");
        self.compare(
            "L2",
            baseline,
            &answers,
            "connection 1",
            "a new connection after one dropped with calls in flight",
        );
    }

    /// R3: a fresh connection whose first Replicate message is a plain delta.
    pub(super) async fn first_message_not_full(&mut self) {
        let Ok(mut c) = Conn::open(&self.target, self.timeout).await else {
            return;
        };
        if c.send(
            pb::replicate_request::Kind::Delta(pb::SnapshotDelta::default()),
            true,
        )
        .is_err()
        {
            return;
        }
        let closed = self.stream_closes(&mut c).await;
        self.checks.check("R3", closed, || {
            "a first message without `full` was accepted".into()
        });
    }
}
