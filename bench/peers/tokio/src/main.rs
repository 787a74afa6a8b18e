// bench/peers/tokio: the standard workloads W1..W10 of ../../../../shared/WORKLOADS.md written for
// Tokio, printing the same JSON lines as //bench:weft_workloads ("runtime":"tokio"). Built offline
// against Debian's librust-tokio-dev. Run through bench/run_workloads.sh, or:
//
//     cargo run --release -- --reps 5 --workers 2 [--only W1,W3]
//
// Written as Tokio's users write it: every workload's root is a spawned task (as weft's root is a
// worker fiber; a future run by `block_on` sits on the calling thread, and its spawns go through
// the runtime's shared inject queue). Where Tokio's model differs from the workload's wording:
//   - Tokio tasks are stackless futures: there is no stack to switch, and W8's RSS per task is the
//     size of one task's future state, not of a parked stack.
//   - W1: two tasks on a current-thread runtime calling `yield_now`, in two variants (a
//     "variant" field; bench/report.py headlines the faster): "all_drivers", the runtime
//     `#[tokio::main(flavor = "current_thread")]` builds (`enable_all`), where a yielded task's
//     wake-up waits for the next I/O driver poll, which counts as part of a yield; and
//     "no_io_driver" (`enable_time` only), for programs that do no I/O.
//   - W5: Tokio's timer wheel has 1 ms resolution and rounds a sleep up to the next tick.
//   - W7: two variants: "tokio_mutex" (`tokio::sync::Mutex`, which parks tasks, FIFO) and
//     "std_mutex" (`std::sync::Mutex`, which Tokio's docs recommend for short sections that never
//     hold the lock across an await; it blocks the worker thread while contended).
//   - W8: tasks park on a `Semaphore` with no permits; release adds one permit per task.
//   - W10: two variants: "tokio_fs" (each task its own `tokio::fs::File`, a seek to its range,
//     then `read_exact` per chunk: each read is a blocking-pool job) and "spawn_blocking_read_at"
//     (one `std::fs::File` shared, each chunk a `spawn_blocking` of `FileExt::read_at`).
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::{Builder, Runtime};
use tokio::sync::{mpsc, Mutex, Semaphore};

extern "C" {
    fn mallopt(param: i32, value: i32) -> i32;
}
const M_TRIM_THRESHOLD: i32 = -1;
const M_MMAP_THRESHOLD: i32 = -3;

#[derive(Default)]
struct Line {
    workload: &'static str,
    variant: &'static str, // "" when the workload has one form here
    n: u64,
    workers: usize,
    ns_per_op: f64,
    wall_ms: f64,
    samples: Vec<f64>,
    extra: Vec<(&'static str, f64)>,
}

fn rss_kb() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

fn emit(l: Line) {
    let mut s = format!(
        "{{\"runtime\":\"tokio\",\"workload\":\"{}\",\"n\":{},\"workers\":{},\"ns_per_op\":{:.3},\"wall_ms\":{:.3},\"rss_kb\":{}",
        l.workload, l.n, l.workers, l.ns_per_op, l.wall_ms, rss_kb()
    );
    if !l.variant.is_empty() {
        s += &format!(",\"variant\":\"{}\"", l.variant);
    }
    let list: Vec<String> = l.samples.iter().map(|v| format!("{:.3}", v)).collect();
    s += &format!(",\"samples_ms\":[{}]", list.join(","));
    for (k, v) in l.extra {
        s += &format!(",\"{}\":{:.3}", k, v);
    }
    println!("{}}}", s);
}

// LatencyHistogram: bench/latency.h's histogram, the same buckets: below 64 ns one each, then 64
// per power of two; a percentile is the lower bound of its bucket.
struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
}

impl LatencyHistogram {
    fn new() -> Self {
        LatencyHistogram { counts: vec![0; 64 + 64 * (64 - 6)], total: 0 }
    }
    fn record(&mut self, ns: u64) {
        let i = if ns < 64 {
            ns
        } else {
            let e = 63 - u64::from(ns.leading_zeros());
            64 + 64 * (e - 6) + ((ns >> (e - 6)) & 63)
        };
        self.counts[i as usize] += 1;
        self.total += 1;
    }
    fn merge(&mut self, o: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.total += o.total;
    }
    fn lower_bound(i: u64) -> u64 {
        if i < 64 {
            return i;
        }
        let e = (i - 64) / 64 + 6;
        (64 + (i - 64) % 64) << (e - 6)
    }
    fn percentile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64) as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::lower_bound(i as u64);
            }
        }
        Self::lower_bound(self.counts.len() as u64 - 1)
    }
    // us: p50, p99, p99.9 in microseconds.
    fn us(&self) -> [f64; 3] {
        [0.5, 0.99, 0.999].map(|q| self.percentile(q) as f64 / 1e3)
    }
}

