// bench/peers/go: the standard workloads W1..W10 of ../../../../shared/WORKLOADS.md written for Go,
// printing the same JSON lines as //bench:weft_workloads ("runtime":"go"). Standard library only,
// so it builds offline. Run through bench/run_workloads.sh, or:
//
//	go run . --reps 5 --workers 2 [--only W1,W3]
//
// Where Go cannot express a workload exactly:
//   - W1: two goroutines on GOMAXPROCS=1 calling runtime.Gosched(); Go does not promise they
//     alternate, only that each yields the processor.
//   - W2: Go has no join handles. Two variants: "waitgroup", one sync.WaitGroup for all (the
//     idiom), and "channel_per_task", a channel per goroutine received one by one (a join per
//     task, as the workload's wording).
//   - W4: each call's child sends its result on a channel of its own (Go's way to return a
//     value from a goroutine).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type line struct {
	Runtime  string `json:"runtime"`
	Workload string `json:"workload"`
	// Variant names one of several forms of a workload (bench/report.py headlines the faster).
	Variant string  `json:"variant,omitempty"`
	N       int64   `json:"n"`
	Workers int     `json:"workers"`
	NsPerOp float64 `json:"ns_per_op"`
	WallMs  float64 `json:"wall_ms"`
	RssKb   int64   `json:"rss_kb"`
	// The timed runs (ms) whose median is WallMs.
	SamplesMs []float64 `json:"samples_ms"`
	// Workload-specific, as in weft_workloads.
	SeqMs        *float64 `json:"seq_ms,omitempty"`
	NsPerTask    *float64 `json:"ns_per_task,omitempty"`
	MsgsPerS     *float64 `json:"msgs_per_s,omitempty"`
	MibPerS      *float64 `json:"mib_per_s,omitempty"`
	ReleaseMs    *float64 `json:"release_ms,omitempty"`
	RssKbPerTask *float64 `json:"rss_kb_per_task,omitempty"`
	RssKbPerConn *float64 `json:"rss_kb_per_conn,omitempty"`
	Conns        int      `json:"conns,omitempty"`
	// W6, W9: round-trip latency percentiles (us), each the median over the timed runs.
	P50Us  *float64 `json:"p50_us,omitempty"`
	P99Us  *float64 `json:"p99_us,omitempty"`
	P999Us *float64 `json:"p999_us,omitempty"`
}

// latencyHistogram: bench/latency.h's histogram, the same buckets: below 64 ns one each, then
// 64 per power of two; a percentile is the lower bound of its bucket.
type latencyHistogram struct {
	counts [64 + 64*(64-6)]uint64
	total  uint64
}

func (h *latencyHistogram) record(ns uint64) {
	i := ns
	if ns >= 64 {
		e := uint64(bits.Len64(ns) - 1)
		i = 64 + 64*(e-6) + (ns>>(e-6))&63
	}
	h.counts[i]++
	h.total++
}

func (h *latencyHistogram) merge(o *latencyHistogram) {
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.total += o.total
}

func latencyLowerBound(i uint64) uint64 {
	if i < 64 {
		return i
	}
	e := (i-64)/64 + 6
	return (64 + (i-64)%64) << (e - 6)
}

func (h *latencyHistogram) percentile(q float64) uint64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q * float64(h.total))
	if rank == 0 {
		rank = 1
	}
	seen := uint64(0)
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return latencyLowerBound(uint64(i))
		}
	}
	return latencyLowerBound(uint64(len(h.counts) - 1))
}

// percentiles: one run's p50, p99, p99.9 (us).
type percentiles struct{ p50, p99, p999 float64 }

// withLatency: l with the medians of runs' percentiles (runs[0], the warm-up, dropped).
func withLatency(l line, runs []percentiles) line {
	var a, b, c []float64
	for _, r := range runs[1:] {
		a, b, c = append(a, r.p50), append(b, r.p99), append(c, r.p999)
	}
	l.P50Us, l.P99Us, l.P999Us = f64(median(a)), f64(median(b)), f64(median(c))
	return l
}

