package gateway

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// metrics are the gateway's Prometheus collectors.
type metrics struct {
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	retries  *prometheus.CounterVec
	// countTokens counts POST /v1/messages/count_tokens, which costs nothing
	// and is kept out of requests and tokens.
	countTokens *prometheus.CounterVec
	dropped     prometheus.Counter
	written     prometheus.Counter
	// models bounds the model label; nil keeps every name.
	models *modelLabels
	// http counts and times the gateway's requests; refusals among them.
	http *httpMetrics
	// upstream times each upstream attempt.
	upstream *upstreamMetrics
}

func newMetrics(reg prometheus.Registerer, pending func() float64) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ballet_llm_requests_total",
			Help: "Model calls served by the gateway, by final HTTP status.",
		}, []string{"organization", "project", "model", "status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ballet_llm_tokens_total",
			Help: "Tokens metered by the gateway (token_type input|output|cache_read|cache_write).",
		}, []string{"organization", "project", "model", "token_type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ballet_llm_upstream_retries_total",
			Help: "Upstream attempts retried after a connection error, 429 or 5xx before the first byte.",
		}, []string{"provider"}),
		countTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ballet_llm_count_tokens_total",
			Help: "Token counts served by the gateway (count exact|estimated, \"\" for a refusal), by final HTTP status.",
		}, []string{"organization", "project", "count", "status"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ballet_llm_usage_dropped_total",
			Help: "Usage rows dropped because the bounded buffer was full (Postgres unreachable for long).",
		}),
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ballet_llm_usage_written_total",
			Help: "Usage rows written to Postgres.",
		}),
	}
	for _, p := range []string{store.ProviderAnthropic, store.ProviderOpenAI} {
		m.retries.WithLabelValues(p) // the series start at 0
	}
	pendingGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ballet_llm_usage_pending",
		Help: "Usage rows buffered, not yet written to Postgres.",
	}, pending)
	m.upstream = newUpstreamMetrics()
	for _, c := range append([]prometheus.Collector{m.requests, m.tokens, m.retries, m.countTokens, m.dropped, m.written, pendingGauge},
		m.upstream.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: register metrics: %w", err)
		}
	}
	var err error
	if m.http, err = newHTTPMetrics(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// observe counts one finished call.
func (m *metrics) observe(org, project, model string, status int, u llm.Usage) {
	model = m.models.label(model, status >= 200 && status <= 299)
	m.requests.WithLabelValues(org, project, model, strconv.Itoa(status)).Inc()
	for _, t := range []struct {
		typ string
		n   int64
	}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"cache_read", u.CacheReadInputTokens}, {"cache_write", u.CacheCreationInputTokens}} {
		if t.n > 0 {
			m.tokens.WithLabelValues(org, project, model, t.typ).Add(float64(t.n))
		}
	}
}

// meter reads usage from the Anthropic events of one answer as they pass,
// without holding them.
type meter struct {
	usage      llm.Usage
	reported   bool // some usage figure came from upstream
	sawDelta   bool // message_delta's usage seen: output is final
	outChars   int
	stopReason string
	errType    string // type of an error event, if one came
	errMessage string
}

func (m *meter) apply(u *llm.UsageDelta) {
	if u.ApplyTo(&m.usage) {
		m.reported = true
	}
}

// meterEvent is what the meter reads of an event. Message and Delta are
// values, not pointers: nothing tells an absent one from an empty one, and
// each pointer would cost an allocation per event.
type meterEvent struct {
	Type    string `json:"type"`
	Message struct {
		Usage *llm.UsageDelta `json:"usage"`
	} `json:"message"`
	Usage *llm.UsageDelta `json:"usage"`
	Delta struct {
		StopReason  string `json:"stop_reason"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	} `json:"delta"`
	Error *llm.ErrorDetail `json:"error"`
}

// observe reads one event.
func (m *meter) observe(ev sse.Event) {
	switch ev.Name {
	case "message_start", "message_delta", "content_block_delta", "error":
	case "":
	default:
		return
	}
	var e meterEvent
	if !decodeMeterEvent(ev.Data, &e) {
		return
	}
	m.observeDecoded(&e)
}

// observeMessage reads the usage of a JSON answer.
func (m *meter) observeMessage(body []byte) {
	var msg struct {
		StopReason string          `json:"stop_reason"`
		Usage      *llm.UsageDelta `json:"usage"`
		Content    json.RawMessage `json:"content"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return
	}
	m.apply(msg.Usage)
	m.sawDelta = msg.Usage != nil
	m.stopReason = msg.StopReason
	m.outChars = len(msg.Content)
}

// final returns the usage to record, estimating at four characters per
// token what the upstream did not report.
func (m *meter) final(inputChars int) (llm.Usage, bool) {
	u := m.usage
	estimated := false
	if !m.reported {
		u.InputTokens = int64(estimateTokens(inputChars))
		estimated = true
	}
	if !m.sawDelta {
		if est := int64(estimateTokens(m.outChars)); est > u.OutputTokens {
			u.OutputTokens = est
		}
		estimated = true
	}
	return u, estimated
}

// estimateTokens is the gateway's estimate: about four characters a token.
func estimateTokens(chars int) int { return (chars + 3) / 4 }
