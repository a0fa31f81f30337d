package switchyard

import "testing"

type counts struct{ m map[string]int }

func (c *counts) Clone() StateData {
	n := &counts{m: map[string]int{}}
	for k, v := range c.m {
		n.m[k] = v
	}
	return n
}

func TestForkIsIndependent(t *testing.T) {
	var a CycleState
	a.Write(&counts{m: map[string]int{"x": 1}})
	b := a.Clone()
	b.Read().(*counts).m["x"] = 5
	b.Read().(*counts).m["y"] = 1
	if got := a.Read().(*counts).m; got["x"] != 1 || len(got) != 1 {
		t.Fatalf("the fork changed the original: %v", got)
	}
	var empty CycleState
	if empty.Clone().Read() != nil {
		t.Fatal("a fork of an empty state holds something")
	}
}
