use super::*;
use crate::config::{Config, Overrides, RawConfig};

fn fleet(n: usize) -> Fleet {
    let o = Overrides {
        upstreams: (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect(),
        ..Overrides::default()
    };
    let config = Config::from_raw(RawConfig::default(), &o).unwrap();
    let f = Fleet::new(&config);
    for m in f.members() {
        m.set_address(m.upstream.address.parse().unwrap());
        m.set_health(Ok(()));
        m.set_total_slots(Some(2));
    }
    f
}

/// A finished answer of `prompt_n` new tokens at 2 ms a token.
fn finished(prompt_n: u32) -> Finished {
    let prompt_ms = 2.0 * f64::from(prompt_n);
    Finished {
        timings: Timings {
            prompt_n,
            prompt_ms,
            cache_n: 0,
            predicted_n: 16,
            predicted_ms: 160.0,
        },
        max_tokens: Some(16),
        ttft: Some(Duration::from_secs_f64((prompt_ms + 5.0) / 1000.0)),
        prefill_others: 0,
        prefill_before: 0,
        probe: false,
    }
}

#[test]
fn nothing_is_predicted_before_a_member_and_model_was_measured() {
    let f = fleet(2);
    let p = Predictor::default();
    let got = p.predict(&f, 0, Some("m"), (4000, 0), false);
    assert_eq!(got.prediction, Prediction::NoData);
    assert_eq!(got.ms(), None);
    assert_eq!(got.confidence(), None);
    assert!(got.at_once);
    assert!(p.is_empty());
}

#[test]
fn a_member_and_model_learn_from_their_own_answers_only() {
    let f = fleet(2);
    for m in f.members() {
        f.set_models(&m, vec!["m".into(), "n".into()]);
    }
    let p = Predictor::default();
    for i in 0..12u32 {
        let prompt_n = 200 + 100 * (i % 4);
        let bytes = u64::from(prompt_n) * 4;
        let at = p.predict(&f, 0, Some("m"), (bytes, 0), false);
        p.learn(&f, &at, &finished(prompt_n));
    }
    assert_eq!(p.len(), 1);
    let got = p.predict(&f, 0, Some("m"), (1600, 0), false);
    let ms = got.ms().expect("a prediction after twelve answers");
    // 400 tokens at 2 ms a token, and a few ms of overhead.
    assert!((700..=1000).contains(&ms), "{ms} ms");
    // Another member, and another model on the same member, know nothing.
    let other = p.predict(&f, 1, Some("m"), (1600, 0), false);
    assert_eq!(other.prediction, Prediction::NoData);
    let model = p.predict(&f, 0, Some("n"), (1600, 0), false);
    assert_eq!(model.prediction, Prediction::NoData);
}

#[test]
fn a_member_starts_from_a_peer_serving_the_same_model() {
    let f = fleet(2);
    // Member 0 serves two models, member 1 one of them.
    let members = f.members();
    f.set_models(&members[0], vec!["m".into(), "n".into()]);
    f.set_models(&members[1], vec!["m".into()]);
    let p = Predictor::default();
    // 40 ms a prefill, and 1 ms a token.
    let answer = |prompt_n: u32| Finished {
        timings: Timings {
            prompt_ms: 40.0 + f64::from(prompt_n),
            ..finished(prompt_n).timings
        },
        ttft: Some(Duration::from_secs_f64(
            (45.0 + f64::from(prompt_n)) / 1000.0,
        )),
        ..finished(prompt_n)
    };
    for i in 0..16u32 {
        let prompt_n = 100 + 100 * (i % 8);
        let at = p.predict(&f, 0, Some("m"), (u64::from(prompt_n) * 4, 0), false);
        p.learn(&f, &at, &answer(prompt_n));
    }
    // One short answer on member 1 of the same model, and on member 0 of
    // another: the first starts from member 0's curve, the second alone is
    // a cost per token (80 ms for 40 tokens: 2 ms a token).
    for (member, model) in [(1, "m"), (0, "n")] {
        let at = p.predict(&f, member, Some(model), (160, 0), false);
        p.learn(&f, &at, &answer(40));
    }
    let ms = |member, model| {
        let got = p.predict(&f, member, Some(model), (1600, 0), false);
        got.prediction.ttft_ms().expect("a prediction")
    };
    // 400 tokens: 440 ms, and the 5 ms of overhead member 0 learned.
    let peer = ms(1, "m");
    assert!((420.0..=490.0).contains(&peer), "{peer} ms");
    let alone = ms(0, "n");
    assert!(alone > 700.0, "{alone} ms");
}

#[test]
fn the_load_counts_the_requests_in_flight_but_not_this_one() {
    let f = fleet(1);
    let p = Predictor::default();
    let d = f.choose(None, &Chain::default(), None, &[]).unwrap();
    let counted = p.predict(&f, d.upstream, None, (100, 0), true);
    assert_eq!(counted.busy_others, 0);
    assert!(counted.at_once);
    let _second = f.choose(None, &Chain::default(), None, &[]).unwrap();
    let _third = f.choose(None, &Chain::default(), None, &[]).unwrap();
    // Three in flight on two slots: this one would queue behind them.
    let next = p.predict(&f, 0, None, (100, 0), false);
    assert_eq!(next.busy_others, 3);
    assert!(!next.at_once);
}

#[test]
fn an_answer_without_timings_teaches_nothing() {
    let f = fleet(1);
    let p = Predictor::default();
    let at = p.predict(&f, 0, None, (100, 0), false);
    p.learn(&f, &at, &Finished::default());
    assert!(p.is_empty());
}

#[test]
fn helpers_round_and_measure() {
    assert_eq!(round_ms(12.5), 13);
    assert_eq!(round_ms(-3.0), 0);
    assert_eq!(round_ms(f64::NAN), 0);
    assert_eq!(prompt_bytes(&Chain::default(), Some(900)), 900);
    assert_eq!(prompt_bytes(&Chain::default(), None), 0);
    let f = fleet(2);
    f.set_models(&f.members()[0], vec!["a".into(), "b".into()]);
    assert_ne!(key(&f, 0, Some("a")), key(&f, 0, Some("b")));
    assert_ne!(key(&f, 0, Some("a")), key(&f, 1, Some("a")));
    assert_eq!(key(&f, 0, None), key(&f, 0, Some("")));
}

#[test]
fn every_name_a_member_of_one_model_answers_to_is_one_key() {
    let f = fleet(2);
    let members = f.members();
    // Before its list is read, and after: one key for every name.
    let one = key(&f, 0, Some("medium.gguf"));
    f.set_models(&members[0], vec!["medium.gguf".into()]);
    f.set_models(&members[1], vec!["a.gguf".into(), "b.gguf".into()]);
    for name in [None, Some(""), Some("gpt-4o"), Some("medium.gguf")] {
        assert_eq!(key(&f, 0, name), one, "{name:?}");
    }
    assert_eq!(model_of(&f, &one).as_deref(), Some("medium.gguf"));
    // So a client's made-up names add no keys to the book.
    let p = Predictor::default();
    for (i, name) in ["x", "y", "z", "medium.gguf"].into_iter().enumerate() {
        let at = p.predict(&f, 0, Some(name), (1600, 0), false);
        p.learn(&f, &at, &finished(400 + i as u32));
    }
    assert_eq!(p.len(), 1);
    // A member of several models: each name is its own key, and stands
    // for the model of that name; one it does not report, for none.
    let (a, b) = (key(&f, 1, Some("a.gguf")), key(&f, 1, Some("b.gguf")));
    assert_ne!(a, b);
    assert_eq!(model_of(&f, &b).as_deref(), Some("b.gguf"));
    assert_eq!(model_of(&f, &key(&f, 1, Some("other"))), None);
}

#[test]
fn sure_after_a_few_answers_started_at_once() {
    let f = fleet(1);
    let p = Predictor::default();
    for i in 0..8u32 {
        let prompt_n = 400 + 10 * (i % 3);
        let at = p.predict(&f, 0, None, (u64::from(prompt_n) * 4, 0), false);
        p.learn(&f, &at, &finished(prompt_n));
    }
    let got = p.predict(&f, 0, None, (1600, 0), false);
    assert_eq!(got.confidence(), Some(Confidence::High), "{got:?}");
}

#[test]
fn a_progress_event_corrects_the_prediction_by_what_it_says() {
    let f = fleet(1);
    let p = Predictor::default();
    let first = p.predict(&f, 0, Some("m"), (1600, 0), false);
    let progress = llamatap_policy::ttft::Progress {
        total: 400,
        cache: 0,
        processed: 0,
        time_ms: 0,
    };
    // Nothing learned: nothing to correct.
    assert_eq!(
        p.correct(&first, &progress, (first.sent, 0)),
        Prediction::NoData
    );
    for _ in 0..8 {
        let at = p.predict(&f, 0, Some("m"), (1600, 0), false);
        p.learn(&f, &at, &finished(400));
    }
    let at = p.predict(&f, 0, Some("m"), (1600, 0), false);
    // Half the prompt done: less is left than at its start.
    let start = p.correct(&at, &progress, (at.sent, 0)).ttft_ms().unwrap();
    let half = llamatap_policy::ttft::Progress {
        processed: 200,
        time_ms: 400,
        ..progress
    };
    let later = at.sent + Duration::from_millis(400);
    let corrected = p.correct(&at, &half, (later, 0)).ttft_ms().unwrap();
    assert!(start > 0.0 && corrected >= 400.0, "{start} {corrected}");
    // The slot started at once and ran as learned (2 ms a token): about
    // the same TTFT from dispatch, whichever event said it.
    assert!(
        (corrected / start - 1.0).abs() < 0.25,
        "{start} {corrected}"
    );
}

#[test]
fn a_prompt_still_prefilling_beside_is_counted_until_its_prefill_ends() {
    let f = fleet(1);
    let p = Predictor::default();
    for i in 0..12u32 {
        let prompt_n = 200 + 100 * (i % 4);
        let at = p.predict(&f, 0, None, (u64::from(prompt_n) * 4, 0), false);
        p.learn(&f, &at, &finished(prompt_n));
    }
    // One request in flight on the member (one of its two slots).
    let _other = f.choose(None, &Chain::default(), None, &[]).unwrap();
    let alone = p.predict(&f, 0, None, (1600, 0), false);
    // That request's 800 tokens are still to prefill: they go first.
    let b = p
        .flights
        .board(
            0,
            InFlight {
                generated: 0,
                max_tokens: Some(16),
                prefill_left: 800,
                decoding_ms: 0,
                prefilling_ms: 0,
                prefill_context: 0,
            },
            None,
        )
        .unwrap();
    let beside = p.predict(&f, 0, None, (1600, 0), false);
    let (a, s) = (alone.prediction.ttft_ms(), beside.prediction.ttft_ms());
    assert!(s.unwrap() > a.unwrap() + 100.0, "alone {a:?}, beside {s:?}");
    assert!(alone.at_once && !beside.at_once);
    assert_eq!((alone.beside_tokens, beside.beside_tokens), (0, 800));
    // Its first token came: nothing is ahead any more.
    p.flights.prefill_left(b, 0);
    let after = p.predict(&f, 0, None, (1600, 0), false);
    assert_eq!(after.prediction, alone.prediction);
    assert!(after.at_once);
    p.flights.land(b);
    let mut out = [InFlight::default(); 4];
    assert_eq!(p.flights.of(0, &mut out), 0);
}

#[test]
fn answers_that_shared_their_batches_teach_the_whole_batches() {
    // Each learns a dozen answers alone, then a dozen whose 400 tokens went
    // through batches with 400 of another prompt's (1,600 ms, not 800): one
    // told so, one not.
    let f = fleet(1);
    let (told, untold) = (Predictor::default(), Predictor::default());
    for p in [&told, &untold] {
        for i in 0..12u32 {
            let prompt_n = 200 + 100 * (i % 4);
            let at = p.predict(&f, 0, None, (u64::from(prompt_n) * 4, 0), false);
            p.learn(&f, &at, &finished(prompt_n));
        }
    }
    for _ in 0..12 {
        for (p, others) in [(&told, 400), (&untold, 0)] {
            let at = p.predict(&f, 0, None, (1600, 0), false);
            let mut shared = finished(800);
            shared.timings.prompt_n = 400;
            shared.prefill_others = others;
            p.learn(&f, &at, &shared);
        }
    }
    let ms = |p: &Predictor| p.predict(&f, 0, None, (1600, 0), false).ms().unwrap();
    // 400 tokens alone: 800 ms and a few of overhead, as first learned.
    assert!((700..=1000).contains(&ms(&told)), "{} ms", ms(&told));
    assert!(ms(&untold) > 1200, "{} ms", ms(&untold));
}

#[test]
fn the_tokens_to_prefill_are_the_prompts_less_its_cached_share() {
    let f = fleet(1);
    let p = Predictor::default();
    let none = p.predict(&f, 0, None, (4000, 0), false);
    assert_eq!(new_tokens(&none, 1000), 750);
    for i in 0..12u32 {
        let prompt_n = 200 + 100 * (i % 4);
        let at = p.predict(&f, 0, None, (u64::from(prompt_n) * 4, 0), false);
        p.learn(&f, &at, &finished(prompt_n));
    }
    let known = p.predict(&f, 0, None, (4000, 0), false);
    let Prediction::Estimate(e) = known.prediction else {
        panic!("no estimate after twelve answers");
    };
    assert_eq!(new_tokens(&known, 0), e.prompt_tokens);
    assert_eq!(new_tokens(&known, 4000), 0);
    assert_eq!(new_tokens(&known, 9000), 0);
    let half = new_tokens(&known, 2000);
    assert!(
        half.abs_diff(e.prompt_tokens / 2) <= 1,
        "{half} of {}",
        e.prompt_tokens
    );
}

#[test]
fn answers_predicted_uncached_teach_the_template_head() {
    // llama-server reused 12 tokens of each prompt the affinity book
    // thought new (the template's head): they are not prefilled again.
    let f = fleet(1);
    let head = Predictor::default();
    let none = Predictor::default();
    for i in 0..12u32 {
        let prompt_n = 100 + 60 * (i % 4);
        let bytes = u64::from(prompt_n + 12) * 4;
        let mut done = finished(prompt_n);
        done.timings.cache_n = 12;
        let at = head.predict(&f, 0, Some("m"), (bytes, 0), false);
        assert_eq!(at.cached_bytes, 0);
        head.learn(&f, &at, &done);
        // The same answers, predicted with their 12 tokens known cached.
        let at = none.predict(&f, 0, Some("m"), (bytes, 48), false);
        none.learn(&f, &at, &done);
    }
    let with = head.predict(&f, 0, Some("m"), (452, 0), false);
    let without = none.predict(&f, 0, Some("m"), (452, 0), false);
    let (with, without) = (with.ms().unwrap_or(0), without.ms().unwrap_or(0));
    // 101 new tokens at 2 ms a token with the head; 113 without.
    assert!(with + 15 < without, "{with} vs {without} ms");
    assert!((190..=230).contains(&with), "{with} ms");
}

#[test]
fn the_slot_view_follows_each_members_slots_and_their_count() {
    use llamatap_policy::router::Chain;
    use llamatap_wire::request::Route;
    let chat = |system: &str, user: &str| {
        let body = serde_json::json!({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]});
        Chain::from_json(Route::ChatCompletions, &body)
    };
    let system = "policy ".repeat(200);
    let (a, b, c) = (
        chat(&system, "first customer"),
        chat(&system, "second customer"),
        chat(&system, "third customer"),
    );
    let only_system = Chain::from_json(
        Route::ChatCompletions,
        &serde_json::json!({"messages": [{"role": "system", "content": system}]}),
    )
    .total_bytes();
    let f = fleet(2);
    let p = Predictor::default();
    // a and b at once on member 0, then c: c takes a's slot (the first
    // most like it), and a's conversation is left at the system prompt.
    let ta = p.slots.take(&f, 0, &a).unwrap();
    let tb = p.slots.take(&f, 0, &b).unwrap();
    p.slots.release(0, ta, (0, 8));
    p.slots.release(0, tb, (0, 8));
    let tc = p.slots.take(&f, 0, &c).unwrap();
    p.slots.release(0, tc, (0, 8));
    let held = a.total_bytes();
    assert_eq!(p.slots.reused(&f, 0, &a, held), only_system);
    assert_eq!(p.slots.reused(&f, 0, &b, b.total_bytes()), b.total_bytes());
    // Member 1 has its own view, with nothing in it: the book's figure.
    assert_eq!(p.slots.reused(&f, 1, &a, held), held);
    // A restart empties the member's view: the book's figure (itself
    // emptied by the restart) stands.
    let m0 = f.member(0).unwrap();
    m0.note_restart();
    assert_eq!(p.slots.reused(&f, 0, &a, held), held);
    let tc = p.slots.take(&f, 0, &c).unwrap();
    p.slots.release(0, tc, (0, 8));
    assert_eq!(p.slots.reused(&f, 0, &c, c.total_bytes()), c.total_bytes());
    // A member's slot count changing makes its view again; unknown, the
    // book's figure stands.
    m0.set_total_slots(Some(4));
    assert_eq!(p.slots.reused(&f, 0, &a, held), held);
    m0.set_total_slots(None);
    assert_eq!(p.slots.take(&f, 0, &a), None);
    assert_eq!(p.slots.reused(&f, 0, &a, held), held);
}

#[test]
fn a_restarted_member_has_no_floor_until_it_answers_again() {
    let f = fleet(1);
    let p = Predictor::default();
    let floor = || {
        p.bound(&f, 0, None, (1600, 0), (0, false))
            .and_then(|b| b.floor_ms)
    };
    for prompt_n in [400, 410, 420] {
        let at = p.predict(&f, 0, None, (u64::from(prompt_n) * 4, 0), false);
        p.learn(&f, &at, &finished(prompt_n));
    }
    // 16 tokens in 160 ms, 5 ms outside the prefill: half of 10 + 5.
    assert_eq!(floor(), Some(7.5));
    // A new process may be faster: its floor is not the old one's.
    let m = f.member(0).unwrap();
    m.note_restart();
    assert_eq!(floor(), None);
    let at = p.predict(&f, 0, None, (1600, 0), false);
    assert!(at.ms().is_some(), "its rates stand");
    p.learn(&f, &at, &finished(400));
    assert_eq!(floor(), Some(7.5));
}
