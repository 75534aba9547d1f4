#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: any chunking of any stream of events strips exactly the
//! progress events, holds back only an incomplete event, and reads every
//! progress; any chunking of any body grows it by exactly the member.

use proptest::prelude::*;

use super::super::*;

/// One event of the model stream, and whether it is a progress event.
fn event() -> impl Strategy<Value = (String, Option<PromptProgress>)> {
    let text = proptest::string::string_regex("[a-z \"\\\\{}:_]{0,16}").unwrap();
    let end = prop::sample::select(vec!["\n\n", "\r\n\r\n", "\n\r\n"]);
    prop_oneof![
        2 => (any::<u16>(), any::<u16>(), any::<u16>(), any::<u32>(), end.clone()).prop_map(
            |(total, cache, processed, time_ms, end)| {
                let p = PromptProgress {
                    total: total.into(),
                    cache: cache.into(),
                    processed: processed.into(),
                    time_ms: time_ms.into(),
                };
                let e = format!(
                    "data: {{\"choices\":[],\"prompt_progress\":{{\"total\":{},\"cache\":{},\"processed\":{},\"time_ms\":{}}}}}{end}",
                    p.total, p.cache, p.processed, p.time_ms
                );
                (e, Some(p))
            }
        ),
        3 => (text, end.clone()).prop_map(|(t, end)| {
            let json = serde_json::to_string(&serde_json::json!({"choices":[{"delta":{"content":t}}]})).unwrap();
            (format!("data: {json}{end}"), None)
        }),
        1 => end.clone().prop_map(|end| (format!(":{end}"), None)),
        1 => end.prop_map(|end| (format!("data: [DONE]{end}"), None)),
    ]
}

/// Cut positions of a stream of `len` bytes, sorted.
fn cuts(len: usize, raw: &[usize]) -> Vec<usize> {
    let mut c: Vec<usize> = raw.iter().map(|r| r % (len + 1)).collect();
    c.sort_unstable();
    c
}

proptest! {
    #[test]
    fn any_chunking_strips_exactly(
        events in prop::collection::vec(event(), 0..12),
        raw in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let bytes: Vec<u8> = events.iter().flat_map(|(e, _)| e.bytes()).collect();
        // Each event's end, and what is sent once it is complete.
        let mut ends = Vec::new();
        let mut sent = Vec::new();
        for (e, p) in &events {
            if p.is_none() {
                sent.extend_from_slice(e.as_bytes());
            }
            ends.push((ends.last().map_or(0, |(end, _)| *end) + e.len(), sent.len()));
        }
        let mut f = ProgressFilter::new(true, 4096);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        let mut at = 0;
        for c in cuts(bytes.len(), &raw).into_iter().chain([bytes.len()]) {
            f.feed(&bytes[at..c], &mut out, |p| seen.push(p));
            at = c;
            // Every complete event went out; nothing of an incomplete one.
            let due = ends.iter().rev().find(|(end, _)| *end <= at).map_or(0, |(_, s)| *s);
            prop_assert_eq!(out.len(), due);
        }
        f.finish(&mut out, |p| seen.push(p));
        prop_assert_eq!(out, sent);
        let want: Vec<PromptProgress> = events.iter().filter_map(|(_, p)| *p).collect();
        prop_assert_eq!(seen, want);
    }

    #[test]
    fn reading_sees_what_stripping_sees(
        events in prop::collection::vec(event(), 0..12),
        raw in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let bytes: Vec<u8> = events.iter().flat_map(|(e, _)| e.bytes()).collect();
        let mut f = ProgressFilter::new(false, 4096);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        let mut at = 0;
        for c in cuts(bytes.len(), &raw).into_iter().chain([bytes.len()]) {
            f.feed(&bytes[at..c], &mut out, |p| seen.push(p));
            at = c;
        }
        f.finish(&mut out, |p| seen.push(p));
        prop_assert!(out.is_empty());
        let want: Vec<PromptProgress> = events.iter().filter_map(|(_, p)| *p).collect();
        prop_assert_eq!(seen, want);
    }

    #[test]
    fn any_bytes_stripped_in_any_chunks_are_stripped_alike(
        bytes in prop::collection::vec(prop::sample::select(b"data: {}\"prompt_progress\":1\r\n[DONE]x".to_vec()), 0..200),
        raw in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let whole = {
            let mut f = ProgressFilter::new(true, 64);
            let mut out = Vec::new();
            f.feed(&bytes, &mut out, |_| {});
            f.finish(&mut out, |_| {});
            out
        };
        let mut f = ProgressFilter::new(true, 64);
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts(bytes.len(), &raw).into_iter().chain([bytes.len()]) {
            f.feed(&bytes[at..c], &mut out, |_| {});
            at = c;
        }
        f.finish(&mut out, |_| {});
        prop_assert_eq!(out, whole);
    }

    #[test]
    fn any_body_grows_by_the_member_alone(
        body in prop::collection::vec(any::<u8>(), 0..64),
        raw in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut a = ProgressAsk::new();
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts(body.len(), &raw).into_iter().chain([body.len()]) {
            let chunk = &body[at..c];
            match a.feed(chunk) {
                Some(v) => out.extend_from_slice(&v),
                None => out.extend_from_slice(chunk),
            }
            at = c;
        }
        out.extend_from_slice(a.finish());
        prop_assert_eq!(out.len(), body.len() + ADDED);
    }

    #[test]
    fn any_json_object_gets_the_member_and_keeps_its_own(
        map in prop::collection::btree_map("[a-z_]{1,8}", any::<i32>(), 0..6),
        spaces in "[ \n\t]{0,3}",
        raw in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let json = serde_json::to_string(&map).unwrap();
        let body = format!("{spaces}{json}");
        let b = body.as_bytes();
        let mut a = ProgressAsk::new();
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts(b.len(), &raw).into_iter().chain([b.len()]) {
            match a.feed(&b[at..c]) {
                Some(v) => out.extend_from_slice(&v),
                None => out.extend_from_slice(&b[at..c]),
            }
            at = c;
        }
        out.extend_from_slice(a.finish());
        let v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&out).unwrap();
        let own = map.contains_key("return_progress");
        if !own {
            prop_assert_eq!(v.get("return_progress"), Some(&serde_json::Value::Bool(true)));
        }
        for (k, val) in &map {
            prop_assert_eq!(v.get(k), Some(&serde_json::json!(val)));
        }
    }
}
