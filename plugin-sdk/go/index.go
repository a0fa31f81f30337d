package switchyard

// Indexes the replica keeps current as deltas arrive, so a plugin that looks at the
// whole cluster (a quota, a gang, rack locality) reads a count in its PreFilter or
// PreScore instead of scanning every pod of the cluster in every cycle. A plugin
// declares the indexes it reads (IndexesPlugin); the SDK builds them when the full
// snapshot arrives and updates them with each pod and node a delta adds, moves or
// removes. The same indexes as the Rust SDK's Index.

// IndexKind is what an Index counts.
type IndexKind int

const (
	// PodsByLabel: placed pods by the value of pod label Key, per node
	// (Snapshot.PodsByLabel). Pods without the label are not counted.
	PodsByLabel IndexKind = iota + 1
	// PodsByNamespace: placed pods by namespace, per node (Snapshot.PodsByNamespace).
	PodsByNamespace
	// NodesByLabel: nodes by the value of node label Key (Snapshot.NodesByLabel).
	NodesByLabel
	// PodListsByLabel: the placed pods themselves by namespace and the value of pod
	// label Key (Snapshot.PodListsByLabel): the members of a gang or a job, to tell
	// which are placed and where. Pods without the label are not listed.
	PodListsByLabel
)

// Index is one index a plugin reads.
type Index struct {
	Kind IndexKind
	Key  string // the label, for PodsByLabel, NodesByLabel and PodListsByLabel
}

// IndexesPlugin declares the indexes of the replica the plugin reads.
type IndexesPlugin interface {
	Plugin
	Indexes() []Index
}

// PodCounts counts placed pods per node for each value of one key (a label's
// value, a namespace).
type PodCounts struct {
	byValue map[string]*valueCounts
}

type valueCounts struct {
	total  uint64
	byNode map[uint32]uint32
}

func newPodCounts() *PodCounts { return &PodCounts{byValue: map[string]*valueCounts{}} }

// Total is the number of pods with value in the whole replica.
func (c *PodCounts) Total(value string) uint64 {
	if v := c.byValue[value]; v != nil {
		return v.total
	}
	return 0
}

// OnNode is the number of pods with value on node nodeID.
func (c *PodCounts) OnNode(value string, nodeID uint32) uint32 {
	if v := c.byValue[value]; v != nil {
		return v.byNode[nodeID]
	}
	return 0
}

// Nodes calls f with each node holding pods with value and how many (in no order):
// as many calls as nodes hold them, however large the cluster.
func (c *PodCounts) Nodes(value string, f func(nodeID uint32, count uint32)) {
	if v := c.byValue[value]; v != nil {
		for n, k := range v.byNode {
			f(n, k)
		}
	}
}

// Values calls f with each value counted and its total.
func (c *PodCounts) Values(f func(value string, total uint64)) {
	for k, v := range c.byValue {
		f(k, v.total)
	}
}

func (c *PodCounts) add(value string, node uint32) {
	v := c.byValue[value]
	if v == nil {
		v = &valueCounts{byNode: map[uint32]uint32{}}
		c.byValue[value] = v
	}
	v.total++
	v.byNode[node]++
}

func (c *PodCounts) remove(value string, node uint32) {
	v := c.byValue[value]
	if v == nil {
		return
	}
	if v.total > 0 {
		v.total--
	}
	if k, ok := v.byNode[node]; ok {
		if k <= 1 {
			delete(v.byNode, node)
		} else {
			v.byNode[node] = k - 1
		}
	}
	if v.total == 0 {
		delete(c.byValue, value)
	}
}

// NodeSets holds nodes by the value of one node label.
type NodeSets struct {
	byValue map[string][]uint32
	count   int
}

func newNodeSets() *NodeSets { return &NodeSets{byValue: map[string][]uint32{}} }

// Count is how many nodes carry the label (any value).
func (s *NodeSets) Count() int { return s.count }

