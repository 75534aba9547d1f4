//! Character classes of the first-sentence rule.

/// Ends a line.
pub(super) fn is_newline(c: char) -> bool {
    matches!(c, '\n' | '\u{2028}' | '\u{2029}')
}

/// Ends a sentence once whitespace or CJK text follows (and no lowercase
/// letter after the whitespace).
pub(super) fn is_terminator(c: char) -> bool {
    matches!(
        c,
        '.' | '!'
            | '?'
            | '…'
            | '‼'
            | '⁇'
            | '⁈'
            | '⁉'
            | '．'
            | '।'
            | '॥'
            | '؟'
            | '۔'
            | '።'
            | '။'
    )
}

/// Ends a sentence without a space (CJK full stops, full-width `！` and `？`);
/// only a closer right after it still belongs to the sentence.
pub(super) fn is_immediate(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '｡')
}

/// Closes a quotation, bracket or markdown emphasis after a terminator.
pub(super) fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '”'
            | '’'
            | ')'
            | ']'
            | '}'
            | '»'
            | '›'
            | '」'
            | '』'
            | '）'
            | '］'
            | '】'
            | '》'
            | '〉'
            | '〕'
            | '*'
            | '_'
    )
}

/// Chinese or Japanese text, written without spaces between sentences.
pub(super) fn is_cjk_text(c: char) -> bool {
    let u = u32::from(c);
    matches!(
        u,
        0x3040..=0x30FF // kana
            | 0x31F0..=0x31FF
            | 0x3400..=0x4DBF // ideographs
            | 0x4E00..=0x9FFF
            | 0xF900..=0xFAFF
            | 0xFF66..=0xFF9F // half-width kana
            | 0x20000..=0x3134F
    ) || (matches!(u, 0x3000..=0x303F | 0xFF00..=0xFFEF) && !c.is_alphanumeric())
}
