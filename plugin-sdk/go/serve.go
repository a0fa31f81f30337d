package switchyard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// Environment variables read by Main and Options.FromEnv (the same as the Rust SDK
// and the Python sidecar).
const (
	// ListenEnv is the listen address when --listen is not given; the scheduler's
	// --sidecar sets it.
	ListenEnv = "SWITCHYARD_PLUGIN_LISTEN"
	// CapabilitiesEnv set to "off" (or "false", "0") is the environment fallback of
	// the --no-optional-capabilities flag: FromEnv (and only FromEnv) reads it and
	// sets Options.Capabilities to false.
	CapabilitiesEnv = "SWITCHYARD_PLUGIN_CAPABILITIES"
	// TLS files (PEM) for an https:// listen address; the client CA makes it
	// mutual TLS.
	TLSCertEnv     = "SWITCHYARD_PLUGIN_TLS_CERT"
	TLSKeyEnv      = "SWITCHYARD_PLUGIN_TLS_KEY"
	TLSClientCAEnv = "SWITCHYARD_PLUGIN_TLS_CLIENT_CA"
)

// pluginService is the gRPC service name, also reported by the health service.
const pluginService = "switchyard.plugin.v1.Plugin"

// maxMessage is the largest gRPC message either way (the scheduler's limit, L1).
const maxMessage = 64 << 20

// Options says how a sidecar serves. Start from DefaultOptions (or FromEnv).
type Options struct {
	// Listen is unix:///path.sock (or unix:path), tcp://host:port, http://host:port,
	// host:port, or https://host:port (TLS, see TLS).
	Listen string
	// GenerationWait bounds how long a call waits for the replica to reach the
	// generation it names (C1).
	GenerationWait time.Duration
	// ParallelThreshold: Filter and Score batches of at least this many nodes are
	// evaluated on several goroutines (0 = never).
	ParallelThreshold int
	// MaxBatchNodes is the batch limit declared at handshake (0 = none).
	MaxBatchNodes uint32
	// Capabilities offers the protocol's optional capabilities (filter-batch:
	// several pods' Filter calls per message for node-local plugins;
	// replicate-batch: several Replicate messages per message) when the scheduler
	// does. On in DefaultOptions; false serves as a sidecar built before them would
	// (the scheduler then calls it one pod at a time). Main's
	// --no-optional-capabilities flag turns it off, and so does
	// SWITCHYARD_PLUGIN_CAPABILITIES=off through FromEnv.
	Capabilities bool
	// TLS is required for an https:// address (FromEnv builds it from
	// SWITCHYARD_PLUGIN_TLS_*).
	TLS *tls.Config
	// ShutdownGrace bounds how long shutdown waits for open streams (the
	// scheduler's streams live as long as its connection) before closing them.
	ShutdownGrace time.Duration
	// OTLP, when set, exports a span per traced call over OTLP/gRPC (see
	// Traceparent and README "Tracing"); FromEnv sets it from the OTEL_* variables.
	// An empty ServiceName is "switchyard-sidecar-<first plugin, lowercase>".
	OTLP *otlp.Config
}

// DefaultOptions are the Rust SDK's defaults: 5 s generation wait, parallel batches
// from 2048 nodes, no batch limit, capabilities on.
func DefaultOptions(listen string) Options {
	return Options{
		Listen:            listen,
		GenerationWait:    5 * time.Second,
		ParallelThreshold: 2048,
		Capabilities:      true,
		ShutdownGrace:     5 * time.Second,
	}
}

// FromEnv is DefaultOptions with SWITCHYARD_PLUGIN_CAPABILITIES=off (Capabilities
// false, the fallback of --no-optional-capabilities), for an https://
// address the TLS files of SWITCHYARD_PLUGIN_TLS_*, and span export (Options.OTLP)
// when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_TRACES_EXPORTER=otlp asks for it, applied. A malformed OTEL_* variable
// turns tracing off (logged); it does not stop the sidecar.
func FromEnv(listen string) (Options, error) {
	o := DefaultOptions(listen)
	if c, ok, err := otlp.ConfigFromEnv(); err != nil {
		log.Printf("switchyard: tracing disabled: %v", err)
	} else if ok {
		o.OTLP = &c
	}
	switch strings.TrimSpace(os.Getenv(CapabilitiesEnv)) {
	case "off", "false", "0":
		o.Capabilities = false
	}
	if strings.HasPrefix(listen, "https://") {
		c, err := serverTLSFromEnv()
		if err != nil {
			return o, err
		}
		o.TLS = c
	}
	return o, nil
}

