//! Answers reused for alike pods (upstream's opportunistic batching, KEP-5598, and
//! its pod signatures), for remote plugins that declare a `signature`: their Filter
//! and Score answers depend only on the pod fields it lists and the Node object, so an
//! answer given for one pod on a node holds for every pod with the same signature
//! while that Node object is unchanged — pods landing on the node do not change it.
//! A round whose every node has such an answer is answered here, without a call;
//! placements are the ones the sidecar would give, because its answer would be the
//! same. Answers come only from this connection's replies and are dropped when it
//! reconnects (the sidecar may have changed).

use std::sync::Arc;

use prost::Message;
use switchyard_proto::v1 as pb;

use super::convert;
use crate::framework::node_info::prefetch_ahead;
use crate::framework::{NodeInfo, Status};
use crate::model::{Node, Pod};

/// How many signatures are kept at once: workloads of a few kinds interleaved in
/// the queue keep their answers; more kinds than that start over.
const MAX_SIGNATURES: usize = 4;

/// The pod's signature over `fields` and the values of the label keys `label_keys`
/// (as sidecars see the pod, `pb::Pod`; maps in key order): equal signatures mean
/// the plugin cannot tell the pods apart.
pub fn signature(pod: &Pod, fields: &[pb::PodField], label_keys: &[String]) -> Vec<u8> {
    use pb::PodField as F;
    let mut out = Vec::new();
    for k in label_keys {
        put_str(&mut out, k);
        match pod.spec.labels.get(k.as_str()) {
            Some(v) => put_str(&mut out, v),
            // Absent differs from empty.
            None => put(&mut out, u64::MAX),
        }
    }
    // `NONE` alone: every pod is alike, and the pod need not be converted.
    if fields.iter().all(|f| *f == F::None) {
        for f in fields {
            put(&mut out, *f as u64);
        }
        return out;
    }
    let p = convert::pod(pod);
    let map = |out: &mut Vec<u8>, m: &std::collections::HashMap<String, String>| {
        let mut kv: Vec<_> = m.iter().collect();
        kv.sort_unstable();
        put(out, kv.len() as u64);
        for (k, v) in kv {
            put_str(out, k);
            put_str(out, v);
        }
    };
    for f in fields {
        put(&mut out, *f as u64);
        match f {
            F::Unspecified | F::None => {}
            F::Namespace => put_str(&mut out, &p.namespace),
            F::Labels => map(&mut out, &p.labels),
            F::Annotations => map(&mut out, &p.annotations),
            F::SchedulerName => put_str(&mut out, &p.scheduler_name),
            F::Priority => {
                put(&mut out, p.priority as u64);
                put_str(&mut out, &p.priority_class_name);
            }
            F::Requests => {
                let mut kv: Vec<_> = p.requests.iter().collect();
                kv.sort_unstable();
                put(&mut out, kv.len() as u64);
                for (k, v) in kv {
                    put_str(&mut out, k);
                    put(&mut out, *v as u64);
                }
            }
            F::Tolerations => {
                for t in &p.tolerations {
                    t.encode_length_delimited(&mut out).ok();
                }
                put(&mut out, p.tolerations.len() as u64);
            }
            F::NodeSelector => map(&mut out, &p.node_selector),
            F::OwnerReferences => {
                for o in &p.owner_references {
                    o.encode_length_delimited(&mut out).ok();
                }
                put(&mut out, p.owner_references.len() as u64);
            }
            F::VolumeClaims => {
                for c in &p.volume_claims {
                    c.encode_length_delimited(&mut out).ok();
                }
                put(&mut out, p.volume_claims.len() as u64);
            }
        }
    }
    out
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A node as an answer was given for it: its id, its Node object and its generation
/// (which also moves when its pods change).
pub type NodeKey = (u32, Arc<Node>, u64);

/// Filter failures by index in a round.
pub type Failures = Vec<(usize, Status)>;

/// One node's answer for one signature.
struct Answer {
    /// The Node object it was given for (held, so its address is never reused).
    node: Arc<Node>,
    /// The node's generation then: checked for plugins whose answers read its pods.
    generation: u64,
    /// `None`: the node passed Filter.
    failure: Option<Status>,
    /// The raw (un-normalised) score, once one was given.
    raw_score: Option<i64>,
}

struct Signed {
    signature: Box<[u8]>,
    /// By node id.
    answers: Vec<Option<Answer>>,
}

/// What the plugin declared on the connection the answers come from.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Declared {
    /// Filter answers may be reused.
    pub filter: bool,
    /// The pod fields the plugin signs.
    pub fields: Arc<[pb::PodField]>,
    /// The pod label keys it signs by value (sorted).
    pub label_keys: Arc<[String]>,
    /// Scores may be reused and normalised here (a standard normalisation).
    pub scores: bool,
    pub normalization: i32,
    /// The plugin has a NormalizeScore (standard or not).
    pub normalize: bool,
    /// The answers read the pods on the node too (`signature_node_pods`): one holds
    /// only while the node's generation is unchanged, not just its Node object.
    pub node_pods: bool,
}

