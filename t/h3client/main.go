// SPDX-License-Identifier: BSD-2-Clause

// An HTTP/3 client for the tests, with headers of their choosing (quic-go,
// Debian's golang-github-lucas-clemente-quic-go-dev): every request given
// is sent at once, as streams of one QUIC connection; then one line per
// request, in order: "<index> <protocol> <status> <body bytes>" or
// "<index> error <message>". The certificate is not checked.
//
//	h3client [-timeout 20s] 'URL[|name: value]...' ...
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lucas-clemente/quic-go/http3"
)

func get(c *http.Client, spec string) string {
	parts := strings.Split(spec, "|")
	req, err := http.NewRequest("GET", parts[0], nil)
	if err != nil {
		return "error " + err.Error()
	}
	for _, h := range parts[1:] {
		kv := strings.SplitN(h, ":", 2)
		if len(kv) != 2 {
			return "error bad header " + h
		}
		req.Header.Add(strings.TrimSpace(kv[0]), strings.TrimSpace(kv[1]))
	}
	resp, err := c.Do(req)
	if err != nil {
		return "error " + err.Error()
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("%s %d %d", resp.Proto, resp.StatusCode, n)
}

func main() {
	timeout := flag.Duration("timeout", 20*time.Second, "for all requests")
	flag.Parse()

	rt := &http3.RoundTripper{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}
	defer rt.Close()
	c := &http.Client{Transport: rt, Timeout: *timeout}

	out := make([]string, flag.NArg())
	var wg sync.WaitGroup
	for i, spec := range flag.Args() {
		wg.Add(1)
		go func(i int, spec string) {
			defer wg.Done()
			out[i] = get(c, spec)
		}(i, spec)
	}
	wg.Wait()

	failed := false
	for i, line := range out {
		fmt.Printf("%d %s\n", i, line)
		failed = failed || strings.HasPrefix(line, "error")
	}
	if failed {
		os.Exit(1)
	}
}
