package switchyard

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// PodField is a field of the pod a plugin's Signature may list (pb.PodField).
type PodField = pb.PodField

// The pod fields a Signature may list (proto/README.md, "Alike pods").
const (
	PodFieldNamespace     = pb.PodField_POD_FIELD_NAMESPACE
	PodFieldLabels        = pb.PodField_POD_FIELD_LABELS
	PodFieldAnnotations   = pb.PodField_POD_FIELD_ANNOTATIONS
	PodFieldSchedulerName = pb.PodField_POD_FIELD_SCHEDULER_NAME
	// PodFieldPriority is priority and priority_class_name.
	PodFieldPriority        = pb.PodField_POD_FIELD_PRIORITY
	PodFieldRequests        = pb.PodField_POD_FIELD_REQUESTS
	PodFieldTolerations     = pb.PodField_POD_FIELD_TOLERATIONS
	PodFieldNodeSelector    = pb.PodField_POD_FIELD_NODE_SELECTOR
	PodFieldOwnerReferences = pb.PodField_POD_FIELD_OWNER_REFERENCES
	PodFieldVolumeClaims    = pb.PodField_POD_FIELD_VOLUME_CLAIMS
	// PodFieldNone, alone, declares that Filter and Score read no field of the pod
	// (their answers depend on the Node object alone): every pod is alike. An empty
	// Signature declares nothing.
	PodFieldNone = pb.PodField_POD_FIELD_NONE
)

// ScoreNormalization says how a Score plugin's scores are normalised
// (pb.ScoreNormalization).
type ScoreNormalization = pb.ScoreNormalization

const (
	// ScoreNormalizationCustom is the plugin's own NormalizeScore (ScoreExtensions),
	// or none.
	ScoreNormalizationCustom = pb.ScoreNormalization_SCORE_NORMALIZATION_CUSTOM
	// ScoreNormalizationDefault is upstream's DefaultNormalizeScore(100, false): each
	// score times 100 over the highest.
	ScoreNormalizationDefault = pb.ScoreNormalization_SCORE_NORMALIZATION_DEFAULT
	// ScoreNormalizationDefaultReverse is DefaultNormalizeScore(100, true): 100 minus
	// that.
	ScoreNormalizationDefaultReverse = pb.ScoreNormalization_SCORE_NORMALIZATION_DEFAULT_REVERSE
)

func standardNormalization(k ScoreNormalization) bool {
	return k == ScoreNormalizationDefault || k == ScoreNormalizationDefaultReverse
}

// maxNodeScore is upstream's MaxNodeScore.
const maxNodeScore = 100

// NormalizeScores applies a standard normalisation to raw scores in place and
// returns true; for any other kind (ScoreNormalizationCustom) it returns false and
// leaves scores alone. Default: each score times 100 over the highest, divided
// toward zero; when the highest is 0 or less every score stays as it is. Reverse:
// 100 minus that (saturating), and all 100 when the highest is 0 or less. The
// scheduler applies switchyard_proto::normalize_scores to raw scores it reuses for
// alike pods, so this is that arithmetic to the bit, 128-bit intermediate and
// wrapping included, not only upstream's for scores in range.
func NormalizeScores(kind ScoreNormalization, scores []int64) bool {
	if !standardNormalization(kind) {
		return false
	}
	reverse := kind == ScoreNormalizationDefaultReverse
	var highest int64
	for _, s := range scores {
		if s > highest {
			highest = s
		}
	}
	for i, s := range scores {
		switch {
		case highest == 0 && reverse:
			scores[i] = maxNodeScore
		case highest == 0:
		case reverse:
			scores[i] = saturatingSub(maxNodeScore, scale(s, highest))
		default:
			scores[i] = scale(s, highest)
		}
	}
	return true
}

// scale is Rust's (100 * s as i128 / highest as i128) as i64 for highest > 0: the
// quotient truncated toward zero, then its low 64 bits.
func scale(s, highest int64) int64 {
	mag := uint64(s)
	if s < 0 {
		mag = -mag // two's complement: |MinInt64| = 1<<63 fits in a uint64
	}
	hi, lo := bits.Mul64(maxNodeScore, mag)
	d := uint64(highest)
	// Long division in two steps: hi may be >= d, which Div64 alone refuses. Only
	// the low word of the quotient survives the cast.
	q, _ := bits.Div64(hi%d, lo, d)
	if s < 0 {
		q = -q
	}
	return int64(q)
}

func saturatingSub(a, b int64) int64 {
	r := a - b
	switch {
	case b < 0 && r < a:
		return math.MaxInt64
	case b > 0 && r > a:
		return math.MinInt64
	}
	return r
}

// checkAlike refuses alike-pod declarations the scheduler could not use or that
// would be silently wrong.
func checkAlike(r *registered) error {
	none := false
	for _, f := range r.signature {
		if _, known := pb.PodField_name[int32(f)]; !known || f == pb.PodField_POD_FIELD_UNSPECIFIED {
			return fmt.Errorf("plugin %q: its Signature lists %v, which is no pod field this SDK knows: "+
				"list PodField constants (PodFieldNone when Filter and Score read no field of the pod)", r.name, f)
		}
		none = none || f == PodFieldNone
	}
	if none && len(r.signature) > 1 {
		return fmt.Errorf("plugin %q: its Signature lists PodFieldNone with other fields %v: "+
			"PodFieldNone alone means Filter and Score read no field of the pod", r.name, r.signature)
	}
	if len(r.signature) > 0 && !r.nodeLocal && !r.nodePods {
		return fmt.Errorf("plugin %q declares a Signature but not NodeLocal: answers reused across pods must "+
			"depend on the node alone (or, with SignatureNodePods, on the node and its pods) as well "+
			"(return true from NodeLocal if they do, else drop the Signature)", r.name)
	}
	if r.nodePods && len(r.signature) == 0 {
		return fmt.Errorf("plugin %q declares SignatureNodePods without a Signature: list the pod fields "+
			"its answers read ([]PodField{PodFieldNone} with SignatureLabelKeys)", r.name)
	}
	if len(r.labelKeys) > 0 && (!r.nodePods || r.nodeLocal) {
		return fmt.Errorf("plugin %q declares SignatureLabelKeys without SignatureNodePods, or with NodeLocal: "+
			"return true from SignatureNodePods and false from NodeLocal", r.name)
	}
	if r.podOnly && (!r.nodePods || r.nodeLocal) {
		return fmt.Errorf("plugin %q declares PreFilterPodOnly without SignatureNodePods, or with NodeLocal: "+
			"return true from SignatureNodePods (with a Signature) and false from NodeLocal", r.name)
	}
	switch k := r.normalization; {
	case k == ScoreNormalizationCustom:
	case !standardNormalization(k):
		return fmt.Errorf("plugin %q: unknown ScoreNormalization %v (ScoreNormalizationCustom, "+
			"ScoreNormalizationDefault or ScoreNormalizationDefaultReverse)", r.name, k)
	case r.score == nil:
		return fmt.Errorf("plugin %q declares ScoreNormalization %v but has no Score", r.name, k)
	case r.normalize != nil:
		return fmt.Errorf("plugin %q declares ScoreNormalization %v and implements NormalizeScore: the SDK "+
			"applies the standard one itself and would never call NormalizeScore; drop NormalizeScore, or the "+
			"declaration to keep your own", r.name, k)
	}
	return nil
}