// Nodes returns the ids of the nodes whose label has value. Read-only.
func (s *NodeSets) Nodes(value string) []uint32 { return s.byValue[value] }

// Values calls f with each value and its nodes (read-only).
func (s *NodeSets) Values(f func(value string, nodes []uint32)) {
	for k, v := range s.byValue {
		f(k, v)
	}
}

func (s *NodeSets) add(value string, node uint32) {
	s.byValue[value] = append(s.byValue[value], node)
	s.count++
}

func (s *NodeSets) remove(value string, node uint32) {
	v := s.byValue[value]
	for i, n := range v {
		if n == node {
			v[i] = v[len(v)-1]
			v = v[:len(v)-1]
			s.count--
			break
		}
	}
	if len(v) == 0 {
		delete(s.byValue, value)
	} else {
		s.byValue[value] = v
	}
}

// PodLists holds placed pods by namespace and the value of one pod label.
type PodLists struct {
	// namespace -> value -> pods by UID
	byNamespace map[string]map[string]map[string]*Pod
}

func newPodLists() *PodLists { return &PodLists{byNamespace: map[string]map[string]map[string]*Pod{}} }

// namespaceOrDefault: a pod without a namespace is in "default", as the API server
// defaults it.
func namespaceOrDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// Pods calls f with each placed pod in namespace whose label has value (in no
// order). An empty namespace means "default".
func (l *PodLists) Pods(namespace, value string, f func(*Pod)) {
	for _, p := range l.byNamespace[namespaceOrDefault(namespace)][value] {
		f(p)
	}
}

// Count is how many placed pods in namespace have value.
func (l *PodLists) Count(namespace, value string) int {
	return len(l.byNamespace[namespaceOrDefault(namespace)][value])
}

// Values calls f with each (namespace, value) listed and how many pods.
func (l *PodLists) Values(f func(namespace, value string, count int)) {
	for ns, values := range l.byNamespace {
		for v, m := range values {
			f(ns, v, len(m))
		}
	}
}

func (l *PodLists) add(value string, p *Pod) {
	ns := namespaceOrDefault(p.GetNamespace())
	values := l.byNamespace[ns]
	if values == nil {
		values = map[string]map[string]*Pod{}
		l.byNamespace[ns] = values
	}
	m := values[value]
	if m == nil {
		m = map[string]*Pod{}
		values[value] = m
	}
	m[p.GetUid()] = p
}

func (l *PodLists) remove(value string, p *Pod) {
	ns := namespaceOrDefault(p.GetNamespace())
	values := l.byNamespace[ns]
	if m := values[value]; m != nil {
		delete(m, p.GetUid())
		if len(m) == 0 {
			delete(values, value)
		}
	}
	if values != nil && len(values) == 0 {
		delete(l.byNamespace, ns)
	}
}

// indexes are one replica's indexes.
type indexes struct {
	podsByLabel     map[string]*PodCounts
	podsByNamespace *PodCounts
	nodesByLabel    map[string]*NodeSets
	podListsByLabel map[string]*PodLists
}

// declare adds index (empty: the caller fills it); false when already declared or
// unknown.
func (x *indexes) declare(i Index) bool {
	switch i.Kind {
	case PodsByLabel:
		if x.podsByLabel == nil {
			x.podsByLabel = map[string]*PodCounts{}
		}
		if _, ok := x.podsByLabel[i.Key]; ok {
			return false
		}
		x.podsByLabel[i.Key] = newPodCounts()
	case PodsByNamespace:
		if x.podsByNamespace != nil {
			return false
		}
		x.podsByNamespace = newPodCounts()
	case NodesByLabel:
		if x.nodesByLabel == nil {
			x.nodesByLabel = map[string]*NodeSets{}
		}
		if _, ok := x.nodesByLabel[i.Key]; ok {
			return false
		}
		x.nodesByLabel[i.Key] = newNodeSets()
	case PodListsByLabel:
		if x.podListsByLabel == nil {
			x.podListsByLabel = map[string]*PodLists{}
		}
		if _, ok := x.podListsByLabel[i.Key]; ok {
			return false
		}
		x.podListsByLabel[i.Key] = newPodLists()
	default:
		return false
	}
	return true
}