func rssKb() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return -1
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// repeat: one warm-up, then reps timed runs; returns the walls (ms).
// repeat: one warm-up, then reps timed runs; their walls (ms). With WEFT_BENCH_PROGRESS set
// (bench/run_workloads.sh sets it), each run's time goes to stderr as it ends.
func repeat(reps int, body func() float64) []float64 {
	progress := os.Getenv("WEFT_BENCH_PROGRESS") != ""
	out := make([]float64, 0, reps)
	for i := 0; i <= reps; i++ {
		wall := body()
		if i > 0 {
			out = append(out, wall)
		}
		if progress && i == 0 {
			fmt.Fprintf(os.Stderr, "    warm-up: %.1f ms\n", wall)
		} else if progress {
			fmt.Fprintf(os.Stderr, "    run %d/%d: %.1f ms\n", i, reps, wall)
		}
	}
	return out
}

func emit(l line) {
	l.Runtime = "go"
	l.RssKb = rssKb()
	b, _ := json.Marshal(l)
	fmt.Println(string(b))
}

func f64(v float64) *float64 { return &v }

func w1(reps int) {
	const yields = 1000000
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	walls := repeat(reps, func() float64 {
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(2)
		for k := 0; k < 2; k++ {
			go func() {
				for i := 0; i < yields; i++ {
					runtime.Gosched()
				}
				wg.Done()
			}()
		}
		wg.Wait()
		return ms(time.Since(start))
	})
	wall := median(walls)
	emit(line{SamplesMs: walls, Workload: "yield_pingpong", N: yields, Workers: 1, NsPerOp: wall * 1e6 / (2 * yields), WallMs: wall})
}

func w2(reps, workers int) {
	const n = 100000
	waitgroup := repeat(reps, func() float64 {
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(n)
		for i := 0; i < n; i++ {
			go wg.Done()
		}
		wg.Wait()
		return ms(time.Since(start))
	})
	perTask := repeat(reps, func() float64 {
		start := time.Now()
		done := make([]chan struct{}, n)
		for i := range done {
			ch := make(chan struct{})
			done[i] = ch
			go func() { close(ch) }()
		}
		for _, ch := range done {
			<-ch
		}
		return ms(time.Since(start))
	})
	for _, v := range []struct {
		name  string
		walls []float64
	}{{"waitgroup", waitgroup}, {"channel_per_task", perTask}} {
		wall := median(v.walls)
		emit(line{SamplesMs: v.walls, Workload: "spawn_join", Variant: v.name, N: n, Workers: workers, NsPerOp: wall * 1e6 / n, WallMs: wall})
	}
}

func w3(reps, workers int) {
	const rounds = 1000000
	walls := repeat(reps, func() float64 {
		start := time.Now()
		ping, pong := make(chan int, 1), make(chan int, 1)
		go func() {
			for i := 0; i < rounds; i++ {
				pong <- <-ping
			}
		}()
		for i := 0; i < rounds; i++ {
			ping <- i
			<-pong
		}
		return ms(time.Since(start))
	})
	wall := median(walls)
	emit(line{SamplesMs: walls, Workload: "channel_pingpong", N: rounds, Workers: workers, NsPerOp: wall * 1e6 / rounds, WallMs: wall})
}

//go:noinline
func seqFib(n int) uint64 {
	if n < 2 {
		return uint64(n)
	}
	return seqFib(n-1) + seqFib(n-2)
}

func fib(n int) uint64 {
	if n < 2 {
		return uint64(n)
	}
	ch := make(chan uint64, 1)
	go func() { ch <- fib(n - 1) }()
	b := fib(n - 2)
	return <-ch + b
}

