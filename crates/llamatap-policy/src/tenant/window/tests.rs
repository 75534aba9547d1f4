use super::*;

fn limits(rpm: Option<u64>, tpm: Option<u64>, conc: Option<u32>) -> Limits {
    Limits {
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
        max_concurrent: conc,
    }
}

#[test]
fn windows_are_utc_minutes_and_reset_counts_down_to_their_end() {
    assert_eq!(window(0), 0);
    assert_eq!(window(59_999), 0);
    assert_eq!(window(60_000), 1);
    assert_eq!(reset_ms(0), 60_000);
    assert_eq!(reset_ms(59_999), 1);
    assert_eq!(reset_ms(60_000), 60_000);
    for now in (0..180_000).step_by(7) {
        let r = reset_ms(now);
        assert!((1..=WINDOW_MS).contains(&r));
        // The reset is the first moment of the next window, exactly.
        assert_eq!(window(now + r), window(now) + 1);
        assert_eq!(window(now + r - 1), window(now));
    }
}

#[test]
fn unlimited_admits_everything_and_says_nothing() {
    let q = decide(&Limits::default(), Usage::default(), 5).unwrap();
    assert_eq!(q, Quota::default());
    assert!(quota_headers(&q).is_empty());
    let used = Usage {
        requests: u64::MAX,
        tokens: u64::MAX,
        concurrent: u32::MAX,
    };
    assert!(decide(&Limits::default(), used, 5).is_ok());
}

/// A client sending at every moment of three minutes (with an injected
/// clock) never gets more than `rpm` admissions in a window, and each
/// refusal's wait, exactly, is when it is admitted again.
#[test]
fn requests_per_minute_hold_and_retry_after_is_exact() {
    for rpm in [1u64, 2, 3, 7, 60] {
        let l = limits(Some(rpm), None, None);
        let mut w = Window::default();
        let mut admitted_in: std::collections::BTreeMap<u64, u64> = Default::default();
        let mut now = 1_700_000_000_123u64;
        let end = now + 180_000;
        while now < end {
            let (requests, tokens) = w.used(now);
            let used = Usage {
                requests,
                tokens,
                concurrent: 0,
            };
            match decide(&l, used, now) {
                Ok(q) => {
                    w.admit(now);
                    *admitted_in.entry(window(now)).or_default() += 1;
                    let g = q.requests.unwrap();
                    assert_eq!(g.limit, rpm);
                    assert_eq!(g.remaining, rpm - admitted_in[&window(now)]);
                    assert_eq!(g.reset_ms, reset_ms(now));
                    now += 997;
                }
                Err(r) => {
                    assert_eq!(r.limit, LimitKind::Requests);
                    assert_eq!(r.value, rpm);
                    assert_eq!(r.quota.requests.unwrap().remaining, 0);
                    let wait = r.retry_after_ms.unwrap();
                    // One millisecond early is still refused...
                    let (req, tok) = w.used(now + wait - 1);
                    assert!(decide(
                        &l,
                        Usage {
                            requests: req,
                            tokens: tok,
                            concurrent: 0
                        },
                        now + wait - 1
                    )
                    .is_err());
                    // ...and at the moment told, admitted.
                    now += wait;
                    let (req, tok) = w.used(now);
                    assert!(decide(
                        &l,
                        Usage {
                            requests: req,
                            tokens: tok,
                            concurrent: 0
                        },
                        now
                    )
                    .is_ok());
                }
            }
        }
        assert!(admitted_in.values().all(|n| *n <= rpm), "{admitted_in:?}");
        assert!(admitted_in.values().any(|n| *n == rpm));
    }
}

