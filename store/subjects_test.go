package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestConcurrentBindingsOfNewSubject binds many roles to one subject that
// does not exist yet, all at once: every binding is made and the subject
// gets exactly one row.
func TestConcurrentBindingsOfNewSubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	const n = 24
	var projects []store.Project
	org, err := db.CreateOrganization(ctx, "acme", "Acme", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p, err := db.CreateProject(ctx, org.ID, fmt.Sprintf("P%d", i), "P", store.SystemActor())
		if err != nil {
			t.Fatal(err)
		}
		projects = append(projects, p)
	}
	for round := range 5 {
		subject := fmt.Sprintf("newcomer-%d", round)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = db.CreateRoleBinding(ctx, subject, store.RoleViewer,
					store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: projects[i].ID}, store.SystemActor())
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d binding %d: %v", round, i, err)
			}
		}
		var subjects, bindings int
		if err := db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM subjects WHERE id = $1),
			(SELECT count(*) FROM role_bindings WHERE subject = $1)`, subject).Scan(&subjects, &bindings); err != nil {
			t.Fatal(err)
		}
		if subjects != 1 || bindings != n {
			t.Fatalf("round %d: %d subject rows and %d bindings, want 1 and %d", round, subjects, bindings, n)
		}
	}
}

// TestEnsureSubjectKeepsTheFirstRow returns the stored row on a second call
// and refuses ids that Postgres or the limit cannot hold.
func TestEnsureSubjectKeepsTheFirstRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	first, err := db.EnsureSubject(ctx, store.Subject{ID: "ann", DisplayName: "Ann", Email: "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := db.EnsureSubject(ctx, store.Subject{ID: "ann", DisplayName: "Someone else"})
	if err != nil {
		t.Fatal(err)
	}
	if again.DisplayName != "Ann" || again.Email != "ann@example.com" || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("second call %+v, want the first row %+v", again, first)
	}
	for name, id := range map[string]string{"empty": "", "NUL": "a\x00b", "too long": strings.Repeat("a", 256), "bad UTF-8": "a\xffb"} {
		t.Run(name, func(t *testing.T) {
			if _, err := db.EnsureSubject(ctx, store.Subject{ID: id}); !store.IsCode(err, store.CodeInvalid) {
				t.Fatalf("error %v, want invalid", err)
			}
		})
	}
}
