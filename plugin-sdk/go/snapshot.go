package switchyard

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// Pod is a pod as the scheduler replicates it: quantities are integers (cpu in
// millicores, memory and storage in bytes). Treat it as read-only: the SDK shares
// one copy between the replica and every call.
type Pod = pb.Pod

// Node is a node as the scheduler replicates it. Read-only, like Pod.
type Node = pb.Node

// ClusterEvent names a cluster event that may make a pod the plugin rejected
// schedulable (see Events).
type ClusterEvent = pb.ClusterEvent

// maxPendingPods is how many CycleStart pods the replica keeps for PodUpdates that
// name them (the scheduler applies the same rule, proto/README.md R4).
const maxPendingPods = 1024

// NodeInfo is a node with the pods placed on it (bound, or assumed by the
// scheduler). It is valid for the duration of the call it is passed to: do not keep
// it or its Pods slice after the call returns.
type NodeInfo struct {
	Node *Node
	Pods []*Pod
}

// Name is the node's name.
func (n *NodeInfo) Name() string { return n.Node.GetName() }

// Requested sums one resource requested by the pods on the node (cpu in millicores).
func (n *NodeInfo) Requested(resource string) int64 {
	var sum int64
	for _, p := range n.Pods {
		sum += p.GetRequests()[resource]
	}
	return sum
}

// Allocatable is the node's allocatable amount of one resource (0 when the node
// does not report it).
func (n *NodeInfo) Allocatable(resource string) int64 {
	return n.Node.GetAllocatable()[resource]
}

// clone copies the pod list, so a what-if delta can change it.
func (n *NodeInfo) clone() *NodeInfo {
	return &NodeInfo{Node: n.Node, Pods: append([]*Pod(nil), n.Pods...)}
}

func (n *NodeInfo) removePod(uid string) *Pod {
	for i, p := range n.Pods {
		if p.GetUid() == uid {
			last := len(n.Pods) - 1
			n.Pods[i] = n.Pods[last]
			n.Pods[last] = nil
			n.Pods = n.Pods[:last]
			return p
		}
	}
	return nil
}

type podEntry struct {
	pod    *Pod
	node   uint32
	onNode bool // false: its node is not in the replica
}

// Snapshot is the sidecar's replica of the scheduler's snapshot: nodes by the
// scheduler's node id, pods by UID. The SDK keeps it current from the Replicate
// stream and evaluates every call against it at the generation the call names;
// plugins read it through Cycle.Snapshot during a call.
type Snapshot struct {
	generation uint64
	// Dense, so iterating nodes walks memory forwards; slots maps ids into it.
	nodes   []*NodeInfo
	slots   map[uint32]int
	byName  map[string]uint32
	pods    map[string]podEntry
	pending map[string]*Pod // CycleStart pods not yet placed
	indexes indexes         // the plugins' declared indexes (index.go)
}

// NewSnapshot returns an empty replica.
func NewSnapshot() *Snapshot {
	return &Snapshot{
		slots:   map[uint32]int{},
		byName:  map[string]uint32{},
		pods:    map[string]podEntry{},
		pending: map[string]*Pod{},
	}
}

// SnapshotFromObjects builds the replica a full snapshot with these nodes and pods
// would, for a plugin's unit tests. Nodes with id 0 are numbered after the largest
// id given; a pod goes on the node its NodeName names (nowhere when none does).
func SnapshotFromObjects(nodes []*Node, pods []*Pod) (*Snapshot, error) {
	var next uint32
	for _, n := range nodes {
		if n.GetId() > next {
			next = n.GetId()
		}
	}
	names := map[string]bool{}
	ns := make([]*Node, 0, len(nodes))
	for _, n := range nodes {
		if names[n.GetName()] {
			return nil, fmt.Errorf("node %q is given twice", n.GetName())
		}
		names[n.GetName()] = true
		if n.GetId() == 0 {
			next++
			n = proto.Clone(n).(*Node)
			n.Id = next
		}
		ns = append(ns, n)
	}
	s := NewSnapshot()
	if err := s.apply(1, &pb.SnapshotDelta{Full: true, UpsertNodes: ns, UpsertPods: pods}); err != nil {
		return nil, err
	}
	return s, nil
}

// Generation is the generation of the last snapshot change applied.
func (s *Snapshot) Generation() uint64 { return s.generation }

// Node returns the node with the scheduler's id, or nil.
func (s *Snapshot) Node(id uint32) *NodeInfo {
	if i, ok := s.slots[id]; ok {
		return s.nodes[i]
	}
	return nil
}

// NodeByName returns the node with this name, or nil.
func (s *Snapshot) NodeByName(name string) *NodeInfo {
	if id, ok := s.byName[name]; ok {
		return s.Node(id)
	}
	return nil
}

// Nodes returns every node. The slice is the replica's: do not modify or keep it.
func (s *Snapshot) Nodes() []*NodeInfo { return s.nodes }

// NumNodes is the number of nodes.
func (s *Snapshot) NumNodes() int { return len(s.nodes) }

// Pod returns a bound or assumed pod by UID, or nil.
func (s *Snapshot) Pod(uid string) *Pod { return s.pods[uid].pod }