func serverTLSFromEnv() (*tls.Config, error) {
	cert, key := os.Getenv(TLSCertEnv), os.Getenv(TLSKeyEnv)
	if strings.TrimSpace(cert) == "" || strings.TrimSpace(key) == "" {
		return nil, fmt.Errorf("an https:// listen address needs %s and %s naming PEM files", TLSCertEnv, TLSKeyEnv)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", TLSCertEnv, TLSKeyEnv, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if ca := strings.TrimSpace(os.Getenv(TLSClientCAEnv)); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: cannot read: %w", TLSClientCAEnv, ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in it", TLSClientCAEnv, ca)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// ParseListen splits a listen address into a network ("unix" or "tcp"), an
// address, and whether it is TLS.
func ParseListen(s string) (network, address string, useTLS bool, err error) {
	bad := fmt.Errorf("listen address %q: expected unix:///path/to.sock, tcp://host:port, https://host:port or host:port", s)
	if p, ok := cutPrefix(s, "unix://"); ok {
		if p == "" {
			return "", "", false, bad
		}
		return "unix", p, false, nil
	}
	if p, ok := cutPrefix(s, "unix:"); ok {
		if p == "" {
			return "", "", false, bad
		}
		return "unix", p, false, nil
	}
	hostport := s
	if p, ok := cutPrefix(s, "https://"); ok {
		hostport, useTLS = p, true
	} else if p, ok := cutPrefix(s, "tcp://"); ok {
		hostport = p
	} else if p, ok := cutPrefix(s, "http://"); ok {
		hostport = p
	}
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", "", false, bad
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", "", false, bad
	}
	return "tcp", hostport, useTLS, nil
}

func cutPrefix(s, prefix string) (string, bool) {
	if strings.HasPrefix(s, prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

// Known cluster event names (proto/README.md, "Cluster events"): the scheduler
// fails the handshake on others, so Serve refuses them first, with the plugin named.
var (
	eventResources = setOf("Pod", "AssignedPod", "UnschedulablePod", "Node", "PodDisruptionBudget", "Namespace",
		"PersistentVolume", "PersistentVolumeClaim", "StorageClass", "CSINode", "CSIDriver", "CSIStorageCapacity", "*")
	eventActions = setOf("Add", "Delete", "Update", "UpdateNodeAllocatable", "UpdateNodeLabel", "UpdateNodeTaint",
		"UpdateNodeCondition", "UpdateNodeAnnotation", "UpdateNodeDeclaredFeature", "UpdatePodLabel",
		"UpdatePodScaleDown", "UpdatePodToleration", "UpdatePodSchedulingGatesEliminated",
		"UpdatePodGeneratedResourceClaim", "All", "*")
)

func setOf(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// checkPlugins refuses what the scheduler could not use (H3): no plugin, an empty
// or duplicate name, a node-local plugin with a PreFilter, unknown event names, and
// alike-pod declarations checkAlike refuses.
func checkPlugins(plugins []Plugin) error {
	if len(plugins) == 0 {
		return errors.New("no plugin to serve")
	}
	seen := map[string]bool{}
	for _, p := range plugins {
		if p == nil {
			return errors.New("a nil plugin")
		}
		r := register(p)
		if r.name == "" {
			return fmt.Errorf("a plugin of type %T has an empty name", p)
		}
		if seen[r.name] {
			return fmt.Errorf("plugin %q is registered twice", r.name)
		}
		seen[r.name] = true
		if l, ok := p.(LabelScorePlugin); ok {
			_, pre := p.(PreScorePlugin)
			_, sc := p.(ScorePlugin)
			_, ne := p.(ScoreExtensions)
			if pre || sc || ne {
				return fmt.Errorf("plugin %q scores by a node label and also has a PreScore, Score or NormalizeScore: the label scores are its PreScore and Score, drop the others", r.name)
			}
			if _, pf := p.(PreFilterPlugin); pf {
				return fmt.Errorf("plugin %q scores by a node label and has a PreFilter: its label scores are asked for as the cycle starts, before PreFilter, and keep the cycle state; serve the PreFilter from a plugin of its own", r.name)
			}
			if l.ScoreNodeLabel() == "" {
				return fmt.Errorf("plugin %q scores by a node label but names none: return the label key from ScoreNodeLabel", r.name)
			}
		}
		if r.nodeLocal && r.preFilter != nil {
			return fmt.Errorf("plugin %q declares NodeLocal but has a PreFilter, whose state may span nodes: drop one of the two", r.name)
		}
		for _, e := range r.events {
			if !eventResources[e.GetResource()] {
				return fmt.Errorf("plugin %q: unknown event resource %q", r.name, e.GetResource())
			}
			for _, a := range e.GetActions() {
				if !eventActions[a] {
					return fmt.Errorf("plugin %q: unknown event action %q", r.name, a)
				}
			}
		}
		if err := checkAlike(r); err != nil {
			return err
		}
	}
	return nil
}

// Serve serves plugins as a sidecar until ctx is done, then reports NOT_SERVING on
// the health service, stops accepting connections, and closes (after at most
// ShutdownGrace) the streams still open. A Unix socket is removed before listening
// (a stale one would make listening fail) and after.
func Serve(ctx context.Context, opts Options, plugins ...Plugin) error {
	if err := checkPlugins(plugins); err != nil {
		return err
	}
	network, addr, useTLS, err := ParseListen(opts.Listen)
	if err != nil {
		return err
	}
	if opts.GenerationWait <= 0 {
		opts.GenerationWait = 5 * time.Second
	}
	svc := newService(plugins, opts)
	if opts.OTLP != nil {
		svc.tracer = startTracing(*opts.OTLP, plugins)
		defer stopTracing(svc.tracer)
	}
	sopts := []grpc.ServerOption{
		grpc.StatsHandler(connTagger{svc}),
		grpc.CustomCodec(codec{}), //nolint:staticcheck // see codec; ForceServerCodec needs grpc 1.38
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
	}
	if useTLS {
		if opts.TLS == nil {
			return fmt.Errorf("%s: TLS needs a certificate (Options.TLS, or %s/%s)", opts.Listen, TLSCertEnv, TLSKeyEnv)
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	srv := grpc.NewServer(sopts...)
	pb.RegisterPluginServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pluginService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)

	if network == "unix" {
		_ = os.Remove(addr)
		if dir := filepath.Dir(addr); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("cannot listen on %s: %w (create the directory or choose another path with --listen or %s)", addr, err, ListenEnv)
			}
		}
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (choose another address with --listen or %s)", opts.Listen, err, ListenEnv)
	}
	if network == "unix" {
		defer os.Remove(addr)
	}
	names := make([]string, len(plugins))
	for i, p := range plugins {
		names[i] = p.Name()
	}
	log.Printf("switchyard: serving plugins %s on %s", strings.Join(names, ", "), opts.Listen)

	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	hs.Shutdown() // NOT_SERVING while the calls in flight drain
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	grace := opts.ShutdownGrace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	select {
	case <-stopped:
	case <-time.After(grace):
		srv.Stop()
		<-stopped
	}
	<-done
	return nil
}

// startTracing starts the span exporter (nil, logged, when it cannot start).
func startTracing(c otlp.Config, plugins []Plugin) *otlp.Exporter {
	if c.ServiceName == "" && c.ResourceAttributes["service.name"] == "" {
		c.ServiceName = "switchyard-sidecar"
		if len(plugins) > 0 {
			c.ServiceName += "-" + strings.ToLower(plugins[0].Name())
		}
	}
	e, err := otlp.New(c)
	if err != nil {
		log.Printf("switchyard: tracing disabled: %v", err)
		return nil
	}
	return e
}

// stopTracing exports the spans still queued, waiting at most 5 s.
func stopTracing(e *otlp.Exporter) {
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		log.Printf("switchyard: %v", err)
	}
}

// Main is a sidecar's main function: it reads --listen ADDRESS (else
// $SWITCHYARD_PLUGIN_LISTEN, else unix:///tmp/switchyard/<first plugin>.sock),
// --probe and --no-optional-capabilities (Options.Capabilities false; else
// $SWITCHYARD_PLUGIN_CAPABILITIES=off) from the command line (with the flag package,
// so a plugin can define flags of its own before calling Main), serves until SIGTERM
// or SIGINT (with the options of FromEnv and those flags, so spans are exported when
// the OTEL_* variables ask for it, and flushed at shutdown), and exits 1 with the
// reason on failure.
func Main(plugins ...Plugin) {
	if err := run(plugins); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
}

// noOptionalCapabilitiesFlag is Main's flag for Options.Capabilities false (the same
// spelling in every SDK).
const noOptionalCapabilitiesFlag = "no-optional-capabilities"

// defineFlags defines Main's flags on the flag package's command line, each unless
// the plugin has defined it.
func defineFlags() {
	if flag.Lookup("listen") == nil {
		flag.String("listen", "", "unix:///path.sock, tcp://host:port, host:port, or https://host:port with "+
			TLSCertEnv+" and "+TLSKeyEnv+" naming PEM files ("+TLSClientCAEnv+": require client certificates from that CA). "+
			"Default: $"+ListenEnv+", else unix:///tmp/switchyard/<plugin>.sock")
	}
	if flag.Lookup("probe") == nil {
		flag.Bool("probe", false, "check the running sidecar at the listen address (gRPC health) and exit 0 if it is serving, 1 if not")
	}
	if flag.Lookup(noOptionalCapabilitiesFlag) == nil {
		flag.Bool(noOptionalCapabilitiesFlag, false, "offer none of the protocol's optional capabilities (filter-batch, "+
			"replicate-batch, filter-after-pre-filter, permit-after-reserve): serve as a sidecar built before them would. Default: offered, unless $"+CapabilitiesEnv+"=off")
	}
}

// commandLineOptions is FromEnv(listen) with the command line's
// --no-optional-capabilities applied.
func commandLineOptions(listen string) (Options, error) {
	opts, err := FromEnv(listen)
	if err != nil {
		return opts, err
	}
	if f := flag.Lookup(noOptionalCapabilitiesFlag); f != nil && f.Value.String() == "true" {
		opts.Capabilities = false
	}
	return opts, nil
}

func run(plugins []Plugin) error {
	defineFlags()
	if !flag.Parsed() {
		flag.Parse()
	}
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; try --help", flag.Arg(0))
	}
	name := "plugin"
	if len(plugins) > 0 && plugins[0] != nil {
		name = plugins[0].Name()
	}
	listen := ResolveListen(flag.Lookup("listen").Value.String(), name)
	if flag.Lookup("probe").Value.String() == "true" {
		return Probe(listen, 5*time.Second)
	}
	opts, err := commandLineOptions(listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return Serve(ctx, opts, plugins...)
}

// ResolveListen picks the listen address: flag, else $SWITCHYARD_PLUGIN_LISTEN, else
// unix:///tmp/switchyard/<plugin name, lowercase>.sock.
func ResolveListen(flagValue, pluginName string) string {
	if flagValue != "" {
		return flagValue
	}
	if env := os.Getenv(ListenEnv); env != "" {
		return env
	}
	return "unix:///tmp/switchyard/" + strings.ToLower(pluginName) + ".sock"
}

// Probe checks a running sidecar's gRPC health at listen: nil when it answers
// SERVING for "". For exec probes (kubelet's gRPC probes cannot reach a Unix
// socket). An https:// address is verified for "localhost" against the CA of
// SWITCHYARD_PLUGIN_TLS_CLIENT_CA (presenting the sidecar's own certificate), else
// against the sidecar's own certificate.
func Probe(listen string, timeout time.Duration) error {
	network, addr, useTLS, err := ParseListen(listen)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	creds := grpc.WithInsecure()
	if useTLS {
		c, err := probeTLS()
		if err != nil {
			return err
		}
		creds = grpc.WithTransportCredentials(credentials.NewTLS(c))
	}
	conn, err := grpc.DialContext(ctx, "passthrough:///"+addr, creds, grpc.WithContextDialer(dialer), grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{})))
	if err != nil {
		return fmt.Errorf("health check of %s: cannot connect: %w", listen, err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("health check of %s: %w", listen, err)
	}
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check of %s: %s", listen, r.GetStatus())
	}
	return nil
}

func probeTLS() (*tls.Config, error) {
	server, err := serverTLSFromEnv()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}
	caFile := os.Getenv(TLSCertEnv)
	if server.ClientCAs != nil {
		caFile = os.Getenv(TLSClientCAEnv)
		c.Certificates = server.Certificates
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	c.RootCAs = x509.NewCertPool()
	c.RootCAs.AppendCertsFromPEM(pem)
	return c, nil
}
