//! Benchmarks of the TTFT predictor (`llamatap_policy::ttft`): one
//! prediction (a free slot; every slot busy with one request queued ahead;
//! a prompt known by bytes), one mid-prefill correction, and one update from
//! a finished request, on a book of 64 members already trained.
//!
//! Run: `cargo bench -p llamatap-policy --bench ttft -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use llamatap_policy::ttft::{
    InFlight, Load, Observation, Progress, PromptSize, Query, Timings, TtftBook,
};
use std::hint::black_box;

/// Members in the book.
const MEMBERS: u32 = 64;

fn observation(i: u32) -> Observation {
    let new = 50 + (i * 37) % 1500;
    let cached = (i * 91) % 800;
    let busy = i % 4;
    let prompt_ms = (5.0 + 0.4 * f64::from(new)) * (1.0 + 0.25 * f64::from(busy));
    Observation {
        timings: Timings {
            prompt_n: new,
            prompt_ms,
            cache_n: cached,
            predicted_n: 64,
            predicted_ms: 320.0,
        },
        busy_others: busy,
        prefill_others: if busy > 1 { 200 } else { 0 },
        prefill_before: 0,
        beside_at_dispatch: 0,
        max_tokens: Some(64),
        prompt_bytes: Some(u64::from(new + cached) * 4),
        ttft_ms: (busy == 0).then_some(prompt_ms + 10.0),
        started_ms: (busy == 0).then_some(7.0),
        process: 0,
        predicted_uncached: false,
    }
}

fn trained() -> TtftBook<u32> {
    let mut book = TtftBook::new(MEMBERS as usize);
    for i in 0..(MEMBERS * 50) {
        book.observe(&(i % MEMBERS), &observation(i));
    }
    book
}

fn bench(c: &mut Criterion) {
    let mut book = trained();
    let flights = [InFlight {
        generated: 20,
        max_tokens: Some(128),
        prefill_left: 0,
        decoding_ms: 0,
        prefilling_ms: 0,
        prefill_context: 0,
    }; 4];
    let free = Query {
        prompt: PromptSize::Tokens(1200),
        cached: PromptSize::Tokens(800),
        load: Load {
            slots: 4,
            busy: 2,
            queue_ahead: 0,
            in_flight: &flights[..2],
        },
    };
    let full = Query {
        load: Load {
            busy: 4,
            queue_ahead: 1,
            in_flight: &flights,
            ..free.load
        },
        ..free
    };
    let bytes = Query {
        prompt: PromptSize::Bytes(4800),
        cached: PromptSize::Bytes(3200),
        ..free
    };
    // Two slots prefilling prompts, 150 ms into them: each is drained by
    // its time on the member's curve.
    let prefilling = [InFlight {
        generated: 0,
        max_tokens: Some(128),
        prefill_left: 600,
        decoding_ms: 0,
        prefilling_ms: 150,
        prefill_context: 400,
    }; 2];
    let beside = Query {
        load: Load {
            in_flight: &prefilling,
            ..free.load
        },
        ..free
    };
    let mut k = 0u32;
    let mut group = c.benchmark_group("ttft");
    group.bench_function("predict/free_slot", |b| {
        b.iter(|| {
            k = (k + 1) % MEMBERS;
            black_box(book.predict(&k, black_box(&free)))
        })
    });
    group.bench_function("predict/all_busy_one_queued", |b| {
        b.iter(|| {
            k = (k + 1) % MEMBERS;
            black_box(book.predict(&k, black_box(&full)))
        })
    });
    group.bench_function("predict/prompts_prefilling_beside", |b| {
        b.iter(|| {
            k = (k + 1) % MEMBERS;
            black_box(book.predict(&k, black_box(&beside)))
        })
    });
    group.bench_function("predict/prompt_in_bytes", |b| {
        b.iter(|| {
            k = (k + 1) % MEMBERS;
            black_box(book.predict(&k, black_box(&bytes)))
        })
    });
    let progress = Progress {
        total: 1200,
        cache: 800,
        processed: 1000,
        time_ms: 80,
    };
    group.bench_function("correct/mid_prefill", |b| {
        b.iter(|| {
            k = (k + 1) % MEMBERS;
            black_box(book.correct(&k, black_box(&progress), 95.0, 2, 0))
        })
    });
    let mut i = 0u32;
    group.bench_function("observe", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            book.observe(&(i % MEMBERS), black_box(&observation(i)));
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