#[test]
fn tokens_admit_while_one_is_left_and_charge_when_the_answer_ends() {
    let l = limits(None, Some(100), None);
    let mut w = Window::default();
    let t0 = 60_000 * 1000 + 10_000;
    let used = |w: &mut Window, now| {
        let (requests, tokens) = w.used(now);
        Usage {
            requests,
            tokens,
            concurrent: 0,
        }
    };
    let q = decide(&l, used(&mut w, t0), t0).unwrap();
    assert_eq!(q.tokens.unwrap().remaining, 100);
    assert!(q.requests.is_none());
    w.admit(t0);
    w.charge(t0 + 1000, 99);
    let q = decide(&l, used(&mut w, t0 + 1000), t0 + 1000).unwrap();
    assert_eq!(q.tokens.unwrap().remaining, 1);
    // An answer larger than what is left overshoots; the window is then full.
    w.charge(t0 + 2000, 40);
    let r = decide(&l, used(&mut w, t0 + 2000), t0 + 2000).unwrap_err();
    assert_eq!(r.limit, LimitKind::Tokens);
    assert_eq!(r.retry_after_ms, Some(48_000));
    assert_eq!(r.quota.tokens.unwrap().remaining, 0);
    // The next window starts empty.
    assert!(decide(&l, used(&mut w, t0 + 50_000), t0 + 50_000).is_ok());
    assert_eq!(w.used(t0 + 50_000), (0, 0));
}

#[test]
fn concurrency_is_checked_first_and_has_no_known_wait() {
    let l = limits(Some(1), Some(1), Some(2));
    let used = Usage {
        requests: 5,
        tokens: 5,
        concurrent: 2,
    };
    let r = decide(&l, used, 0).unwrap_err();
    assert_eq!(r.limit, LimitKind::Concurrency);
    assert_eq!(r.retry_after_ms, None);
    let h = refusal_headers(&r);
    assert!(!h.iter().any(|(k, _)| *k == "retry-after"));
    let used = Usage {
        concurrent: 1,
        ..Usage::default()
    };
    assert!(decide(&l, used, 0).is_ok());
}

#[test]
fn durations_are_written_as_openai_does() {
    assert_eq!(duration(0), "0ms");
    assert_eq!(duration(250), "250ms");
    assert_eq!(duration(1000), "1s");
    assert_eq!(duration(12_000), "12s");
    assert_eq!(duration(1500), "1.5s");
    assert_eq!(duration(17_280), "17.28s");
    assert_eq!(duration(60_000), "1m0s");
    assert_eq!(duration(360_000), "6m0s");
    assert_eq!(duration(61_001), "1m1.001s");
}

#[test]
fn retry_after_rounds_up_to_whole_seconds() {
    assert_eq!(retry_after_secs(1), 1);
    assert_eq!(retry_after_secs(1000), 1);
    assert_eq!(retry_after_secs(1001), 2);
    assert_eq!(retry_after_secs(11_200), 12);
    assert_eq!(retry_after_secs(0), 1);
}

#[test]
fn a_refusal_carries_openai_headers_and_names_the_tenant() {
    let l = limits(Some(3), Some(1000), None);
    let used = Usage {
        requests: 3,
        tokens: 10,
        concurrent: 0,
    };
    let now = 48_800;
    let r = decide(&l, used, now).unwrap_err();
    let h: std::collections::HashMap<_, _> = refusal_headers(&r).into_iter().collect();
    assert_eq!(h["retry-after"], "12");
    assert_eq!(h["retry-after-ms"], "11200");
    assert_eq!(h["x-should-retry"], "true");
    assert_eq!(h["x-ratelimit-limit-requests"], "3");
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
    assert_eq!(h["x-ratelimit-reset-requests"], "11.2s");
    assert_eq!(h["x-ratelimit-limit-tokens"], "1000");
    assert_eq!(h["x-ratelimit-remaining-tokens"], "990");
    assert_eq!(h["x-ratelimit-reset-tokens"], "11.2s");
    assert_eq!(
        message("alice", &r),
        "tenant \"alice\": requests per minute limit 3 reached; retry in 12 s"
    );
}
