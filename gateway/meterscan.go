package gateway

// scannedEvent is what scanMeterEvent reads of a message_start or a
// message_delta: the figures of message.usage and usage, and the stop
// reason of delta.
type scannedEvent struct {
	typ        string
	msgUsage   scannedUsage // message.usage
	usage      scannedUsage
	stopReason string
}

// scannedUsage holds the usage figures an event names, in the order of
// usageNames; present is set once a usage object was read.
type scannedUsage struct {
	present bool
	set     [4]bool
	v       [4]int64
}

// The members scanMeterEvent reads, at each level of the event.
var (
	eventNames = []string{"type", "message", "usage", "delta", "error"}
	msgNames   = []string{"usage"}
	deltaNames = []string{"stop_reason", "text", "partial_json", "thinking"}
	usageNames = []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}
)

// scanMeterEvent reads a message_start or message_delta event's data in one
// pass over its bytes, without decoding it. It answers only where its answer
// is surely what decoding with json.Unmarshal gives: the data is valid JSON
// of the everyday shape (names as written by the API, integer token counts,
// plain stop reasons, no error member, type message_start or message_delta).
// It returns false for anything else, and the caller decodes the event.
func scanMeterEvent(data []byte, e *scannedEvent) bool {
	s := scanner{data: data}
	return s.document(func(name int) bool {
		switch name {
		case 0:
			return s.plainString(&e.typ)
		case 1:
			return s.object(func(name int) bool { return s.usage(&e.msgUsage) }, msgNames)
		case 2:
			return s.usage(&e.usage)
		case 3:
			return s.object(func(name int) bool {
				var v string
				if !s.plainString(&v) {
					return false
				}
				if name == 0 {
					e.stopReason = v
				}
				return true
			}, deltaNames)
		}
		return false // an error member: decode the event
	}, eventNames) && (e.typ == "message_start" || e.typ == "message_delta")
}

// observeScanned is what observeDecoded does with the same event decoded.
func (m *meter) observeScanned(e *scannedEvent) {
	switch e.typ {
	case "message_start":
		m.applyScanned(&e.msgUsage)
	case "message_delta":
		if e.usage.present {
			m.sawDelta = true
		}
		m.applyScanned(&e.usage)
		if e.stopReason != "" {
			m.stopReason = e.stopReason
		}
	}
}

// applyScanned is apply (llm.UsageDelta.ApplyTo) for scanned figures.
func (m *meter) applyScanned(u *scannedUsage) {
	dst := [4]*int64{&m.usage.InputTokens, &m.usage.OutputTokens,
		&m.usage.CacheCreationInputTokens, &m.usage.CacheReadInputTokens}
	for k, set := range u.set {
		if set {
			*dst[k] = u.v[k]
			m.reported = m.reported || u.v[k] > 0
		}
	}
}

// usage reads a usage object into u: each figure an integer or null, as
// later members override earlier ones and a second object adds to the
// first.
func (s *scanner) usage(u *scannedUsage) bool {
	u.present = true
	return s.object(func(name int) bool {
		if s.literal("null") {
			u.set[name], u.v[name] = false, 0
			return true
		}
		n, ok := s.integer()
		u.set[name], u.v[name] = ok, n
		return ok
	}, usageNames)
}
