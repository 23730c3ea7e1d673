package store

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"
)

// Vectors are stored as bytea: the float32 components, little-endian, of
// the L2-normalised vector, so that the cosine similarity of two vectors is
// their dot product. bytea needs no extension (pgvector is not everywhere)
// and is what a scan reads fastest: a vector of d dimensions is 4d bytes
// on the wire (real[] sends a 4-byte length before each component, plus an
// array header) and it is compared straight from the row's raw bytes,
// without decoding into a slice (see BenchmarkVectorDecode).

// encodeVector is the stored form of v: normalised, float32 little-endian.
func encodeVector(v []float32) []byte {
	n := normalized(v)
	b := make([]byte, 4*len(n))
	for i, x := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// decodeVector is the vector stored as b (tests and tools; the scan
// compares raw bytes).
func decodeVector(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// normalized is v scaled to length 1; nil when v is zero or not finite.
func normalized(v []float32) []float32 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 || math.IsInf(ss, 0) || math.IsNaN(ss) {
		return nil
	}
	inv := 1 / math.Sqrt(ss)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// dotBytes is the dot product of q with the stored vector b; ok is false
// when their dimensions differ.
func dotBytes(q []float32, b []byte) (float32, bool) {
	if len(b) != 4*len(q) {
		return 0, false
	}
	b = b[:4*len(q)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(q); i += 4 {
		o := 4 * i
		s0 += q[i] * math.Float32frombits(binary.LittleEndian.Uint32(b[o:]))
		s1 += q[i+1] * math.Float32frombits(binary.LittleEndian.Uint32(b[o+4:]))
		s2 += q[i+2] * math.Float32frombits(binary.LittleEndian.Uint32(b[o+8:]))
		s3 += q[i+3] * math.Float32frombits(binary.LittleEndian.Uint32(b[o+12:]))
	}
	for ; i < len(q); i++ {
		s0 += q[i] * math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return s0 + s1 + s2 + s3, true
}

// scoredID is a candidate of the semantic leg.
type scoredID struct {
	id  [16]byte
	sim float32
}

// topK keeps the k best candidates seen: a min-heap on similarity, so a
// candidate costs one comparison with the worst kept unless it enters.
type topK []scoredID

func (h topK) Len() int { return len(h) }
func (h topK) Less(i, j int) bool {
	if h[i].sim != h[j].sim {
		return h[i].sim < h[j].sim
	}
	return string(h[i].id[:]) > string(h[j].id[:])
}
func (h topK) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *topK) Push(x any)   { *h = append(*h, x.(scoredID)) }
func (h *topK) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// offer considers c for a set of at most k.
func (h *topK) offer(c scoredID, k int) {
	if len(*h) < k {
		heap.Push(h, c)
		return
	}
	if w := (*h)[0]; c.sim > w.sim || (c.sim == w.sim && string(c.id[:]) < string(w.id[:])) {
		(*h)[0] = c
		heap.Fix(h, 0)
	}
}

// best returns the kept ids as uuid strings, best first.
func (h *topK) best() []string {
	out := make([]string, len(*h))
	for i := len(*h) - 1; i >= 0; i-- {
		out[i] = uuidString(heap.Pop(h).(scoredID).id)
	}
	return out
}

// uuidString formats 16 bytes as a canonical uuid.
func uuidString(b [16]byte) string {
	const hexd = "0123456789abcdef"
	out := make([]byte, 36)
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexd[c>>4], hexd[c&15]
		j += 2
	}
	return string(out)
}

// rankVectors compares q with every stored vector of entityType and model
// in the read scope rs and returns the ids of the k most similar (positive
// similarity only), best first.
//
// The scan reads the scope's rows through the organization and project
// indexes of search_embeddings, in the binary protocol, and compares each
// vector from the row's raw bytes: no per-row allocation, one pass, and a
// heap of k. Its cost is linear in the scope's vectors: see
// BenchmarkSearchSemantic and docs/decisions.md for how far that goes.
func rankVectors(ctx context.Context, tx pgx.Tx, model, entityType string, q []float32, vs vectorScope, k int) ([]string, error) {
	rows, err := tx.Query(ctx, `
		SELECT entity_id, embedding FROM search_embeddings
		WHERE entity_type = $1 AND model = $2
		  AND ($3::bool OR organization_id = ANY($4::uuid[]) OR project_id = ANY($5::uuid[])
		       OR (project_id IS NULL AND organization_id = ANY($6::uuid[])))`,
		entityType, model, vs.all, nonNil(vs.organizations), nonNil(vs.projects), nonNil(vs.orgLevel))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	h := make(topK, 0, k)
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != 2 || len(raw[0]) != 16 {
			return nil, errors.New("unexpected row shape")
		}
		sim, ok := dotBytes(q, raw[1])
		if !ok || !(sim > 0) {
			continue
		}
		var c scoredID
		copy(c.id[:], raw[0])
		c.sim = sim
		h.offer(c, k)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return h.best(), nil
}
