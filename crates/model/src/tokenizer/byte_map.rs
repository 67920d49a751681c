//! The raw bytes a token stands for, as the engine's incremental detokenizer needs them.
//!
//! Byte-level BPE (GPT-2 and its descendants) spells every byte as one printable character
//! (`bytes_to_unicode` in GPT-2's `encoder.py`): the printable Latin-1 bytes stand for
//! themselves and the other 68 bytes map to U+0100.. in order. SentencePiece-style vocabularies
//! spell a space as `▁` (U+2581) and an otherwise unknown byte as a `<0xXX>` token.

use std::sync::OnceLock;

/// How a vocabulary spells bytes; decides [`token_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteEncoding {
    /// GPT-2 byte↔unicode alphabet.
    ByteLevel,
    /// `▁` for space and `<0xXX>` byte-fallback tokens.
    SentencePiece,
    /// Token text is the UTF-8 it stands for.
    Plain,
}

/// The SentencePiece space marker.
pub const SPM_SPACE: char = '\u{2581}';

fn is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// `byte → char` of GPT-2's alphabet.
pub fn byte_to_char(b: u8) -> char {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            table[b as usize] = if is_printable(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or('\0');
                next += 1;
                c
            };
        }
        table
    })[b as usize]
}

/// `char → byte` of GPT-2's alphabet; `None` for characters outside it.
pub fn char_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 256 {
        let b = u as u8;
        return is_printable(b).then_some(b);
    }
    // The 68 non-printable bytes, in order, are U+0100..U+0143.
    let k = u.checked_sub(256).filter(|&k| k < 68)? as usize;
    (0..=255u8).filter(|&b| !is_printable(b)).nth(k)
}

/// Whether every character of `s` belongs to GPT-2's byte alphabet.
pub fn is_byte_level_spelling(s: &str) -> bool {
    s.chars().all(|c| char_to_byte(c).is_some())
}

/// Spells arbitrary bytes in GPT-2's alphabet.
pub fn bytes_to_byte_level(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

/// `<0xXX>` → `XX`.
pub fn parse_byte_token(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The bytes `token` stands for under `encoding`, as the matching `tokenizers` decoder produces
/// them: a byte-level token with any character outside the alphabet (an added token spelled in
/// plain text) stands for its own UTF-8, like `ByteLevel`'s decoder does.
pub fn token_bytes(token: &str, encoding: ByteEncoding) -> Vec<u8> {
    match encoding {
        ByteEncoding::ByteLevel => token
            .chars()
            .map(char_to_byte)
            .collect::<Option<Vec<u8>>>()
            .unwrap_or_else(|| token.as_bytes().to_vec()),
        ByteEncoding::SentencePiece => match parse_byte_token(token) {
            Some(b) => vec![b],
            None => token.replace(SPM_SPACE, " ").into_bytes(),
        },
        ByteEncoding::Plain => token.as_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(byte_to_char(b' '), '\u{120}');
        assert_eq!(byte_to_char(b'\n'), '\u{10A}');
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte('\u{AD}'), None);
    }
}
