#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use llamatap_wire::request::Route;
use proptest::prelude::*;
use serde_json::json;

/// A chat of `system` then the `turns` (user, assistant, user, ...).
fn chat(system: &str, turns: &[&str]) -> Chain {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for (i, t) in turns.iter().enumerate() {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": t}));
    }
    Chain::from_json(Route::ChatCompletions, &json!({ "messages": messages }))
}

/// A system prompt of 1,200 bytes and three conversations' first turns
/// over it.
fn three_over_one_system() -> (String, [Chain; 3]) {
    let system = text(0, 1200);
    let firsts = [1, 2, 3].map(|i| chat(&system, &[&text(i, 200)]));
    (system, firsts)
}

/// The second turn of conversation `i` (1 to 3) of
/// [`three_over_one_system`].
fn second_turn(system: &str, i: u32) -> Chain {
    chat(system, &[&text(i, 200), "An answer.", &text(4, 100)])
}

/// A text of `n` bytes, distinct per `seed`.
fn text(seed: u32, n: usize) -> String {
    let word = format!("w{seed} ");
    word.repeat(n / word.len() + 1)[..n].to_string()
}

#[test]
fn a_conversation_still_in_its_slot_reuses_all_it_sent() {
    let system = text(0, 1200);
    let mut view = SlotView::new(2);
    let turn1 = chat(&system, &[&text(1, 200)]);
    let slot = view.take(&turn1).unwrap();
    view.release(slot, (0, 20));
    let turn2 = chat(&system, &[&text(1, 200), "An answer.", &text(2, 100)]);
    let sent = turn1.total_bytes();
    assert_eq!(view.reused(&turn2, sent), sent);
}

#[test]
fn conversations_sharing_a_system_prompt_replace_each_other_down_to_it() {
    // Two slots, three conversations over one long system prompt. a and b
    // run at once, so b takes the empty slot; c, after both, takes the
    // first slot most like it (both are, by the system prompt), which
    // keeps more than half of its prompt: a is lost past the system
    // prompt, though the index, which records what was sent, holds it
    // whole.
    let (system, [a1, b1, c1]) = three_over_one_system();
    let mut view = SlotView::new(2);
    let sa = view.take(&a1).unwrap();
    let sb = view.take(&b1).unwrap();
    view.release(sa, (0, 10));
    view.release(sb, (0, 10));
    let sc = view.take(&c1).unwrap();
    view.release(sc, (0, 10));
    let a2 = second_turn(&system, 1);
    let sent = a1.total_bytes();
    let system_bytes = chat(&system, &[]).total_bytes();
    assert_eq!(view.reused(&a2, sent), system_bytes);
    assert!(system_bytes < sent);
    // b's first turn is still in the other slot.
    let b2 = second_turn(&system, 2);
    assert_eq!(view.reused(&b2, b1.total_bytes()), b1.total_bytes());
}

#[test]
fn one_after_another_they_all_go_to_one_slot() {
    // llama-server skips empty slots when it looks for a similar one: with
    // nothing running at once, every conversation over the shared system
    // prompt takes the same slot, and only the last one is kept, though
    // other slots stay empty.
    let (system, firsts) = three_over_one_system();
    let mut view = SlotView::new(4);
    for c in &firsts {
        let t = view.take(c).unwrap();
        view.release(t, (0, 10));
    }
    let system_bytes = chat(&system, &[]).total_bytes();
    for i in 1..=2 {
        let turn = second_turn(&system, i);
        let held = firsts[i as usize - 1].total_bytes();
        assert_eq!(view.reused(&turn, held), system_bytes);
    }
    let c2 = second_turn(&system, 3);
    assert_eq!(
        view.reused(&c2, firsts[2].total_bytes()),
        firsts[2].total_bytes()
    );
}

#[test]
fn a_prompt_like_no_slot_is_restored_from_the_host_cache() {
    // Distinct conversations share nothing: each takes the least recently
    // used slot, llama-server saves what that slot held and restores the
    // best cached prompt, so what was sent is what is reused.
    let mut view = SlotView::new(2);
    let chains: Vec<Chain> = (1..=3)
        .map(|i| chat(&text(i, 900), &[&text(i + 10, 100)]))
        .collect();
    for c in &chains {
        let s = view.take(c).unwrap();
        view.release(s, (0, 10));
    }
    let again = chat(
        &text(1, 900),
        &[&text(11, 100), "An answer.", &text(20, 50)],
    );
    let sent = chains[0].total_bytes();
    assert_eq!(view.reused(&again, sent), sent);
}

#[test]
fn a_slot_keeping_less_than_half_goes_through_the_host_cache() {
    // A short question over the head of a long document: the slot that
    // held the document would keep less than half of it, so llama-server
    // looks in its host cache, and what was sent is what counts.
    let mut view = SlotView::new(1);
    let document = chat(&text(0, 300), &[&text(1, 3000)]);
    let s = view.take(&document).unwrap();
    view.release(s, (0, 10));
    let question = chat(&text(0, 300), &[&text(2, 40)]);
    let held = chat(&text(0, 300), &[]).total_bytes() + 20;
    assert_eq!(view.reused(&question, held), held);
}

