//! Tests of the first-sentence rule: a table of cases in ten languages, each
//! fed whole, char by char and cut at every pair of positions; the moments
//! of reporting; the cap; and property tests that any cut gives one result.
//! The moment of the sentence ([`SentenceClock`]) is tested in [`clock`].

use super::*;
use proptest::prelude::*;

mod clock;

/// (language, streamed text, expected first sentence and its char count).
/// `None`: no sentence, even at the end of the stream.
type Case = (&'static str, &'static str, Option<(&'static str, usize)>);

#[rustfmt::skip]
pub(super) const CASES: &[Case] = &[
    ("en", "Hello there. How are you?", Some(("Hello there.", 12))),
    ("en", "  \n\nHello there! How", Some(("Hello there!", 12))),
    ("en", "Pi is 3.14. Next", Some(("Pi is 3.14.", 11))),
    ("en", "Visit example.com for more. Thanks", Some(("Visit example.com for more.", 27))),
    ("en", "Visit https://example.com. Then", Some(("Visit https://example.com.", 26))),
    ("en", "Version v1.2.3 is out. Yes", Some(("Version v1.2.3 is out.", 22))),
    ("en", "Dr. Smith and Mrs. Jones met at St. Mary's. Then", Some(("Dr. Smith and Mrs. Jones met at St. Mary's.", 43))),
    ("en", "PROF. X spoke vs. Mr. Y today. Ok", Some(("PROF. X spoke vs. Mr. Y today.", 30))),
    ("en", "J. R. R. Tolkien wrote it. Yes", Some(("J. R. R. Tolkien wrote it.", 26))),
    ("en", "1. Boil the water. 2. Add salt.", Some(("1. Boil the water.", 18))),
    ("en", "12. Stir well. Then", Some(("12. Stir well.", 14))),
    ("en", "a. First option.\nb. Second", Some(("a. First option.", 16))),
    ("en", "a. First option. b. Second", Some(("a. First option. b.", 19))),
    ("en", "2) Add salt. Then", Some(("2) Add salt.", 12))),
    ("en", "**1.** Preheat the oven. Then", Some(("**1.** Preheat the oven.", 24))),
    ("en", "No. 5 is the best. Yes", Some(("No. 5 is the best.", 18))),
    ("en", "No. I won't. Sorry", Some(("No.", 3))),
    ("en", "We left on Jan. 5 at noon. Ok", Some(("We left on Jan. 5 at noon.", 26))),
    ("en", "Apples, pears, etc. Then we left.", Some(("Apples, pears, etc.", 19))),
    ("en", "Apples, pears, etc. are fruit. Yes", Some(("Apples, pears, etc. are fruit.", 30))),
    ("en", "We met at 5 p.m. and left. Bye", Some(("We met at 5 p.m. and left.", 26))),
    ("en", "We met at 5 p.m. Then we left.", Some(("We met at 5 p.m.", 16))),
    ("en", "The U.S. is big. Yes", Some(("The U.S. is big.", 16))),
    ("en", "Use it, e.g. for tests. Ok", Some(("Use it, e.g. for tests.", 23))),
    ("en", "It costs approx. 5 dollars. Ok", Some(("It costs approx. 5 dollars.", 27))),
    ("en", "Wow!!! That is great.", Some(("Wow!!!", 6))),
    ("en", "Really?! Yes.", Some(("Really?!", 8))),
    ("en", "Well... Let me think.", Some(("Well...", 7))),
    ("en", "Well... let me think. Ok", Some(("Well... let me think.", 21))),
    ("en", "Hmm... maybe later. Ok", Some(("Hmm... maybe later.", 19))),
    ("en", "Wait… what?", Some(("Wait… what?", 11))),
    ("en", "Wait… What?", Some(("Wait…", 5))),
    ("en", "\"Help!\" he cried. Then", Some(("\"Help!\" he cried.", 17))),
    ("en", "\"Help!\" He cried.", Some(("\"Help!\"", 7))),
    ("en", "What? no way! Fine", Some(("What? no way!", 13))),
    ("en", "(Really?) yes, really. Ok", Some(("(Really?) yes, really.", 22))),
    ("en", "**Stop!** said he. Ok", Some(("**Stop!** said he.", 18))),
    ("en", "Hi there. how odd. Ok", Some(("Hi there. how odd.", 18))),
    ("en", "I can't. Maybe later", Some(("I can't.", 8))),
    ("en", "That is John's. Then more", Some(("That is John's.", 15))),
    ("en", "It weighs 5 lbs. and costs $3. Ok", Some(("It weighs 5 lbs. and costs $3.", 30))),
    ("en", "It takes 5 min. to cook. Ok", Some(("It takes 5 min. to cook.", 24))),
    ("en", "Ask Acme Inc. today. Ok", Some(("Ask Acme Inc. today.", 20))),
    ("en", "Go to https://example. then", Some(("Go to https://example. then", 27))),
    ("en", "Call user@example. then", Some(("Call user@example. then", 23))),
    ("en", "Wow!!! amazing. Ok", Some(("Wow!!! amazing.", 15))),
    ("en", "Done! 5 more. Ok", Some(("Done!", 5))),
    ("en", "Done! \"Next\" one", Some(("Done!", 5))),
    ("en", "No. maybe not. Ok", Some(("No. maybe not.", 14))),
    ("en", "Done. iOS 18 is out. Ok", Some(("Done. iOS 18 is out.", 20))),
    ("en", "Wow! iOS 18 is out. Ok", Some(("Wow! iOS 18 is out.", 19))),
    ("en", "He said \"Stop.\" Then he left.", Some(("He said \"Stop.\"", 15))),
    ("en", "She said ‘fine.’ Then", Some(("She said ‘fine.’", 16))),
    ("en", "(See above.) Next", Some(("(See above.)", 12))),
    ("en", "**Note.** This matters.", Some(("**Note.**", 9))),
    ("en", "_Yes!_ Indeed", Some(("_Yes!_", 6))),
    ("en", "# Heading\nBody text.", Some(("# Heading", 9))),
    ("en", "## Step 1: Prepare\n\nText", Some(("## Step 1: Prepare", 18))),
    ("en", "- first item\n- second item", Some(("- first item", 12))),
    ("en", "Here is a list:\n1. one", Some(("Here is a list:", 15))),
    ("en", "Line one\r\nLine two", Some(("Line one", 8))),
    ("en", "---\n\nHello there. Bye", Some(("Hello there.", 12))),
    ("en", "```python\nprint('a. b')\nx = 1. 2\n```\nThat prints. More", Some(("That prints.", 12))),
    ("en", "~~~\nDone. Yes\n~~~\nAfter. More", Some(("After.", 6))),
    ("en", "````md\n```\nnot closed. yet\n````\nNow. Ok", Some(("Now.", 4))),
    ("en", "```js``` is inline. Next", Some(("```js``` is inline.", 19))),
    ("en", "Sure! 😀 Here it is.", Some(("Sure!", 5))),
    ("en", "😀 Sure thing. Ok", Some(("😀 Sure thing.", 13))),
    ("en", "👍\nOK. Done", Some(("OK.", 3))),
    ("en", "... and then. Ok", Some(("... and then.", 13))),
    ("en", "It costs $5. Cheap", Some(("It costs $5.", 12))),
    ("en", "I am 25. Next", Some(("I am 25.", 8))),
    ("en", "Is it 2.0? Yes", Some(("Is it 2.0?", 10))),
    ("en", "Yes.\nNo.", Some(("Yes.", 4))),
    ("en", "Call Dr.\nSmith", Some(("Call Dr.", 8))),
    ("en", "This sentence never ends", Some(("This sentence never ends", 24))),
    ("en", "Ends with a period.", Some(("Ends with a period.", 19))),
    ("en", "Trailing spaces   \n", Some(("Trailing spaces", 15))),
    ("en", "The answer is C. It is right. Ok", Some(("The answer is C. It is right.", 29))),
    ("en", "   ", None),
    ("en", "", None),
    ("en", "😀😀 \n ---", None),
    ("en", "```\ncode only. yes\n```\n", None),
    ("en", "```rust", None),
    ("en", "...", None),
    ("zh", "你好。我是你的助手。", Some(("你好。", 3))),
    ("zh", "我们在3.5版本中修复了它。谢谢", Some(("我们在3.5版本中修复了它。", 14))),
    ("zh", "你好.我是助手", Some(("你好.", 3))),
    ("zh", "他说：“好的。”然后走了。", Some(("他说：“好的。”", 8))),
    ("zh", "她说：“好的。”", Some(("她说：“好的。”", 8))),
    ("zh", "她说：“好的。”然后", Some(("她说：“好的。”", 8))),
    ("zh", "他说：「好。」」然后", Some(("他说：「好。」", 7))),
    ("zh", "（完了！）然后", Some(("（完了！）", 5))),
    ("zh", "你好。 我", Some(("你好。", 3))),
    ("zh", "你好。\n我", Some(("你好。", 3))),
    ("zh", "好的！谢谢", Some(("好的！", 3))),
    ("zh", "什么？！真的吗", Some(("什么？", 3))),
    ("zh", "。你好。", Some(("。你好。", 4))),
    ("zh", "没有标点的句子", Some(("没有标点的句子", 7))),
    ("ja", "こんにちは！元気ですか？", Some(("こんにちは！", 6))),
    ("ja", "「はい。」と言った。", Some(("「はい。」", 5))),
    ("ja", "本当？！", Some(("本当？", 3))),
    ("ja", "本研究では手法を示す．次に結果を述べる．", Some(("本研究では手法を示す．", 11))),
    ("ja", "円周率は３．１４です。次", Some(("円周率は３．１４です。", 11))),
    ("ja", "１．はじめに\n本文", Some(("１．はじめに", 6))),
    ("ja", "ｺﾝﾆﾁﾊ｡ｹﾞﾝｷ", Some(("ｺﾝﾆﾁﾊ｡", 6))),
    ("es", "¿Qué hora es? Son las tres.", Some(("¿Qué hora es?", 13))),
    ("es", "¡Hola! ¿Cómo estás?", Some(("¡Hola!", 6))),
    ("es", "El Sr. García llegó tarde. Luego", Some(("El Sr. García llegó tarde.", 26))),
    ("es", "Vivo en EE.UU. desde 2010. Sí", Some(("Vivo en EE.UU. desde 2010.", 26))),
    ("de", "Das ist z.B. gut. Ja", Some(("Das ist z.B. gut.", 17))),
    ("de", "Wir haben Äpfel, Birnen usw. und mehr. Ja", Some(("Wir haben Äpfel, Birnen usw. und mehr.", 38))),
    ("de", "Straße Nr. 5 ist hier. Ja", Some(("Straße Nr. 5 ist hier.", 22))),
    ("de", "Am 3. Oktober war Feiertag. Ja", Some(("Am 3.", 5))),
    ("fr", "Bonjour ! Comment ça va ?", Some(("Bonjour !", 9))),
    ("fr", "M. Dupont est là. Oui", Some(("M. Dupont est là.", 17))),
    ("fr", "« Oui. » Il est parti.", Some(("« Oui.", 6))),
    ("fr", "Des pommes, etc. Puis", Some(("Des pommes, etc.", 16))),
    ("fr", "« Non ! » dit-il. Oui", Some(("« Non !", 7))),
    ("hi", "नमस्ते। आप कैसे हैं?", Some(("नमस्ते।", 7))),
    ("hi", "क्या आप ठीक हैं? हाँ।", Some(("क्या आप ठीक हैं?", 16))),
    ("hi", "यह १.५ किलो है। ठीक", Some(("यह १.५ किलो है।", 15))),
    ("ar", "مرحبا! كيف حالك؟", Some(("مرحبا!", 6))),
    ("ar", "كيف حالك؟ أنا بخير.", Some(("كيف حالك؟", 9))),
    ("ur", "یہ اچھا ہے۔ شکریہ", Some(("یہ اچھا ہے۔", 11))),
    ("ru", "Привет. Как дела?", Some(("Привет.", 7))),
    ("ru", "Это т.е. пример. Да", Some(("Это т.е. пример.", 16))),
    ("ru", "А. С. Пушкин — поэт. Да", Some(("А. С. Пушкин — поэт.", 20))),
    ("ru", "Это я. Привет", Some(("Это я.", 6))),
    ("ru", "Ого! сказал он. Да", Some(("Ого! сказал он.", 15))),
    ("ru", "Он живёт в Москве и т.д. Потом", Some(("Он живёт в Москве и т.д.", 24))),
    ("ru", "Он живёт в Москве и т.д. и т.п. Ну", Some(("Он живёт в Москве и т.д. и т.п.", 31))),
    ("ru", "Это стоит 5 тыс. рублей. Да", Some(("Это стоит 5 тыс. рублей.", 24))),
    ("ru", "Это стоит 5 млн. рублей. Да", Some(("Это стоит 5 млн. рублей.", 24))),
    ("th", "สวัสดีครับ ยินดีต้อนรับ\nต่อไป", Some(("สวัสดีครับ ยินดีต้อนรับ", 23))),
    ("el", "Τι κάνεις; Καλά. Εσύ", Some(("Τι κάνεις; Καλά.", 16))),
    ("ko", "안녕하세요. 반갑습니다.", Some(("안녕하세요.", 6))),
    ("en", "We have apples, etc.", Some(("We have apples, etc.", 20))),
    ("en", "Please call Dr. Smith", Some(("Please call Dr. Smith", 21))),
];

/// Feeds `parts` in order, then ends the stream.
fn feed(parts: &[&str]) -> Option<Sentence> {
    let mut rule = SentenceRule::new();
    for part in parts {
        if let Some(found) = rule.push(part) {
            assert!(rule.is_done());
            assert_eq!(rule.push("More text. And more.\n"), None);
            assert_eq!(rule.finish(), None);
            return Some(found);
        }
        assert!(!rule.is_done());
    }
    let found = rule.finish();
    assert!(rule.is_done());
    assert_eq!(rule.push("Late text. "), None);
    found
}

/// Byte offsets of every char boundary of `text`, both ends included.
fn boundaries(text: &str) -> Vec<usize> {
    text.char_indices()
        .map(|(at, _)| at)
        .chain(std::iter::once(text.len()))
        .collect()
}

/// `text` cut at the given sorted boundaries.
fn cut<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut parts = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for &at in cuts {
        parts.push(&text[from..at]);
        from = at;
    }
    parts.push(&text[from..]);
    parts
}

fn expected(case: &Case) -> Option<Sentence> {
    case.2.map(|(text, chars)| Sentence {
        chars,
        text: text.to_owned(),
    })
}

#[test]
fn table_fed_whole() {
    for case in CASES {
        let found = feed(&[case.1]);
        assert_eq!(found, expected(case), "{}: {:?}", case.0, case.1);
        if let Some(found) = found {
            assert_eq!(found.chars, found.text.chars().count(), "{:?}", case.1);
        }
    }
}

#[test]
fn table_fed_char_by_char() {
    for case in CASES {
        let chars: Vec<String> = case.1.chars().map(String::from).collect();
        let parts: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(feed(&parts), expected(case), "{}: {:?}", case.0, case.1);
    }
}

#[test]
fn table_cut_at_every_position_and_pair_of_positions() {
    for case in CASES {
        let want = expected(case);
        let bounds = boundaries(case.1);
        for (i, &a) in bounds.iter().enumerate() {
            assert_eq!(feed(&cut(case.1, &[a])), want, "{:?} cut at {a}", case.1);
            for &b in &bounds[i..] {
                let parts = cut(case.1, &[a, b]);
                assert_eq!(feed(&parts), want, "{:?} cut as {parts:?}", case.1);
            }
        }
    }
}

#[test]
fn every_language_is_covered() {
    for lang in ["en", "zh", "ja", "es", "de", "fr", "hi", "ar", "ru", "th"] {
        assert!(CASES.iter().any(|case| case.0 == lang), "{lang}");
    }
}

// === the moment a sentence is reported ===

/// Feeds `parts`; returns the index of the part whose push reported.
fn reported_at(parts: &[&str]) -> Option<usize> {
    let mut rule = SentenceRule::new();
    parts.iter().position(|part| rule.push(part).is_some())
}

#[test]
fn a_terminator_waits_for_the_next_visible_character() {
    assert_eq!(reported_at(&["Hello", " there", ".", " How"]), Some(3));
    assert_eq!(reported_at(&["Hello there.", "\n"]), Some(1));
    assert_eq!(reported_at(&["Pi is 3", ".", "14", ". ", "Next"]), Some(4));
    assert_eq!(reported_at(&["Hi!", " ", " ", "Then"]), Some(3));
    assert_eq!(
        reported_at(&["\"Help!", "\"", " he", " cried.", " Then"]),
        Some(4)
    );
    assert_eq!(reported_at(&["Hmm...", " maybe", " later.", "\n"]), Some(3));
}

#[test]
fn cjk_full_stops_wait_one_character_for_a_closer() {
    assert_eq!(reported_at(&["你好", "。", "我"]), Some(2));
    assert_eq!(reported_at(&["你好。我"]), Some(0));
    assert_eq!(reported_at(&["好的。", "”", "然后"]), Some(1));
    assert_eq!(reported_at(&["你好。"]), None);
    let mut rule = SentenceRule::new();
    assert_eq!(rule.push("好的。"), None);
    let closed = rule.push("”然后").map(|s| s.text);
    assert_eq!(closed.as_deref(), Some("好的。”"));
}

#[test]
fn an_abbreviation_waits_for_the_next_word() {
    assert_eq!(reported_at(&["Pears, etc.", " ", " ", "Then"]), Some(3));
    assert_eq!(reported_at(&["No.", " ", "5 is best.", " Yes"]), Some(3));
    assert_eq!(
        reported_at(&["Dr.", " Smith", " came.", " ", "Ok"]),
        Some(4)
    );
}

#[test]
fn a_newline_ends_a_line_at_once() {
    assert_eq!(reported_at(&["# Title", "\n", "Body"]), Some(1));
    assert_eq!(reported_at(&["Etc.", "\n"]), Some(1));
}

#[test]
fn finish_reports_the_rest_once() {
    let mut rule = SentenceRule::default();
    assert_eq!(rule.push("  Sure thing"), None);
    let want = Sentence {
        chars: 10,
        text: "Sure thing".into(),
    };
    assert_eq!(rule.finish(), Some(want));
    assert!(rule.is_done());
    assert_eq!(rule.finish(), None);
}

// === the cap ===

#[test]
fn text_without_an_end_is_cut_at_the_cap() {
    let text = "ab".repeat(MAX_SENTENCE_CHARS);
    let mut rule = SentenceRule::new();
    let want = Sentence {
        chars: MAX_SENTENCE_CHARS,
        text: text[..MAX_SENTENCE_CHARS].to_owned(),
    };
    assert_eq!(rule.push(&text), Some(want));
    assert!(rule.is_done());
}

#[test]
fn the_cap_counts_chars_not_bytes_and_trims() {
    let text = "é ".repeat(MAX_SENTENCE_CHARS);
    let found = feed(&[&text]);
    assert_eq!(
        found.as_ref().map(|s| s.chars),
        Some(MAX_SENTENCE_CHARS - 1)
    );
    assert!(found.is_some_and(|s| s.text.ends_with('é')));
}

#[test]
fn the_cap_reports_from_a_single_delta_call_by_call() {
    let mut rule = SentenceRule::new();
    for _ in 0..MAX_SENTENCE_CHARS / 4 - 1 {
        assert_eq!(rule.push("abc "), None);
    }
    let found = rule.push("abc abc").map(|s| s.chars);
    assert_eq!(found, Some(MAX_SENTENCE_CHARS - 1));
}

#[test]
fn unspeakable_text_is_dropped_at_the_cap_not_reported() {
    let text = format!("{}Hi. ", "-".repeat(3 * MAX_SENTENCE_CHARS));
    assert_eq!(feed(&[&text]).map(|s| s.text).as_deref(), Some("Hi."));
}

#[test]
fn code_blocks_do_not_count_toward_the_cap() {
    let text = format!("```\n{}\n```\nDone. ", "x = 1\n".repeat(MAX_SENTENCE_CHARS));
    assert_eq!(feed(&[&text]).map(|s| s.text).as_deref(), Some("Done."));
}

#[test]
fn an_unclosed_code_block_gives_no_sentence() {
    assert_eq!(feed(&["```\nlet x = 1. Then y.\n"]), None);
}

// === properties ===

/// Pieces that exercise every rule when strung together.
fn piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a", "Z", "word", "1", "42", " ", "  ", "\n", "\t", ".", "!", "?", "…", "...", "。", "！",
        "？", "．", "।", "؟", "」", "\"", "”", ")", "*", "_", "`", "```", "~~~", "中文", "は", "é",
        "Я", "😀", "Dr", "No", "etc", "e.g", "U.S", "p.m", "¿", "¡", "-", "#",
    ])
}

