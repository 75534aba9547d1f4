//! Each stage of the one loop on its own, against a scripted upstream: the
//! client is one end of an in-memory pipe that Pingora's session reads and
//! writes, the upstream the other end of a second pipe that the test
//! writes (byte cuts, silences, resets the real llama-server cannot be made
//! to produce). The end-to-end tests (`tests/`) run the same stages through
//! the binary against real llama-servers.

use std::sync::Arc;
use std::time::Duration;

use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{ErrorSource, ErrorType};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::super::attempt::Ending;
use super::super::{resume, send, stream};
use crate::config::{Config, Overrides, RawConfig};
use crate::fleet::Fleet;
use crate::proxy::context::RequestCtx;
use crate::proxy::{attempt, continuable, downstream, Steps};
use crate::upstream::client::Exchange;
use llamatap_policy::answer::Reason;
use llamatap_telemetry::Telemetry;
use llamatap_wire::request::Route;

/// A streamed chat request's body.
const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;

/// Three events of a chat stream and its end.
const EVENTS: &[&str] = &[
    "data: {\"id\":\"c1\",\"created\":1733300000,\"model\":\"m\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n",
    "data: {\"id\":\"c1\",\"created\":1733300000,\"model\":\"m\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there.\"}}]}\n\n",
    "data: {\"id\":\"c1\",\"created\":1733300000,\"model\":\"m\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
];

/// One stage's world: the steps over a config, the client's session with
/// its request read, the client's end of the pipe, and the scripted
/// upstream's connection.
struct World {
    steps: Steps,
    session: Session,
    client: DuplexStream,
    ctx: RequestCtx,
    up: Exchange,
    script: DuplexStream,
    peer: HttpPeer,
}

async fn world(toml: &str, request: &str) -> World {
    let raw = RawConfig::from_toml(toml).unwrap();
    let config = Arc::new(Config::from_raw(raw, &Overrides::default()).unwrap());
    let telemetry = Telemetry::start(&llamatap_telemetry::Start {
        settings: &config.telemetry,
        upstreams: vec!["a"],
        default_server: ("127.0.0.1", 9),
        tenants: vec![],
        model_aliases: &[],
        recent_requests: 4,
    })
    .unwrap();
    let fleet = Arc::new(Fleet::new(&config));
    let peer = attempt::peer(&config, "127.0.0.1:9".parse().unwrap());
    let steps = Steps::new(config, telemetry, fleet);
    let (mut client, server) = tokio::io::duplex(1 << 16);
    client.write_all(request.as_bytes()).await.unwrap();
    let mut session = Session::new_h1(Box::new(server));
    assert!(session.read_request().await.unwrap());
    let mut ctx = RequestCtx::new();
    ctx.asked.route = Route::from_target(session.req_header().raw_path());
    ctx.asked.request.stream = Some(true);
    let (up_end, script) = tokio::io::duplex(1 << 16);
    World {
        steps,
        session,
        client,
        ctx,
        up: Exchange::new(Box::new(up_end)),
        script,
        peer,
    }
}

/// A configuration that does not ask llama-server for prompt progress.
const NO_PROGRESS: &str = "[ttft]\nprompt_progress = false\n";

fn chat_request() -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n\
         Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    )
}

