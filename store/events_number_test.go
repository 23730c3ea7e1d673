package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestEventNumbersAfterCommit: events are numbered after they commit, by
// any number of numberers at once, per organization 1..N without gaps or
// duplicates; a reader following the log sees the numbers in increasing
// order only, so reading "after the last seen" misses none; an event
// waits for its number.
func TestEventNumbersAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	numberAll(t, f.db) // the fixture's own events
	base := int64(f.count(t, `SELECT count(*) FROM events WHERE organization_id = $1`, f.org.ID))

	it, err := f.db.CreateItem(ctx, f.engineer, "WEB", store.NewItem{Kind: store.KindTicket, Title: "waits"})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, `SELECT count(*) FROM event_numbers n JOIN events e USING (seq) WHERE e.entity_id = $1`, it.ID); n != 0 {
		t.Fatalf("an event was numbered at commit (%d numbers); numbering is the numberer's", n)
	}
	if got, err := f.db.EventsAfter(ctx, f.org.ID, store.EventFilter{}, base, 0); err != nil || len(got) != 0 {
		t.Fatalf("EventsAfter before numbering = %d events, %v; want none", len(got), err)
	}
	if queued, err := f.db.EventsToNumber(ctx); err != nil || !queued {
		t.Fatalf("EventsToNumber = %v, %v; want true", queued, err)
	}
	got, err := f.db.NumberEvents(ctx, store.EventNumberBatch)
	if err != nil {
		t.Fatal(err)
	}
	if got.Events != 1 || got.Latest[f.org.ID] != base+1 {
		t.Fatalf("NumberEvents = %+v, want 1 event, acme at %d", got, base+1)
	}
	if queued, err := f.db.EventsToNumber(ctx); err != nil || queued {
		t.Fatalf("EventsToNumber after numbering = %v, %v; want false", queued, err)
	}
	if found, err := f.db.NumberQueuedEvents(ctx); err != nil || found {
		t.Fatalf("NumberQueuedEvents with nothing queued = %v, %v; want false", found, err)
	}
	if _, err := f.db.CreateItem(ctx, f.engineer, "WEB", store.NewItem{Kind: store.KindTicket, Title: "found"}); err != nil {
		t.Fatal(err)
	}
	if found, err := f.db.NumberQueuedEvents(ctx); err != nil || !found {
		t.Fatalf("NumberQueuedEvents with one queued = %v, %v; want true", found, err)
	}
	base++ // the reader below follows from that one on

	// Writers in both organizations, numberers and a reader at once.
	const writers, each, numberers = 6, 8, 3
	var wg, side, reading sync.WaitGroup
	stop, numberedAll := make(chan struct{}), make(chan struct{})
	var numbered atomic.Int64
	errs := make(chan error, writers*each+numberers+1)
	for range numberers {
		side.Add(1)
		go func() {
			defer side.Done()
			for {
				n, err := f.db.NumberEvents(ctx, 7) // small batches: many numberings interleave
				if err != nil {
					errs <- err
					return
				}
				numbered.Add(int64(n.Events))
				select {
				case <-stop:
					if n.Events == 0 {
						return
					}
				default:
				}
			}
		}()
	}
	var seen []int64
	reading.Add(1)
	go func() {
		defer reading.Done()
		last := base + 1
		for done := false; !done; {
			select {
			case <-numberedAll:
				done = true
			default:
			}
			evs, err := f.db.EventsAfter(ctx, f.org.ID, store.EventFilter{}, last, 0)
			if err != nil {
				errs <- err
				return
			}
			for _, e := range evs {
				seen = append(seen, e.Seq)
				last = e.Seq
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				caller, project := f.engineer, "WEB"
				if w%2 == 1 {
					caller, project = f.otherEngineer, "GLX"
				}
				if _, err := f.db.CreateItem(ctx, caller, project, store.NewItem{Kind: store.KindTicket, Title: fmt.Sprintf("w%d-%d", w, i)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	side.Wait()
	close(numberedAll)
	reading.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The reader's last read ran after the last numbering: it saw all.
	acme := int64(writers / 2 * each)
	if int64(len(seen)) != acme {
		t.Fatalf("the reader saw %d of acme's %d new events: %v", len(seen), acme, seen)
	}
	for i, n := range seen {
		if n != base+2+int64(i) {
			t.Fatalf("the reader saw numbers %v: not %d.. in order without gaps", seen, base+2)
		}
	}
	if numbered.Load() != writers*each {
		t.Fatalf("numberers numbered %d events, want %d (each once)", numbered.Load(), writers*each)
	}
	for name, org := range map[string]string{"acme": f.org.ID, "globex": f.otherOrg.ID} {
		events := f.count(t, `SELECT count(*) FROM events WHERE organization_id = $1`, org)
		distinct := f.count(t, `SELECT count(DISTINCT org_seq) FROM event_numbers WHERE organization_id = $1`, org)
		top := f.count(t, `SELECT COALESCE(max(org_seq), 0) FROM event_numbers WHERE organization_id = $1`, org)
		counter := f.count(t, `SELECT last_seq FROM organization_event_counters WHERE organization_id = $1`, org)
		if distinct != events || top != events || counter != events {
			t.Fatalf("%s: %d events, %d distinct numbers up to %d, counter %d: want all %d", name, events, distinct, top, counter, events)
		}
	}
}

// numberAll numbers every queued event, as the numberers of a running
// service would shortly.
func numberAll(t testing.TB, db *store.DB) {
	t.Helper()
	if _, err := db.NumberQueuedEvents(context.Background()); err != nil {
		t.Fatal(err)
	}
}