func w4(reps, workers int) {
	const n = 30
	const tasks = 1346268.0 // calls of fib(30) that spawn (n >= 2): fib(31) - 1
	var seq []float64
	for i := 0; i < reps+1; i++ {
		start := time.Now()
		r := seqFib(n)
		if r != 832040 {
			panic("seq fib")
		}
		if i > 0 {
			seq = append(seq, ms(time.Since(start)))
		}
	}
	walls := repeat(reps, func() float64 {
		start := time.Now()
		if fib(n) != 832040 {
			panic("fib")
		}
		return ms(time.Since(start))
	})
	wall := median(walls)
	emit(line{SamplesMs: walls, Workload: "fib", N: n, Workers: workers, NsPerOp: wall * 1e6, WallMs: wall,
		SeqMs: f64(median(seq)), NsPerTask: f64(wall * 1e6 / tasks)})
}

func w5(reps, workers int) {
	const n = 10000
	walls := repeat(reps, func() float64 {
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func() {
				time.Sleep(time.Millisecond)
				wg.Done()
			}()
		}
		wg.Wait()
		return ms(time.Since(start))
	})
	wall := median(walls)
	emit(line{SamplesMs: walls, Workload: "sleep_fanout", N: n, Workers: workers, NsPerOp: wall * 1e6 / n, WallMs: wall})
}

func w6(reps, workers int) {
	const conns, trips, size = 100, 1000, 64
	var latency []percentiles
	walls := repeat(reps, func() float64 {
		hists := make([]latencyHistogram, conns) // each client's round trips (untimed)
		start := time.Now()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.(*net.TCPConn).SetNoDelay(true)
				go func(c net.Conn) {
					defer c.Close()
					io.Copy(c, c)
				}(c)
			}
		}()
		var wg sync.WaitGroup
		var mu sync.Mutex
		delivered := 0
		for k := 0; k < conns; k++ {
			wg.Add(1)
			go func(h *latencyHistogram) {
				defer wg.Done()
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					return
				}
				defer c.Close()
				c.(*net.TCPConn).SetNoDelay(true)
				out := make([]byte, size)
				in := make([]byte, size)
				r := bufio.NewReaderSize(c, size)
				ok := 0
				for i := 0; i < trips; i++ {
					out[0], out[1] = byte(i), byte(i>>8)
					sent := time.Now()
					if _, err := c.Write(out); err != nil {
						break
					}
					if _, err := io.ReadFull(r, in); err != nil || !bytes.Equal(in, out) {
						break
					}
					h.record(uint64(time.Since(sent).Nanoseconds()))
					ok++
				}
				mu.Lock()
				delivered += ok
				mu.Unlock()
			}(&hists[k])
		}
		wg.Wait()
		ln.Close()
		wall := ms(time.Since(start))
		if delivered != conns*trips {
			panic("W6: lost messages")
		}
		var all latencyHistogram
		for k := range hists {
			all.merge(&hists[k])
		}
		latency = append(latency, percentiles{float64(all.percentile(0.5)) / 1e3, float64(all.percentile(0.99)) / 1e3, float64(all.percentile(0.999)) / 1e3})
		return wall
	})
	wall := median(walls)
	ops := float64(conns * trips)
	emit(withLatency(line{SamplesMs: walls, Workload: "tcp_echo", N: int64(ops), Workers: workers, NsPerOp: wall * 1e6 / ops, WallMs: wall,
		MsgsPerS: f64(ops / (wall / 1000))}, latency))
}