/// Reads from `from` until `done` holds for what was read, or it closes.
async fn read_until(from: &mut DuplexStream, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !done(&got) {
        // Bytes that never come fail the test, not hang it.
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), from.read(&mut buf));
        let n = read
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "30 s without the bytes awaited; got {:?}",
                    String::from_utf8_lossy(&got)
                )
            })
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The upstream's answer head has been read and the client has its head:
/// the body stage can run.
async fn answered(w: &mut World, head: &str) {
    w.script.write_all(head.as_bytes()).await.unwrap();
    let header = send::read_header(&mut w.session, &mut w.up, &w.peer)
        .await
        .unwrap();
    w.steps.upstream_response(&header, &mut w.ctx);
    let mut header = header;
    w.steps.downstream_response(&mut header, &w.ctx).unwrap();
    downstream::head(&mut w.session, header, Duration::from_secs(5))
        .await
        .unwrap();
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

/// The send stage of `w`'s request, with the body read before when given.
async fn send_upstream(w: &mut World, replay: Option<&bytes::Bytes>) {
    send::request(
        &w.steps,
        &mut w.session,
        &mut w.up,
        &w.peer,
        &mut w.ctx,
        replay,
    )
    .await
    .unwrap();
}

fn chunk(s: &str) -> String {
    format!("{:x}\r\n{s}\r\n", s.len())
}

#[tokio::test]
async fn send_writes_the_shaped_head_and_the_body_upstream() {
    let mut w = world(NO_PROGRESS, &chat_request()).await;
    send_upstream(&mut w, None).await;
    let got = read_until(&mut w.script, |g| g.ends_with(CHAT.as_bytes())).await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(
        text.starts_with("post /v1/chat/completions http/1.1\r\n"),
        "{text}"
    );
    // Hop-by-hop headers stay on the client's hop; llama-server is asked
    // to close (connections are never pooled).
    assert!(!text.contains("x-hop"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(
        text.contains(&format!("content-length: {}", CHAT.len())),
        "{text}"
    );
    assert!(got.ends_with(CHAT.as_bytes()));
}

#[tokio::test]
async fn send_sends_a_body_read_before_again_whole_with_its_length() {
    let mut w = world(NO_PROGRESS, &chat_request()).await;
    let body = bytes::Bytes::from_static(b"{\"replayed\":true}");
    send_upstream(&mut w, Some(&body)).await;
    let got = read_until(&mut w.script, |g| g.ends_with(&body)).await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(
        text.contains(&format!("content-length: {}", body.len())),
        "{text}"
    );
    assert!(!text.contains("transfer-encoding"), "{text}");
}

#[tokio::test]
async fn send_asks_a_streamed_body_for_progress_first_and_grows_its_length() {
    let mut w = world("", &chat_request()).await;
    send_upstream(&mut w, None).await;
    let asked = format!("{{\"return_progress\":true,{}", &CHAT[1..]);
    let got = read_until(&mut w.script, |g| g.ends_with(asked.as_bytes())).await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(
        text.contains(&format!("content-length: {}", asked.len())),
        "{text}"
    );
    assert_eq!(asked.len(), CHAT.len() + 23);
    assert!(w.ctx.attempt.progress.asked);
}

#[tokio::test]
async fn the_head_skips_informational_answers() {
    let mut w = world("", &chat_request()).await;
    w.script
        .write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        .await
        .unwrap();
    let h = send::read_header(&mut w.session, &mut w.up, &w.peer)
        .await
        .unwrap();
    assert_eq!(h.status.as_u16(), 200);
}

#[tokio::test]
async fn a_hang_up_while_the_head_is_awaited_is_the_clients_error() {
    let mut w = world("", &chat_request()).await;
    drop(w.client);
    let e = send::read_header(&mut w.session, &mut w.up, &w.peer)
        .await
        .unwrap_err();
    assert_eq!(e.esource(), &ErrorSource::Downstream, "{e}");
}

#[tokio::test]
async fn a_framed_body_passes_byte_for_byte_and_is_whole() {
    let mut w = world("", &chat_request()).await;
    answered(&mut w, SSE_HEAD).await;
    let body: String = EVENTS.concat();
    // Cut inside events and inside the chunk framing.
    let wire: String = EVENTS.iter().map(|e| chunk(e)).collect::<String>() + "0\r\n\r\n";
    let (a, b) = wire.split_at(wire.len() / 3);
    let (script, mut client) = (&mut w.script, w.client);
    let reader =
        tokio::spawn(async move { read_until(&mut client, |g| g.ends_with(b"0\r\n\r\n")).await });
    script.write_all(a.as_bytes()).await.unwrap();
    script.flush().await.unwrap();
    script.write_all(b.as_bytes()).await.unwrap();
    let ending = stream::body(
        &w.steps,
        &mut w.session,
        &mut w.ctx,
        &mut w.up,
        &w.peer,
        None,
    )
    .await
    .unwrap();
    assert!(matches!(ending, Ending::Whole));
    let got = reader.await.unwrap();
    let start = got.windows(4).position(|x| x == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(dechunk(&got[start..]), body.as_bytes(), "the same bytes");
    let facts = w.ctx.seen.stream_facts.as_deref().unwrap();
    assert_eq!(facts.token_events, 2);
    assert!(facts.done);
    assert!(w.ctx.seen.terminal_sent);
}

#[tokio::test]
async fn an_upstream_reset_is_an_error_unless_the_answer_can_go_on() {
    for continuation in [false, true] {
        let toml = if continuation {
            "[continuation]\nenabled = true\n"
        } else {
            ""
        };
        let mut w = world(toml, &chat_request()).await;
        continuable::keep_body(
            &mut w.ctx,
            continuation,
            bytes::Bytes::from_static(CHAT.as_bytes()),
        );
        answered(&mut w, SSE_HEAD).await;
        w.script
            .write_all(chunk(EVENTS[0]).as_bytes())
            .await
            .unwrap();
        drop(w.script);
        let r = stream::body(
            &w.steps,
            &mut w.session,
            &mut w.ctx,
            &mut w.up,
            &w.peer,
            None,
        )
        .await;
        match (continuation, r) {
            (false, Err(e)) => assert_eq!(e.esource(), &ErrorSource::Upstream, "{e}"),
            (true, Ok(Ending::Cut(Reason::UpstreamDied, _))) => {}
            (c, r) => panic!("continuation {c}: {:?}", r.map(|e| format!("{e:?}"))),
        }
    }
}

#[tokio::test]
async fn a_hang_up_mid_answer_ends_it_as_the_clients_error() {
    let mut w = world("", &chat_request()).await;
    answered(&mut w, SSE_HEAD).await;
    w.script
        .write_all(chunk(EVENTS[0]).as_bytes())
        .await
        .unwrap();
    let mut client = w.client;
    // The client reads its first event, then leaves.
    let left = tokio::spawn(async move {
        let seen = read_until(&mut client, |g| contains(g, "Hello")).await;
        drop(client);
        seen
    });
    let r = stream::body(
        &w.steps,
        &mut w.session,
        &mut w.ctx,
        &mut w.up,
        &w.peer,
        None,
    )
    .await;
    assert!(contains(&left.await.unwrap(), "Hello"));
    let e = r.map(|_| ()).expect_err("the hang-up ends the answer");
    assert_eq!(e.esource(), &ErrorSource::Downstream, "{e}");
}

#[tokio::test]
async fn a_silent_upstream_times_out_at_the_read_timeout() {
    let mut w = world("", &chat_request()).await;
    // The configured read timeout is whole seconds; the peer's is what the
    // stage reads.
    w.peer.options.read_timeout = Some(Duration::from_millis(200));
    answered(&mut w, SSE_HEAD).await;
    w.script
        .write_all(chunk(EVENTS[0]).as_bytes())
        .await
        .unwrap();
    let e = stream::body(
        &w.steps,
        &mut w.session,
        &mut w.ctx,
        &mut w.up,
        &w.peer,
        None,
    )
    .await
    .map(|_| ())
    .expect_err("a stall ends the answer");
    assert_eq!(e.etype(), &ErrorType::ReadTimedout, "{e}");
    assert_eq!(e.esource(), &ErrorSource::Upstream, "{e}");
    // The script's end stays open: the silence, not a close, ended it.
    drop(w.script);
}

#[tokio::test]
async fn resume_ends_a_whole_answer_and_gives_up_a_cut_that_cannot_go_on() {
    let mut w = world("", &chat_request()).await;
    let next = resume::next(&w.steps, &mut w.session, &mut w.ctx, Ending::Whole)
        .await
        .unwrap();
    assert!(next.is_none(), "the client has it all");
    // Continuation off: the cut's own error reaches the client.
    let cut = pingora::Error::explain(ErrorType::ConnectionClosed, "reset").into_up();
    let e = resume::next(
        &w.steps,
        &mut w.session,
        &mut w.ctx,
        Ending::Cut(Reason::UpstreamDied, cut),
    )
    .await
    .map(|_| ())
    .expect_err("nothing can take the answer");
    assert_eq!(e.etype(), &ErrorType::ConnectionClosed);
    // A failure before the head with nothing to send again is an error too.
    let before = pingora::Error::explain(ErrorType::ConnectionClosed, "gone").into_up();
    let e = resume::next(
        &w.steps,
        &mut w.session,
        &mut w.ctx,
        Ending::BeforeHead(before),
    )
    .await
    .map(|_| ())
    .expect_err("one member: nowhere to send it again");
    assert_eq!(e.esource(), &ErrorSource::Upstream);
}

#[tokio::test]
async fn resume_asks_a_target_for_the_rest_of_a_cut_chat_answer() {
    let two = "[[upstreams]]\nurl = \"http://127.0.0.1:9\"\n\
               [[upstreams]]\nurl = \"http://127.0.0.1:10\"\n\
               [continuation]\nenabled = true\n";
    let mut w = world(two, &chat_request()).await;
    continuable::keep_body(&mut w.ctx, true, bytes::Bytes::from_static(CHAT.as_bytes()));
    // The answer runs on the first member; the second could take it.
    w.ctx.attempt.member = Some(0);
    answered(&mut w, SSE_HEAD).await;
    w.script
        .write_all(chunk(EVENTS[0]).as_bytes())
        .await
        .unwrap();
    drop(w.script);
    let mut client = w.client;
    let reader =
        tokio::spawn(async move { read_until(&mut client, |g| contains(g, "Hello")).await });
    let ending = stream::body(
        &w.steps,
        &mut w.session,
        &mut w.ctx,
        &mut w.up,
        &w.peer,
        None,
    )
    .await
    .unwrap();
    assert!(
        contains(&reader.await.unwrap(), "Hello"),
        "the client had the first event"
    );
    let next = resume::next(&w.steps, &mut w.session, &mut w.ctx, ending).await;
    let log = w.ctx.resume.as_ref().map(|r| format!("{:?}", r.log));
    let next = next.unwrap_or_else(|e| panic!("{e}; continuations: {log:?}"));
    match next {
        Some(super::super::attempt::Attempt::Rest(rest)) => {
            // It goes on from what the client has: the first event's text.
            assert_eq!(rest.text, "Hello");
            assert_eq!(rest.target.tokens_before, 1);
            // The member that died is not chosen again.
            assert_eq!(w.ctx.attempt.routed.tried, [0]);
        }
        _ => panic!("the rest of the answer is asked for"),
    }
}

/// The payload of a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|x| x == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..line]).unwrap(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[line + 2..line + 2 + n]);
        b = &b[line + 2 + n + 2..];
    }
}

#[tokio::test]
async fn a_cut_copy_read_by_a_new_observer_plans_its_rest_from_what_it_holds() {
    use crate::proxy::bodies;
    use llamatap_wire::continuation::Next;
    let plan = |copy: &str| {
        let copy = copy.to_string();
        async move {
            let mut w = world("", &chat_request()).await;
            continuable::keep_body(&mut w.ctx, true, bytes::Bytes::from_static(CHAT.as_bytes()));
            let (config, telemetry) = (&w.steps.config, &w.steps.telemetry);
            bodies::watch_copy(&mut w.ctx, copy.as_bytes(), config, telemetry);
            match continuable::plan_next(&w.ctx) {
                Next::Generate(rest) => Ok(rest.target.tokens_before),
                Next::Refused(why) => Err(why),
                Next::End { why, .. } => Err(why),
            }
        }
    };
    // Two tokens heard, as if by the replaying client: the rest follows them.
    assert_eq!(plan(&format!("{}{}", EVENTS[0], EVENTS[1])).await, Ok(2));
    // Cut inside an event: refused as it is (the replay trims the copy to
    // its last whole event first).
    let cut = format!("{}{}", EVENTS[0], &EVENTS[1][..30]);
    assert_eq!(plan(&cut).await, Err("cut_mid_event"));
    // Its finish was in the copy: only the end was lost.
    assert!(plan(&EVENTS[..3].concat()).await.is_err());
}