// latency_extra: the medians over the timed runs (runs[0], the warm-up, dropped) of each
// percentile, as the line's p50_us, p99_us, p999_us.
fn latency_extra(runs: &[[f64; 3]]) -> Vec<(&'static str, f64)> {
    let col = |k: usize| median(&runs[1..].iter().map(|r| r[k]).collect::<Vec<_>>());
    vec![("p50_us", col(0)), ("p99_us", col(1)), ("p999_us", col(2))]
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[s.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// root: runs `fut` as the workload's root task: spawned onto the runtime's workers, the calling
// thread only waiting for it (as `#[tokio::main]` programs spawn their work).
fn root<T: Send + 'static>(rt: &Runtime, fut: impl Future<Output = T> + Send + 'static) -> T {
    rt.block_on(async { tokio::spawn(fut).await.unwrap() })
}

// One warm-up, then `reps` timed runs; their walls (ms). With WEFT_BENCH_PROGRESS set
// (bench/run_workloads.sh sets it), each run's time goes to stderr as it ends.
fn repeat(reps: usize, mut body: impl FnMut() -> f64) -> Vec<f64> {
    let progress = std::env::var_os("WEFT_BENCH_PROGRESS").is_some();
    let mut out = Vec::with_capacity(reps);
    for i in 0..=reps {
        let wall = body();
        if progress && i == 0 {
            eprintln!("    warm-up: {:.1} ms", wall);
        } else if progress {
            eprintln!("    run {}/{}: {:.1} ms", i, reps, wall);
        }
        if i > 0 {
            out.push(wall);
        }
    }
    out
}

fn multi(workers: usize) -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime")
}

// Spawns n tasks made by `task`, then awaits every one (W2, W5, W7).
async fn spawn_all_then_join<F, Fut>(n: usize, task: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handles: Vec<_> = (0..n).map(|_| tokio::spawn(task())).collect();
    for h in handles {
        h.await.unwrap();
    }
}

// Emits a line whose op is one of `ops` equal parts of each run.
fn emit_per_op(workload: &'static str, n: u64, ops: f64, workers: usize, samples: Vec<f64>) {
    emit_variant(workload, "", n, ops, workers, samples);
}

fn emit_variant(
    workload: &'static str,
    variant: &'static str,
    n: u64,
    ops: f64,
    workers: usize,
    samples: Vec<f64>,
) {
    let wall = median(&samples);
    emit(Line {
        samples,
        workload,
        variant,
        n,
        workers,
        ns_per_op: wall * 1e6 / ops,
        wall_ms: wall,
        ..Default::default()
    });
}

