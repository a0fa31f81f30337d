package switchyard

import (
	"strings"
	"testing"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

func node(id uint32, name string) *Node { return &Node{Id: id, Name: name} }

func pod(uid, node string, cpu int64) *Pod {
	return &Pod{Uid: uid, Name: uid, NodeName: node, Requests: map[string]int64{"cpu": cpu}}
}

func mustApply(t *testing.T, s *Snapshot, g uint64, d *pb.SnapshotDelta) {
	t.Helper()
	if err := s.apply(g, d); err != nil {
		t.Fatalf("apply %d: %v", g, err)
	}
}

func TestDeltasMovePodsAndNodes(t *testing.T) {
	s := NewSnapshot()
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true, UpsertNodes: []*Node{node(1, "a"), node(2, "b")},
		UpsertPods: []*Pod{pod("p1", "a", 100), pod("p2", "a", 200)}})
	if got := s.NodeByName("a").Requested("cpu"); got != 300 {
		t.Fatalf("a requests %d, want 300", got)
	}
	// p1 moves to b, p2 goes away, node a is removed.
	mustApply(t, s, 2, &pb.SnapshotDelta{UpsertPods: []*Pod{pod("p1", "b", 100)},
		RemovePods: []string{"p2"}, RemoveNodes: []uint32{1}})
	if s.NodeByName("a") != nil || s.Node(1) != nil {
		t.Fatal("node a still there")
	}
	if got := s.Node(2).Requested("cpu"); got != 100 {
		t.Fatalf("b requests %d, want 100", got)
	}
	if s.Pod("p2") != nil || s.Generation() != 2 {
		t.Fatal("p2 kept or generation not 2")
	}
	// A full snapshot replaces everything.
	mustApply(t, s, 3, &pb.SnapshotDelta{Full: true, UpsertNodes: []*Node{node(7, "c")}})
	if s.NumNodes() != 1 || s.Pod("p1") != nil {
		t.Fatal("full snapshot did not replace the replica")
	}
}

func TestRemovingANodeKeepsTheOthersReachable(t *testing.T) {
	s := NewSnapshot()
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true,
		UpsertNodes: []*Node{node(1, "a"), node(2, "b"), node(3, "c"), node(1<<30, "far")},
		UpsertPods:  []*Pod{pod("p3", "c", 100)}})
	mustApply(t, s, 2, &pb.SnapshotDelta{RemoveNodes: []uint32{1}, UpsertNodes: []*Node{node(4, "d")},
		UpsertPods: []*Pod{pod("p4", "d", 50)}})
	if s.Node(1) != nil || s.Node(3).Name() != "c" || s.NodeByName("c").Requested("cpu") != 100 ||
		s.Node(4).Requested("cpu") != 50 || s.Node(2).Name() != "b" || s.Node(1<<30).Name() != "far" {
		t.Fatal("nodes not reachable by id and name after a removal")
	}
	mustApply(t, s, 3, &pb.SnapshotDelta{RemoveNodes: []uint32{4, 1 << 30}, RemovePods: []string{"p3"}})
	if s.NumNodes() != 2 || s.Node(3).Requested("cpu") != 0 {
		t.Fatal("removal of the last nodes")
	}
	// A pod whose node was removed is still held, nowhere.
	if s.Pod("p4") == nil {
		t.Fatal("p4 dropped with its node")
	}
}

func TestRemovedNodeDropsItsPodsFromNodes(t *testing.T) {
	s := NewSnapshot()
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true, UpsertNodes: []*Node{node(1, "a")},
		UpsertPods: []*Pod{pod("p1", "a", 100)}})
	mustApply(t, s, 2, &pb.SnapshotDelta{RemoveNodes: []uint32{1}})
	// Re-created under a new id: the old pod does not come back onto it.
	mustApply(t, s, 3, &pb.SnapshotDelta{UpsertNodes: []*Node{node(5, "a")}})
	if got := len(s.Node(5).Pods); got != 0 {
		t.Fatalf("re-created node has %d pods", got)
	}
}

