use super::*;
use proptest::prelude::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn an_ended_answer_is_held_for_llama_servers_buffer_time() {
    let t0 = Instant::now();
    let mut b = Book::new(8);
    b.started("c1", "a", t0);
    assert!(b.is_open("c1"));
    assert_eq!(b.holder("c1", t0 + secs(1000)), Some("a"));
    b.ended("c1", "a", t0 + secs(1000));
    assert!(!b.is_open("c1"));
    assert_eq!(b.holder("c1", t0 + secs(1299)), Some("a"));
    assert_eq!(b.holder("c1", t0 + secs(1300)), None);
    assert!(b.is_empty());
}

#[test]
fn an_answer_whose_end_is_never_seen_is_kept_at_most_max_open() {
    let t0 = Instant::now();
    let mut b = Book::new(8);
    b.started("c1", "a", t0);
    assert_eq!(b.holder("c1", t0 + MAX_OPEN - secs(1)), Some("a"));
    assert_eq!(b.holder("c1", t0 + MAX_OPEN), None);
}

#[test]
fn a_later_answer_on_another_member_replaces_the_id_and_its_old_end_is_ignored() {
    let t0 = Instant::now();
    let mut b = Book::new(8);
    b.started("c1", "a", t0);
    b.started("c1", "b", t0 + secs(1));
    b.ended("c1", "a", t0 + secs(2));
    assert!(b.is_open("c1"));
    assert_eq!(b.holder("c1", t0 + secs(3)), Some("b"));
    b.forget("c1", "a");
    assert_eq!(b.holder("c1", t0 + secs(3)), Some("b"));
    b.forget("c1", "b");
    assert_eq!(b.holder("c1", t0 + secs(3)), None);
}

#[test]
fn learning_from_the_store_never_overrides_a_later_entry() {
    let t0 = Instant::now();
    let mut b = Book::new(8);
    b.started("c1", "a", t0);
    b.learn("c1", "b", t0 + secs(10));
    assert_eq!(b.holder("c1", t0), Some("a"));
    b.learn("c2", "b", t0 + secs(10));
    assert_eq!(b.holder("c2", t0 + secs(9)), Some("b"));
    assert_eq!(b.holder("c2", t0 + secs(10)), None);
}

#[test]
fn a_full_book_forgets_the_oldest_write() {
    let t0 = Instant::now();
    let mut b = Book::new(3);
    b.started("c1", "a", t0);
    b.started("c2", "a", t0);
    b.started("c3", "a", t0);
    // c1 written again: c2 is now the oldest.
    b.started("c1", "b", t0);
    b.started("c4", "a", t0);
    assert_eq!(b.len(), 3);
    assert_eq!(b.holder("c2", t0), None);
    assert_eq!(b.holder("c1", t0), Some("b"));
    assert_eq!(b.holder("c3", t0), Some("a"));
    assert_eq!(b.holder("c4", t0), Some("a"));
}

#[test]
fn use_labels() {
    let all = [Use::Generate, Use::Replay, Use::Stop, Use::Lookup];
    let labels: Vec<&str> = all.iter().map(|u| u.as_str()).collect();
    assert_eq!(labels, ["generate", "replay", "stop", "lookup"]);
}

proptest! {
    /// Whatever the writes, the book never holds more than its capacity,
    /// its order queue stays bounded, and the last write of a held id wins.
    #[test]
    fn the_book_stays_bounded(ops in proptest::collection::vec((0u8..40, 0u8..3, any::<bool>()), 0..400), cap in 1usize..16) {
        let t0 = Instant::now();
        let mut b = Book::new(cap);
        let mut last: HashMap<String, String> = HashMap::new();
        for (id, member, end) in ops {
            let id = format!("c{id}");
            let member = format!("m{member}");
            if end {
                b.ended(&id, &member, t0);
            } else {
                b.started(&id, &member, t0);
                last.insert(id.clone(), member.clone());
            }
            prop_assert!(b.len() <= cap);
            prop_assert!(b.order.len() <= cap * 2 + 1);
            if !end {
                prop_assert_eq!(b.holder(&id, t0), Some(member.as_str()));
            }
        }
    }
}
