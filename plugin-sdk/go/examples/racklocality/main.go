// RackLocality is the topology example: the pods of a job (label switchyard.dev/job)
// are packed by rack (node label switchyard.dev/rack). It is a LabelScorePlugin:
// once per attempt it counts the job's placed pods per rack from the replica's
// PodListsByLabel index (the job's members, in the pod's namespace: as many as the
// job has placed, however large the cluster); a node scores its rack's count, and
// upstream's default normalisation scales the counts to 0..100. The scheduler asks
// for the table as the cycle starts and scores the nodes itself. A pod in no job
// is skipped.
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

// ScoreNodeLabel: a node's score is its rack's.
func (RackLocality) ScoreNodeLabel() string { return rackLabel }

// LabelScores counts the job's placed pods in each rack.
func (RackLocality) LabelScores(_ context.Context, c *sy.Cycle) (map[string]int64, *sy.Status) {
	job := c.Pod.GetLabels()[jobLabel]
	lists := c.Snapshot.PodListsByLabel(jobLabel)
	if job == "" || lists == nil {
		return nil, sy.NewSkip()
	}
	counts := map[string]int64{}
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
	return counts, nil
}

func main() { sy.Main(RackLocality{}) }
