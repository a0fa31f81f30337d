// RackLocality is the topology example: the pods of a job (label switchyard.dev/job)
// are packed by rack (node label switchyard.dev/rack). PreScore counts the job's
// placed pods per rack from the replica's PodListsByLabel index (the job's members,
// in the pod's namespace: as many as the job has placed, however large the cluster);
// Score gives a node the count of its rack; upstream's default normalisation scales
// the counts to 0..100. A pod in no job is skipped.
//
// tests/remote_racklocality.rs runs it beside the same plugin in process (and the
// Python SDK's plugin-sdk/python/examples/racklocality.py) and expects the same
// placements; `switchyard bench --rack-sidecar go=CMD` measures it.
package main

import (
	"context"

	sy "github.com/switchyard-sched/switchyard/plugin-sdk/go"
)

const (
	jobLabel  = "switchyard.dev/job"
	rackLabel = "switchyard.dev/rack"
)

// perRack is the cycle's state: the job's placed pods in each rack.
type perRack map[string]int64

// Clone copies the map (Score only reads it; preemption forks never change it).
func (p perRack) Clone() sy.StateData {
	c := make(perRack, len(p))
	for k, v := range p {
		c[k] = v
	}
	return c
}

type RackLocality struct{}

func (RackLocality) Name() string { return "RackLocality" }

// Indexes: the placed pods of each job.
func (RackLocality) Indexes() []sy.Index {
	return []sy.Index{{Kind: sy.PodListsByLabel, Key: jobLabel}}
}

// ScoreNormalization: upstream's DefaultNormalizeScore(100, false).
func (RackLocality) ScoreNormalization() sy.ScoreNormalization {
	return sy.ScoreNormalizationDefault
}

func (RackLocality) PreScore(_ context.Context, c *sy.Cycle, state *sy.CycleState, _ []*sy.NodeInfo) *sy.Status {
	job := c.Pod.GetLabels()[jobLabel]
	lists := c.Snapshot.PodListsByLabel(jobLabel)
	if job == "" || lists == nil {
		return sy.NewSkip()
	}
	counts := perRack{}
	lists.Pods(c.Pod.GetNamespace(), job, func(p *sy.Pod) {
		if p.GetUid() == c.Pod.GetUid() {
			return
		}
		if ni := c.Snapshot.NodeByName(p.GetNodeName()); ni != nil {
			if rack := ni.Node.GetLabels()[rackLabel]; rack != "" {
				counts[rack]++
			}
		}
	})
	state.Write(counts)
	return nil
}

func (RackLocality) Score(_ context.Context, _ *sy.Cycle, state *sy.CycleState, node *sy.NodeInfo) (int64, *sy.Status) {
	counts, ok := state.Read().(perRack)
	if !ok {
		return 0, sy.Errorf("RackLocality: the PreScore state of this cycle is missing")
	}
	rack := node.Node.GetLabels()[rackLabel]
	if rack == "" {
		return 0, nil
	}
	return counts[rack], nil
}

func main() { sy.Main(RackLocality{}) }
