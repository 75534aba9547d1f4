use std::sync::Arc;

use super::*;

#[test]
fn asks_while_a_round_runs_make_one_more_round() {
    let c = Coalesce::default();
    assert!(c.ask(false), "the first ask starts the task");
    assert_eq!(c.next(), Some(false));
    // A burst while that round runs: nobody starts a task.
    for i in 0..100 {
        assert!(!c.ask(i == 50));
    }
    // One round for all of them, with the message one asked for.
    assert_eq!(c.next(), Some(true));
    assert_eq!(c.next(), None, "the task ends");
    // The next ask starts a task again.
    assert!(c.ask(false));
    assert_eq!(c.next(), Some(false));
    assert_eq!(c.next(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_asks_from_many_tasks_runs_one_round_at_a_time() {
    let c = Arc::new(Coalesce::default());
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let rounds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (c, in_flight, most, rounds, round_gate) = (
            c.clone(),
            in_flight.clone(),
            most.clone(),
            rounds.clone(),
            gate.clone(),
        );
        tasks.push(tokio::spawn(async move {
            if !c.ask(true) {
                return;
            }
            while c.next().is_some() {
                rounds.fetch_add(1, Ordering::SeqCst);
                let n = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                // A round takes as long as the test lets it.
                if let Ok(p) = round_gate.acquire().await {
                    p.forget();
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }));
        // Rounds go on while asks arrive.
        gate.add_permits(1);
    }
    gate.add_permits(1000);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "one round in flight at most"
    );
    let rounds = rounds.load(Ordering::SeqCst);
    assert!((1..=200).contains(&rounds), "{rounds}");
    // Nothing asked is lost: a round after the last ask.
    assert!(!c.running.load(Ordering::SeqCst));
    assert!(!c.again.load(Ordering::SeqCst));
}
