//! The model list in both of llama-server's shapes.

use super::*;

#[test]
fn the_openai_list_gives_its_ids() {
    let body = br#"{"object":"list","data":[
        {"id":"qwen2.5-0.5b-instruct","object":"model","created":0,"owned_by":"llamacpp"},
        {"id":"tiny","object":"model"}]}"#;
    assert_eq!(parse_model_list(body), ["qwen2.5-0.5b-instruct", "tiny"]);
}

#[test]
fn llama_servers_own_list_gives_names_and_models_once() {
    // llama-server's `/v1/models` carries both lists and names each model
    // in several fields: each name comes once.
    let body = br#"{"models":[{"name":"m.gguf","model":"m.gguf","type":"model"}],
        "object":"list","data":[{"id":"m.gguf"},{"id":"b"}]}"#;
    assert_eq!(parse_model_list(body), ["b", "m.gguf"]);
}

#[test]
fn anything_else_gives_no_name() {
    for body in [
        &b""[..],
        b"not json",
        b"[]",
        b"{}",
        b"{\"data\":{}}",
        b"{\"data\":[{\"id\":7},{\"id\":null},\"x\"]}",
        b"{\"error\":{\"code\":503,\"message\":\"Loading model\"}}",
    ] {
        assert!(parse_model_list(body).is_empty(), "{body:?}");
    }
}

#[test]
fn a_body_cut_anywhere_gives_no_name_or_the_whole_list() {
    let body = br#"{"data":[{"id":"a"},{"id":"b"}]}"#;
    for cut in 0..body.len() {
        assert!(parse_model_list(&body[..cut]).is_empty(), "cut at {cut}");
    }
    assert_eq!(parse_model_list(body), ["a", "b"]);
}
