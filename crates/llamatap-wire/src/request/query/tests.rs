use super::*;

#[test]
fn the_query_starts_at_the_first_question_mark_and_ends_at_a_hash() {
    assert_eq!(of(b"/a?b=1&c"), Some(&b"b=1&c"[..]));
    assert_eq!(of(b"/a?b=1#x?y"), Some(&b"b=1"[..]));
    assert_eq!(of(b"/a#x?y"), None);
    assert_eq!(of(b"/a"), None);
    assert_eq!(of(b"/a?"), Some(&b""[..]));
}

#[test]
fn pairs_split_on_ampersands_and_the_first_equals_sign() {
    let got: Vec<_> = pairs(b"/a?x=1=2&&y&z=").collect();
    assert_eq!(
        got,
        vec![
            (&b"x"[..], Some(&b"1=2"[..])),
            (&b"y"[..], None),
            (&b"z"[..], Some(&b""[..])),
        ]
    );
}

#[test]
fn components_decode_as_cpp_httplib_decodes_them() {
    assert_eq!(decode(b"a%3A%3ab+c"), b"a::b c");
    assert_eq!(decode(b"%zz%4"), b"%zz%4");
    assert_eq!(decode(b"%41"), b"A");
    assert_eq!(decode(b"100%"), b"100%");
    assert!(has(b"/m?x=1&re%6Coad", b"reload"));
    assert!(!has(b"/m?x=reload", b"reload"));
}

#[test]
fn encoding_round_trips_every_byte() {
    let all: Vec<u8> = (0..=255).collect();
    let enc = encode(&all);
    assert!(enc
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)));
    assert_eq!(decode(enc.as_bytes()), all);
}