// w9: 10,000 connections, each echoed by its goroutine through a 1 KiB buffer, clients in a
// second process: bench/w9_client at $WEFT_W9_CLIENT, the same program for every runtime.
// $WEFT_W9_CONNS lowers the count. Not io.Copy as in W6: between two TCP connections it splices
// through a pipe pair per connection, 3 fds each, past a 20,000 fd limit at 10,000 connections.
func w9(reps, workers int) {
	const trips, size = 100, 64
	conns := 10000
	if v, err := strconv.Atoi(os.Getenv("WEFT_W9_CONNS")); err == nil && v > 0 {
		conns = v
	}
	client := os.Getenv("WEFT_W9_CLIENT")
	if client == "" {
		fmt.Fprintln(os.Stderr, "W9: set WEFT_W9_CLIENT to bench/w9_client (bench/run_workloads.sh does)")
		os.Exit(1)
	}
	var rssPerConn []float64
	var latency []percentiles
	walls := repeat(reps, func() float64 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		rss0 := rssKb()
		var accepted sync.WaitGroup
		accepted.Add(conns)
		var echoers sync.WaitGroup
		go func() {
			for k := 0; k < conns; k++ {
				c, err := ln.Accept()
				if err != nil {
					panic(err)
				}
				c.(*net.TCPConn).SetNoDelay(true)
				echoers.Add(1)
				go func(c net.Conn) {
					defer echoers.Done()
					defer c.Close()
					accepted.Done()
					buf := make([]byte, 1024)
					for {
						n, err := c.Read(buf)
						if err != nil {
							return
						}
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
				}(c)
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		cmd := exec.Command(client, strconv.Itoa(port), strconv.Itoa(conns), strconv.Itoa(trips), strconv.Itoa(size))
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			panic(err)
		}
		r := bufio.NewReader(stdout)
		if l, _ := r.ReadString('\n'); l != "connected\n" {
			panic("W9: the client did not connect: " + l)
		}
		accepted.Wait()
		time.Sleep(20 * time.Millisecond) // every echoer parked in its read
		rssPerConn = append(rssPerConn, float64(rssKb()-rss0)/float64(conns))
		io.WriteString(stdin, "go\n")
		done, _ := r.ReadString('\n')
		var ns int64
		var msgs, bad, p50, p99, p999 uint64
		if n, _ := fmt.Sscanf(done, "done %d %d %d %d %d %d", &ns, &msgs, &bad, &p50, &p99, &p999); n != 6 || bad != 0 || msgs != uint64(conns*trips) {
			panic("W9: lost messages: " + done)
		}
		latency = append(latency, percentiles{float64(p50) / 1e3, float64(p99) / 1e3, float64(p999) / 1e3})
		stdin.Close()
		cmd.Wait()
		echoers.Wait()
		ln.Close()
		return float64(ns) / 1e6
	})
	wall := median(walls)
	ops := float64(conns * trips)
	emit(withLatency(line{SamplesMs: walls, Workload: "many_conn_echo", N: int64(ops), Workers: workers, NsPerOp: wall * 1e6 / ops, WallMs: wall,
		MsgsPerS: f64(ops / (wall / 1000)), RssKbPerConn: f64(rssPerConn[0]), Conns: conns}, latency))
}

// w10File: W10's 1 GiB file, at $WEFT_W10_FILE or $TMPDIR/weft_w10.dat (made, as zeros, if
// missing or of another size; bench/run_workloads.sh makes it once for every runtime), read
// once so that the page cache holds it.
const w10Bytes = 1 << 30

func w10File() string {
	path := os.Getenv("WEFT_W10_FILE")
	if path == "" {
		dir := os.Getenv("TMPDIR")
		if dir == "" {
			dir = "/tmp"
		}
		path = dir + "/weft_w10.dat"
	}
	if st, err := os.Stat(path); err != nil || st.Size() != w10Bytes {
		f, err := os.Create(path)
		if err != nil {
			panic(err)
		}
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < w10Bytes; off += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros, off); err != nil {
				panic(err)
			}
		}
		f.Close()
	}
	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < w10Bytes; off += int64(len(buf)) {
		f.ReadAt(buf, off)
	}
	f.Close()
	return path
}

