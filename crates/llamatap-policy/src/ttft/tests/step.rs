//! The fixed costs beside busy slots: a request that finds other slots
//! decoding waits for their batch to end, half a decode step on average.

use super::*;

#[test]
fn a_request_beside_decoding_slots_waits_half_a_step() {
    let m = Member::cpu();
    let mut book = TtftBook::new(2);
    let mut rng = StdRng::seed_from_u64(5);
    // Half a step of the synthetic member's decode with one other slot
    // busy (its decode slows by a tenth a busy slot).
    let half_step = 0.5 * m.decode * 1.1;
    for i in 0..60 {
        let new = rng.random_range(20..600);
        let busy = u32::from(i % 2 == 1);
        let mut o = m.observation(new, 0, busy, 1.0);
        // Every one started at once: a free slot, nothing prefilling.
        o.ttft_ms = Some(o.timings.prompt_ms + m.overhead + half_step * f64::from(busy));
        book.observe(&0, &o);
    }
    let l = book.learned(&0).unwrap();
    // The step is not taken for part of the fixed overhead...
    assert!(rel_err(l.overhead_ms.unwrap(), m.overhead) < 0.05, "{l:?}");
    // ...but added where slots are busy.
    for busy in [0, 1] {
        let e = estimate(book.predict(&0, &busy_query(40, busy)));
        let want = m.ttft(40, 0, busy) + half_step * f64::from(busy);
        assert!(rel_err(e.ttft_ms, want) < 0.05, "{busy}: {e:?} vs {want}");
    }
}