impl Declared {
    pub fn of(info: Option<&pb::PluginInfo>, enabled: bool) -> Declared {
        let Some(i) = info.filter(|i| {
            enabled && !i.signature.is_empty() && (i.node_local || i.signature_node_pods)
        }) else {
            return Declared::default();
        };
        // A field this scheduler does not know could tell pods apart: no reuse.
        let Ok(mut fields) = i
            .signature
            .iter()
            .map(|&f| match pb::PodField::try_from(f) {
                Ok(pb::PodField::Unspecified) | Err(_) => Err(()),
                Ok(f) => Ok(f),
            })
            .collect::<Result<Vec<_>, ()>>()
        else {
            return Declared::default();
        };
        fields.sort_unstable();
        fields.dedup();
        // Label keys without node pods: not a declaration this scheduler trusts.
        if !i.signature_label_keys.is_empty() && (!i.signature_node_pods || i.node_local) {
            return Declared::default();
        }
        let mut label_keys = i.signature_label_keys.clone();
        label_keys.sort_unstable();
        label_keys.dedup();
        let standard = i.score_normalization != pb::ScoreNormalization::Custom as i32
            && pb::ScoreNormalization::try_from(i.score_normalization).is_ok();
        Declared {
            filter: true,
            fields: fields.into(),
            label_keys: label_keys.into(),
            // Without a NormalizeScore raw scores are final; with a custom one only
            // the sidecar can normalise.
            scores: !i.normalize_score || standard,
            normalization: i.score_normalization,
            normalize: i.normalize_score,
            node_pods: i.signature_node_pods,
        }
    }

    /// Normalises raw scores as the plugin declared; false for a custom one.
    pub fn normalize(&self, scores: &mut [i64]) -> bool {
        if !self.normalize {
            return true;
        }
        let kind = pb::ScoreNormalization::try_from(self.normalization)
            .unwrap_or(pb::ScoreNormalization::Custom);
        switchyard_proto::normalize_scores(kind, scores)
    }
}

/// The reused answers of one remote plugin.
#[derive(Default)]
pub struct AlikeAnswers {
    /// The connection the answers come from (none yet).
    epoch: Option<u64>,
    pub declared: Declared,
    /// Most recently used first.
    signed: Vec<Signed>,
}

impl AlikeAnswers {
    /// Starts over when the connection changed, with what its handshake declared.
    pub fn on_epoch(&mut self, epoch: u64, declared: impl FnOnce() -> Declared) {
        if self.epoch != Some(epoch) {
            self.epoch = Some(epoch);
            self.signed.clear();
            self.declared = declared();
        }
    }

    fn find(&self, signature: &[u8]) -> Option<&Signed> {
        self.signed.iter().find(|s| &*s.signature == signature)
    }

    fn entry(&mut self, signature: &[u8]) -> &mut Signed {
        match self.signed.iter().position(|s| &*s.signature == signature) {
            Some(i) => {
                let s = self.signed.remove(i);
                self.signed.insert(0, s);
            }
            None => {
                self.signed.truncate(MAX_SIGNATURES - 1);
                self.signed.insert(
                    0,
                    Signed {
                        signature: signature.into(),
                        answers: Vec::new(),
                    },
                );
            }
        }
        &mut self.signed[0]
    }

