use pingora::http::RequestHeader;

use super::send::strip_hop_by_hop;

#[test]
fn hop_by_hop_and_nominated_headers_are_removed() {
    let mut req = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    req.insert_header("Connection", "keep-alive, X-Hop")
        .unwrap();
    req.insert_header("X-Hop", "1").unwrap();
    req.insert_header("Keep-Alive", "timeout=5").unwrap();
    req.insert_header("Transfer-Encoding", "chunked").unwrap();
    req.insert_header("X-End", "1").unwrap();
    strip_hop_by_hop(&mut req);
    let names: Vec<&str> = req.headers.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["x-end"]);
}

mod stages;