// w10: 16 goroutines, each ReadAt over its sixteenth of one os.File (the idiom: ReadAt takes an
// offset, so goroutines share the File).
func w10(reps, workers int) {
	const tasks = 16
	path := w10File()
	for _, chunk := range []int{4096, 1 << 20} {
		walls := repeat(reps, func() float64 {
			start := time.Now()
			f, err := os.Open(path)
			if err != nil {
				panic(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			total := int64(0)
			part := int64(w10Bytes / tasks)
			for k := 0; k < tasks; k++ {
				wg.Add(1)
				go func(k int) {
					defer wg.Done()
					buf := make([]byte, chunk)
					got := int64(0)
					for off := int64(k) * part; off < int64(k+1)*part; off += int64(chunk) {
						n, err := f.ReadAt(buf, off)
						if err != nil || n != chunk {
							return
						}
						got += int64(n)
					}
					mu.Lock()
					total += got
					mu.Unlock()
				}(k)
			}
			wg.Wait()
			f.Close()
			if total != w10Bytes {
				panic("W10: a read failed or came short")
			}
			return ms(time.Since(start))
		})
		wall := median(walls)
		reads := float64(w10Bytes / chunk)
		name := "file_read_4k"
		if chunk != 4096 {
			name = "file_read_1m"
		}
		emit(line{SamplesMs: walls, Workload: name, N: int64(reads), Workers: workers, NsPerOp: wall * 1e6 / reads,
			WallMs: wall, MibPerS: f64(float64(w10Bytes>>20) / (wall / 1000))})
	}
}

func w7(reps, workers int) {
	const fibers, ops = 1000, 1000
	walls := repeat(reps, func() float64 {
		var m sync.Mutex
		counter := 0
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(fibers)
		for i := 0; i < fibers; i++ {
			go func() {
				for k := 0; k < ops; k++ {
					m.Lock()
					counter++
					m.Unlock()
				}
				wg.Done()
			}()
		}
		wg.Wait()
		if counter != fibers*ops {
			panic("W7: lost increments")
		}
		return ms(time.Since(start))
	})
	wall := median(walls)
	emit(line{SamplesMs: walls, Workload: "mutex_contended", N: fibers * ops, Workers: workers, NsPerOp: wall * 1e6 / (fibers * ops), WallMs: wall})
}

func w8(reps, workers int) {
	const n = 100000
	var rssPerTask []float64
	walls := repeat(reps, func() float64 {
		rss0 := rssKb()
		gate := make(chan struct{})
		var parked, done sync.WaitGroup
		parked.Add(n)
		done.Add(n)
		for i := 0; i < n; i++ {
			go func() {
				parked.Done()
				<-gate
				done.Done()
			}()
		}
		parked.Wait()
		rss1 := rssKb()
		rssPerTask = append(rssPerTask, float64(rss1-rss0)/n)
		start := time.Now()
		close(gate)
		done.Wait()
		return ms(time.Since(start))
	})
	release := median(walls)
	// As weft's: RSS per task from the first (warm-up) run.
	emit(line{SamplesMs: walls, Workload: "park_many", N: n, Workers: workers, NsPerOp: 0, WallMs: release,
		ReleaseMs: f64(release), RssKbPerTask: f64(rssPerTask[0])})
}

func main() {
	reps := flag.Int("reps", 5, "timed repetitions after one warm-up")
	workers := flag.Int("workers", 0, "GOMAXPROCS (0: all cores)")
	only := flag.String("only", "", "comma-separated workload ids, e.g. W1,W4")
	flag.Parse()
	if *reps < 1 || *workers < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "go_workloads: --reps must be at least 1, --workers at least 0, and no arguments (--help)")
		os.Exit(2)
	}
	// Keep freed memory, as the other runtimes do (WORKLOADS.md: page faults dominate otherwise).
	debug.SetGCPercent(400)
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	w := runtime.GOMAXPROCS(0)
	want := func(id string) bool {
		return *only == "" || strings.Contains(","+*only+",", ","+id+",")
	}
	if want("W1") {
		w1(*reps)
	}
	if want("W2") {
		w2(*reps, w)
	}
	if want("W3") {
		w3(*reps, w)
	}
	if want("W4") {
		w4(*reps, w)
	}
	if want("W5") {
		w5(*reps, w)
	}
	if want("W6") {
		w6(*reps, w)
	}
	if want("W7") {
		w7(*reps, w)
	}
	if want("W8") {
		w8(*reps, w)
	}
	if want("W9") {
		w9(*reps, w)
	}
	if want("W10") {
		w10(*reps, w)
	}
}
