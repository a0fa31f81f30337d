package switchyard

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

var testIndexes = []Index{{Kind: PodsByLabel, Key: "team"}, {Kind: PodsByNamespace}, {Kind: NodesByLabel, Key: "rack"},
	{Kind: PodListsByLabel, Key: "team"}}

// indexContents is every index as sorted lines, to compare a replica moved by deltas
// with one built from scratch.
func indexContents(s *Snapshot) []string {
	var out []string
	counts := func(name string, c *PodCounts) {
		c.Values(func(v string, total uint64) {
			var nodes [][2]uint32
			c.Nodes(v, func(n, k uint32) { nodes = append(nodes, [2]uint32{n, k}) })
			sort.Slice(nodes, func(i, j int) bool { return nodes[i][0] < nodes[j][0] })
			out = append(out, fmt.Sprintf("%s %s=%d %v", name, v, total, nodes))
		})
	}
	counts("team", s.PodsByLabel("team"))
	counts("ns", s.PodsByNamespace())
	lists := s.PodListsByLabel("team")
	lists.Values(func(ns, v string, n int) {
		var uids []string
		lists.Pods(ns, v, func(p *Pod) { uids = append(uids, p.GetUid()+"@"+p.GetNodeName()) })
		sort.Strings(uids)
		if len(uids) != n || lists.Count(ns, v) != n {
			panic(fmt.Sprintf("list %s/%s: %d pods, count %d", ns, v, len(uids), n))
		}
		out = append(out, fmt.Sprintf("list %s/%s %v", ns, v, uids))
	})
	racks := s.NodesByLabel("rack")
	racks.Values(func(v string, nodes []uint32) {
		n := append([]uint32(nil), nodes...)
		sort.Slice(n, func(i, j int) bool { return n[i] < n[j] })
		out = append(out, fmt.Sprintf("rack %s %v of %d", v, n, racks.Count()))
	})
	sort.Strings(out)
	return out
}

func TestIndexesFollowDeltasAsAFreshBuildWould(t *testing.T) {
	racked := func(id uint32, name, rack string) *Node {
		return &Node{Id: id, Name: name, Labels: map[string]string{"rack": rack}}
	}
	teamed := func(uid, node, team, ns string) *Pod {
		p := pod(uid, node, 1)
		p.Labels = map[string]string{"team": team}
		p.Namespace = ns
		return p
	}
	s := NewSnapshot().WithIndexes(testIndexes...)
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true,
		UpsertNodes: []*Node{racked(1, "a", "r1"), racked(2, "b", "r1"), node(3, "c")},
		UpsertPods: []*Pod{teamed("p1", "a", "red", "x"), teamed("p2", "a", "blue", "x"),
			teamed("p3", "b", "red", "y"), pod("p4", "c", 1)}})
	if got := s.PodsByLabel("team").OnNode("red", 1); got != 1 {
		t.Fatalf("red on node 1: %d", got)
	}
	if got := s.NodesByLabel("rack").Count(); got != 2 {
		t.Fatalf("racked nodes: %d", got)
	}
	mustApply(t, s, 2, &pb.SnapshotDelta{
		UpsertNodes: []*Node{racked(2, "b", "r2"), racked(4, "d", "r1")},
		UpsertPods: []*Pod{teamed("p1", "c", "red", "x"), teamed("p5", "d", "blue", "y"),
			teamed("p6", "nowhere", "red", "y")},
		RemovePods: []string{"p2"}, RemoveNodes: []uint32{1}})
	fresh, err := SnapshotFromObjects(
		[]*Node{racked(2, "b", "r2"), node(3, "c"), racked(4, "d", "r1")},
		[]*Pod{teamed("p1", "c", "red", "x"), teamed("p3", "b", "red", "y"), pod("p4", "c", 1),
			teamed("p5", "d", "blue", "y")})
	if err != nil {
		t.Fatal(err)
	}
	fresh.WithIndexes(testIndexes...)
	if a, b := indexContents(s), indexContents(fresh); !reflect.DeepEqual(a, b) {
		t.Fatalf("after deltas:\n%v\nfresh:\n%v", a, b)
	}
	if got := s.PodsByLabel("team").Total("red"); got != 2 {
		t.Fatalf("red total %d", got)
	}
	if s.PodsByLabel("other") != nil {
		t.Fatal("an undeclared index is nil")
	}
	// p3 (y/red on b) and p6 (y/red, its node not in the replica): only p3 is placed.
	if got := s.PodListsByLabel("team").Count("y", "red"); got != 1 {
		t.Fatalf("y/red listed %d", got)
	}
}

func TestPodListsKeepNamespacesApartAndDefaultTheEmptyOne(t *testing.T) {
	l := newPodLists()
	mk := func(uid, ns string) *Pod { return &Pod{Uid: uid, Namespace: ns} }
	a, b, c := mk("a", ""), mk("b", "default"), mk("c", "other")
	for _, p := range []*Pod{a, b, c, a} {
		l.add("g", p)
	}
	if l.Count("default", "g") != 2 || l.Count("", "g") != 2 || l.Count("other", "g") != 1 {
		t.Fatalf("counts %d %d", l.Count("default", "g"), l.Count("other", "g"))
	}
	l.remove("g", a)
	var left []string
	l.Pods("default", "g", func(p *Pod) { left = append(left, p.GetUid()) })
	if !reflect.DeepEqual(left, []string{"b"}) {
		t.Fatalf("left %v", left)
	}
	l.remove("g", b)
	l.remove("g", b)
	n := 0
	l.Values(func(string, string, int) { n++ })
	if n != 1 {
		t.Fatalf("%d values left", n)
	}
}

type indexed struct{}

func (indexed) Name() string { return "Indexed" }
func (indexed) Indexes() []Index {
	return []Index{{Kind: PodsByLabel, Key: "team"}}
}

func TestTheServiceDeclaresThePluginsIndexes(t *testing.T) {
	svc := newService([]Plugin{indexed{}}, Options{})
	if svc.newSession().replica.PodsByLabel("team") == nil {
		t.Fatal("the session's replica lacks the plugin's index")
	}
}
