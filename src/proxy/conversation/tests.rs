use super::*;
use crate::config::{Overrides, RawConfig};
use llamatap_policy::tenant::TenantId;

fn config(toml: &str) -> Config {
    Config::from_raw(RawConfig::from_toml(toml).unwrap(), &Overrides::default()).unwrap()
}

const NAMED: &str = r#"
[auth]
api_keys = ["flat-key-0001"]
[[auth.keys]]
name = "alice"
key = "alice-key-0001"
"#;

fn head(target: &str, ids: &[&str]) -> RequestHeader {
    let mut req = RequestHeader::build("GET", target.as_bytes(), None).unwrap();
    for id in ids {
        req.append_header("X-Conversation-Id", *id).unwrap();
    }
    req
}

fn ids(req: &RequestHeader) -> Vec<String> {
    req.headers
        .get_all(conversation::HEADER)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_tenants_header_and_query_go_up_in_its_scope() {
    let c = config(NAMED);
    let mut ctx = RequestCtx::new();
    ctx.who.tenant = TenantId::Named(0);
    let p = Scope::of_tenant("alice").prefix().to_string();
    let mut req = head("/v1/stream?conv_id=c1&from=3", &["c1::m", "other"]);
    scope_head(&mut req, &ctx, &c).unwrap();
    assert_eq!(ids(&req), vec![format!("{p}c1::m")], "one header, scoped");
    let want = format!("/v1/stream?conv_id={p}c1&from=3");
    assert_eq!(req.raw_path(), want.as_bytes());
    // The flat keys are one more namespace.
    ctx.who.tenant = TenantId::Anonymous;
    let mut req = head("/v1/chat/completions", &[" c2 "]);
    scope_head(&mut req, &ctx, &c).unwrap();
    let anon = Scope::of_tenant(llamatap_policy::tenant::ANONYMOUS);
    assert_eq!(ids(&req), vec![format!("{}c2", anon.prefix())]);
    assert_eq!(req.raw_path(), b"/v1/chat/completions");
    // An empty id is none.
    let mut req = head("/v1/chat/completions", &[""]);
    scope_head(&mut req, &ctx, &c).unwrap();
    assert!(ids(&req).is_empty());
}

#[test]
fn without_named_keys_nothing_changes() {
    for c in [
        config(""),
        config("[auth]\napi_keys = [\"flat-key-0001\"]\n"),
    ] {
        let ctx = RequestCtx::new();
        let mut req = head("/v1/stream?conv_id=c1", &["c1", "c2"]);
        scope_head(&mut req, &ctx, &c).unwrap();
        assert_eq!(ids(&req), vec!["c1", "c2"]);
        assert_eq!(req.raw_path(), b"/v1/stream?conv_id=c1");
    }
}
