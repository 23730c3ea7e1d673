-- +goose Up
-- A claim's write of the session row changes only its lease and cursor, but
-- it was never a HOT update: planner_sessions_leased_idx has lease_owner as
-- its key and in its predicate, so taking the lease inserted the new row
-- version into every index of the table (its key, the sessions list's). The
-- index served one read, the sweeper's ForgetWorkers, which now finds a
-- worker's leases through the running turns (planner_turns_running_idx): a
-- session holds a lease exactly while one of its turns runs (a claim takes
-- both in one statement; a running turn's end releases the lease in its
-- transaction). Without it a claim's update, a lease renewal, a hand-back
-- and an update that only moves the cursor are HOT when the new version fits
-- on its page, which the lower fillfactor leaves room for (it applies to
-- pages filled from now on).
DROP INDEX planner_sessions_leased_idx;
ALTER TABLE planner_sessions SET (fillfactor = 70);

-- +goose Down
ALTER TABLE planner_sessions RESET (fillfactor);
CREATE INDEX planner_sessions_leased_idx ON planner_sessions (lease_owner) WHERE lease_owner IS NOT NULL;
