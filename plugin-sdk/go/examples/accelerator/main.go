// Accelerator is the example plugin of every Switchyard plugin SDK: a pod annotated
// accelerator.switchyard.dev/type: T fits only nodes labelled with the same type,
// and prefers nodes already running pods of that type.
package main

import (
	"context"

	sy "github.com/switchyard-sched/switchyard/plugin-sdk/go"
)

const key = "accelerator.switchyard.dev/type"

type Accelerator struct{}

func (Accelerator) Name() string { return "Accelerator" }

// NodeLocal: answers depend only on the pod and the node asked about. No Signature
// (alike pods): Score counts the pods on the node, which a signature must not read.
func (Accelerator) NodeLocal() bool { return true }

// Events: a rejected pod may fit once a node is added or relabelled.
func (Accelerator) Events() []*sy.ClusterEvent {
	return []*sy.ClusterEvent{{Resource: "Node", Actions: []string{"Add", "UpdateNodeLabel"}}}
}

func (Accelerator) Filter(_ context.Context, c *sy.Cycle, _ *sy.CycleState, n *sy.NodeInfo) *sy.Status {
	want, ok := c.Pod.Annotations[key]
	if ok && n.Node.Labels[key] != want {
		return sy.NewUnschedulable("node has no " + want + " accelerator")
	}
	return nil
}

// Score counts the pods on the node that need the same accelerator.
func (Accelerator) Score(_ context.Context, c *sy.Cycle, _ *sy.CycleState, n *sy.NodeInfo) (int64, *sy.Status) {
	want, ok := c.Pod.Annotations[key]
	var count int64
	for _, p := range n.Pods {
		if v, has := p.Annotations[key]; ok && has && v == want {
			count++
		}
	}
	return count, nil
}

// NormalizeScore scales the counts to 0..100 by the highest.
func (Accelerator) NormalizeScore(_ context.Context, _ *sy.Cycle, _ *sy.CycleState, scores []int64) *sy.Status {
	var max int64 = 1 // all stay 0 when the highest is 0
	for _, s := range scores {
		if s > max {
			max = s
		}
	}
	for i := range scores {
		scores[i] = scores[i] * 100 / max
	}
	return nil
}

func main() { sy.Main(Accelerator{}) }
