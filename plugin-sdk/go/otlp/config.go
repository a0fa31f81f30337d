package otlp

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config configures an Exporter. ConfigFromEnv reads it from the standard OTEL_*
// variables; zero fields take the defaults New documents.
type Config struct {
	// Endpoint is the collector: http://host:port (plaintext gRPC), https://host:port
	// (TLS) or host:port (plaintext). A path is ignored; the port defaults to 4317.
	Endpoint string
	// Headers are sent with every export (e.g. an API key).
	Headers map[string]string
	// ServiceName is the resource's service.name (empty: unknown_service:go, unless
	// ResourceAttributes names one).
	ServiceName string
	// ResourceAttributes are further resource attributes (OTEL_RESOURCE_ATTRIBUTES).
	ResourceAttributes map[string]string
	// ScheduleDelay is the time between exports (default 5 s).
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export call (default 10 s).
	ExportTimeout time.Duration
	// MaxQueueSize bounds the spans waiting for export (default 2048); more are
	// dropped.
	MaxQueueSize int
	// MaxExportBatchSize bounds the spans of one export (default 512).
	MaxExportBatchSize int
	// CAFile (PEM) verifies an https:// collector instead of the system roots;
	// ClientCertFile and ClientKeyFile (PEM) are presented to it when both are set.
	CAFile, ClientCertFile, ClientKeyFile string
}

// Environment variables read by ConfigFromEnv (the OpenTelemetry SDK configuration;
// the _TRACES_ forms take precedence).
const (
	EndpointEnv       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	TracesEndpointEnv = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	TracesExporterEnv = "OTEL_TRACES_EXPORTER"
	ServiceNameEnv    = "OTEL_SERVICE_NAME"
	ScheduleDelayEnv  = "OTEL_BSP_SCHEDULE_DELAY"
)

// DefaultEndpoint is used when OTEL_TRACES_EXPORTER=otlp names no endpoint.
const DefaultEndpoint = "http://localhost:4317"

// Requested reports whether the environment asks for span export, as the Rust and
// Python SDKs decide: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, or OTEL_TRACES_EXPORTER=otlp; never when
// OTEL_SDK_DISABLED=true.
func Requested() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return env(EndpointEnv) != "" || env(TracesEndpointEnv) != "" || env(TracesExporterEnv) == "otlp"
}

// ConfigFromEnv reads the configuration from the OTEL_* variables:
// OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT, _HEADERS, _TIMEOUT (ms), _CERTIFICATE,
// _CLIENT_CERTIFICATE, _CLIENT_KEY; OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES;
// OTEL_BSP_SCHEDULE_DELAY (ms), OTEL_BSP_MAX_QUEUE_SIZE and
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE. ok is false when export is not requested (see
// Requested). A malformed value is an error naming the variable.
func ConfigFromEnv() (c Config, ok bool, err error) {
	if !Requested() {
		return Config{}, false, nil
	}
	c.Endpoint = traces("ENDPOINT")
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	c.ServiceName = env(ServiceNameEnv)
	if c.Headers, err = keyValues(tracesName("HEADERS")); err != nil {
		return c, false, err
	}
	if c.ResourceAttributes, err = keyValues("OTEL_RESOURCE_ATTRIBUTES"); err != nil {
		return c, false, err
	}
	if c.ExportTimeout, err = millis(tracesName("TIMEOUT")); err != nil {
		return c, false, err
	}
	if c.ScheduleDelay, err = millis(ScheduleDelayEnv); err != nil {
		return c, false, err
	}
	if c.MaxQueueSize, err = count("OTEL_BSP_MAX_QUEUE_SIZE"); err != nil {
		return c, false, err
	}
	if c.MaxExportBatchSize, err = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"); err != nil {
		return c, false, err
	}
	c.CAFile = traces("CERTIFICATE")
	c.ClientCertFile = traces("CLIENT_CERTIFICATE")
	c.ClientKeyFile = traces("CLIENT_KEY")
	return c, true, nil
}

func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

// traces reads OTEL_EXPORTER_OTLP_TRACES_<suffix>, else OTEL_EXPORTER_OTLP_<suffix>.
func traces(suffix string) string { return env(tracesName(suffix)) }

// tracesName is the variable traces reads.
func tracesName(suffix string) string {
	if env("OTEL_EXPORTER_OTLP_TRACES_"+suffix) != "" {
		return "OTEL_EXPORTER_OTLP_TRACES_" + suffix
	}
	return "OTEL_EXPORTER_OTLP_" + suffix
}

// millis reads a duration in milliseconds (0 when unset).
func millis(name string) (time.Duration, error) {
	v := env(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a number of milliseconds", name, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// count reads a positive integer (0 when unset).
func count(name string) (int, error) {
	v := env(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s=%q: not a positive integer", name, v)
	}
	return int(n), nil
}

// keyValues reads "k1=v1,k2=v2" with URL-encoded (percent-encoded) values.
func keyValues(name string) (map[string]string, error) {
	v := env(name)
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, val, found := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !found || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", name, item)
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", name, item, err)
		}
		out[k] = dec
	}
	return out, nil
}

// target splits an endpoint into the dial address (host:port) and whether it
// uses TLS.
func target(endpoint string) (addr string, useTLS bool, err error) {
	e := strings.TrimSpace(endpoint)
	if e == "" {
		e = DefaultEndpoint
	}
	if !strings.Contains(e, "://") {
		e = "http://" + e
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" {
		return "", false, fmt.Errorf("OTLP endpoint %q: want http://host:port, https://host:port or host:port", endpoint)
	}
	switch u.Scheme {
	case "http", "grpc":
	case "https":
		useTLS = true
	default:
		return "", false, fmt.Errorf("OTLP endpoint %q: scheme %q not supported (http or https)", endpoint, u.Scheme)
	}
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = "4317"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + port, useTLS, nil
}
