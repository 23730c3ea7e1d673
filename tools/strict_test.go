package tools_test

import (
	"testing"
)

// TestInputKeysAreExact checks that a tool input's keys must be spelled as
// the schema says: a key in another case or given twice, at any depth, is
// an error result that names it, and nothing is written.
func TestInputKeysAreExact(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		name, tool, input string
		want              []string
	}{
		{"upper case key", "create_knowledge", `{"KIND":"note","TITLE":"t","BODY":"b"}`, []string{"invalid input", "'BODY'", "'KIND'", "'TITLE'"}},
		{"one key in another case", "get_item", `{"Key":"WEB-3"}`, []string{"invalid input", "'Key' not allowed"}},
		{"duplicate key", "create_knowledge", `{"kind":"note","title":"a","body":"b","title":"c"}`, []string{"invalid input", `duplicate field "title"`}},
		{"duplicate of a required key", "get_item", `{"key":"WEB-3","key":"WEB-4"}`, []string{`duplicate field "key"`}},
		{"duplicate in an operation", "propose_changeset",
			`{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"a","title":"b"}}]}`,
			[]string{`duplicate field "title"`, "/operations/0/create"}},
		{"case in an operation", "propose_changeset",
			`{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","Title":"a"}}]}`,
			[]string{"/operations/0/create", "'Title' not allowed"}},
		{"duplicate in update", "update_knowledge", `{"id":"00000000-0000-0000-0000-000000000000","version":1,"version":2,"title":"t"}`,
			[]string{`duplicate field "version"`}},
	}
	rows := func() int {
		return f.count(t, `SELECT count(*) FROM changesets`) + f.count(t, `SELECT count(*) FROM knowledge_entries`) +
			f.count(t, `SELECT count(*) FROM events`)
	}
	before := rows()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.fails(t, f.engineer, tc.tool, tc.input, tc.want...)
		})
	}
	if after := rows(); after != before {
		t.Errorf("refused calls wrote %d rows", after-before)
	}
	f.noInternalErrors(t)
}
