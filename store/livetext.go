package store

// LiveText stitches a watcher's text outputs into the running round's
// text, as a client should (offsets count bytes of the UTF-8 text): it
// drops a delta of an older attempt (a worker
// that lost its lease) and one it holds already (a repeat), starts the
// round over on a newer attempt (a takeover, or the model called again),
// and places a resume snapshot at its offset instead of appending it. A
// stored output of the round's turn ends the round: its message holds the
// text.
type LiveText struct {
	turn    string
	after   int64
	attempt int64
	text    []byte
}

// Add takes any output the watcher received, in order, and reports
// whether the round's text changed.
func (l *LiveText) Add(o Output) bool {
	if o.Type != OutputText {
		if o.Cursor > 0 && o.Turn == l.turn {
			// The round is over; the turn's next one follows this output,
			// and a late delta of the one before is dropped.
			*l = LiveText{turn: o.Turn, after: o.Cursor}
		}
		return false
	}
	if o.TextEnd == 0 { // no place known: it follows what came before
		if o.Turn != l.turn {
			*l = LiveText{turn: o.Turn}
		}
		l.text = append(l.text, o.Text...)
		return o.Text != ""
	}
	switch {
	case o.Turn == l.turn && o.TextAfter < l.after:
		return false // a round that is over
	case o.Turn != l.turn || o.TextAfter > l.after:
		*l = LiveText{turn: o.Turn, after: o.TextAfter, attempt: o.Attempt}
	case o.Attempt < l.attempt:
		return false // stale
	case o.Attempt > l.attempt:
		l.attempt, l.text = o.Attempt, l.text[:0]
	}
	start := o.TextEnd - int64(len(o.Text))
	have := int64(len(l.text))
	if o.TextEnd <= have || start > have || start < 0 {
		return false // held already, or past a gap it cannot fill
	}
	l.text = append(l.text, o.Text[have-start:]...)
	return true
}

// Turn is the turn whose round the text belongs to ("" before any).
func (l *LiveText) Turn() string { return l.turn }

// Text is the running round's text so far.
func (l *LiveText) Text() string { return string(l.text) }
