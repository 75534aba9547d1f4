//! The moment of the first sentence ([`SentenceClock`]) against the rule
//! that reports it when it sees what follows ([`SentenceRule`]): the same
//! sentence, never a later moment, and an earlier one only at the piece that
//! ends where the sentence ends (or with whitespace after it). Checked on the whole table cut at
//! every position and pair of positions, on real answers of a real model as
//! llama-server streamed them, and by a property test; plus when the moment
//! moves and when it does not.

use super::*;

/// What the rule alone gives: the sentence and the piece that reported it
/// (`pieces.len()` for the end of the stream), and whether the period
/// certain by the text before it was revoked by the next piece.
fn waiting(pieces: &[&str]) -> (Option<Sentence>, usize, usize) {
    let mut rule = SentenceRule::new();
    let mut revoked = 0;
    for (i, piece) in pieces.iter().enumerate() {
        let pending = rule.pending;
        let found = rule.push(piece);
        // A period certain at the end of the last piece, and the sentence
        // does not end there: deciding at it would have been wrong.
        let gone = found.is_none() && rule.pending != pending || found.is_some();
        if pending.is_some() && gone && !(found.is_some() && rule.ended_at_pending) {
            revoked += 1;
        }
        if found.is_some() {
            return (found, i, revoked);
        }
    }
    let found = rule.finish();
    (found, pieces.len(), revoked)
}

/// The clock over `pieces`, with piece indices as moments.
fn clocked(pieces: &[&str]) -> Option<(Sentence, usize)> {
    let mut clock = SentenceClock::new();
    for (i, piece) in pieces.iter().enumerate() {
        if let Some(found) = clock.push(piece, i) {
            return Some(found);
        }
    }
    clock.finish(pieces.len())
}

/// Checks the clock against the rule on `pieces`; returns how many pieces
/// earlier the moment is, and the revoked periods.
fn compare(pieces: &[&str]) -> Result<(usize, usize), String> {
    let (sentence, reported, revoked) = waiting(pieces);
    let clocked = clocked(pieces);
    let Some((found, moment)) = clocked else {
        return match sentence {
            None => Ok((0, revoked)),
            Some(s) => Err(format!("{pieces:?}: no clocked sentence for {s:?}")),
        };
    };
    if sentence.as_ref() != Some(&found) || moment > reported {
        return Err(format!(
            "{pieces:?}: {found:?} at {moment} vs {sentence:?} at {reported}"
        ));
    }
    let ends = |at: usize| pieces[..=at].concat().trim_end().ends_with(&found.text);
    if moment < reported && !ends(moment) {
        return Err(format!("{pieces:?}: piece {moment} does not end {found:?}"));
    }
    Ok((reported - moment, revoked))
}

#[test]
fn the_table_cut_anywhere_gets_the_same_sentence_no_later_and_earlier_only_at_its_end() {
    let (mut periods, mut moved, mut revoked) = (0, 0, Vec::new());
    for case in CASES {
        let bounds = boundaries(case.1);
        let mut gone = 0;
        for (i, &a) in bounds.iter().enumerate() {
            for &b in &bounds[i..] {
                gone += compare(&cut(case.1, &[a, b])).unwrap().1;
            }
        }
        let chars: Vec<String> = case.1.chars().map(String::from).collect();
        let parts: Vec<&str> = chars.iter().map(String::as_str).collect();
        compare(&parts).unwrap();
        if gone > 0 {
            revoked.push(case.1);
        }
        // Cut right after the sentence's last character, as a token ends.
        if let Some((text, _)) = case.2.filter(|(t, _)| t.ends_with(['.', '．'])) {
            let end = case.1.find(text).unwrap() + text.len();
            periods += 1;
            moved += usize::from(compare(&cut(case.1, &[end])).unwrap().0 > 0);
        }
    }
    // Figures for docs/telemetry.md.
    eprintln!(
        "{} cases, {periods} first sentences end with a period: stamped at it in {moved}; \
         a certain period revoked by what followed in {} cases: {revoked:?}",
        CASES.len(),
        revoked.len()
    );
    assert!(moved * 2 > periods, "{moved} of {periods}");
}

// === real answers ===

/// One answer of `tests/fixtures/sentence/smollm2_answers.jsonl`: the
/// pieces as llama-server streamed them with their arrival, and the arrival
/// of the final event (ms after the first piece).
struct Answer {
    prompt: String,
    pieces: Vec<(f64, String)>,
    end: f64,
}

fn real_answers() -> Vec<Answer> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sentence/smollm2_answers.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let pieces = v["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t[0].as_f64().unwrap(), t[1].as_str().unwrap().to_owned()))
                .collect();
            Answer {
                prompt: v["prompt"].as_str().unwrap().to_owned(),
                pieces,
                end: v["end_ms"].as_f64().unwrap(),
            }
        })
        .collect()
}

