package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// postRequest is the POST of body to path under base, as
// http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(body))
// makes it, with the URL parsed once per endpoint (endpointURL) rather
// than on every call, and the body a reader of its own. The request gets
// its context from NewRequestWithContext, the one way to give it one
// without copying the request, called with no URL to parse; the empty URL
// it allocates takes a copy of the endpoint's, so that no request shares a
// URL another could change.
func postRequest(ctx context.Context, base, path string, body []byte) (*http.Request, error) {
	u, err := endpointURL(base, path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", nil)
	if err != nil {
		return nil, err
	}
	*req.URL, req.Host = *u, u.Host
	if len(body) == 0 {
		req.Body = http.NoBody
		req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
		return req, nil
	}
	req.Body, req.ContentLength = newMemBody(body), int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return newMemBody(body), nil }
	return req, nil
}

// memBody is a request body held in memory.
type memBody struct{ bytes.Reader }

func newMemBody(b []byte) *memBody {
	m := &memBody{}
	m.Reset(b)
	return m
}

// Close implements io.Closer; there is nothing to release.
func (*memBody) Close() error { return nil }

// endpointKey names an upstream endpoint: a credential's base URL and the
// path of an API under it.
type endpointKey struct{ base, path string }

// maxEndpointURLs bounds endpointURLs; credentials name few base URLs,
// and past this many the cache starts over.
const maxEndpointURLs = 1024

// endpointURLs holds the parsed URL of each upstream endpoint calls went
// to; requests take copies, and a URL in it is never modified.
var endpointURLs = struct {
	sync.RWMutex
	m map[endpointKey]*url.URL
}{m: map[endpointKey]*url.URL{}}

// endpointURL is base+path parsed as http.NewRequest parses a request's
// URL, an empty port dropped from its host.
func endpointURL(base, path string) (*url.URL, error) {
	k := endpointKey{base, path}
	endpointURLs.RLock()
	u := endpointURLs.m[k]
	endpointURLs.RUnlock()
	if u != nil {
		return u, nil
	}
	u, err := url.Parse(base + path)
	if err != nil {
		return nil, err
	}
	u.Host = strings.TrimSuffix(u.Host, ":") // an empty port: as NewRequest, after the last ']' at once
	endpointURLs.Lock()
	if len(endpointURLs.m) >= maxEndpointURLs {
		clear(endpointURLs.m)
	}
	endpointURLs.m[endpointKey{strings.Clone(base), strings.Clone(path)}] = u
	endpointURLs.Unlock()
	return u, nil
}