#[test]
fn busy_slots_are_not_chosen_and_a_released_one_is() {
    let system = text(0, 1200);
    let mut view = SlotView::new(2);
    let a1 = chat(&system, &[&text(1, 200)]);
    let sa = view.take(&a1).unwrap();
    // While a's answer runs, its turn goes to the other (empty) slot.
    let a2 = chat(&system, &[&text(1, 200), "An answer.", &text(2, 100)]);
    assert_eq!(view.reused(&a2, a1.total_bytes()), a1.total_bytes());
    let sb = view.take(&a2).unwrap();
    view.release(sa, (0, 10));
    view.release(sb, (0, 10));
    let a3 = chat(
        &system,
        &[
            &text(1, 200),
            "An answer.",
            &text(2, 100),
            "Another.",
            &text(3, 60),
        ],
    );
    assert_eq!(view.reused(&a3, a2.total_bytes()), a2.total_bytes());
}

#[test]
fn a_request_that_found_every_slot_busy_takes_the_first_to_free() {
    // Two slots busy with a and b; c waits. Had it been placed at once by
    // similarity, it would have replaced either; llama-server gives it the
    // slot that frees first (b's), so a's conversation stays whole.
    let (system, [a1, b1, c1]) = three_over_one_system();
    let mut view = SlotView::new(2);
    let ta = view.take(&a1).unwrap();
    let tb = view.take(&b1).unwrap();
    let tc = view.take(&c1).unwrap();
    view.release(tb, (0, 10));
    view.release(ta, (0, 10));
    let a2 = second_turn(&system, 1);
    assert_eq!(view.reused(&a2, a1.total_bytes()), a1.total_bytes());
    let b2 = second_turn(&system, 2);
    let system_bytes = chat(&system, &[]).total_bytes();
    assert_eq!(view.reused(&b2, b1.total_bytes()), system_bytes);
    // c's own release frees its slot; a ticket no longer held is ignored.
    view.release(tc, (0, 10));
    view.release(tc, (0, 10));
    let c2 = second_turn(&system, 3);
    assert_eq!(view.reused(&c2, c1.total_bytes()), c1.total_bytes());
}

#[test]
fn a_long_answer_makes_its_slot_keep_less_than_half() {
    // The same slot and request, once after a short answer and once after
    // a long one: llama-server's f_keep counts the answer's tokens, which
    // the view counts at the prompt's own bytes per token.
    let system = text(0, 600);
    let other = chat(&system, &[&text(1, 200)]);
    let next = chat(&system, &[&text(2, 200), "An answer.", &text(3, 100)]);
    let held = chat(&system, &[&text(2, 200)]).total_bytes();
    let system_bytes = chat(&system, &[]).total_bytes();
    let after = |answer: u64| {
        let mut view = SlotView::new(1);
        let t = view.take(&other).unwrap();
        // About 5 bytes a token.
        view.release(t, (other.total_bytes() / 5, answer));
        view.reused(&next, held)
    };
    assert_eq!(after(20), system_bytes);
    assert_eq!(after(400), held);
}

#[test]
fn never_more_than_the_index_holds() {
    // The member restarted: the index was emptied, the view still shows
    // the old chain.
    let system = text(0, 1200);
    let mut view = SlotView::new(1);
    let a1 = chat(&system, &[&text(1, 200)]);
    let s = view.take(&a1).unwrap();
    view.release(s, (0, 10));
    let a2 = chat(&system, &[&text(1, 200), "An answer.", &text(2, 100)]);
    assert_eq!(view.reused(&a2, 0), 0);
    view.clear();
    assert_eq!(view.reused(&a2, 500), 500);
}

#[test]
fn an_empty_chain_or_view_takes_no_slot() {
    let mut none = SlotView::new(0);
    let c = chat(&text(0, 100), &[]);
    assert_eq!(none.take(&c), None);
    assert_eq!(none.reused(&c, 77), 77);
    let mut view = SlotView::new(2);
    assert_eq!(view.take(&Chain::default()), None);
    assert_eq!(view.reused(&Chain::default(), 5), 5);
}

fn arb_chain() -> impl Strategy<Value = Chain> {
    (0u32..3, proptest::collection::vec(0u32..4, 0..5)).prop_map(|(system, turns)| {
        let texts: Vec<String> = turns
            .iter()
            .map(|&t| text(t, 40 + 30 * t as usize))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        chat(&text(system, 400), &refs)
    })
}

proptest! {
    /// Whatever was dispatched and released before, a prompt reuses no
    /// more than the index holds, nor, when less, more than itself; and a
    /// take finds a slot for every chain that is not empty.
    #[test]
    fn reuse_is_bounded_and_a_slot_is_always_found(
        steps in proptest::collection::vec((arb_chain(), any::<bool>(), 0u64..50), 1..30),
        probe in arb_chain(),
        held in 0u64..5000,
    ) {
        let mut view = SlotView::new(3);
        let mut taken = Vec::new();
        for (chain, release, tokens) in &steps {
            if let Some(s) = view.take(chain) {
                taken.push(s);
            } else {
                prop_assert!(chain.is_empty());
            }
            if *release {
                if let Some(s) = taken.pop() {
                    view.release(s, (0, *tokens));
                }
            }
        }
        let r = view.reused(&probe, held);
        prop_assert!(r <= held);
        // Less than the index holds only for a slot's common prefix,
        // which is part of the prompt.
        prop_assert!(r == held || r <= probe.total_bytes());
    }
}