func TestSnapshotFromObjects(t *testing.T) {
	s, err := SnapshotFromObjects([]*Node{{Name: "a"}, node(5, "b"), {Name: "c"}},
		[]*Pod{pod("p1", "c", 100), pod("p2", "gone", 50)})
	if err != nil {
		t.Fatal(err)
	}
	if s.NumNodes() != 3 || s.Node(5).Name() != "b" || s.Node(6).Name() != "a" || s.Node(7).Name() != "c" {
		t.Fatal("numbering")
	}
	if s.NodeByName("c").Requested("cpu") != 100 || len(s.Pods()) != 2 {
		t.Fatal("placement")
	}
	if _, err := SnapshotFromObjects([]*Node{{Name: "a"}, {Name: "a"}}, nil); err == nil || !strings.Contains(err.Error(), `"a" is given twice`) {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestConflictingNodeIDIsAnError(t *testing.T) {
	s := NewSnapshot()
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true, UpsertNodes: []*Node{node(1, "a")}})
	err := s.apply(2, &pb.SnapshotDelta{UpsertNodes: []*Node{node(2, "a")}})
	if err == nil || !strings.Contains(err.Error(), "id 2") {
		t.Fatalf("got %v", err)
	}
}

func TestPodUpdatesPlaceCyclePodsAndMoveReplicaPods(t *testing.T) {
	s := NewSnapshot()
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true, UpsertNodes: []*Node{node(1, "a"), node(2, "b")},
		UpsertPods: []*Pod{pod("p1", "a", 100)}})
	s.noteCyclePod(pod("c1", "", 300))
	update := func(uid, node string) *pb.PodUpdate {
		return &pb.PodUpdate{Uid: uid, NodeName: node, Phase: "Running"}
	}
	mustApply(t, s, 2, &pb.SnapshotDelta{UpdatePods: []*pb.PodUpdate{update("c1", "b"), update("p1", "b")}})
	if s.Node(2).Requested("cpu") != 400 || len(s.Node(1).Pods) != 0 || s.Pod("c1").Phase != "Running" {
		t.Fatal("updates not applied with the spec kept")
	}
	// The CycleStart copy is consumed: a second placement updates the replica's.
	mustApply(t, s, 3, &pb.SnapshotDelta{UpdatePods: []*pb.PodUpdate{update("c1", "a")}})
	if s.Node(1).Requested("cpu") != 300 {
		t.Fatal("second update")
	}
	if err := s.apply(4, &pb.SnapshotDelta{UpdatePods: []*pb.PodUpdate{update("nobody", "a")}}); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("update of an unknown pod: %v", err)
	}
}

func TestCyclePodsAreForgottenAt1024(t *testing.T) {
	s := NewSnapshot()
	mustApply(t, s, 1, &pb.SnapshotDelta{Full: true, UpsertNodes: []*Node{node(1, "a")}})
	s.noteCyclePod(pod("first", "", 1))
	for i := 1; i < maxPendingPods; i++ {
		s.noteCyclePod(pod("x"+string(rune('a'+i%26))+strings.Repeat("y", i/26), "", 1))
	}
	s.noteCyclePod(pod("last", "", 1)) // the 1025th: all earlier ones are forgotten
	if err := s.apply(2, &pb.SnapshotDelta{UpdatePods: []*pb.PodUpdate{{Uid: "first", NodeName: "a"}}}); err == nil {
		t.Fatal("a forgotten CycleStart pod was updated")
	}
	mustApply(t, s, 3, &pb.SnapshotDelta{UpdatePods: []*pb.PodUpdate{{Uid: "last", NodeName: "a"}}})
}

func TestMalformedDeltasAreErrorsNotPanics(t *testing.T) {
	s := NewSnapshot()
	for _, d := range []*pb.SnapshotDelta{
		{UpsertNodes: []*Node{nil}},
		{UpsertPods: []*Pod{nil}},
		{UpdatePods: []*pb.PodUpdate{nil}},
	} {
		if err := s.apply(1, d); err == nil {
			t.Fatalf("no error for %v", d)
		}
	}
}
