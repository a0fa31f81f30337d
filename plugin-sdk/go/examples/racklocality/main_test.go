package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	sy "github.com/switchyard-sched/switchyard/plugin-sdk/go"
)

// The SDK's harness on cluster.yaml (converted by `switchyard snapshot`:
// $SWITCHYARD_BIN, else the workspace's target/debug/switchyard): PreScore, Score and
// the default normalisation, as the sidecar runs them.
func TestRackLocalityThroughTheHarness(t *testing.T) {
	wd, err := os.Getwd()
	if err == nil {
		// GOPATH mode links the SDK in: the repository is where the link points.
		wd, err = filepath.EvalSymlinks(wd)
	}
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("SWITCHYARD_BIN")
	if bin == "" {
		bin = filepath.Join(wd, "..", "..", "..", "..", "target", "debug", "switchyard")
	}
	h, err := sy.HarnessFromManifests(bin, filepath.Join(wd, "cluster.yaml"))
	if err != nil {
		t.Fatalf("%v (build it: cargo build -p switchyard, or set SWITCHYARD_BIN)", err)
	}
	ctx := context.Background()
	o, err := h.Run(ctx, RackLocality{}, "ml/train-3")
	if err != nil {
		t.Fatal(err)
	}
	// r1 holds two of ml/train's pods, r2 one (other/train is another job): 100 and 50.
	want := map[string]int64{"r1-a": 100, "r1-b": 100, "r2-a": 50, "r2-b": 50, "loose": 0}
	for node, w := range want {
		if got, ok := o.Score(node); !ok || got != w {
			t.Errorf("score of %s: %d (%v), want %d", node, got, ok, w)
		}
	}
	if b := o.Best(); b != "r1-a" && b != "r1-b" {
		t.Errorf("best %s", b)
	}
	solo, err := h.Run(ctx, RackLocality{}, "ml/solo")
	if err != nil {
		t.Fatal(err)
	}
	if solo.PreScore.CodeOf() != sy.Skip || len(solo.Scores) != 0 {
		t.Errorf("a pod in no job: PreScore %v, %d scores", solo.PreScore, len(solo.Scores))
	}
}
