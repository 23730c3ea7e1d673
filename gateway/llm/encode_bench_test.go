package llm

import "testing"

// BenchmarkEncodeRequest encodes one model request: encoding/json with the
// old block encoding against the jsonv2 token encoder with the tools
// cache.
//
//	go test ./gateway/llm -run '^$' -bench EncodeRequest -benchmem
func BenchmarkEncodeRequest(b *testing.B) {
	req := benchRequest(b)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := refEncode(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jsonv2", func(b *testing.B) {
		c := &Client{}
		b.ReportAllocs()
		for range b.N {
			buf, err := c.encodeRequest(&req)
			if err != nil {
				b.Fatal(err)
			}
			putBodyBuf(buf)
		}
	})
}
