//! What predicting costs a request in the proxy, beyond the predictor's own
//! arithmetic (`crates/llamatap-policy/benches/ttft.rs`): the key's hash,
//! the member's load read from the fleet, the book's lock, and, for a
//! request with a TTFT objective, one prediction per member (with each
//! member's cached prefix from the affinity book) and the verdict; and the
//! learning in `logging`. Two members, each trained on 32 answers.
//!
//! Run: `cargo bench --bench ttft_glue -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use llamatap::config::{Config, Overrides, RawConfig};
use llamatap::fleet::Fleet;
use llamatap::ttft::{slo, Finished, Predictor};
use llamatap_policy::router::Chain;
use llamatap_policy::ttft::Timings;
use std::hint::black_box;
use std::time::Duration;

fn fleet() -> Option<Fleet> {
    let o = Overrides {
        upstreams: vec![
            "http://127.0.0.1:9000".into(),
            "http://127.0.0.1:9001".into(),
        ],
        ..Overrides::default()
    };
    let config = Config::from_raw(RawConfig::default(), &o).ok()?;
    let f = Fleet::new(&config);
    for m in f.members() {
        m.set_health(Ok(()));
        m.set_total_slots(Some(2));
        f.set_models(&m, vec!["model.gguf".into()]);
    }
    Some(f)
}

fn finished(i: u32) -> Finished {
    let prompt_n = 300 + 37 * (i % 11);
    Finished {
        timings: Timings {
            prompt_n,
            prompt_ms: 0.9 * f64::from(prompt_n),
            cache_n: 0,
            predicted_n: 16,
            predicted_ms: 90.0,
        },
        max_tokens: Some(16),
        ttft: Some(Duration::from_secs_f64(
            (0.9 * f64::from(prompt_n) + 5.0) / 1000.0,
        )),
        prefill_others: 0,
        prefill_before: 0,
        probe: false,
    }
}

fn bench(c: &mut Criterion) {
    let Some(f) = fleet() else {
        return;
    };
    let p = Predictor::default();
    for i in 0..32 {
        for m in 0..2 {
            let at = p.predict(
                &f,
                m,
                Some("model"),
                (u64::from(300 + 37 * (i % 11)) * 4, 0),
                false,
            );
            p.learn(&f, &at, &finished(i));
        }
    }
    let chain = Chain::default();
    let mut group = c.benchmark_group("ttft_glue");
    group.bench_function("dispatch/one_member", |b| {
        b.iter(|| black_box(p.predict(&f, 0, Some("model"), (black_box(2000), 0), true)))
    });
    group.bench_function("objective/two_members_and_verdict", |b| {
        b.iter(|| {
            let members: Vec<_> = f
                .servers(Some("model"))
                .into_iter()
                .map(|m| {
                    let sizes = (black_box(2000), f.cached_bytes(m, &chain));
                    (m, p.bound(&f, m, Some("model"), sizes, (0, false)))
                })
                .collect();
            black_box(slo::judge(300, &members))
        })
    });
    let at = p.predict(&f, 0, Some("model"), (2000, 0), true);
    group.bench_function("learn", |b| {
        b.iter(|| p.learn(&f, black_box(&at), &finished(3)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