// clear empties every index, keeping the declarations.
func (x *indexes) clear() {
	for k := range x.podsByLabel {
		x.podsByLabel[k] = newPodCounts()
	}
	if x.podsByNamespace != nil {
		x.podsByNamespace = newPodCounts()
	}
	for k := range x.nodesByLabel {
		x.nodesByLabel[k] = newNodeSets()
	}
	for k := range x.podListsByLabel {
		x.podListsByLabel[k] = newPodLists()
	}
}

// pod notes a pod placed on node (add) or taken off it.
func (x *indexes) pod(p *Pod, node uint32, add bool) {
	for key, c := range x.podsByLabel {
		if v, ok := p.GetLabels()[key]; ok {
			if add {
				c.add(v, node)
			} else {
				c.remove(v, node)
			}
		}
	}
	if c := x.podsByNamespace; c != nil {
		if add {
			c.add(p.GetNamespace(), node)
		} else {
			c.remove(p.GetNamespace(), node)
		}
	}
	for key, l := range x.podListsByLabel {
		if v, ok := p.GetLabels()[key]; ok {
			if add {
				l.add(v, p)
			} else {
				l.remove(v, p)
			}
		}
	}
}

// node notes a node added (add) or removed, with the labels it has then.
func (x *indexes) node(n *Node, add bool) {
	for key, s := range x.nodesByLabel {
		if v, ok := n.GetLabels()[key]; ok {
			if add {
				s.add(v, n.GetId())
			} else {
				s.remove(v, n.GetId())
			}
		}
	}
}

// DeclareIndex keeps index from now on (built at once from what the replica
// holds); the SDK declares every IndexesPlugin's indexes.
func (s *Snapshot) DeclareIndex(i Index) {
	if !s.indexes.declare(i) {
		return
	}
	s.indexes.clear()
	for _, ni := range s.nodes {
		s.indexes.node(ni.Node, true)
		for _, p := range ni.Pods {
			s.indexes.pod(p, ni.Node.GetId(), true)
		}
	}
}

// WithIndexes declares indexes and returns the replica (for plugin unit tests).
func (s *Snapshot) WithIndexes(indexes ...Index) *Snapshot {
	for _, i := range indexes {
		s.DeclareIndex(i)
	}
	return s
}

// PodsByLabel is the placed pods per node by the value of pod label key, or nil when
// no plugin declared Index{PodsByLabel, key}.
func (s *Snapshot) PodsByLabel(key string) *PodCounts { return s.indexes.podsByLabel[key] }

// PodsByNamespace is the placed pods per node by namespace, or nil when no plugin
// declared Index{Kind: PodsByNamespace}.
func (s *Snapshot) PodsByNamespace() *PodCounts { return s.indexes.podsByNamespace }

// NodesByLabel is the nodes by the value of node label key, or nil when no plugin
// declared Index{NodesByLabel, key}.
func (s *Snapshot) NodesByLabel(key string) *NodeSets { return s.indexes.nodesByLabel[key] }

// pluginIndexes is every index the plugins declare.
func pluginIndexes(plugins []Plugin) []Index {
	var out []Index
	for _, p := range plugins {
		if ip, ok := p.(IndexesPlugin); ok {
			out = append(out, ip.Indexes()...)
		}
	}
	return out
}

// PodListsByLabel is the placed pods by namespace and the value of pod label key, or
// nil when no plugin declared Index{PodListsByLabel, key}.
func (s *Snapshot) PodListsByLabel(key string) *PodLists { return s.indexes.podListsByLabel[key] }