/// Checks what holds for any first sentence of `text`.
fn check_sentence(text: &str, found: &Option<Sentence>) -> Result<(), TestCaseError> {
    if let Some(found) = found {
        prop_assert!(text.contains(&found.text));
        prop_assert_eq!(found.chars, found.text.chars().count());
        prop_assert!(found.chars <= MAX_SENTENCE_CHARS);
        prop_assert_eq!(found.text.trim(), found.text.as_str());
        prop_assert!(found.text.chars().any(char::is_alphanumeric));
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_cut_gives_the_result_of_the_whole_text(
        pieces in prop::collection::vec(piece(), 0..48),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let text = pieces.concat();
        let whole = feed(&[&text]);
        check_sentence(&text, &whole)?;
        let bounds = boundaries(&text);
        let mut cuts: Vec<usize> = picks.iter().map(|pick| *pick.get(&bounds)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(feed(&cut(&text, &cuts)), whole);
    }

    #[test]
    fn any_text_any_cut_never_panics_and_agrees(
        text in any::<String>(),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let whole = feed(&[&text]);
        check_sentence(&text, &whole)?;
        let bounds = boundaries(&text);
        let mut cuts: Vec<usize> = picks.iter().map(|pick| *pick.get(&bounds)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(feed(&cut(&text, &cuts)), whole);
    }
}
