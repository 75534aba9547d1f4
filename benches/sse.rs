//! Throughput of the SSE reader and llama-server event parsing on realistic
//! OpenAI chat token events (about 250 bytes each), fed one event per chunk
//! (how llama-server flushes) and in 4 KiB chunks (a slow reader's view).
//!
//! cargo bench --bench sse

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llamatap_wire::llama::{parse_event, StreamFormat};
use llamatap_wire::sse::SseReader;

const EVENTS: usize = 1000;
const WORDS: [&str; 8] = [" word", " the", " llama", ",", " é", "\\n", " quick", " 🦙"];

/// One llama-server chat chunk event per token, as the wire carries it.
fn events() -> Vec<Vec<u8>> {
    (0..EVENTS)
        .map(|i| {
            format!(
                "data: {{\"choices\":[{{\"finish_reason\":null,\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}],\
                 \"created\":{},\"id\":\"chatcmpl-Zk3mQ8vR2tLw9XcY7bN4pJ6hF1sD0aGe\",\"model\":\"tiny.gguf\",\
                 \"system_fingerprint\":\"b0-unknown\",\"object\":\"chat.completion.chunk\"}}\n\n",
                WORDS[i % WORDS.len()],
                1_764_493_200 + i / 50,
            )
            .into_bytes()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let per_event = events();
    let stream: Vec<u8> = per_event.concat();
    let in_4k: Vec<&[u8]> = stream.chunks(4096).collect();
    let one_each: Vec<&[u8]> = per_event.iter().map(Vec::as_slice).collect();
    let mean = stream.len() / EVENTS;

    let mut group = c.benchmark_group(format!("sse_{mean}B_events"));
    group.throughput(Throughput::Elements(EVENTS as u64));
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (name, chunks) in [("event_per_chunk", &one_each), ("4KiB_chunks", &in_4k)] {
        group.bench_with_input(BenchmarkId::new("reader", name), chunks, |b, chunks| {
            let mut reader = SseReader::new(1 << 20);
            b.iter(|| {
                let mut bytes = 0usize;
                for chunk in chunks.iter() {
                    reader.feed(black_box(chunk), |e| bytes += e.data.len());
                }
                black_box(bytes)
            });
        });
        group.bench_with_input(
            BenchmarkId::new("reader+parse_event", name),
            chunks,
            |b, chunks| {
                let mut reader = SseReader::new(1 << 20);
                b.iter(|| {
                    let mut visible = 0usize;
                    for chunk in chunks.iter() {
                        reader.feed(black_box(chunk), |e| {
                            let d = parse_event(StreamFormat::OpenAiChat, e);
                            visible += d.visible.map_or(0, |v| v.len());
                        });
                    }
                    black_box(visible)
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