    fn answer<'a>(&self, s: &'a Signed, ni: &NodeInfo) -> Option<&'a Answer> {
        let a = s.answers.get(ni.id as usize)?.as_ref()?;
        (ni.node_arc().is_some_and(|n| Arc::ptr_eq(n, &a.node))
            && (!self.declared.node_pods || a.generation == ni.generation))
            .then_some(a)
    }

    /// The Filter failures (by index in `nodes`) if every node has an answer.
    pub fn filter(&self, signature: &[u8], nodes: &[&NodeInfo]) -> Option<Vec<(usize, Status)>> {
        if !self.declared.filter {
            return None;
        }
        let s = self.find(signature)?;
        let mut out = Vec::new();
        for (i, ni) in nodes.iter().enumerate() {
            // The answers' checks are the first reads of a round's node infos.
            prefetch_ahead(nodes, i);
            if let Some(f) = &self.answer(s, ni)?.failure {
                out.push((i, f.clone()));
            }
        }
        Some(out)
    }

    /// For a round some of whose nodes have answers: the failures among those (by
    /// index in `nodes`) and the indices of the nodes without one, which must be
    /// asked (none: every node has an answer, as [`Self::filter`] gives). None when
    /// no node has an answer (an empty round has every answer).
    pub fn filter_partly(
        &self,
        signature: &[u8],
        nodes: &[&NodeInfo],
    ) -> Option<(Failures, Vec<usize>)> {
        if !self.declared.filter {
            return None;
        }
        let s = self.find(signature)?;
        let mut failures = Vec::new();
        let mut ask = Vec::new();
        for (i, ni) in nodes.iter().enumerate() {
            prefetch_ahead(nodes, i);
            match self.answer(s, ni) {
                Some(a) => {
                    if let Some(f) = &a.failure {
                        failures.push((i, f.clone()));
                    }
                }
                None => ask.push(i),
            }
        }
        (ask.len() < nodes.len() || nodes.is_empty()).then_some((failures, ask))
    }

    /// Raw scores for `nodes` if every one has one.
    pub fn raw_scores(&self, signature: &[u8], nodes: &[Arc<NodeInfo>]) -> Option<Vec<i64>> {
        if !self.declared.scores {
            return None;
        }
        let s = self.find(signature)?;
        nodes
            .iter()
            .map(|ni| self.answer(s, ni).and_then(|a| a.raw_score))
            .collect()
    }

    /// Keeps a Filter reply: `nodes` (id, object) in batch order, the failures by
    /// index (ascending).
    pub fn keep_filter(
        &mut self,
        epoch: u64,
        signature: &[u8],
        nodes: &[NodeKey],
        failures: &[(usize, Status)],
    ) {
        if Some(epoch) != self.epoch || !self.declared.filter {
            return;
        }
        let node_pods = self.declared.node_pods;
        let s = self.entry(signature);
        let mut failed = failures.iter().peekable();
        for (i, (id, node, generation)) in nodes.iter().enumerate() {
            let failure = match failed.peek() {
                Some((j, f)) if *j == i => {
                    failed.next();
                    Some(f.clone())
                }
                _ => None,
            };
            let slot = slot(&mut s.answers, *id);
            let raw_score = slot
                .as_ref()
                .filter(|a| {
                    Arc::ptr_eq(&a.node, node) && (!node_pods || a.generation == *generation)
                })
                .and_then(|a| a.raw_score);
            *slot = Some(Answer {
                node: node.clone(),
                generation: *generation,
                failure,
                raw_score,
            });
        }
    }

    /// Keeps raw scores of nodes that passed Filter (those without a Filter answer are
    /// not kept: a score alone cannot answer a round).
    pub fn keep_scores<'a>(
        &mut self,
        epoch: u64,
        signature: &[u8],
        nodes: impl Iterator<Item = &'a NodeKey>,
        raw: &[i64],
    ) {
        if Some(epoch) != self.epoch || !self.declared.scores {
            return;
        }
        let node_pods = self.declared.node_pods;
        let s = self.entry(signature);
        for ((id, node, generation), &v) in nodes.zip(raw) {
            if let Some(Some(a)) = s.answers.get_mut(*id as usize) {
                let same =
                    Arc::ptr_eq(&a.node, node) && (!node_pods || a.generation == *generation);
                if same && a.failure.is_none() {
                    a.raw_score = Some(v);
                }
            }
        }
    }
}

