// Command goserver is the benchmark's fixture: a minimal HTTP server and a
// tight-loop client, standard library only.
//
//	goserver -mode http  -addr 127.0.0.1:8080   net/http, every request gets 200 "ok\n"
//	goserver -mode raw   -addr 127.0.0.1:8080   bare TCP: one fixed response per request head read
//	goserver -mode blast -addr 127.0.0.1:8080 -conns 64 -duration 5s [-rate 100000]
//	goserver -mode grpc  -addr 127.0.0.1:8080   gRPC unary over h2c (prior knowledge): status OK, "ok"
//	goserver -mode blast -grpc ...              unary calls to it, all on one HTTP/2 connection
//
// blast opens -conns keep-alive connections and, on each, writes one request
// and reads its response in a loop, one request in flight per connection.
// With -rate > 0 the requests leave on a fixed schedule (-rate requests/s in
// all: an open loop as long as the connections keep up) and latency is also
// measured from the scheduled time; with -rate 0 they go as fast as the
// server answers. It prints one JSON line: {"requests":N,"errors":N,
// "seconds":S,"service_ms":{p50,p90,p99,max},"corrected_ms":{…}}. The
// benchmark uses it as a cheap open-loop load (--loadgen blast) and, with
// raw, to feed ringtail's ring buffer as fast as the machine allows.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

var (
	request  = []byte("GET /bench HTTP/1.1\r\nHost: bench\r\nUser-Agent: ringtail-bench\r\n\r\n")
	response = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
	headEnd  = []byte("\r\n\r\n")
)

func main() {
	mode := flag.String("mode", "http", "http, raw or blast")
	addr := flag.String("addr", "127.0.0.1:8080", "listen (http, raw) or connect (blast) address")
	conns := flag.Int("conns", 64, "blast: connections")
	duration := flag.Duration("duration", 5*time.Second, "blast: how long")
	rate := flag.Float64("rate", 0, "blast: total requests/s; 0 = as fast as possible")
	useTLS := flag.Bool("tls", false, "blast: connect with TLS (the certificate is not verified)")
	useGRPC := flag.Bool("grpc", false, "blast: gRPC unary calls over h2c, -conns streams at a time on one connection")
	flag.Parse()
	var err error
	switch *mode {
	case "http":
		err = serveHTTP(*addr)
	case "raw":
		err = serveRaw(*addr)
	case "grpc":
		err = serveGRPC(*addr)
	case "blast":
		err = blast(*addr, *conns, *duration, *rate, *useTLS, *useGRPC)
	default:
		err = fmt.Errorf("unknown -mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	}
}

func serveHTTP(addr string) error {
	ok := []byte("ok\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(ok)
	})
	return http.ListenAndServe(addr, h)
}

// grpcFrame is a gRPC length-prefixed message: uncompressed, `p` as is.
func grpcFrame(p []byte) []byte {
	f := make([]byte, 5+len(p))
	binary.BigEndian.PutUint32(f[1:5], uint32(len(p)))
	copy(f[5:], p)
	return f
}

// serveGRPC answers every call as a gRPC unary method would: one message,
// then the trailers with grpc-status 0. Plain net/http, prior-knowledge
// HTTP/2 only (as gRPC's insecure channels speak it).
func serveGRPC(addr string) error {
	reply := grpcFrame([]byte("ok"))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		w.Write(reply)
		w.Header().Set("Grpc-Status", "0")
	})
	srv := &http.Server{Addr: addr, Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv.ListenAndServe()
}

// grpcCaller makes unary calls to `addr` on one shared HTTP/2 connection.
func grpcCaller(addr string) func() error {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: tr}
	body := grpcFrame([]byte("bench"))
	url := "http://" + addr + "/bench.Bench/Call"
	return func() error {
		req, err := http.NewRequest("POST", url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if st := resp.Trailer.Get("Grpc-Status"); st != "0" {
			return fmt.Errorf("grpc-status %q", st)
		}
		return nil
	}
}

