package switchyard

import (
	"flag"
	"testing"
)

// --no-optional-capabilities and its environment fallback turn Options.Capabilities
// off; without either it is on.
func TestNoOptionalCapabilities(t *testing.T) {
	defineFlags()
	listen := "unix:///tmp/switchyard-go-test.sock"
	t.Setenv(CapabilitiesEnv, "")
	if o, err := commandLineOptions(listen); err != nil || !o.Capabilities {
		t.Fatalf("default: capabilities %v, err %v; want on", o.Capabilities, err)
	}
	t.Setenv(CapabilitiesEnv, "off")
	if o, err := commandLineOptions(listen); err != nil || o.Capabilities {
		t.Fatalf("%s=off: capabilities %v, err %v; want off", CapabilitiesEnv, o.Capabilities, err)
	}
	t.Setenv(CapabilitiesEnv, "")
	if err := flag.Set(noOptionalCapabilitiesFlag, "true"); err != nil {
		t.Fatal(err)
	}
	defer flag.Set(noOptionalCapabilitiesFlag, "false")
	if o, err := commandLineOptions(listen); err != nil || o.Capabilities {
		t.Fatalf("--%s: capabilities %v, err %v; want off", noOptionalCapabilitiesFlag, o.Capabilities, err)
	}
}
