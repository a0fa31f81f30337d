package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	sy "github.com/switchyard-sched/switchyard/plugin-sdk/go"
)

// The SDK's harness on plugins/quota/testdata/cluster.yaml, converted by `switchyard
// snapshot` ($SWITCHYARD_BIN, else the workspace's target/debug/switchyard): each
// pending pod through PreFilter and Filter over every node, as the sidecar runs them.
func TestTenantQuotaThroughTheHarness(t *testing.T) {
	wd, err := os.Getwd()
	if err == nil {
		// GOPATH mode links the SDK in: the repository is where the link points.
		wd, err = filepath.EvalSymlinks(wd)
	}
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(wd, "..", "..", "..", "..") // from plugin-sdk/go/examples/tenantquota
	bin := os.Getenv("SWITCHYARD_BIN")
	if bin == "" {
		bin = filepath.Join(repo, "target", "debug", "switchyard")
	}
	h, err := sy.HarnessFromManifests(bin, filepath.Join(repo, "plugins", "quota", "testdata", "cluster.yaml"))
	if err != nil {
		t.Fatalf("%v (build it: cargo build -p switchyard, or set SWITCHYARD_BIN)", err)
	}
	q := &TenantQuota{reserved: map[string]string{}}
	ctx := context.Background()
	acme, _ := h.Run(ctx, q, "acme-new")
	if got := acme.Feasible(); !reflect.DeepEqual(got, []string{"two-a", "free"}) {
		t.Fatalf("acme-new feasible %v", got)
	}
	if st, _ := acme.Status("one"); st.CodeOf() != sy.Unschedulable || st.Message() != "node(s) exceeded the pod quota of tenant acme" {
		t.Fatalf("acme-new on one: %v", st)
	}
	globex, _ := h.Run(ctx, q, "default/globex-new")
	if got := globex.Feasible(); !reflect.DeepEqual(got, []string{"two-a", "two-b", "free"}) {
		t.Fatalf("globex-new feasible %v", got)
	}
	plain, _ := h.Run(ctx, q, "plain")
	if plain.PreFilter.CodeOf() != sy.Skip || len(plain.Feasible()) != 4 {
		t.Fatalf("plain: %v %v", plain.PreFilter, plain.Feasible())
	}
}
