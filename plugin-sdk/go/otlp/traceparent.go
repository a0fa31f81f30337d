package otlp

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand"
	"sync"
	"time"
)

// SpanContext identifies a span: its trace, itself, and the W3C trace flags.
type SpanContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	// Flags are the W3C trace flags (bit 0: sampled).
	Flags byte
	// Remote: the context came from another process (a traceparent).
	Remote bool
}

// IsValid: both ids are set (non-zero).
func (c SpanContext) IsValid() bool {
	return c.TraceID != [16]byte{} && c.SpanID != [8]byte{}
}

// Sampled reports the W3C sampled flag.
func (c SpanContext) Sampled() bool { return c.Flags&1 == 1 }

// Traceparent formats c as a W3C traceparent (version 00), "" when c is not valid.
func (c SpanContext) Traceparent() string {
	if !c.IsValid() {
		return ""
	}
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = append(b, hex.EncodeToString(c.TraceID[:])...)
	b = append(b, '-')
	b = append(b, hex.EncodeToString(c.SpanID[:])...)
	b = append(b, '-')
	b = append(b, hex.EncodeToString([]byte{c.Flags})...)
	return string(b)
}

// ParseTraceparent parses a W3C traceparent header value,
// "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>" (lowercase hex). A later
// version may carry more fields after the flags, which are ignored; version ff,
// all-zero ids, uppercase hex or a malformed value give ok false. The context is
// marked Remote.
func ParseTraceparent(s string) (c SpanContext, ok bool) {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return SpanContext{}, false
	}
	var version [1]byte
	if !lowerHex(version[:], s[0:2]) || version[0] == 0xff {
		return SpanContext{}, false
	}
	if (version[0] == 0 && len(s) != 55) || (len(s) > 55 && s[55] != '-') {
		return SpanContext{}, false
	}
	var flags [1]byte
	if !lowerHex(c.TraceID[:], s[3:35]) || !lowerHex(c.SpanID[:], s[36:52]) || !lowerHex(flags[:], s[53:55]) {
		return SpanContext{}, false
	}
	c.Flags = flags[0]
	c.Remote = true
	if !c.IsValid() {
		return SpanContext{}, false
	}
	return c, true
}

// lowerHex decodes src (lowercase hex only, as W3C requires) into dst.
func lowerHex(dst []byte, src string) bool {
	for i := 0; i < len(src); i++ {
		if ch := src[i]; !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(src))
	return err == nil
}

// newTraceID and newSpanID draw random, non-zero ids from crypto/rand (or, should
// it ever fail, from a time-seeded math/rand: ids need not be secret, and tracing
// must never take the sidecar down).
func newTraceID() (id [16]byte) {
	for id == [16]byte{} {
		randomBytes(id[:])
	}
	return id
}

func newSpanID() (id [8]byte) {
	for id == [8]byte{} {
		randomBytes(id[:])
	}
	return id
}

var (
	fallbackMu  sync.Mutex
	fallbackRnd *mrand.Rand
)

func randomBytes(b []byte) {
	if _, err := rand.Read(b); err == nil {
		return
	}
	fallbackMu.Lock()
	defer fallbackMu.Unlock()
	if fallbackRnd == nil {
		fallbackRnd = mrand.New(mrand.NewSource(time.Now().UnixNano()))
	}
	fallbackRnd.Read(b)
}
