package switchyard

import (
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// The Permit Handle: allow or reject a waiting pod from any goroutine.

// Handle lets a Permit plugin decide later about pods it answered Wait for. It is
// safe for concurrent use and valid for the life of the sidecar.
type Handle struct{ svc *service }

// Allow lets plugin release the waiting pod uid. It returns false when the pod is
// not waiting on that plugin (already decided, timed out, its cycle ended, or its
// Wait not yet sent).
func (h *Handle) Allow(plugin, uid string) bool { return h.decide(plugin, uid, true, "") }

// Reject rejects the waiting pod uid: the scheduler unreserves it and retries it
// later. message says why.
func (h *Handle) Reject(plugin, uid, message string) bool {
	return h.decide(plugin, uid, false, message)
}

// WaitingPods returns the pods currently waiting on plugin.
func (h *Handle) WaitingPods(plugin string) []*Pod {
	var out []*Pod
	for _, s := range h.svc.allSessions() {
		s.waitMu.Lock()
		for _, w := range s.waiting {
			for _, p := range w.plugins {
				if p == plugin {
					out = append(out, w.pod)
					break
				}
			}
		}
		s.waitMu.Unlock()
	}
	return out
}

func (h *Handle) decide(plugin, uid string, allow bool, message string) bool {
	for _, s := range h.svc.allSessions() {
		s.waitMu.Lock()
		w := s.waiting[uid]
		found := -1
		if w != nil {
			for i, p := range w.plugins {
				if p == plugin {
					found = i
				}
			}
		}
		if found < 0 {
			s.waitMu.Unlock()
			continue
		}
		w.plugins = append(w.plugins[:found], w.plugins[found+1:]...)
		if !allow || len(w.plugins) == 0 {
			delete(s.waiting, uid)
		}
		ps := s.permit
		s.waitMu.Unlock()
		if ps == nil {
			return false
		}
		err := ps.send(&pb.PermitResponse{
			RequestId: 0,
			Decision:  &pb.WaitingPodDecision{PodUid: uid, Plugin: plugin, Allow: allow, Message: message},
		})
		return err == nil
	}
	return false
}

// ---------------------------------------------------------------- streams
