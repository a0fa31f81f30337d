//! The preemption evaluator (upstream `preemption.Evaluator`): when no node fits a pod,
//! find nodes where removing lower-priority pods would let it fit, choose the victims on
//! each (reprieving as many as possible, PDB-protected ones first), and pick the best
//! node. Victims are removed and re-added through every plugin's AddPod/RemovePod on a
//! private copy of the node and the cycle state, so plugins whose filters depend on
//! other pods (affinity, spreading, sidecar plugins) are honoured.
//!
//! The dry run is parallel over nodes but deterministic: nodes are taken in snapshot
//! order from a random offset, in rounds, and the search stops at the first point where
//! upstream's stop rule holds.

use std::cmp::Ordering;
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::Snapshot;
use crate::framework::diagnosis::{fit_error_message, Diagnosis};
use crate::framework::interface::{NodeToStatus, NominatedPod, NominatedPods};
use crate::framework::runtime::PARALLEL_CHUNK;
use crate::framework::{Code, CycleState, Framework, NodeInfo, Status};
use crate::model::pod::PreemptionPolicy;
use crate::model::{LabelSelector, Pod, PodDisruptionBudget};

pub const MSG_NO_VICTIMS: &str = "No preemption victims found for incoming pod";
pub const MSG_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// A node and the pods to evict there.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub node: Arc<str>,
    /// Most important first.
    pub victims: Vec<Arc<Pod>>,
    pub num_pdb_violations: i64,
}

/// What the dry run concluded.
pub enum Outcome {
    /// Preempt these victims on this node.
    Chosen(Candidate),
    /// No node can be made to fit; the message says why, per node.
    NoCandidates(String),
}

pub struct Evaluator<'a> {
    pub framework: &'a Framework,
    pub snapshot: &'a Snapshot,
    pub nominated: &'a NominatedPods,
    pub min_candidate_nodes_percentage: i64,
    pub min_candidate_nodes_absolute: i64,
}

/// Upstream `MoreImportantPod`: higher priority, then earlier start (a pod that has not
/// started counts as starting now, i.e. last).
pub fn more_important(a: &Pod, b: &Pod) -> Ordering {
    b.priority()
        .cmp(&a.priority())
        .then_with(|| start_key(a).cmp(&start_key(b)))
}

fn start_key(p: &Pod) -> i64 {
    p.spec.start_time.unwrap_or(i64::MAX)
}

/// Upstream `PodEligibleToPreemptOthers`: `Err(message)` when the pod must not preempt.
pub fn eligible_to_preempt(
    pod: &Pod,
    snapshot: &Snapshot,
    statuses: &NodeToStatus,
) -> Result<(), &'static str> {
    if pod.spec.preemption_policy == PreemptionPolicy::Never {
        return Err("not eligible due to preemptionPolicy=Never.");
    }
    if let Some(nnn) = &pod.nominated_node_name {
        if statuses.get(nnn).code() == Code::UnschedulableAndUnresolvable {
            return Ok(());
        }
        if let Some(ni) = snapshot.get(nnn) {
            let blocking = ni.pods.iter().any(|p| {
                p.priority() < pod.priority()
                    && p.deletion_timestamp.is_some()
                    && p.preempted_by_scheduler
            });
            if blocking {
                return Err("not eligible due to a terminating pod on the nominated node.");
            }
        }
    }
    Ok(())
}

/// Upstream `calculateNumCandidates`.
pub fn num_candidates(n: i64, percentage: i64, absolute: i64) -> i64 {
    let c = n * percentage / 100;
    c.max(absolute).min(n)
}