fn w1(reps: usize) {
    const YIELDS: u64 = 1_000_000;
    let variants: [(&'static str, fn(&mut Builder) -> &mut Builder); 2] = [
        ("all_drivers", |b| b.enable_all()),
        ("no_io_driver", |b| b.enable_time()),
    ];
    for (variant, drivers) in variants {
        let rt = drivers(&mut Builder::new_current_thread())
            .build()
            .expect("runtime");
        let samples = repeat(reps, || {
            rt.block_on(async {
                let start = Instant::now();
                let a = tokio::spawn(async {
                    for _ in 0..YIELDS {
                        tokio::task::yield_now().await;
                    }
                });
                let b = tokio::spawn(async {
                    for _ in 0..YIELDS {
                        tokio::task::yield_now().await;
                    }
                });
                a.await.unwrap();
                b.await.unwrap();
                ms(start.elapsed())
            })
        });
        emit_variant("yield_pingpong", variant, YIELDS, (2 * YIELDS) as f64, 1, samples);
    }
}

fn w2(rt: &Runtime, reps: usize, workers: usize) {
    const N: usize = 100_000;
    let samples = repeat(reps, || {
        root(rt, async {
            let start = Instant::now();
            spawn_all_then_join(N, || async {}).await;
            ms(start.elapsed())
        })
    });
    emit_per_op("spawn_join", N as u64, N as f64, workers, samples);
}

fn w3(rt: &Runtime, reps: usize, workers: usize) {
    const ROUNDS: u64 = 1_000_000;
    let samples = repeat(reps, || {
        rt.block_on(async {
            let start = Instant::now();
            let (ping_tx, mut ping_rx) = mpsc::channel::<u64>(1);
            let (pong_tx, mut pong_rx) = mpsc::channel::<u64>(1);
            let echo = tokio::spawn(async move {
                while let Some(v) = ping_rx.recv().await {
                    if pong_tx.send(v).await.is_err() {
                        break;
                    }
                }
            });
            // The root side runs in a spawned task too, so both ends are on worker threads.
            let root = tokio::spawn(async move {
                for i in 0..ROUNDS {
                    ping_tx.send(i).await.unwrap();
                    assert_eq!(pong_rx.recv().await, Some(i));
                }
            });
            root.await.unwrap();
            echo.await.unwrap();
            ms(start.elapsed())
        })
    });
    emit_per_op("channel_pingpong", ROUNDS, ROUNDS as f64, workers, samples);
}

#[inline(never)]
fn seq_fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        seq_fib(n - 1) + seq_fib(n - 2)
    }
}

// A task spawned for fib(n-1) at every call; fib(n-2) runs in the calling task (as Go's and weft's).
fn fib(n: u32) -> Pin<Box<dyn Future<Output = u64> + Send>> {
    Box::pin(async move {
        if n < 2 {
            return n as u64;
        }
        let child = tokio::spawn(fib(n - 1));
        let b = fib(n - 2).await;
        child.await.unwrap() + b
    })
}

fn w4(rt: &Runtime, reps: usize, workers: usize) {
    const N: u32 = 30;
    const TASKS: f64 = 1_346_268.0; // calls of fib(30) that spawn (n >= 2): fib(31) - 1
    let seq = median(&repeat(reps, || {
        let start = Instant::now();
        // A volatile read keeps the argument opaque, so the call is not folded at compile time.
        assert_eq!(seq_fib(unsafe { std::ptr::read_volatile(&N) }), 832_040);
        ms(start.elapsed())
    }));
    let samples = repeat(reps, || {
        rt.block_on(async {
            let start = Instant::now();
            let r = tokio::spawn(fib(N)).await.unwrap();
            assert_eq!(r, 832_040);
            ms(start.elapsed())
        })
    });
    let wall = median(&samples);
    emit(Line {
        samples,
        workload: "fib",
        n: N as u64,
        workers,
        ns_per_op: wall * 1e6,
        wall_ms: wall,
        extra: vec![("seq_ms", seq), ("ns_per_task", wall * 1e6 / TASKS)],
        ..Default::default()
    });
}

fn w5(rt: &Runtime, reps: usize, workers: usize) {
    const N: usize = 10_000;
    let samples = repeat(reps, || {
        root(rt, async {
            let start = Instant::now();
            spawn_all_then_join(N, || tokio::time::sleep(Duration::from_millis(1))).await;
            ms(start.elapsed())
        })
    });
    emit_per_op("sleep_fanout", N as u64, N as f64, workers, samples);
}

// echo: a connection's server task (W6, W9): echoes through an N-byte buffer in the task until
// the stream ends.
async fn echo<const N: usize>(mut s: TcpStream) {
    let mut buf = [0u8; N];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                if s.write_all(&buf[..k]).await.is_err() {
                    break;
                }
            }
        }
    }
}

