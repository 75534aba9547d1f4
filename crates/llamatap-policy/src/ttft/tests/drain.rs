//! A prompt prefilling beside, partly done: llama-server reports a batch's
//! progress only when it ends, so a prompt of one batch reads as whole
//! until its first token; its time on it says how much is behind it.

use super::*;

/// A prompt of 900 tokens prefilling in the other slot, `ms` into it.
fn beside(ms: u32) -> [InFlight; 1] {
    [InFlight {
        max_tokens: Some(64),
        prefill_left: 900,
        prefilling_ms: ms,
        ..InFlight::default()
    }]
}

fn with<'a>(flights: &'a [InFlight], slots: u32) -> Query<'a> {
    Query {
        load: Load {
            slots,
            busy: 1,
            queue_ahead: 0,
            in_flight: flights,
        },
        ..idle(300, 0)
    }
}

#[test]
fn a_prompt_prefilling_beside_counts_for_what_its_time_has_not_gone_through() {
    let m = Member::cpu();
    let book = trained(&m, 200, 0.0, 12);
    // Its whole prefill, as this member runs it with one other slot busy.
    let whole = m.prefill(900, 0, 1);
    let at = |ms: f64| {
        let flights = beside(ms as u32);
        estimate(book.predict(&0, &with(&flights, 2)))
    };
    let (start, half, done) = (at(0.0), at(whole / 2.0), at(whole * 1.2));
    // Not started, or its start not seen: all 900 tokens.
    assert_eq!(start.ahead_tokens, 900, "{start:?}");
    // Half its time gone: about half its tokens.
    assert!(half.ahead_tokens.abs_diff(450) <= 45, "{half:?}");
    assert!(half.wait_ms < start.wait_ms * 0.6, "{half:?} vs {start:?}");
    // Past its expected time: nothing ahead, the prompt alone.
    let alone = estimate(book.predict(&0, &busy_query(300, 1)));
    assert_eq!(done.ahead_tokens, 0, "{done:?}");
    assert!(rel_err(done.ttft_ms, alone.ttft_ms) < 1e-9, "{done:?}");
    // The same 900 tokens after 3,000 in their slot take longer (they
    // attend to them): the same time has gone through fewer of them.
    let flights = [InFlight {
        prefill_context: 3000,
        ..beside((whole / 2.0) as u32)[0]
    }];
    let long = estimate(book.predict(&0, &with(&flights, 2)));
    let (whole_long, ahead) = (m.prefill(900, 3000, 1), long.ahead_tokens);
    let want = 900.0 * (1.0 - whole / 2.0 / whole_long);
    assert!(whole_long > whole * 1.2, "{whole_long} vs {whole}");
    assert!((f64::from(ahead) - want).abs() <= 45.0, "{ahead} vs {want}");
}

#[test]
fn a_slot_prefilling_frees_sooner_the_longer_it_has_been_at_it() {
    let m = Member::cpu();
    let book = trained(&m, 200, 0.0, 12);
    // One slot, busy with the prompt: the request waits for it to free.
    let wait = |ms: u32| {
        let flights = beside(ms);
        estimate(book.predict(&0, &with(&flights, 1))).wait_ms
    };
    let (start, later) = (wait(0), wait(200));
    // 200 ms of the prefill are behind it (the answer's decode is left).
    assert!(rel_err(start - later, 200.0) < 0.05, "{start} → {later}");
}
