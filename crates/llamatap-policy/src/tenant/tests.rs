use super::*;

fn tenant(name: &str, key: &str) -> Tenant {
    Tenant {
        name: name.into(),
        key: Secret::new(key.into()),
        priority: Priority::Default,
        weight: 1,
        limits: Limits::default(),
        admin: false,
    }
}

#[test]
fn keys_identify_their_tenant_and_the_flat_list_is_anonymous() {
    let t = Tenants::new(
        vec![tenant("alice", "alice-key-1"), tenant("bob", "bob-key-22")],
        vec![Secret::new("flat-key-333".into())],
    );
    assert!(t.auth_required());
    assert_eq!(
        t.identify(Some("alice-key-1")),
        Identity::Known(TenantId::Named(0))
    );
    assert_eq!(
        t.identify(Some("bob-key-22")),
        Identity::Known(TenantId::Named(1))
    );
    assert_eq!(
        t.identify(Some("flat-key-333")),
        Identity::Known(TenantId::Anonymous)
    );
    assert_eq!(t.identify(Some("alice-key-2")), Identity::Stranger);
    assert_eq!(t.identify(Some("alice-key-10")), Identity::Stranger);
    assert_eq!(t.identify(Some("")), Identity::Stranger);
    assert_eq!(t.identify(None), Identity::Stranger);
    assert_eq!(t.name(TenantId::Named(1)), "bob");
    assert_eq!(t.name(TenantId::Anonymous), ANONYMOUS);
    assert_eq!(t.label_values(), ["alice", "bob", ANONYMOUS]);
}

#[test]
fn without_keys_everyone_is_anonymous() {
    let t = Tenants::default();
    assert!(!t.auth_required());
    assert_eq!(t.identify(Some("anything")), Identity::Open);
    assert_eq!(t.identify(None), Identity::Open);
    assert_eq!(t.limits(TenantId::Anonymous), Limits::default());
}

#[test]
fn comparison() {
    let k = Secret::new("secret-key-1".into());
    assert!(same(&k, "secret-key-1"));
    assert!(!same(&k, "secret-key-2"));
    assert!(!same(&k, "secret-key-10"));
    assert!(!same(&k, "secret-key-"));
    assert!(!same(&k, ""));
    // A prefix padded with what a short key is compared against.
    assert!(!same(&k, "secret-key-1\0"));
    let empty = Secret::new(String::new());
    assert!(same(&empty, ""));
    assert!(!same(&empty, "\0"));
}

#[test]
fn names_are_label_safe() {
    assert!(valid_name("alice"));
    assert!(valid_name("team-a.batch_1"));
    assert!(!valid_name(""));
    assert!(!valid_name(ANONYMOUS));
    assert!(!valid_name("a b"));
    assert!(!valid_name("a\"b"));
    assert!(!valid_name("{a}"));
    assert!(!valid_name(&"a".repeat(MAX_NAME_BYTES + 1)));
}

#[test]
fn priorities_parse() {
    for p in Priority::ALL {
        assert_eq!(Priority::parse(p.as_str()), Some(p));
    }
    assert_eq!(Priority::default(), Priority::Default);
    assert_eq!(Priority::parse("urgent"), None);
}

#[test]
fn only_admin_keys_administer_once_named_keys_exist() {
    let mut root = tenant("root", "root-key-1");
    root.admin = true;
    let t = Tenants::new(
        vec![tenant("alice", "alice-key-1"), root],
        vec![Secret::new("flat-key-333".into())],
    );
    assert!(t.named());
    assert!(!t.may_administer(TenantId::Named(0)));
    assert!(t.may_administer(TenantId::Named(1)));
    assert!(!t.may_administer(TenantId::Anonymous));
    let flat = Tenants::new(vec![], vec![Secret::new("flat-key-333".into())]);
    assert!(!flat.named());
    assert!(flat.may_administer(TenantId::Anonymous));
    assert!(Tenants::default().may_administer(TenantId::Anonymous));
}
