//! Fuzzes request inspection: `llamatap_wire::request::inspect_body` on the raw
//! input and `Route::from_path` on its longest valid UTF-8 prefix.
//!
//! Invariants:
//! - never panics;
//! - `model` is `None` or a non-empty string of at most `MAX_MODEL_BYTES`
//!   (256) bytes;
//! - a leading UTF-8 BOM changes nothing;
//! - a query string or fragment does not change the route, and neither
//!   does spelling a path without `%` all in `%XX` (or, if ASCII, `%u00XX`);
//! - `Route::from_path` returns one of `Route::all()`, and a route that has
//!   a stream format generates (has an operation name).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llamatap_wire::request::{inspect_body, Route, MAX_MODEL_BYTES};

fuzz_target!(|data: &[u8]| {
    let facts = inspect_body(data);
    if let Some(model) = &facts.model {
        assert!(!model.is_empty(), "empty model");
        assert!(
            model.len() <= MAX_MODEL_BYTES,
            "model of {} bytes",
            model.len()
        );
    }
    if !data.starts_with(b"\xEF\xBB\xBF") {
        let mut bom = b"\xEF\xBB\xBF".to_vec();
        bom.extend_from_slice(data);
        assert_eq!(inspect_body(&bom), facts, "a BOM changed the facts");
    }

    let path = match std::str::from_utf8(data) {
        Ok(p) => p,
        Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
    };
    let route = Route::from_path(path);
    assert!(Route::all().contains(&route), "route not in Route::all()");
    assert!(!route.as_str().is_empty());
    let bare = path.split(['?', '#']).next().unwrap_or_default();
    assert_eq!(Route::from_path(bare), route, "query changed the route");
    assert_eq!(Route::from_path(&format!("{bare}?stream=true")), route);
    // llama-server decodes the path before it routes: a path spelled all in
    // `%XX` (or `%u00XX`) is the route of the path it decodes to.
    if !bare.contains('%') {
        let hex: String = bare.bytes().map(|b| format!("%{b:02X}")).collect();
        assert_eq!(Route::from_path(&hex), route, "{bare:?} encoded changed the route");
        if bare.is_ascii() {
            let wide: String = bare.bytes().map(|b| format!("%u00{b:02x}")).collect();
            assert_eq!(Route::from_path(&wide), route, "{bare:?} %u-encoded changed the route");
        }
    }
    if route.stream_format().is_some() {
        assert!(
            route.operation_name().is_some(),
            "{path:?} has a stream format but route {route} generates nothing"
        );
    }
});
