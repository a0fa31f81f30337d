//! The sidecar surface: every reply message a sidecar can send, as
//! `<message index>:<hex of its protobuf encoding>`, decoded and validated as the
//! scheduler validates it (statuses, cluster-event names of the handshake).

use prost::Message;
use switchyard_proto::v1 as pb;

use super::Rng;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn status(code: i32, reasons: &[&str]) -> Option<pb::Status> {
    Some(pb::Status {
        code,
        reasons: reasons.iter().map(|r| r.to_string()).collect(),
    })
}

pub fn seeds() -> Vec<String> {
    let handshake = pb::HandshakeResponse {
        protocol_version: "switchyard.plugin.v1".into(),
        plugins: vec![pb::PluginInfo {
            name: "Gang".into(),
            extension_points: vec![1, 2, 3, 4],
            pre_filter_extensions: true,
            normalize_score: true,
            events: vec![pb::ClusterEvent {
                resource: "Pod".into(),
                actions: vec!["Add".into(), "Delete".into()],
            }],
            node_local: true,
            signature: vec![pb::PodField::Tolerations as i32],
            signature_node_pods: false,
            signature_label_keys: Vec::new(),
            score_normalization: pb::ScoreNormalization::DefaultReverse as i32,
            score_node_label: String::new(),
            pre_filter_pod_only: false,
        }],
        max_batch_nodes: 512,
        capabilities: vec!["filter-batch".into()],
    };
    let filter = pb::FilterResponse {
        request_id: 7,
        generation: 3,
        evaluated: 100,
        failures: vec![pb::NodeStatus {
            index: 4,
            status: status(3, &["node(s) didn't match"]),
        }],
        error: None,
        score: None,
        failure_groups: vec![pb::FailureGroup {
            status: status(2, &["node(s) lack an accelerator"]),
            indices: vec![9, 11, 12],
        }],
    };
    let score = pb::ScoreResponse {
        request_id: 8,
        status: status(0, &[]),
        generation: 3,
        scores: vec![0, 50, 100, -1, i64::MAX],
        normalized: true,
    };
    vec![
        format!("0:{}", hex(&handshake.encode_to_vec())),
        format!("1:{}", hex(&filter.encode_to_vec())),
        format!("2:{}", hex(&score.encode_to_vec())),
        format!(
            "3:{}",
            hex(&pb::StatusResponse {
                request_id: 1,
                status: status(2, &["x"]),
                generation: 9
            }
            .encode_to_vec())
        ),
        format!(
            "4:{}",
            hex(&pb::PreFilterResponse {
                request_id: 1,
                status: status(0, &[]),
                generation: 1,
                has_node_names: true,
                node_names: vec!["n1".into()]
            }
            .encode_to_vec())
        ),
        format!(
            "5:{}",
            hex(&pb::PostFilterResponse {
                request_id: 1,
                status: status(0, &[]),
                generation: 1,
                nominated_node_name: "n1".into()
            }
            .encode_to_vec())
        ),
        format!(
            "6:{}",
            hex(&pb::PermitResponse {
                request_id: 1,
                status: status(4, &[]),
                generation: 1,
                timeout_millis: 1000,
                decision: None
            }
            .encode_to_vec())
        ),
        format!(
            "7:{}",
            hex(&pb::QueueSortResponse {
                request_id: 1,
                sort_key: vec![1, 2, 3],
                status: status(0, &[])
            }
            .encode_to_vec())
        ),
        format!(
            "8:{}",
            hex(&pb::ReplicateResponse {
                applied_generation: 4
            }
            .encode_to_vec())
        ),
    ]
}

pub fn mutate(seed: &str, rng: &mut Rng) -> String {
    let (kind, body) = seed.split_once(':').unwrap_or(("0", seed));
    let mut b = unhex(body).unwrap_or_default();
    for _ in 0..1 + rng.below(4) {
        let i = rng.below(b.len() + 1);
        match rng.below(5) {
            0 if !b.is_empty() => {
                let k = i.min(b.len() - 1);
                b[k] ^= 1 << rng.below(8);
            }
            1 => b.insert(i, [0xff, 0x80, 0x00, 0x7f, 0x01][rng.below(5)]),
            2 if i < b.len() => {
                b.remove(i);
            }
            3 => {
                // A length-delimited field claiming a huge length.
                b.splice(i..i, [0x22, 0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
            _ => {
                let j = (i + rng.below(32)).min(b.len());
                let chunk = b[i.min(j)..j].to_vec();
                b.splice(
                    i.min(j)..i.min(j),
                    chunk
                        .iter()
                        .copied()
                        .cycle()
                        .take(chunk.len() * (1 + rng.below(50))),
                );
            }
        }
    }
    let kind = if rng.below(20) == 0 {
        rng.below(9).to_string()
    } else {
        kind.to_string()
    };
    format!("{kind}:{}", hex(&b))
}

fn check_status(s: Option<&pb::Status>) {
    let st = crate::remote::convert::status_from_pb(s);
    let _ = st.message();
}

/// Decodes and validates one message; true when it was well-formed.
pub fn run(text: &str) -> bool {
    let Some((kind, body)) = text.trim().split_once(':') else {
        return false;
    };
    let Some(b) = unhex(body) else { return false };
    let b = b.as_slice();
    match kind {
        "0" => pb::HandshakeResponse::decode(b).is_ok_and(|h| {
            h.plugins
                .iter()
                .all(|p| crate::remote::convert::events(&p.events).is_ok())
        }),
        "1" => pb::FilterResponse::decode(b).is_ok_and(|r| {
            r.failures
                .iter()
                .for_each(|f| check_status(f.status.as_ref()));
            check_status(r.error.as_ref());
            true
        }),
        "2" => pb::ScoreResponse::decode(b).is_ok_and(|r| {
            check_status(r.status.as_ref());
            true
        }),
        "3" => pb::StatusResponse::decode(b).is_ok_and(|r| {
            check_status(r.status.as_ref());
            true
        }),
        "4" => pb::PreFilterResponse::decode(b).is_ok_and(|r| {
            check_status(r.status.as_ref());
            true
        }),
        "5" => pb::PostFilterResponse::decode(b).is_ok_and(|r| {
            check_status(r.status.as_ref());
            true
        }),
        "6" => pb::PermitResponse::decode(b).is_ok_and(|r| {
            check_status(r.status.as_ref());
            true
        }),
        "7" => pb::QueueSortResponse::decode(b).is_ok_and(|r| {
            check_status(r.status.as_ref());
            true
        }),
        "8" => pb::ReplicateResponse::decode(b).is_ok(),
        _ => false,
    }
}