/// Upstream `filterPodsWithPDBViolation`: splits pods (most important first) into those
/// whose eviction would exceed a matching PDB's budget and the rest, spending budgets in
/// order.
pub fn split_by_pdb_violation(
    pods: Vec<Arc<Pod>>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let mut allowed: Vec<i64> = pdbs
        .iter()
        .map(|p| i64::from(p.disruptions_allowed.unwrap_or(0)))
        .collect();
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violated = false;
        if !pod.labels().is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.namespace != pod.namespace {
                    continue;
                }
                // An empty selector is skipped (upstream: `Empty()`), a nil one matches
                // nothing.
                if matches!(&pdb.selector, LabelSelector::Requirements(r) if r.is_empty())
                    || !pdb.selector.matches(pod.labels())
                {
                    continue;
                }
                if pdb.disrupted_pods.iter().any(|n| **n == *pod.name) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pod);
        } else {
            non_violating.push(pod);
        }
    }
    (violating, non_violating)
}

/// The outcome of one node's dry run.
enum NodeResult {
    Candidate(Candidate),
    Status(Status),
}

/// One node's dry run in progress, on private copies of the node and the state.
struct DryRun<'n> {
    node: &'n Arc<NodeInfo>,
    ni: NodeInfo,
    st: CycleState,
    /// Reprieve order (PDB-violating victims first, then the rest), with that flag.
    order: Vec<(Arc<Pod>, bool)>,
    /// The next victim to try to reprieve.
    next: usize,
    had_both: bool,
    victims: Vec<Arc<Pod>>,
    num_violating: i64,
    /// Set once the node's outcome is decided early (no victims, an error, no fit).
    done: Option<NodeResult>,
}

impl<'n> DryRun<'n> {
    fn new(node: &'n Arc<NodeInfo>, state: &CycleState) -> Self {
        DryRun {
            node,
            ni: (**node).clone(),
            st: state.clone(),
            order: Vec::new(),
            next: 0,
            had_both: false,
            victims: Vec::new(),
            num_violating: 0,
            done: None,
        }
    }

    /// Still has victims to try to reprieve.
    fn reprieving(&self) -> bool {
        self.done.is_none() && self.next < self.order.len()
    }
}

