//! Tests of the per-upstream index: longest prefix, LRU eviction at
//! capacity, prefix closure, learning hooks, and the memory bound.

use crate::router::*;

#[test]
fn matched_finds_the_longest_indexed_prefix() {
    let mut index = PrefixIndex::new(16);
    index.insert(&[1, 2, 3]);
    assert_eq!(index.matched(&[1, 2, 3, 4]).links, 3);
    assert_eq!(
        index.matched(&[1, 2, 9, 3]).links,
        2,
        "stops at the first miss"
    );
    assert_eq!(index.matched(&[9, 1]).links, 0);
    assert_eq!(index.matched(&[]), Match::default());
    // The stamp is the last matched link's: inserted last to first, link 3
    // was touched first.
    assert_eq!(index.matched(&[1, 2, 3]).stamp, 1);
    assert_eq!(index.matched(&[1]).stamp, 3);
}

#[test]
fn the_least_recently_sent_links_go_first_at_capacity() {
    let mut index = PrefixIndex::new(4);
    index.insert(&[1, 2]);
    index.insert(&[3, 4]);
    assert_eq!(index.len(), 4);
    index.insert(&[5]);
    assert_eq!(index.len(), 4);
    assert_eq!(index.matched(&[1, 2]).links, 1, "link 2 was the oldest");
    index.insert(&[6]);
    assert_eq!(index.matched(&[1]).links, 0);
    assert_eq!(index.matched(&[3, 4]).links, 2);
    // A lookup does not refresh; sending again does.
    index.insert(&[3, 4]);
    index.insert(&[7, 8]);
    assert_eq!(index.matched(&[3, 4]).links, 2);
    assert_eq!(index.matched(&[5]).links + index.matched(&[6]).links, 0);
}

#[test]
fn a_chain_longer_than_the_capacity_keeps_its_head() {
    let mut index = PrefixIndex::new(3);
    index.insert(&[1, 2, 3, 4, 5]);
    assert_eq!(index.matched(&[1, 2, 3, 4, 5]).links, 3);
}

#[test]
fn a_shared_prefix_outlives_the_chains_that_carry_it() {
    let mut index = PrefixIndex::new(8);
    for conversation in 0..20u64 {
        index.insert(&[1, 100 + conversation]);
        assert_eq!(index.matched(&[1]).links, 1, "conversation {conversation}");
    }
}

#[test]
fn clear_empties_and_keeps_the_clock() {
    let mut index = PrefixIndex::new(8);
    index.insert(&[1, 2]);
    let before = index.matched(&[1]).stamp;
    assert_eq!(index.clear(), 2);
    assert!(index.is_empty());
    index.insert(&[1]);
    assert!(
        index.matched(&[1]).stamp > before,
        "old stamps never hit new links"
    );
}

#[test]
fn memory_stays_within_the_stated_bound() {
    let mut index = PrefixIndex::new(DEFAULT_CAPACITY);
    assert_eq!(index.memory_bytes(), 0, "nothing allocated before use");
    let capacity = u64::try_from(DEFAULT_CAPACITY).unwrap();
    for key in 0..capacity {
        index.insert(&[key.wrapping_mul(0x9E37_79B9_7F4A_7C15)]);
    }
    let full = index.memory_bytes();
    // 131,072 table slots of 17 bytes and 65,536 nodes of 24 bytes.
    assert_eq!(full, 3_801_088, "the figure stated in the module docs");
    for key in capacity..3 * capacity {
        index.insert(&[key.wrapping_mul(0x9E37_79B9_7F4A_7C15)]);
    }
    assert_eq!(index.len(), DEFAULT_CAPACITY);
    assert_eq!(index.memory_bytes(), full, "eviction reuses the memory");
}