fn slot(v: &mut Vec<Option<Answer>>, id: u32) -> &mut Option<Answer> {
    let i = id as usize;
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    &mut v[i]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn signatures_cover_the_listed_fields_only() {
        use crate::model::taint::{Toleration, TolerationOperator};
        use pb::PodField as F;
        let tol = |k: &str| Toleration {
            key: k.into(),
            operator: TolerationOperator::Exists,
            value: "".into(),
            effect: None,
            toleration_seconds: None,
        };
        let a = pod("a").label("app", "x").toleration(tol("gpu")).build();
        let b = pod("b")
            .label("app", "y")
            .toleration(tol("gpu"))
            .node("n1")
            .build();
        let c = pod("c").label("app", "x").toleration(tol("ssd")).build();
        let t = [F::Tolerations];
        assert_eq!(signature(&a, &t, &[]), signature(&b, &t, &[]));
        assert_ne!(signature(&a, &t, &[]), signature(&c, &t, &[]));
        let all = [F::Labels, F::Tolerations];
        assert_ne!(signature(&a, &all, &[]), signature(&b, &all, &[]));
        let d = pod("d").label("app", "x").toleration(tol("gpu")).build();
        assert_eq!(signature(&a, &all, &[]), signature(&d, &all, &[]));
        let e = pod("e")
            .label("app", "x")
            .toleration(tol("gpu"))
            .cpu(100)
            .build();
        assert_ne!(
            signature(&a, &[F::Requests], &[]),
            signature(&e, &[F::Requests], &[])
        );
        assert_eq!(signature(&a, &all, &[]), signature(&e, &all, &[]));
        // NONE: a plugin that reads no field of the pod sees every pod alike, and
        // with other fields it adds nothing to them.
        for x in [&b, &c, &d, &e] {
            assert_eq!(
                signature(&a, &[F::None], &[]),
                signature(x, &[F::None], &[])
            );
        }
        assert_ne!(
            signature(&a, &[F::None, F::Tolerations], &[]),
            signature(&c, &[F::None, F::Tolerations], &[])
        );
        let info = pb::PluginInfo {
            node_local: true,
            signature: vec![F::None as i32],
            ..Default::default()
        };
        let declared = Declared::of(Some(&info), true);
        assert!(declared.filter && declared.scores, "NONE declares reuse");
    }

    #[test]
    fn answers_hold_while_the_node_object_does() {
        use crate::testing::node;
        let fields: Arc<[pb::PodField]> = vec![pb::PodField::Tolerations].into();
        let mut a = AlikeAnswers::default();
        a.on_epoch(1, || Declared {
            filter: true,
            fields: fields.clone(),
            scores: true,
            normalization: pb::ScoreNormalization::DefaultReverse as i32,
            normalize: true,
            node_pods: false,
            label_keys: Arc::new([]),
        });
        let n1 = node("n1").build();
        let n2 = node("n2").build();
        let mut i1 = NodeInfo::new(n1.clone());
        i1.id = 0;
        let mut i2 = NodeInfo::new(n2.clone());
        i2.id = 1;
        let sig = signature(&pod("p").build(), &fields, &[]);
        assert!(a.filter(&sig, &[&i1, &i2]).is_none(), "nothing kept yet");
        let rejected = Status::unresolvable("node(s) had untolerated taint(s)");
        a.keep_filter(
            1,
            &sig,
            &[
                (0, n1.clone(), i1.generation),
                (1, n2.clone(), i2.generation),
            ],
            &[(1, rejected)],
        );
        a.keep_scores(1, &sig, [(0, n1.clone(), i1.generation)].iter(), &[3]);
        // A pod placed on n1 changes its NodeInfo, not its Node object.
        i1.add_pod(pod("q").node("n1").build());
        let got = a.filter(&sig, &[&i1, &i2]).expect("reused");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 1);
        assert_eq!(a.raw_scores(&sig, &[Arc::new(i1.clone())]), Some(vec![3]));
        // Another signature, another connection, or a new Node object: asked again.
        let gpu = crate::model::taint::Toleration {
            key: "gpu".into(),
            operator: crate::model::taint::TolerationOperator::Exists,
            value: "".into(),
            effect: None,
            toleration_seconds: None,
        };
        let other = signature(&pod("r").toleration(gpu).build(), &fields, &[]);
        assert!(a.filter(&other, &[&i1]).is_none());
        i1.set_node(node("n1").label("zone", "b").build());
        assert!(a.filter(&sig, &[&i1]).is_none());
        assert!(a.filter(&sig, &[&i2]).is_some());
        a.on_epoch(2, Declared::default);
        assert!(a.filter(&sig, &[&i2]).is_none());
        a.keep_filter(1, &sig, &[(1, n2.clone(), i2.generation)], &[]);
        assert!(
            a.filter(&sig, &[&i2]).is_none(),
            "a reply from the old connection"
        );
    }

    /// A plugin whose answers read the pods on the node (`signature_node_pods`, a
    /// quota): a pod placed on a node voids that node's answer, and a round is then
    /// answered partly, the changed node asked again.
    #[test]
    fn answers_reading_node_pods_hold_while_the_node_generation_does() {
        use crate::testing::node;
        let info = pb::PluginInfo {
            signature: vec![pb::PodField::None as i32],
            signature_label_keys: vec!["tenant".into()],
            signature_node_pods: true,
            extension_points: vec![pb::ExtensionPoint::PreFilter as i32],
            ..Default::default()
        };
        let declared = Declared::of(Some(&info), true);
        assert!(
            declared.filter && declared.node_pods,
            "declared without node_local"
        );
        let mut a = AlikeAnswers::default();
        a.on_epoch(1, || declared.clone());
        let infos: Vec<NodeInfo> = (0..3)
            .map(|i| {
                let mut ni = NodeInfo::new(node(&format!("n{i}")).build());
                ni.id = i;
                ni
            })
            .collect();
        let keys: Vec<NodeKey> = infos
            .iter()
            .map(|ni| (ni.id, ni.node_arc().unwrap().clone(), ni.generation))
            .collect();
        let sign = |p: &Pod| signature(p, &declared.fields, &declared.label_keys);
        let sig = sign(&pod("p").label("tenant", "t").label("other", "1").build());
        assert_eq!(
            sig,
            sign(&pod("p2").label("tenant", "t").label("other", "2").build()),
            "only the listed key is signed"
        );
        assert_ne!(sig, sign(&pod("p3").label("tenant", "").build()));
        assert_ne!(
            sign(&pod("p4").build()),
            sign(&pod("p3").label("tenant", "").build())
        );
        let full = Status::unschedulable("node(s) exceeded the pod quota of tenant t");
        a.keep_filter(1, &sig, &keys, &[(2, full.clone())]);
        let round: Vec<&NodeInfo> = infos.iter().collect();
        assert_eq!(a.filter(&sig, &round), Some(vec![(2, full.clone())]));
        // Every node answered: partly is wholly, nothing to ask.
        assert_eq!(
            a.filter_partly(&sig, &round),
            Some((vec![(2, full.clone())], vec![]))
        );
        assert_eq!(a.filter_partly(&sig, &[]), Some((vec![], vec![])));
        // A pod lands on n0: its answer no longer holds.
        let mut n0 = infos[0].clone();
        n0.add_pod(pod("q").label("tenant", "t").node("n0").build());
        let round = [&n0, &infos[1], &infos[2]];
        assert!(a.filter(&sig, &round).is_none());
        let (failures, ask) = a.filter_partly(&sig, &round).expect("partly answered");
        assert_eq!(failures, vec![(2, full)]);
        assert_eq!(ask, vec![0]);
        // Without node_pods (answers read the Node object only) it still holds.
        let mut b = AlikeAnswers::default();
        b.on_epoch(1, || Declared {
            node_pods: false,
            ..declared.clone()
        });
        b.keep_filter(1, &sig, &keys, &[]);
        assert_eq!(b.filter(&sig, &round), Some(vec![]));
        // Nothing kept for another signature: nothing to answer partly.
        let other = sign(&pod("r").label("tenant", "u").build());
        assert!(a.filter_partly(&other, &round).is_none());
    }

    #[test]
    fn standard_normalisations_match_upstream() {
        let mut v = [0, 2, 4];
        assert!(switchyard_proto::normalize_scores(
            pb::ScoreNormalization::DefaultReverse,
            &mut v
        ));
        assert_eq!(v, [100, 50, 0]);
        let mut v = [0, 2, 4];
        assert!(switchyard_proto::normalize_scores(
            pb::ScoreNormalization::Default,
            &mut v
        ));
        assert_eq!(v, [0, 50, 100]);
        let mut v = [0, 0];
        switchyard_proto::normalize_scores(pb::ScoreNormalization::DefaultReverse, &mut v);
        assert_eq!(v, [100, 100]);
        let mut v = [3];
        assert!(!switchyard_proto::normalize_scores(
            pb::ScoreNormalization::Custom,
            &mut v
        ));
        assert_eq!(v, [3]);
    }
}