#[test]
fn real_answers_are_stamped_at_their_period_and_no_certain_period_is_revoked() {
    let answers = real_answers();
    assert!(answers.len() >= 30);
    let (mut saved, mut periods) = (Vec::new(), 0);
    for a in &answers {
        let pieces: Vec<&str> = a.pieces.iter().map(|(_, p)| p.as_str()).collect();
        let (moved, revoked) = compare(&pieces).unwrap();
        let sentence = waiting(&pieces).0.map(|s| s.text).unwrap_or_default();
        periods += usize::from(sentence.ends_with(['.', '．']));
        assert_eq!(
            revoked, 0,
            "{:?}: a certain period did not end it",
            a.prompt
        );
        if moved > 0 {
            let (_, reported, _) = waiting(&pieces);
            let clocked = clocked(&pieces).unwrap().1;
            let at = |i: usize| a.pieces.get(i).map_or(a.end, |(ms, _)| *ms);
            saved.push(at(reported) - at(clocked));
        }
    }
    saved.sort_by(f64::total_cmp);
    let pct = |p: usize| saved.get(saved.len() * p / 100).copied().unwrap_or(0.0);
    // Figures for docs/telemetry.md.
    eprintln!(
        "{} real answers, {periods} first sentences end with a period: stamped at it in {}, \
         earlier by {:.1} ms median, {:.1} ms p90",
        answers.len(),
        saved.len(),
        pct(50),
        pct(90)
    );
    assert!(
        saved.len() * 2 > answers.len(),
        "{} of {}",
        saved.len(),
        answers.len()
    );
}

// === when the moment moves ===

/// The sentence's text and moment (a piece index).
fn moment(pieces: &[&str]) -> Option<(String, usize)> {
    clocked(pieces).map(|(s, at)| (s.text, at))
}

#[test]
fn a_plain_words_period_is_the_moment_once_the_next_piece_shows_the_end() {
    let is = |text: &str, at: usize| Some((text.to_owned(), at));
    let paris = ["The", " capital", " is", " Paris", ".", " It"];
    assert_eq!(moment(&paris), is("The capital is Paris.", 4));
    assert_eq!(moment(&["Hello there.", " How"]), is("Hello there.", 0));
    assert_eq!(moment(&["I can't", ".", "\n"]), is("I can't.", 1));
    assert_eq!(
        moment(&["Hello", " there", ". ", "How"]),
        is("Hello there.", 2)
    );
    assert_eq!(moment(&["Units (SI)", ".", " Next"]), is("Units (SI).", 1));
    assert_eq!(
        moment(&["**Paris** is", " big", ".", " It"]),
        is("**Paris** is big.", 2)
    );
    assert_eq!(
        moment(&["\"Help!\" he", " cried", ".", " It"]),
        is("\"Help!\" he cried.", 2)
    );
    assert_eq!(moment(&["手法を示す", "．", "次に"]), is("手法を示す．", 1));
    assert_eq!(
        moment(&["* Boil", " water", ".", " Then"]),
        is("* Boil water.", 2)
    );
    assert_eq!(
        moment(&["Это", " я", " сказал", ".", " Да"]),
        is("Это я сказал.", 3)
    );
    // Empty and blank pieces keep the period's moment.
    assert_eq!(moment(&["Paris", ".", "", " ", "It"]), is("Paris.", 1));
    // The answer ends with its first sentence: the end of the stream shows it.
    assert_eq!(moment(&["Paris", "."]), is("Paris.", 1));
}

#[test]
fn the_next_piece_can_still_continue_the_sentence_and_then_the_moment_is_later() {
    let is = |text: &str, at: usize| Some((text.to_owned(), at));
    let glued = ["Visit example", ".", "com", " now", ".", " Ok"];
    assert_eq!(moment(&glued), is("Visit example.com now.", 4));
    let lower = ["Hi there", ".", " how", " odd", ".", " Ok"];
    assert_eq!(moment(&lower), is("Hi there. how odd.", 4));
    // A cut stream: the period was never confirmed, there is no sentence
    // before the end of the stream.
    let mut clock = SentenceClock::new();
    assert_eq!(clock.push("Paris.", 0), None);
    assert!(!clock.is_done());
}

#[test]
fn what_the_text_before_the_period_cannot_settle_keeps_the_rules_moment() {
    for pieces in [
        &["Dr", ".", " Next"][..],  // a title
        &["The U", ".", " Next"],   // an initial, or `U.S.`
        &["Pi is 3", ".", " Next"], // a number: `3.14`
        &["Use it, e", ".g.", " Next"],
        &["Well", "...", " Next"], // an ellipsis
        &["Pears, etc", ".", " Next"],
        &["It weighs 5 lbs", ".", " Next"],
        &["1", ".", " Next"],  // a list marker
        &["No", ".", " Next"], // `No. 5`
        &["Go to https://example", ".", " Next"],
        &["Set my_var", ".", " Next"],
        &["Ask Acme Ltd", ".", " Next"], // no vowel: an abbreviation
        &["He said \"Stop", ".", "\"", " Next"], // a closer may follow
        &["(See above", ".", ")", " Next"],
        &["**Note", ".", "**", " Next"],
        &["She said 'fine", ".", "'", " Next"],
        &["»Ja«, sagte er", ".", " Next"], // quoting not understood
        &["Wow", "!", " Next"],            // `!` `?`: no period
        &["你好", "。", "我"],
        &["Stop", ".\"", " Next"], // the period is not the piece's end
    ] {
        let (_, reported, _) = waiting(pieces);
        assert_eq!(moment(pieces).map(|m| m.1), Some(reported), "{pieces:?}");
    }
}

proptest! {
    /// Any text, any cut: the rule's sentence, never a later moment, and an
    /// earlier one only at a piece that ends where the sentence ends.
    #[test]
    fn any_cut_gives_the_rules_sentence_at_or_before_its_moment(
        pieces in prop::collection::vec(piece(), 0..48),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let text = pieces.concat();
        let bounds = boundaries(&text);
        let mut cuts: Vec<usize> = picks.iter().map(|pick| *pick.get(&bounds)).collect();
        cuts.sort_unstable();
        let checked = compare(&cut(&text, &cuts));
        prop_assert!(checked.is_ok(), "{}", checked.err().unwrap_or_default());
    }
}