impl Evaluator<'_> {
    fn nominated_on(&self, node: &str) -> &[NominatedPod] {
        self.nominated.get(node).map_or(&[][..], |v| &v[..])
    }

    /// Upstream `SelectVictimsOnNode` for a round of nodes at once, each on private
    /// copies of the node and state. The nodes advance in lockstep — remove every
    /// lower-priority pod, check the pod fits, then reprieve the victims one at a time —
    /// so each step's Filter is one batched call across the round for remote plugins
    /// (`run_filter_plugins_what_if`). Per node, the steps and results are exactly the
    /// sequential algorithm's.
    fn select_victims_on_nodes(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[&Arc<NodeInfo>],
    ) -> Vec<NodeResult> {
        let fw = self.framework;
        let mut runs: Vec<DryRun> = nodes
            .par_iter()
            .with_min_len(PARALLEL_CHUNK.min(nodes.len().max(1)))
            .map(|node| {
                let mut run = DryRun::new(node, state);
                let potential: Vec<Arc<Pod>> = run
                    .ni
                    .pods
                    .iter()
                    .filter(|p| p.priority() < pod.priority())
                    .cloned()
                    .collect();
                if potential.is_empty() {
                    run.done = Some(NodeResult::Status(Status::unresolvable(MSG_NO_VICTIMS)));
                    return run;
                }
                for v in &potential {
                    run.ni.remove_pod_object(v);
                    let s = fw.run_pre_filter_extension_remove_pod(&mut run.st, pod, v, &run.ni);
                    if !s.is_success() {
                        run.done = Some(NodeResult::Status(s));
                        return run;
                    }
                }
                run.order = potential.into_iter().map(|p| (p, false)).collect();
                run
            })
            .collect();

        // Does the pod fit with every potential victim gone? Then order the reprieves.
        let statuses = self.filter_runs(pod, &mut runs, |r| r.done.is_none());
        for (run, s) in runs.iter_mut().zip(statuses) {
            let Some(s) = s else { continue };
            if !s.is_success() {
                run.done = Some(NodeResult::Status(s));
                continue;
            }
            let mut ordered: Vec<Arc<Pod>> = run.order.drain(..).map(|(p, _)| p).collect();
            ordered.sort_by(|a, b| more_important(a, b));
            let (violating, non_violating) = split_by_pdb_violation(ordered, self.snapshot.pdbs());
            run.had_both = !violating.is_empty() && !non_violating.is_empty();
            run.order = violating
                .into_iter()
                .map(|p| (p, true))
                .chain(non_violating.into_iter().map(|p| (p, false)))
                .collect();
        }

        // Reprieve step by step: add the next victim back; if the pod no longer fits,
        // take it out again and keep it a victim.
        loop {
            let stepping: usize = runs
                .par_iter_mut()
                .with_min_len(PARALLEL_CHUNK)
                .map(|run| {
                    if !run.reprieving() {
                        return 0;
                    }
                    let v = run.order[run.next].0.clone();
                    run.ni.add_pod(v.clone());
                    let s = fw.run_pre_filter_extension_add_pod(&mut run.st, pod, &v, &run.ni);
                    if !s.is_success() {
                        run.done = Some(NodeResult::Status(s));
                        return 0;
                    }
                    1
                })
                .sum();
            if stepping == 0 {
                break;
            }
            let statuses = self.filter_runs(pod, &mut runs, DryRun::reprieving);
            runs.par_iter_mut()
                .zip(statuses)
                .with_min_len(PARALLEL_CHUNK)
                .for_each(|(run, s)| {
                    let Some(s) = s else { return };
                    let (v, violating) = run.order[run.next].clone();
                    run.next += 1;
                    if s.is_success() {
                        return;
                    }
                    run.ni.remove_pod_object(&v);
                    let s = fw.run_pre_filter_extension_remove_pod(&mut run.st, pod, &v, &run.ni);
                    if !s.is_success() {
                        run.done = Some(NodeResult::Status(s));
                        return;
                    }
                    run.victims.push(v);
                    if violating {
                        run.num_violating += 1;
                    }
                });
        }

        runs.into_iter()
            .map(|mut run| {
                if let Some(r) = run.done {
                    return r;
                }
                if run.had_both {
                    run.victims.sort_by(|a, b| more_important(a, b));
                }
                if run.victims.is_empty() {
                    return NodeResult::Status(Status::error(format!(
                        "expected at least one victim pod on node {:?}",
                        &*run.node.node().name
                    )));
                }
                NodeResult::Candidate(Candidate {
                    node: run.node.node().name.clone(),
                    victims: run.victims,
                    num_pdb_violations: run.num_violating,
                })
            })
            .collect()
    }

    /// One Filter step of the lockstep dry run over the runs `take` selects: their
    /// statuses, aligned with `runs` (`None` for the others).
    fn filter_runs<'n>(
        &self,
        pod: &Pod,
        runs: &mut [DryRun<'n>],
        take: impl Fn(&DryRun<'n>) -> bool,
    ) -> Vec<Option<Status>> {
        let taken: Vec<bool> = runs.iter().map(&take).collect();
        let mut items: Vec<(&CycleState, &mut NodeInfo, &[NominatedPod])> = runs
            .iter_mut()
            .zip(&taken)
            .filter(|(_, t)| **t)
            .map(|(r, _)| (&r.st, &mut r.ni, self.nominated_on(&r.node.node().name)))
            .collect();
        let mut statuses = self
            .framework
            .run_filter_plugins_what_if(pod, &mut items)
            .into_iter();
        taken
            .into_iter()
            .map(|t| if t { statuses.next() } else { None })
            .collect()
    }

    /// Upstream `Preempt` up to candidate selection: `offset` is a random number used to
    /// pick where the dry run starts.
    pub fn preempt(
        &self,
        state: &CycleState,
        pod: &Arc<Pod>,
        statuses: &NodeToStatus,
        offset: u64,
    ) -> Result<Outcome, Status> {
        let all = self.snapshot.node_infos();
        // Nodes where preemption may help: explicitly Unschedulable (not Unresolvable).
        let potential: Vec<&Arc<NodeInfo>> = all
            .iter()
            .filter(|ni| {
                let name = &ni.node().name;
                match statuses.explicit(name) {
                    Some(s) => s.code() == Code::Unschedulable,
                    None => statuses.absent().code() == Code::Unschedulable,
                }
            })
            .collect();
        let mut diag = Diagnosis::default();
        diag.node_to_status
            .set_absent(Status::unresolvable(MSG_NOT_HELPFUL));
        if potential.is_empty() {
            return Ok(Outcome::NoCandidates(fit_error_message(all.len(), &diag)));
        }
        let n = potential.len();
        let wanted = num_candidates(
            n as i64,
            self.min_candidate_nodes_percentage,
            self.min_candidate_nodes_absolute,
        ) as usize;
        let start = (offset % n as u64) as usize;
        let at = |i: usize| potential[(start + i) % n];

        let mut non_violating: Vec<Candidate> = Vec::new();
        let mut violating: Vec<Candidate> = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        let mut offset_i = 0usize;
        'rounds: while offset_i < n {
            let need = wanted
                .saturating_sub(non_violating.len() + violating.len())
                .max(1);
            let round = (need + need / 2 + 8).min(n - offset_i);
            let round_nodes: Vec<&Arc<NodeInfo>> = (0..round).map(|i| at(offset_i + i)).collect();
            // Lockstep only pays when remote plugins batch a step's Filter; otherwise
            // each node's dry run runs whole, in parallel with the others.
            let results: Vec<NodeResult> = if self.framework.has_batch_filters() {
                self.select_victims_on_nodes(state, pod, &round_nodes)
            } else {
                round_nodes
                    .par_iter()
                    .with_min_len(PARALLEL_CHUNK.min(round.max(1)))
                    .flat_map_iter(|n| self.select_victims_on_nodes(state, pod, &[n]))
                    .collect()
            };
            for (i, r) in results.into_iter().enumerate() {
                match r {
                    NodeResult::Candidate(c) => {
                        let list = if c.num_pdb_violations == 0 {
                            &mut non_violating
                        } else {
                            &mut violating
                        };
                        if list.len() < wanted {
                            list.push(c);
                        }
                        if !non_violating.is_empty()
                            && non_violating.len() + violating.len() >= wanted
                        {
                            break 'rounds;
                        }
                    }
                    NodeResult::Status(s) => {
                        if s.code() == Code::Error {
                            errors.push(s.message());
                        }
                        diag.node_to_status
                            .set(at(offset_i + i).node().name.clone(), s);
                    }
                }
            }
            offset_i += round;
        }
        let mut candidates = non_violating;
        candidates.extend(violating);
        if state.trace.sampled {
            tracing::Span::current().record("candidates", candidates.len());
        }
        if candidates.is_empty() {
            if !errors.is_empty() {
                errors.dedup();
                let msg = if errors.len() == 1 {
                    errors.remove(0)
                } else {
                    format!("[{}]", errors.join(", "))
                };
                return Err(Status::error(msg));
            }
            return Ok(Outcome::NoCandidates(fit_error_message(all.len(), &diag)));
        }
        Ok(Outcome::Chosen(select_candidate(candidates)))
    }
}

