use super::*;

/// llama-server's /metrics (b6xxx), verbatim.
const LLAMA_SERVER: &str = "\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 12
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.25
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 57
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
";

#[test]
fn reads_llama_servers_families_with_their_types() {
    let f = parse(LLAMA_SERVER.as_bytes());
    let names: Vec<(&str, Kind, f64)> = f
        .iter()
        .map(|f| (f.name.as_str(), f.kind, f.samples[0].value))
        .collect();
    assert_eq!(
        names,
        vec![
            ("llamacpp:prompt_tokens", Kind::Counter, 12.0),
            ("llamacpp:prompt_seconds", Kind::Counter, 0.25),
            ("llamacpp:n_tokens_max", Kind::Unknown, 57.0),
            ("llamacpp:requests_processing", Kind::Gauge, 2.0),
            ("llamacpp:requests_deferred", Kind::Gauge, 1.0),
        ]
    );
    assert_eq!(f[0].sample_name(), "llamacpp:prompt_tokens_total");
    assert_eq!(f[2].sample_name(), "llamacpp:n_tokens_max");
    assert_eq!(f[4].help, "Number of requests deferred");
    assert!(f
        .iter()
        .all(|f| f.samples.len() == 1 && f.samples[0].labels.is_empty()));
}

#[test]
fn labels_escapes_timestamps_and_special_values() {
    let body = "# TYPE llamacpp:g gauge\n\
        llamacpp:g{slot=\"0\",model=\"a\\\"b\\\\c\\nd\"} 3 1700000000000\n\
        llamacpp:g{slot=\"1\",} NaN\n\
        llamacpp:g{upstream=\"self\"} +Inf\n\
        llamacpp:g{slot=\"1\"} 7\n";
    let f = parse(body.as_bytes());
    assert_eq!(f.len(), 1);
    let s = &f[0].samples;
    assert_eq!(
        s[0].labels,
        vec![
            ("slot".to_string(), "0".to_string()),
            ("model".to_string(), "a\"b\\c\nd".to_string())
        ]
    );
    assert_eq!(s[0].value, 3.0);
    assert!(s[1].value.is_nan());
    assert_eq!(s[2].labels[0].0, "exported_upstream");
    assert_eq!(s[2].value, f64::INFINITY);
    // The repeated label set (slot="1") is not a second series.
    assert_eq!(s.len(), 3);
}

#[test]
fn other_families_types_and_malformed_lines_are_skipped() {
    let body = "# TYPE process_cpu_seconds_total counter\n\
        process_cpu_seconds_total 5\n\
        # TYPE llamacpp:h histogram\n\
        llamacpp:h_bucket{le=\"1\"} 1\n\
        llamacpp:broken{a=\"1\" 2\n\
        llamacpp:novalue\n\
        llamacpp:bad{1a=\"x\"} 2\n\
        # TYPE llamacpp:c_total counter\n\
        llamacpp:c_total -1\n\
        llamacpp:c_total NaN\n\
        llamacpp:untyped 4\n";
    let f = parse(body.as_bytes());
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].name, "llamacpp:untyped");
    assert_eq!(f[0].kind, Kind::Unknown);
}

#[test]
fn bounded_whatever_the_upstream_sends() {
    let mut body = String::new();
    for i in 0..1000 {
        body.push_str(&format!("# TYPE llamacpp:f{i} gauge\nllamacpp:f{i} 1\n"));
    }
    assert_eq!(parse(body.as_bytes()).len(), MAX_FAMILIES);
    let mut body = String::from("# TYPE llamacpp:g gauge\n");
    for i in 0..1000 {
        body.push_str(&format!("llamacpp:g{{i=\"{i}\"}} 1\n"));
    }
    let f = parse(body.as_bytes());
    assert_eq!(f[0].samples.len(), MAX_SAMPLES);
    let long = "x".repeat(MAX_STRING_BYTES + 1);
    let labels: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}=\"v\"")).collect();
    let body = format!(
        "# HELP llamacpp:g {long}\n# TYPE llamacpp:g gauge\n\
         llamacpp:g{{a=\"{long}\"}} 1\nllamacpp:g{{{}}} 1\nllamacpp:g 2\n",
        labels.join(",")
    );
    let f = parse(body.as_bytes());
    assert_eq!(f[0].samples.len(), 1);
    assert_eq!(f[0].samples[0].value, 2.0);
    assert!(f[0].help.len() <= MAX_STRING_BYTES);
}

#[test]
fn never_panics_on_any_cut_of_a_real_answer() {
    let body = LLAMA_SERVER.as_bytes();
    for end in 0..body.len() {
        let _ = parse(&body[..end]);
        let _ = parse(&body[end..]);
    }
    let _ = parse(&[0xff, 0xfe, b'{', b'"', b'\\']);
    let _ = parse(b"llamacpp:x{a=\"\\");
}
