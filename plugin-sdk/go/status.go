package switchyard

import (
	"fmt"
	"strings"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// Code is a status code with kube-scheduler's meaning.
type Code int32

const (
	// Success: the pod passes (the zero value, and what a nil *Status means).
	Success Code = Code(pb.Code_SUCCESS)
	// Error: something went wrong; the attempt fails and the pod is retried.
	Error Code = Code(pb.Code_ERROR)
	// Unschedulable: the pod does not fit, but preemption might help.
	Unschedulable Code = Code(pb.Code_UNSCHEDULABLE)
	// UnschedulableAndUnresolvable: the pod does not fit and preemption cannot help.
	UnschedulableAndUnresolvable Code = Code(pb.Code_UNSCHEDULABLE_AND_UNRESOLVABLE)
	// Wait (Permit only): hold the pod until allowed, rejected or timed out.
	Wait Code = Code(pb.Code_WAIT)
	// Skip: skip this plugin's later calls for this pod (PreFilter, PreScore), or
	// pass the pod to the next bind plugin (Bind).
	Skip Code = Code(pb.Code_SKIP)
	// Pending: the pod waits for something outside the scheduler.
	Pending Code = Code(pb.Code_PENDING)
)

func (c Code) String() string {
	if s, ok := pb.Code_name[int32(c)]; ok {
		return s
	}
	return fmt.Sprintf("Code(%d)", int32(c))
}

// Status is a plugin's verdict. As in kube-scheduler, a nil *Status is Success, so
// a plugin returns nil when the pod passes.
type Status struct {
	Code Code
	// Reasons are shown to users (events, kubectl describe): keep them short.
	Reasons []string
}

// NewStatus returns a status with a code and reasons.
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{Code: code, Reasons: reasons}
}

// Errorf returns an Error status: the attempt fails and the pod is retried with
// backoff.
func Errorf(format string, args ...interface{}) *Status {
	return NewStatus(Error, fmt.Sprintf(format, args...))
}

// NewUnschedulable returns an Unschedulable status (preemption may help).
func NewUnschedulable(reason string) *Status { return NewStatus(Unschedulable, reason) }

// NewUnresolvable returns an UnschedulableAndUnresolvable status (preemption
// cannot help).
func NewUnresolvable(reason string) *Status {
	return NewStatus(UnschedulableAndUnresolvable, reason)
}

// NewSkip returns a Skip status.
func NewSkip() *Status { return &Status{Code: Skip} }

// NewWait returns a Wait status (Permit).
func NewWait() *Status { return &Status{Code: Wait} }

// IsSuccess reports whether s is nil or has the Success code.
func (s *Status) IsSuccess() bool { return s == nil || s.Code == Success }

// Message joins the reasons, as kube-scheduler prints a status.
func (s *Status) Message() string {
	if s == nil {
		return ""
	}
	return strings.Join(s.Reasons, ", ")
}

// CodeOf returns the code of s (Success for nil).
func (s *Status) CodeOf() Code {
	if s == nil {
		return Success
	}
	return s.Code
}

func (s *Status) String() string {
	if s == nil {
		return "Success"
	}
	if len(s.Reasons) == 0 {
		return s.Code.String()
	}
	return s.Code.String() + ": " + s.Message()
}

// toPB converts to the wire form. A code outside the enum becomes an Error, so a
// plugin bug cannot put an unknown code on the wire (the scheduler would reject it).
func (s *Status) toPB() *pb.Status {
	if s == nil {
		return &pb.Status{Code: pb.Code_SUCCESS}
	}
	if _, ok := pb.Code_name[int32(s.Code)]; !ok {
		return &pb.Status{Code: pb.Code_ERROR, Reasons: append([]string{fmt.Sprintf("plugin returned unknown status code %d", s.Code)}, s.Reasons...)}
	}
	return &pb.Status{Code: pb.Code(s.Code), Reasons: append([]string(nil), s.Reasons...)}
}

// statusFromPB converts from the wire form; unknown codes read as Error.
func statusFromPB(s *pb.Status) *Status {
	if s == nil {
		return nil
	}
	code := Code(s.GetCode())
	if _, ok := pb.Code_name[int32(code)]; !ok {
		code = Error
	}
	return &Status{Code: code, Reasons: append([]string(nil), s.GetReasons()...)}
}