/// Upstream `pickOneNodeForPreemption`: fewest PDB violations, then the lowest
/// highest-priority victim, the smallest sum of (offset) priorities, the fewest victims,
/// the latest "earliest start" among the highest-priority victims, then the first.
pub fn select_candidate(mut candidates: Vec<Candidate>) -> Candidate {
    if candidates.len() == 1 {
        return candidates.remove(0);
    }
    let earliest_start = |c: &Candidate| -> i64 {
        let max_p = c.victims[0].priority();
        c.victims
            .iter()
            .filter(|v| v.priority() == max_p)
            .map(|v| start_key(v))
            .min()
            .unwrap_or(i64::MIN)
    };
    let keys: [&dyn Fn(&Candidate) -> i64; 5] = [
        &|c| -c.num_pdb_violations,
        &|c| -i64::from(c.victims[0].priority()),
        &|c| {
            -c.victims
                .iter()
                .map(|v| i64::from(v.priority()) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        },
        &|c| -(c.victims.len() as i64),
        &earliest_start,
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    for key in keys {
        let best = remaining
            .iter()
            .map(|&i| key(&candidates[i]))
            .max()
            .unwrap_or(0);
        remaining.retain(|&i| key(&candidates[i]) == best);
        if remaining.len() == 1 {
            break;
        }
    }
    let idx = remaining.first().copied().unwrap_or(0);
    candidates.swap_remove(idx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node::IntOrPercent;
    use crate::testing::pod;

    fn pdb(allowed: i32, app: &str) -> Arc<PodDisruptionBudget> {
        Arc::new(PodDisruptionBudget {
            namespace: "default".into(),
            name: "pdb".into(),
            selector: LabelSelector::Requirements(Box::new([crate::model::Requirement::new(
                "app",
                crate::model::Operator::In,
                vec![app.into()],
            )
            .unwrap()])),
            min_available: Some(IntOrPercent::Int(1)),
            max_unavailable: None,
            disruptions_allowed: Some(allowed),
            status_given: true,
            disrupted_pods: Box::new([]),
        })
    }

    #[test]
    fn pdb_budget_is_spent_in_importance_order() {
        let a = pod("a").label("app", "db").priority(5).build();
        let b = pod("b").label("app", "db").priority(3).build();
        let c = pod("c").label("app", "web").build();
        let (viol, ok) = split_by_pdb_violation(vec![a, b, c], &[pdb(1, "db")]);
        assert_eq!(viol.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["b"]);
        assert_eq!(ok.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn candidate_criteria_in_order() {
        let v = |n: &str, p: i32, start: i64| {
            pod(n)
                .priority(p)
                .spec(|s| s.start_time = Some(start))
                .build()
        };
        let c = |node: &str, victims: Vec<Arc<Pod>>, pdb: i64| Candidate {
            node: node.into(),
            victims,
            num_pdb_violations: pdb,
        };
        // Fewer PDB violations wins over everything else.
        let pick = select_candidate(vec![
            c("a", vec![v("x", 1, 0)], 1),
            c("b", vec![v("y", 9, 0), v("z", 9, 0)], 0),
        ]);
        assert_eq!(&*pick.node, "b");
        // Then the lowest highest-priority victim.
        let pick = select_candidate(vec![
            c("a", vec![v("x", 5, 0)], 0),
            c("b", vec![v("y", 3, 0), v("z", 3, 0)], 0),
        ]);
        assert_eq!(&*pick.node, "b");
        // Then the smallest offset sum of priorities (fewer victims of the same priority).
        let pick = select_candidate(vec![
            c("a", vec![v("x", 3, 0), v("w", 3, 0)], 0),
            c("b", vec![v("y", 3, 0)], 0),
        ]);
        assert_eq!(&*pick.node, "b");
        // Ties on all but start time: the node whose earliest high-priority victim started latest.
        let pick = select_candidate(vec![
            c("a", vec![v("x", 3, 100)], 0),
            c("b", vec![v("y", 3, 200)], 0),
        ]);
        assert_eq!(&*pick.node, "b");
    }

    #[test]
    fn candidate_count() {
        assert_eq!(num_candidates(50, 10, 100), 50);
        assert_eq!(num_candidates(1000, 10, 100), 100);
        assert_eq!(num_candidates(5000, 10, 100), 500);
    }
}