func serveRaw(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func(c net.Conn) {
			defer c.Close()
			buf := make([]byte, 4096)
			pending := 0
			for {
				n, err := c.Read(buf[pending:])
				if err != nil {
					return
				}
				pending += n
				// Answer every complete request head in what was read.
				data := buf[:pending]
				for {
					i := bytes.Index(data, headEnd)
					if i < 0 {
						break
					}
					if _, err := c.Write(response); err != nil {
						return
					}
					data = data[i+len(headEnd):]
				}
				pending = copy(buf, data)
				if pending == len(buf) {
					return // a head larger than the buffer: not our client
				}
			}
		}(c)
	}
}

func blast(addr string, conns int, duration time.Duration, rate float64, useTLS, useGRPC bool) error {
	var total, errors atomic.Int64
	start := time.Now()
	deadline := start.Add(duration)
	// Paced: connection i sends its k-th request at start + (k + i/conns) *
	// interval, whatever happened to the previous one (a late response makes
	// the next requests leave at once, as in wrk2). "service" latency is
	// from the write, "corrected" from the scheduled time.
	interval := time.Duration(0)
	if rate > 0 {
		interval = time.Duration(float64(conns) / rate * float64(time.Second))
	}
	service := make([][]int64, conns)
	corrected := make([][]int64, conns)
	var grpcCall func() error
	if useGRPC {
		grpcCall = grpcCaller(addr)
	}
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			call := grpcCall
			if call == nil {
				var c net.Conn
				var err error
				if useTLS {
					c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
				} else {
					c, err = net.Dial("tcp", addr)
				}
				if err != nil {
					errors.Add(1)
					return
				}
				defer c.Close()
				call = rawCaller(c)
			}
			paced(start, deadline, interval, i, conns, func(now, due time.Time) bool {
				if err := call(); err != nil {
					if err != io.EOF {
						errors.Add(1)
					}
					return false
				}
				end := time.Now()
				service[i] = append(service[i], int64(end.Sub(now)))
				corrected[i] = append(corrected[i], int64(end.Sub(due)))
				total.Add(1)
				return true
			})
		}(i)
	}
	wg.Wait()
	// Until the last response: a generator that fell behind its schedule
	// catches up late, and its rate is what it really achieved.
	secs := time.Since(start).Seconds()
	out, _ := json.Marshal(map[string]any{
		"requests": total.Load(), "errors": errors.Load(), "seconds": secs,
		"service_ms": percentiles(service), "corrected_ms": percentiles(corrected),
	})
	fmt.Println(string(out))
	return nil
}

// rawCaller writes the HTTP/1 request on c and reads the whole response;
// io.EOF when the server closed the connection.
func rawCaller(c net.Conn) func() error {
	buf := make([]byte, 4096)
	return func() error {
		if _, err := c.Write(request); err != nil {
			return err
		}
		for got := 0; got < len(response); {
			n, err := c.Read(buf[got:])
			if err != nil {
				return err
			}
			got += n
		}
		return nil
	}
}

// paced calls one(now, due) for goroutine i of n on blast's schedule (see
// blast) until the deadline or until one returns false.
func paced(start, deadline time.Time, interval time.Duration, i, n int, one func(now, due time.Time) bool) {
	offset := interval * time.Duration(i) / time.Duration(n)
	for k := 0; ; k++ {
		now := time.Now()
		due := now
		if interval > 0 {
			due = start.Add(offset + interval*time.Duration(k))
			if due.After(deadline) {
				return
			}
			if d := due.Sub(now); d > 0 {
				time.Sleep(d)
				now = time.Now()
			}
		} else if now.After(deadline) {
			return
		}
		if !one(now, due) {
			return
		}
	}
}

// percentiles of latencies in ns, as ms: p50, p90, p99, max.
func percentiles(per [][]int64) map[string]float64 {
	var all []int64
	for _, l := range per {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return nil
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	at := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))]) / 1e6 }
	return map[string]float64{"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1)}
}