fn w6(rt: &Runtime, reps: usize, workers: usize) {
    const CONNS: usize = 100;
    const TRIPS: usize = 1000;
    const SIZE: usize = 64;
    let mut latency: Vec<[f64; 3]> = Vec::new();
    let samples = repeat(reps, || {
        let (wall, us) = root(rt, async {
            // Each client's round trips, made before the clock starts.
            let hists: Vec<LatencyHistogram> = (0..CONNS).map(|_| LatencyHistogram::new()).collect();
            let start = Instant::now();
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let mut echoers = Vec::with_capacity(CONNS);
                for _ in 0..CONNS {
                    let (s, _) = listener.accept().await.expect("accept");
                    s.set_nodelay(true).unwrap();
                    echoers.push(tokio::spawn(echo::<SIZE>(s)));
                }
                for e in echoers {
                    e.await.unwrap();
                }
            });
            let delivered = Arc::new(AtomicUsize::new(0));
            let mut clients = Vec::with_capacity(CONNS);
            for mut h in hists {
                let delivered = delivered.clone();
                clients.push(tokio::spawn(async move {
                    let mut s = TcpStream::connect(addr).await.expect("connect");
                    s.set_nodelay(true).unwrap();
                    let mut out = [0u8; SIZE];
                    let mut inb = [0u8; SIZE];
                    for i in 0..TRIPS {
                        out[0] = i as u8;
                        out[1] = (i >> 8) as u8;
                        let sent = Instant::now();
                        if s.write_all(&out).await.is_err()
                            || s.read_exact(&mut inb).await.is_err()
                            || inb != out
                        {
                            break;
                        }
                        h.record(sent.elapsed().as_nanos() as u64);
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    h
                }));
            }
            let mut all = LatencyHistogram::new();
            for c in clients {
                all.merge(&c.await.unwrap());
            }
            server.await.unwrap();
            let wall = ms(start.elapsed());
            assert_eq!(
                delivered.load(Ordering::Relaxed),
                CONNS * TRIPS,
                "W6: lost messages"
            );
            (wall, all.us())
        });
        latency.push(us);
        wall
    });
    let wall = median(&samples);
    let ops = (CONNS * TRIPS) as f64;
    emit(Line {
        samples,
        workload: "tcp_echo",
        n: ops as u64,
        workers,
        ns_per_op: wall * 1e6 / ops,
        wall_ms: wall,
        extra: [vec![("msgs_per_s", ops / (wall / 1000.0))], latency_extra(&latency)].concat(),
        ..Default::default()
    });
}

fn w7(rt: &Runtime, reps: usize, workers: usize) {
    const TASKS: usize = 1000;
    const OPS: usize = 1000;
    // One run: TASKS tasks each add 1 OPS times under `$new` (a mutex), locking with `$lock`.
    macro_rules! contended {
        ($new:expr, |$m:ident| $lock:expr) => {
            repeat(reps, || {
                root(rt, async {
                    let counter = Arc::new($new);
                    let start = Instant::now();
                    spawn_all_then_join(TASKS, || {
                        let counter = counter.clone();
                        async move {
                            for _ in 0..OPS {
                                let $m = &counter;
                                *$lock += 1;
                            }
                        }
                    })
                    .await;
                    let wall = ms(start.elapsed());
                    let $m = &counter;
                    assert_eq!(*$lock, TASKS * OPS, "W7: lost increments");
                    wall
                })
            })
        };
    }
    let tokio_mutex = contended!(Mutex::new(0usize), |m| m.lock().await);
    let std_mutex = contended!(std::sync::Mutex::new(0usize), |m| m.lock().unwrap());
    let ops = (TASKS * OPS) as f64;
    emit_variant("mutex_contended", "tokio_mutex", ops as u64, ops, workers, tokio_mutex);
    emit_variant("mutex_contended", "std_mutex", ops as u64, ops, workers, std_mutex);
}

