package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestEventNumbersArePerOrganization: what a client sees of the event log
// (an item's history) is numbered per organization without gaps, whatever
// another organization writes meanwhile, also under concurrent writers.
func TestEventNumbersArePerOrganization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	theirs, err := f.db.CreateItem(ctx, f.otherEngineer, "GLX", store.NewItem{Kind: store.KindTicket, Title: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	orgSeqs := func(orgID string) []int64 {
		t.Helper()
		rows, err := f.db.Pool().Query(ctx, `SELECT n.org_seq FROM events e JOIN event_numbers n USING (seq)
			WHERE e.organization_id = $1 ORDER BY n.org_seq`, orgID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var n int64
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			out = append(out, n)
		}
		return out
	}
	before := f.count(t, `SELECT count(*) FROM events WHERE organization_id = $1`, f.otherOrg.ID)
	// Acme writes a lot, from many writers at once.
	const writers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := f.db.CreateItem(ctx, f.engineer, "WEB", store.NewItem{Kind: store.KindTicket, Title: fmt.Sprintf("w%d-%d", w, i)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	title := "renamed"
	if _, err := f.db.UpdateItem(ctx, f.otherEngineer, theirs.Key, theirs.Version, store.ItemPatch{Title: &title}); err != nil {
		t.Fatal(err)
	}
	hist, err := f.db.ItemHistory(ctx, f.otherEngineer, theirs.Key)
	if err != nil {
		t.Fatal(err)
	}
	var seen []int64
	for _, e := range hist {
		seen = append(seen, e.Seq)
	}
	next := int64(before)
	if want := []int64{next, next + 1}; !slices.Equal(seen, want) {
		t.Fatalf("globex item history numbers %v, want %v (acme's %d writes must not show)", seen, want, writers*each)
	}
	raw, err := json.Marshal(hist[1])
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]any
	if err := json.Unmarshal(raw, &shown); err != nil || shown["seq"] != float64(next+1) {
		t.Fatalf("history entry %s, want seq %d", raw, next+1)
	}
	if _, err := f.db.NumberEvents(ctx, store.EventNumberBatch); err != nil {
		t.Fatal(err)
	}
	for name, orgID := range map[string]string{"acme": f.org.ID, "globex": f.otherOrg.ID} {
		got := orgSeqs(orgID)
		if want := f.count(t, `SELECT count(*) FROM events WHERE organization_id = $1`, orgID); len(got) != want {
			t.Fatalf("%s: %d of %d events numbered", name, len(got), want)
		}
		for i, n := range got {
			if n != int64(i+1) {
				t.Fatalf("%s event numbers %v: not 1..%d without gaps", name, got, len(got))
			}
		}
	}
}
