package switchyard

// StateData is what a plugin keeps in its CycleState. Clone must return a deep
// enough copy that changing the copy (in AddPod/RemovePod, on a what-if fork) never
// changes the original: the SDK forks the state for every what-if item of a Filter
// call and for score-ahead's PreScore, and evaluates forks concurrently with reads of
// the original. This is kube-scheduler's framework.StateData contract.
type StateData interface {
	Clone() StateData
}

// CycleState is one plugin's state for one scheduling attempt, kept by the SDK from
// the cycle's start (CycleStart) to its end (CycleEnd). Each plugin has its own, so
// there are no keys: a plugin stores one value (usually at PreFilter) and reads it
// back in later calls of the same cycle.
//
// The SDK serialises access: calls that may write (PreFilter, PostFilter, PreScore,
// Reserve, Unreserve, Permit) hold the state exclusively; Filter, Score,
// NormalizeScore, PreBind, Bind and PostBind may run concurrently with each other
// and must only read it.
type CycleState struct {
	data StateData
}

// Write stores the plugin's value, replacing any earlier one.
func (s *CycleState) Write(v StateData) { s.data = v }

// Read returns the stored value, or nil when none was written (or PreFilter did not
// run for this cycle). Type-assert it to the plugin's own type.
func (s *CycleState) Read() StateData {
	if s == nil {
		return nil
	}
	return s.data
}

// Clone forks the state: the fork holds data.Clone(), so writes to either side are
// independent.
func (s *CycleState) Clone() *CycleState {
	if s == nil || s.data == nil {
		return &CycleState{}
	}
	return &CycleState{data: s.data.Clone()}
}
