// TenantQuota is the second example: a Go port of plugins/quota (at most N pods of a
// tenant per node labelled quota.switchyard.dev/pods-per-tenant: N), extended with
// every other extension point so that one sidecar exercises them all: PreFilter
// state with AddPod/RemovePod (so preemption dry runs and nominated pods are
// evaluated on a forked state), PreEnqueue, QueueSort, Reserve/Unreserve, Permit
// with a Wait decided later through the Handle, PreBind and PostBind.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	sy "github.com/switchyard-sched/switchyard/plugin-sdk/go"
)

const (
	tenantLabel = "quota.switchyard.dev/tenant"
	limitLabel  = "quota.switchyard.dev/pods-per-tenant"
	// Pods with this label wait at Permit until the plugin allows them (after
	// holdFor), to show Handle.
	holdLabel = "quota.switchyard.dev/hold"
	holdFor   = 50 * time.Millisecond
)

// quotaState is the cycle's state: the tenant and its pod count per limited node.
type quotaState struct {
	tenant string
	counts map[string]int
}

// Clone copies the map, so a what-if fork never changes the cycle's state.
func (s *quotaState) Clone() sy.StateData {
	c := &quotaState{tenant: s.tenant, counts: make(map[string]int, len(s.counts))}
	for k, v := range s.counts {
		c.counts[k] = v
	}
	return c
}

type TenantQuota struct {
	mu       sync.Mutex
	reserved map[string]string // pod uid -> node, between Reserve and Unreserve
}

func (*TenantQuota) Name() string { return "TenantQuota" }

func (*TenantQuota) Events() []*sy.ClusterEvent {
	return []*sy.ClusterEvent{
		{Resource: "Node", Actions: []string{"Add", "UpdateNodeLabel"}},
		{Resource: "Pod", Actions: []string{"Delete", "UpdatePodLabel"}},
	}
}

// PreEnqueue holds back pods whose tenant label is present but empty.
func (*TenantQuota) PreEnqueue(_ context.Context, pod *sy.Pod) *sy.Status {
	if t, ok := pod.Labels[tenantLabel]; ok && t == "" {
		return sy.NewStatus(sy.UnschedulableAndUnresolvable, "empty tenant label")
	}
	return nil
}

// SortKey: higher priority first, then by namespace/name.
func (*TenantQuota) SortKey(_ context.Context, pod *sy.Pod) []byte {
	key := make([]byte, 4, 4+len(pod.Namespace)+1+len(pod.Name))
	binary.BigEndian.PutUint32(key, uint32(math.MaxInt32-int64(pod.Priority)))
	return append(append(append(key, pod.Namespace...), '/'), pod.Name...)
}

func (*TenantQuota) PreFilter(_ context.Context, c *sy.Cycle, state *sy.CycleState) (*sy.PreFilterResult, *sy.Status) {
	tenant := c.Pod.Labels[tenantLabel]
	if tenant == "" {
		return nil, sy.NewSkip()
	}
	s := &quotaState{tenant: tenant, counts: map[string]int{}}
	limited := false
	for _, n := range c.Snapshot.Nodes() {
		if _, ok := n.Node.Labels[limitLabel]; !ok {
			continue
		}
		limited = true
		for _, p := range n.Pods {
			if p.Uid != c.Pod.Uid && p.Labels[tenantLabel] == tenant {
				s.counts[n.Name()]++
			}
		}
	}
	if !limited {
		return nil, sy.NewSkip()
	}
	state.Write(s)
	return nil, nil
}

func (q *TenantQuota) AddPod(_ context.Context, c *sy.Cycle, state *sy.CycleState, pod *sy.Pod, node *sy.NodeInfo) *sy.Status {
	return q.adjust(c, state, pod, node.Name(), 1)
}

func (q *TenantQuota) RemovePod(_ context.Context, c *sy.Cycle, state *sy.CycleState, pod *sy.Pod, node *sy.NodeInfo) *sy.Status {
	return q.adjust(c, state, pod, node.Name(), -1)
}

func (*TenantQuota) adjust(c *sy.Cycle, state *sy.CycleState, pod *sy.Pod, node string, by int) *sy.Status {
	s, ok := state.Read().(*quotaState)
	if !ok {
		return sy.Errorf("TenantQuota: the PreFilter state of this cycle is missing")
	}
	if pod.Uid != c.Pod.Uid && pod.Labels[tenantLabel] == s.tenant {
		if s.counts[node] += by; s.counts[node] < 0 {
			s.counts[node] = 0
		}
	}
	return nil
}

func (*TenantQuota) Filter(_ context.Context, _ *sy.Cycle, state *sy.CycleState, node *sy.NodeInfo) *sy.Status {
	s, ok := state.Read().(*quotaState)
	if !ok {
		return sy.Errorf("TenantQuota: the PreFilter state of this cycle is missing")
	}
	v, ok := node.Node.Labels[limitLabel]
	if !ok {
		return nil
	}
	limit, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return sy.NewUnresolvable(fmt.Sprintf("node(s) had an invalid value %q for label %s", v, limitLabel))
	}
	switch {
	case uint64(s.counts[node.Name()])+1 <= limit:
		return nil
	case limit == 0: // evicting pods cannot make room on a node that admits none
		return sy.NewUnresolvable("node(s) exceeded the pod quota of tenant " + s.tenant)
	default:
		return sy.NewUnschedulable("node(s) exceeded the pod quota of tenant " + s.tenant)
	}
}

func (q *TenantQuota) Reserve(_ context.Context, c *sy.Cycle, _ *sy.CycleState, node string) *sy.Status {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reserved[c.Pod.Uid] = node
	return nil
}

// Unreserve is idempotent: it may come without a Reserve.
func (q *TenantQuota) Unreserve(_ context.Context, c *sy.Cycle, _ *sy.CycleState, _ string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.reserved, c.Pod.Uid)
}

// Permit holds pods labelled quota.switchyard.dev/hold and allows them a little
// later from another goroutine, as a gang plugin would once its gang is complete.
func (*TenantQuota) Permit(_ context.Context, c *sy.Cycle, _ *sy.CycleState, _ string, h *sy.Handle) (*sy.Status, time.Duration) {
	if _, hold := c.Pod.Labels[holdLabel]; !hold {
		return nil, 0
	}
	uid := c.Pod.Uid
	time.AfterFunc(holdFor, func() { h.Allow("TenantQuota", uid) })
	return sy.NewWait(), 10 * time.Second
}

func (*TenantQuota) PreBind(context.Context, *sy.Cycle, *sy.CycleState, string) *sy.Status {
	return nil
}

func (*TenantQuota) PostBind(context.Context, *sy.Cycle, *sy.CycleState, string) {}

func main() { sy.Main(&TenantQuota{reserved: map[string]string{}}) }
