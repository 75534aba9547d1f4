//! Benchmarks of fleet routing: one routing decision with 3 upstreams and
//! 10,000 indexed conversations of 5 turns each, the cost of reducing a
//! chat body to its prefix chain, and the slot view's look and dispatch for
//! a next turn on a member of 4 slots.
//!
//! Run: `cargo bench --bench route -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use llamatap_policy::router::{Candidate, Chain, Policy, Request, RouteConfig, Router, SlotView};
use llamatap_wire::request::Route;
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Conversations indexed before measuring.
const CONVERSATIONS: usize = 10_000;
/// Turns each indexed conversation has had.
const TURNS: usize = 5;
/// Distinct system prompts shared by the conversations.
const SYSTEMS: usize = 20;

/// Turn `turn` (0-based) of conversation `id`: a system prompt shared with
/// other conversations, then user and assistant messages of 150 to 250 bytes.
fn body(id: usize, turn: usize) -> Value {
    let system = format!(
        "You are assistant number {}. {}",
        id % SYSTEMS,
        "Answer briefly and cite the forecast. ".repeat(15)
    );
    let mut messages = vec![json!({"role": "system", "content": system})];
    for at in 0..=2 * turn {
        let (role, text) = if at % 2 == 0 {
            ("user", format!("Conversation {id}, question {}: ", at / 2))
        } else {
            (
                "assistant",
                format!("Conversation {id}, answer {}: ", at / 2),
            )
        };
        let padding = "what will the weather be like tomorrow in Paris? ".repeat(3 + (id + at) % 3);
        messages.push(json!({"role": role, "content": text + &padding}));
    }
    json!({"model": "qwen2.5-0.5b-instruct", "messages": messages, "stream": true})
}

fn chain(id: usize, turn: usize) -> Chain {
    Chain::from_json(Route::ChatCompletions, &body(id, turn))
}

/// Three idle upstreams, one of them with two requests in flight.
fn candidates() -> Vec<Candidate> {
    let mut candidates: Vec<Candidate> = (0..3).map(Candidate::new).collect();
    candidates[1].in_flight = 2;
    candidates
}

/// A router with `CONVERSATIONS` conversations of `TURNS` turns indexed.
fn indexed_router() -> Router {
    let mut router = Router::new(
        &["llama-a:8080", "llama-b:8080", "llama-c:8080"],
        RouteConfig::default(),
    );
    let candidates = candidates();
    for turn in 0..TURNS {
        for id in 0..CONVERSATIONS {
            let chain = chain(id, turn);
            let request = Request {
                chain: &chain,
                session: None,
                exclude: &[],
            };
            black_box(router.route(&candidates, &request));
        }
    }
    let links: usize = (0..3)
        .filter_map(|up| router.index(up))
        .map(|index| index.len())
        .sum();
    eprintln!(
        "indexed: {CONVERSATIONS} conversations, {links} links, {} bytes of index",
        router.memory_bytes()
    );
    router
}

fn bench_decision(c: &mut Criterion) {
    let mut router = indexed_router();
    let candidates = candidates();
    let mut group = c.benchmark_group("route_decision");
    group.throughput(Throughput::Elements(1));

    // The next turn of an indexed conversation: a prefix hit.
    let next: Vec<Chain> = (0..1000).map(|id| chain(id * 7, TURNS)).collect();
    let links: usize = next.iter().map(Chain::len).sum::<usize>() / next.len();
    eprintln!("next turn: {links} links a chain");
    let mut at = 0;
    group.bench_function(BenchmarkId::new("prefix_affinity", "next_turn"), |b| {
        b.iter(|| {
            at = (at + 1) % next.len();
            let request = Request {
                chain: &next[at],
                session: None,
                exclude: &[],
            };
            black_box(router.route(&candidates, black_box(&request)))
        })
    });

    // A new conversation each time: a cold placement.
    let mut fresh = CONVERSATIONS;
    group.bench_function(
        BenchmarkId::new("prefix_affinity", "new_conversation"),
        |b| {
            b.iter_custom(|iters| {
                let chains: Vec<Chain> = (0..iters)
                    .map(|_| {
                        fresh += 1;
                        chain(fresh, 0)
                    })
                    .collect();
                let start = Instant::now();
                for chain in &chains {
                    let request = Request {
                        chain,
                        session: None,
                        exclude: &[],
                    };
                    black_box(router.route(&candidates, black_box(&request)));
                }
                start.elapsed()
            })
        },
    );
    group.finish();

    let mut group = c.benchmark_group("route_policy");
    for policy in [Policy::LeastBusy, Policy::RoundRobin] {
        let mut router = Router::new(
            &["a", "b", "c"],
            RouteConfig {
                policy,
                ..RouteConfig::default()
            },
        );
        let mut at = 0;
        group.bench_function(BenchmarkId::from_parameter(policy.as_str()), |b| {
            b.iter(|| {
                at = (at + 1) % next.len();
                let request = Request {
                    chain: &next[at],
                    session: None,
                    exclude: &[],
                };
                black_box(router.route(&candidates, black_box(&request)))
            })
        });
    }
    group.finish();
}

fn bench_chain(c: &mut Criterion) {
    let mut group = c.benchmark_group("route_chain");
    let bytes = serde_json::to_vec(&body(1, TURNS)).unwrap_or_default();
    group.throughput(Throughput::Bytes(u64::try_from(bytes.len()).unwrap_or(0)));
    eprintln!("chat body of turn {}: {} bytes", TURNS + 1, bytes.len());
    group.bench_function("from_body_chat", |b| {
        b.iter(|| Chain::from_body(Route::ChatCompletions, black_box(&bytes)))
    });
    let prompt =
        serde_json::to_vec(&json!({"prompt": "x".repeat(bytes.len())})).unwrap_or_default();
    group.bench_function("from_body_prompt", |b| {
        b.iter(|| Chain::from_body(Route::Completions, black_box(&prompt)))
    });
    group.finish();
}

/// The slot view of one member with 4 slots, each holding another
/// conversation's turn over the same system prompt: what a next turn will
/// reuse, and its dispatch into the view (then its release).
fn bench_slots(c: &mut Criterion) {
    let mut group = c.benchmark_group("route_slots");
    group.throughput(Throughput::Elements(1));
    let mut view = SlotView::new(4);
    for id in 0..4 {
        if let Some(s) = view.take(&chain(id * SYSTEMS, TURNS - 1)) {
            view.release(s, (300, 24));
        }
    }
    let next = chain(SYSTEMS, TURNS);
    let held = next.bytes(next.len() - 1);
    group.bench_function("reused", |b| {
        b.iter(|| black_box(&view).reused(black_box(&next), held))
    });
    group.bench_function("take_release", |b| {
        b.iter_batched(
            || view.clone(),
            |mut v| {
                if let Some(s) = v.take(black_box(&next)) {
                    v.release(s, (300, 24));
                }
                v
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_decision, bench_chain, bench_slots
}
criterion_main!(benches);
