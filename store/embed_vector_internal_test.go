package store

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestRankHelpers: the stored form round-trips normalised, the raw-bytes
// dot product is the cosine, and topK keeps the k best, best first.
func TestRankHelpers(t *testing.T) {
	t.Parallel()
	v := []float32{3, 4}
	if got := decodeVector(encodeVector(v)); math.Abs(float64(got[0])-0.6) > 1e-6 || math.Abs(float64(got[1])-0.8) > 1e-6 {
		t.Fatalf("decoded %v", got)
	}
	for _, bad := range [][]float32{{0, 0}, {float32(math.Inf(1)), 1}, {float32(math.NaN())}} {
		if b := encodeVector(bad); len(b) != 0 {
			t.Fatalf("encoded %v as %d bytes", bad, len(b))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	q := normalized([]float32{1, 2, 3, 4, 5, 6, 7})
	type cand struct {
		id  [16]byte
		sim float32
	}
	var all []cand
	h := make(topK, 0, 5)
	for i := range 200 {
		w := make([]float32, 7)
		for j := range w {
			w[j] = float32(r.NormFloat64())
		}
		sim, ok := dotBytes(q, encodeVector(w))
		var want float64
		n := normalized(w)
		for j := range q {
			want += float64(q[j]) * float64(n[j])
		}
		if !ok || math.Abs(float64(sim)-want) > 1e-5 {
			t.Fatalf("dot = %v, %v; want %v", sim, ok, want)
		}
		var id [16]byte
		id[15] = byte(i)
		all = append(all, cand{id, sim})
		h.offer(scoredID{id: id, sim: sim}, 5)
	}
	if _, ok := dotBytes(q, make([]byte, 8)); ok {
		t.Fatal("dimensions differ, yet compared")
	}
	sort.Slice(all, func(i, j int) bool { return all[i].sim > all[j].sim })
	var want []string
	for _, c := range all[:5] {
		want = append(want, uuidString(c.id))
	}
	if got := h.best(); !slices.Equal(got, want) {
		t.Fatalf("top = %v, want %v", got, want)
	}
	if s := uuidString([16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}); s != "12345678-9abc-def0-0102-030405060708" {
		t.Fatalf("uuid %s", s)
	}
}
