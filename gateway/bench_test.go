package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/internal/cputime"
)

// BenchmarkGatewayOverhead streams the same answer from the fake upstream
// directly and through the gateway, at 1 and 200 concurrent streams, and
// reports per-call latency, time to first byte and the process's CPU time
// (getrusage: the client and the fake in both, the gateway too through it;
// not Postgres's share of the usage rows) beside ns/op. The fake shares
// the process and its GC here; `ballet bench gateway` runs it in a process
// of its own, as a real upstream is, which a Go benchmark cannot.
func BenchmarkGatewayOverhead(b *testing.B) {
	e := newEnv(b, fakellm.MustParse(`
loop: true
answers:
  - content: [{text: "Here is a streamed answer of a few hundred characters, cut into small pieces the way a model streams them. It carries no tool call, just text, so that what is measured is the relaying of events: reading each one from the upstream, metering it and flushing it to the caller."}]
    chunk_size: 16
    usage: {input_tokens: 50, output_tokens: 60}
`))
	body, _ := json.Marshal(hello(true))
	token := e.token(b)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	hc := &http.Client{Transport: tr}
	call := func(url string) (ttfb, total time.Duration, err error) {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		one := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, one); err != nil {
			return 0, 0, err
		}
		ttfb = time.Since(start)
		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, 0, err
		}
		if resp.StatusCode != 200 || !bytes.Contains(rest, []byte("message_stop")) {
			return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, rest)
		}
		return ttfb, time.Since(start), nil
	}
	for _, streams := range []int{1, 200} {
		for _, target := range []struct{ name, url string }{{"direct", e.fake.URL()}, {"gateway", e.url}} {
			b.Run(fmt.Sprintf("%s/streams=%d", target.name, streams), func(b *testing.B) {
				var ttfbSum, totalSum atomic.Int64
				run := func() {
					ttfb, total, err := call(target.url)
					if err != nil {
						b.Error(err)
						return
					}
					ttfbSum.Add(int64(ttfb))
					totalSum.Add(int64(total))
				}
				b.ResetTimer()
				cpu0 := cputime.Process()
				if streams == 1 {
					for b.Loop() {
						run()
					}
				} else {
					b.SetParallelism((streams + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							run()
						}
					})
				}
				b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(ttfbSum.Load())/float64(b.N), "ttfb-ns/call")
				b.ReportMetric(float64(totalSum.Load())/float64(b.N), "latency-ns/call")
			})
		}
	}
}