// Pods returns every bound or assumed pod, ordered by UID.
func (s *Snapshot) Pods() []*Pod {
	out := make([]*Pod, 0, len(s.pods))
	for _, e := range s.pods {
		out = append(out, e.pod)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetUid() < out[j].GetUid() })
	return out
}

// noteCyclePod keeps the pod of a CycleStart until a delta places it.
func (s *Snapshot) noteCyclePod(p *Pod) {
	if len(s.pending) >= maxPendingPods {
		s.pending = map[string]*Pod{}
	}
	s.pending[p.GetUid()] = p
}

func (s *Snapshot) removeNode(id uint32) *NodeInfo {
	slot, ok := s.slots[id]
	if !ok {
		return nil
	}
	delete(s.slots, id)
	ni := s.nodes[slot]
	last := len(s.nodes) - 1
	if slot != last {
		s.nodes[slot] = s.nodes[last]
		s.slots[s.nodes[slot].Node.GetId()] = slot
	}
	s.nodes[last] = nil
	s.nodes = s.nodes[:last]
	return ni
}

// apply applies one delta. An error means the replica cannot be trusted any more:
// the SDK ends the Replicate stream and the scheduler reconnects with a full
// snapshot.
func (s *Snapshot) apply(generation uint64, d *pb.SnapshotDelta) error {
	if d.GetFull() {
		s.nodes = nil
		s.slots = map[uint32]int{}
		s.byName = map[string]uint32{}
		s.pods = map[string]podEntry{}
		s.pending = map[string]*Pod{}
		s.indexes.clear()
	}
	// Removals first: a node deleted and re-created arrives with a new id.
	for _, id := range d.GetRemoveNodes() {
		if ni := s.removeNode(id); ni != nil {
			delete(s.byName, ni.Name())
			s.indexes.node(ni.Node, false)
			for _, p := range ni.Pods {
				s.indexes.pod(p, id, false)
				if e, ok := s.pods[p.GetUid()]; ok {
					e.onNode = false
					s.pods[p.GetUid()] = e
				}
			}
		}
	}
	for _, uid := range d.GetRemovePods() {
		s.removePod(uid)
	}
	for _, n := range d.GetUpsertNodes() {
		if n == nil {
			return fmt.Errorf("generation %d: an empty node in upsert_nodes", generation)
		}
		id := n.GetId()
		if old, ok := s.byName[n.GetName()]; ok && old != id {
			return fmt.Errorf("node %q arrived with id %d but the replica has it as %d", n.GetName(), id, old)
		}
		s.byName[n.GetName()] = id
		if slot, ok := s.slots[id]; ok {
			ni := s.nodes[slot]
			if ni.Name() != n.GetName() {
				delete(s.byName, ni.Name())
			}
			s.indexes.node(ni.Node, false)
			s.indexes.node(n, true)
			ni.Node = n
		} else {
			s.indexes.node(n, true)
			s.slots[id] = len(s.nodes)
			s.nodes = append(s.nodes, &NodeInfo{Node: n})
		}
	}
	for _, p := range d.GetUpsertPods() {
		if p == nil {
			return fmt.Errorf("generation %d: an empty pod in upsert_pods", generation)
		}
		delete(s.pending, p.GetUid())
		s.place(p)
	}
	for _, u := range d.GetUpdatePods() {
		if u == nil {
			return fmt.Errorf("generation %d: an empty update in update_pods", generation)
		}
		known := s.pods[u.GetUid()].pod
		if known == nil {
			known = s.pending[u.GetUid()]
		}
		if known == nil {
			return fmt.Errorf("an update for pod %s the replica does not hold", u.GetUid())
		}
		delete(s.pending, u.GetUid())
		p := proto.Clone(known).(*Pod)
		p.NodeName = u.GetNodeName()
		p.NominatedNodeName = u.GetNominatedNodeName()
		p.Phase = u.GetPhase()
		p.Terminating = u.GetTerminating()
		p.StartTimeMicros = u.GetStartTimeMicros()
		s.place(p)
	}
	s.generation = generation
	return nil
}

// place puts a pod in the replica, on its node, replacing any earlier copy.
func (s *Snapshot) place(p *Pod) {
	s.removePod(p.GetUid())
	e := podEntry{pod: p}
	if id, ok := s.byName[p.GetNodeName()]; ok && p.GetNodeName() != "" {
		if ni := s.Node(id); ni != nil {
			ni.Pods = append(ni.Pods, p)
			e.node, e.onNode = id, true
			s.indexes.pod(p, id, true)
		}
	}
	s.pods[p.GetUid()] = e
}

func (s *Snapshot) removePod(uid string) {
	e, ok := s.pods[uid]
	if !ok {
		return
	}
	delete(s.pods, uid)
	if e.onNode {
		if ni := s.Node(e.node); ni != nil && ni.removePod(uid) != nil {
			s.indexes.pod(e.pod, e.node, false)
		}
	}
}

// clonePod deep-copies a pod (the replica's copies are shared and read-only).
func clonePod(p *Pod) *Pod { return proto.Clone(p).(*Pod) }