fn w8(rt: &Runtime, reps: usize, workers: usize) {
    const N: usize = 100_000;
    let mut rss_per_task = Vec::new();
    let samples = repeat(reps, || {
        let (wall, rss) = root(rt, async {
            let rss0 = rss_kb();
            let gate = Arc::new(Semaphore::new(0));
            let parked = Arc::new(AtomicUsize::new(0));
            let mut handles = Vec::with_capacity(N);
            for _ in 0..N {
                let (gate, parked) = (gate.clone(), parked.clone());
                handles.push(tokio::spawn(async move {
                    parked.fetch_add(1, Ordering::Relaxed);
                    gate.acquire().await.unwrap().forget();
                }));
            }
            while parked.load(Ordering::Relaxed) < N {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            let rss = (rss_kb() - rss0) as f64 / N as f64;
            let start = Instant::now();
            gate.add_permits(N);
            for h in handles {
                h.await.unwrap();
            }
            (ms(start.elapsed()), rss)
        });
        rss_per_task.push(rss);
        wall
    });
    let release = median(&samples);
    // As weft's: RSS per task from the first (warm-up) run.
    emit(Line {
        samples,
        workload: "park_many",
        n: N as u64,
        workers,
        ns_per_op: 0.0,
        wall_ms: release,
        extra: vec![
            ("release_ms", release),
            ("rss_kb_per_task", rss_per_task[0]),
        ],
        ..Default::default()
    });
}

// W10's 1 GiB file, at $WEFT_W10_FILE or $TMPDIR/weft_w10.dat (made, as zeros, if missing or of
// another size; bench/run_workloads.sh makes it once for every runtime), read once so that the
// page cache holds it.
const W10_BYTES: u64 = 1 << 30;

fn w10_file() -> String {
    use std::os::unix::fs::FileExt;
    let path = std::env::var("WEFT_W10_FILE").unwrap_or_else(|_| {
        format!("{}/weft_w10.dat", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if size != W10_BYTES {
        let f = std::fs::File::create(&path).expect("create the W10 file");
        let zeros = vec![0u8; 1 << 20];
        let mut off = 0;
        while off < W10_BYTES {
            f.write_all_at(&zeros, off).expect("write the W10 file");
            off += zeros.len() as u64;
        }
    }
    let f = std::fs::File::open(&path).expect("open the W10 file");
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < W10_BYTES {
        let _ = f.read_at(&mut buf, off);
        off += buf.len() as u64;
    }
    path
}

fn w10(rt: &Runtime, reps: usize, workers: usize) {
    use std::os::unix::fs::FileExt;
    use tokio::io::AsyncSeekExt;
    const TASKS: u64 = 16;
    let path = Arc::new(w10_file());
    for chunk in [4096usize, 1 << 20] {
        for variant in ["tokio_fs", "spawn_blocking_read_at"] {
            let path = path.clone();
            let samples = repeat(reps, || {
                let path = path.clone();
                root(rt, async move {
                    let start = Instant::now();
                    let part = W10_BYTES / TASKS;
                    let total = Arc::new(AtomicUsize::new(0));
                    let shared = Arc::new(std::fs::File::open(&*path).expect("open"));
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|k| {
                            let (path, total, shared) = (path.clone(), total.clone(), shared.clone());
                            tokio::spawn(async move {
                                let mut got = 0usize;
                                if variant == "tokio_fs" {
                                    let mut f = tokio::fs::File::open(&*path).await.expect("open");
                                    f.seek(std::io::SeekFrom::Start(k * part)).await.expect("seek");
                                    let mut buf = vec![0u8; chunk];
                                    let mut off = k * part;
                                    while off < (k + 1) * part {
                                        f.read_exact(&mut buf).await.expect("read");
                                        got += chunk;
                                        off += chunk as u64;
                                    }
                                } else {
                                    let mut off = k * part;
                                    while off < (k + 1) * part {
                                        let f = shared.clone();
                                        let n = tokio::task::spawn_blocking(move || {
                                            let mut buf = vec![0u8; chunk];
                                            f.read_at(&mut buf, off).unwrap_or(0)
                                        })
                                        .await
                                        .unwrap();
                                        if n != chunk {
                                            break;
                                        }
                                        got += n;
                                        off += chunk as u64;
                                    }
                                }
                                total.fetch_add(got, Ordering::Relaxed);
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                    assert_eq!(total.load(Ordering::Relaxed) as u64, W10_BYTES, "W10: a short read");
                    ms(start.elapsed())
                })
            });
            let wall = median(&samples);
            let reads = (W10_BYTES / chunk as u64) as f64;
            emit(Line {
                samples,
                workload: if chunk == 4096 { "file_read_4k" } else { "file_read_1m" },
                variant,
                n: reads as u64,
                workers,
                ns_per_op: wall * 1e6 / reads,
                wall_ms: wall,
                extra: vec![("mib_per_s", (W10_BYTES >> 20) as f64 / (wall / 1000.0))],
            });
        }
    }
}

// W9: 10,000 connections, each echoed by its task through a 1 KiB buffer in the task (as in
// Tokio's README echo server), clients in a second process: bench/w9_client at $WEFT_W9_CLIENT,
// the same program for every runtime. $WEFT_W9_CONNS lowers the count.
fn w9(rt: &Runtime, reps: usize, workers: usize) {
    use std::io::{BufRead, BufReader, Write};
    const TRIPS: usize = 100;
    const SIZE: usize = 64;
    let conns: usize = std::env::var("WEFT_W9_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10000);
    let Ok(client) = std::env::var("WEFT_W9_CLIENT") else {
        eprintln!("W9: set WEFT_W9_CLIENT to bench/w9_client (bench/run_workloads.sh does)");
        std::process::exit(1);
    };
    let mut rss_per_conn = Vec::new();
    let mut latency: Vec<[f64; 3]> = Vec::new();
    let samples = repeat(reps, || {
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
        let port = listener.local_addr().unwrap().port();
        let rss0 = rss_kb();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let server = rt.spawn(async move {
            let mut echoers = Vec::with_capacity(conns);
            for _ in 0..conns {
                let (s, _) = listener.accept().await.expect("accept");
                s.set_nodelay(true).unwrap();
                let counter = counter.clone();
                echoers.push(tokio::spawn(async move {
                    counter.fetch_add(1, Ordering::Relaxed);
                    echo::<1024>(s).await
                }));
            }
            for e in echoers {
                let _ = e.await;
            }
        });
        let mut child = std::process::Command::new(&client)
            .args([port.to_string(), conns.to_string(), TRIPS.to_string(), SIZE.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("W9: cannot start the client");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "connected\n", "W9: the client did not connect");
        while accepted.load(Ordering::Relaxed) < conns {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20)); // every echoer parked in its read
        rss_per_conn.push((rss_kb() - rss0) as f64 / conns as f64);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
        if f.len() != 6 || f[2] != 0 || f[1] != (conns * TRIPS) as u64 {
            panic!("W9: lost messages: {line}");
        }
        latency.push([f[3] as f64 / 1e3, f[4] as f64 / 1e3, f[5] as f64 / 1e3]);
        drop(stdin);
        let _ = child.wait();
        rt.block_on(server).unwrap();
        f[0] as f64 / 1e6
    });
    let wall = median(&samples);
    let ops = (conns * TRIPS) as f64;
    emit(Line {
        workload: "many_conn_echo",
        n: ops as u64,
        workers,
        ns_per_op: wall * 1e6 / ops,
        wall_ms: wall,
        samples,
        extra: [
            vec![
                ("msgs_per_s", ops / (wall / 1000.0)),
                ("rss_kb_per_conn", rss_per_conn[0]),
                ("conns", conns as f64),
            ],
            latency_extra(&latency),
        ]
        .concat(),
        ..Default::default()
    });
}

fn main() {
    const USAGE: &str = "usage: tokio_workloads [--reps N (5)] [--workers N (0: all cores)] [--only W1,W2]\n\
                         the standard workloads W1..W10 (WORKLOADS.md) on Tokio, one JSON line each";
    let usage_error = |message: String| -> ! {
        eprintln!("tokio_workloads: {message}\n{USAGE}");
        std::process::exit(2);
    };
    let mut reps = 5usize;
    let mut workers = 0usize;
    let mut only = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            return;
        }
        let Some(value) = args.next() else {
            usage_error(format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--reps" => match value.parse() {
                Ok(n) if n >= 1 => reps = n,
                _ => usage_error(format!("--reps takes a number >= 1, not '{value}'")),
            },
            "--workers" => match value.parse() {
                Ok(n) => workers = n,
                _ => usage_error(format!("--workers takes a number, not '{value}'")),
            },
            "--only" => only = value,
            other => usage_error(format!("unknown flag {other}")),
        }
    }
    // Keep freed memory, as the other runtimes do (WORKLOADS.md: page faults dominate otherwise).
    unsafe {
        mallopt(M_TRIM_THRESHOLD, i32::MAX);
        mallopt(M_MMAP_THRESHOLD, i32::MAX);
    }
    if workers == 0 {
        workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
    }
    let want = |id: &str| only.is_empty() || only.split(',').any(|w| w == id);
    if want("W1") {
        w1(reps);
    }
    let rt = multi(workers);
    let suites: [(&str, fn(&Runtime, usize, usize)); 9] = [
        ("W2", w2),
        ("W3", w3),
        ("W4", w4),
        ("W5", w5),
        ("W6", w6),
        ("W7", w7),
        ("W8", w8),
        ("W9", w9),
        ("W10", w10),
    ];
    for (id, run) in suites {
        if want(id) {
            run(&rt, reps, workers);
        }
    }
}
