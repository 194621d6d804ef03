//! The few words the proxy looks for in every statement's text (Cypher
//! calls, catalog changes, isolation and search path changes, prepared
//! statements), found in one pass: this runs on every Query and Parse.

/// A set of the words below found in a statement, case-insensitively and
/// anywhere (inside identifiers and literals too: a hint, never a parse).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Words(u16);

impl Words {
    pub const CYPHER: Words = Words(1);
    pub const GRAPH: Words = Words(1 << 1);
    pub const LABEL: Words = Words(1 << 2);
    pub const EXTENSION: Words = Words(1 << 3);
    pub const AGE: Words = Words(1 << 4);
    pub const DISCARD: Words = Words(1 << 5);
    pub const DEALLOCATE: Words = Words(1 << 6);
    pub const ISOLATION: Words = Words(1 << 7);
    pub const RESET: Words = Words(1 << 8);
    pub const PREPARE: Words = Words(1 << 9);
    /// `execute` (found as "xecute": "ex" starts "extension").
    pub const EXECUTE: Words = Words(1 << 10);
    pub const SEARCH_PATH: Words = Words(1 << 11);
    /// `SET SCHEMA` sets the search path.
    pub const SCHEMA: Words = Words(1 << 12);
    /// `set_config`.
    pub const CONFIG: Words = Words(1 << 13);
    pub const LOAD: Words = Words(1 << 14);

    pub fn scan(text: &str) -> Words {
        let h = text.as_bytes();
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        // SAFETY: SSE2 is part of the target (the cfg above), so the CPU
        // this runs on has it.
        let (found, from) = unsafe { wide::scan(h) };
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        let (found, from) = (Words::default(), 0);
        found | scan_from(h, from)
    }

    /// Does the set hold any of `w` (which may be several words joined by `|`)?
    pub fn any(self, w: Words) -> bool {
        self.0 & w.0 != 0
    }

    pub fn all(self, w: Words) -> bool {
        self.0 & w.0 == w.0
    }
}

/// The words whose anchor starts at `from` or later, a byte at a time.
fn scan_from(h: &[u8], from: usize) -> Words {
    let mut found = Words::default();
    // An anchor may start only where a letter that starts one is followed
    // by a letter that comes second in one: a table lookup per byte finds
    // those few places, and they are checked exactly.
    let mut prev = 0u8;
    for (i, &b) in h.iter().enumerate().skip(from) {
        let class = CLASS[usize::from(b)];
        if (prev << 1) & class & SECOND != 0 {
            found = found | word_at(h, i - 1);
        }
        prev = class;
    }
    found
}

/// Sixteen places at a time with SSE2 (every x86-64 CPU has it).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod wide {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x,
        _mm_set1_epi8, _mm_setzero_si128,
    };

    use super::{ANCHORS, Words, word_at};

    /// The words whose anchor starts in the blocks of sixteen places
    /// scanned, and where the byte loop must go on from.
    #[target_feature(enable = "sse2")]
    pub(super) fn scan(h: &[u8]) -> (Words, usize) {
        let mut found = Words::default();
        let mut i = 0;
        // A block's last place pairs with the byte after the block.
        while let (Some(a), Some(b)) = (block(h, i), block(h, i + 1)) {
            let mut bits = _mm_movemask_epi8(anchors(a, b)) as u32;
            while bits != 0 {
                found = found | word_at(h, i + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
            i += 16;
        }
        (found, i)
    }

    /// Sixteen bytes from `at`, letters folded to lower case (`| 0x20` maps
    /// no other byte onto a lower-case letter).
    #[target_feature(enable = "sse2")]
    fn block(h: &[u8], at: usize) -> Option<__m128i> {
        let b = h.get(at..)?.first_chunk::<16>()?;
        let v = u128::from_le_bytes(*b);
        let v = _mm_set_epi64x((v >> 64) as i64, v as i64);
        Some(_mm_or_si128(v, _mm_set1_epi8(0x20)))
    }

    /// The places where some word's anchor starts: its first letter in `a`
    /// and its second at the same place in `b` (the bytes one further).
    /// Pairs, not letters: a place with the first letter of one anchor and
    /// the second of another is no candidate.
    #[target_feature(enable = "sse2")]
    fn anchors(a: __m128i, b: __m128i) -> __m128i {
        let mut m = _mm_setzero_si128();
        // Constant letters, so the loop unrolls into compares with
        // constant vectors.
        for [x, y] in ANCHORS {
            let first = _mm_cmpeq_epi8(a, _mm_set1_epi8(x as i8));
            let second = _mm_cmpeq_epi8(b, _mm_set1_epi8(y as i8));
            m = _mm_or_si128(m, _mm_and_si128(first, second));
        }
        m
    }
}

const WORDS: [(Words, &[u8], usize); 15] = [
    (Words::AGE, b"age", 0),
    (Words::CYPHER, b"cypher", 1),
    (Words::CONFIG, b"config", 2),
    (Words::DISCARD, b"discard", 2),
    (Words::DEALLOCATE, b"deallocate", 5),
    (Words::EXTENSION, b"extension", 5),
    (Words::EXECUTE, b"xecute", 0),
    (Words::GRAPH, b"graph", 3),
    (Words::ISOLATION, b"isolation", 3),
    (Words::LABEL, b"label", 2),
    (Words::LOAD, b"load", 1),
    (Words::PREPARE, b"prepare", 2),
    (Words::RESET, b"reset", 3),
    (Words::SCHEMA, b"schema", 3),
    (Words::SEARCH_PATH, b"search_path", 3),
];

/// A word's anchor: the two letters at its offset.
const fn anchor(word: &(Words, &[u8], usize)) -> [u8; 2] {
    [word.1[word.2], word.1[word.2 + 1]]
}

/// Each word's anchor, in the order of WORDS.
const ANCHORS: [[u8; 2]; WORDS.len()] = {
    let mut t = [[0u8; 2]; WORDS.len()];
    let mut i = 0;
    while i < WORDS.len() {
        t[i] = anchor(&WORDS[i]);
        i += 1;
    }
    t
};

const FIRST: u8 = 1;
const SECOND: u8 = 2;

/// For each byte: FIRST if it is the first letter of an anchor (either
/// case), SECOND if it is the second letter of one.
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < WORDS.len() {
        let [x, y] = anchor(&WORDS[i]);
        t[x as usize] |= FIRST;
        t[x.to_ascii_uppercase() as usize] |= FIRST;
        t[y as usize] |= SECOND;
        t[y.to_ascii_uppercase() as usize] |= SECOND;
        i += 1;
    }
    t
};

/// For two letters (their low five bits, the same in either case): one
/// more than the index in WORDS of the word they anchor, or 0.
const PAIRS: [[u8; 32]; 32] = {
    let mut t = [[0u8; 32]; 32];
    let mut i = 0;
    while i < WORDS.len() {
        let [x, y] = anchor(&WORDS[i]);
        t[(x & 0x1f) as usize][(y & 0x1f) as usize] = i as u8 + 1;
        i += 1;
    }
    t
};

/// The word whose anchor starts at `h[at]`, if it is there; `h[at]` and
/// `h[at + 1]` are letters. No two words share an anchor, so those two
/// pick the one word to check.
fn word_at(h: &[u8], at: usize) -> Words {
    let pick = PAIRS[usize::from(h[at] & 0x1f)][usize::from(h[at + 1] & 0x1f)];
    let Some((w, word, offset)) = WORDS.get(usize::from(pick).wrapping_sub(1)) else {
        return Words::default();
    };
    let Some(start) = at.checked_sub(*offset) else {
        return Words::default();
    };
    match h.get(start..start + word.len()) {
        Some(text) if text.eq_ignore_ascii_case(word) => *w,
        _ => Words::default(),
    }
}

impl std::ops::BitOr for Words {
    type Output = Words;
    fn bitor(self, o: Words) -> Words {
        Words(self.0 | o.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Words;

    #[test]
    fn finds_each_word_in_any_case_anywhere() {
        let w = Words::scan("SELECT * FROM CyPhEr('g', $$ $$) -- create_GRAPH, vlabel");
        assert!(w.all(Words::CYPHER | Words::GRAPH | Words::LABEL));
        assert!(!w.any(Words::EXTENSION | Words::DISCARD | Words::RESET | Words::AGE));
        assert_eq!(Words::scan("DEALLOCATE ALL"), Words::DEALLOCATE);
        assert_eq!(Words::scan("select usage"), Words::AGE);
        assert!(Words::scan("set transaction ISOLATION level serializable").any(Words::ISOLATION));
        assert!(Words::scan("discard all; reset all").all(Words::DISCARD | Words::RESET));
        assert!(Words::scan("create extension age").all(Words::EXTENSION | Words::AGE));
        assert_eq!(
            Words::scan("select cyphe, grap, labe, ag"),
            Words::default()
        );
        assert_eq!(Words::scan(""), Words::default());
        assert_eq!(Words::scan("ÇYPHER Ågé"), Words::default());
        // Non-letters never fold onto a letter: '@' | 0x20 is '`', not 'a'.
        assert_eq!(Words::scan("@GE"), Words::default());
        assert!(Words::scan("xxcypher").any(Words::CYPHER));
    }

    /// Each word, lower-cased text: does it contain the word?
    fn reference(text: &str) -> Words {
        let lower = text.to_ascii_lowercase();
        super::WORDS
            .iter()
            .filter(|(_, word, _)| lower.as_bytes().windows(word.len()).any(|w| w == *word))
            .fold(Words::default(), |found, (w, _, _)| found | *w)
    }

    fn piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            // A word, cut short or not, in mixed case.
            (0..super::WORDS.len(), 1usize..12, any::<u16>()).prop_map(|(i, len, case)| {
                let word = super::WORDS[i].1;
                word.iter()
                    .take(len)
                    .enumerate()
                    .map(|(k, &b)| {
                        let c = char::from(b);
                        if case >> (k % 16) & 1 == 1 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect()
            }),
            "[a-zA-Z@`_ (){}é$]{0,6}",
        ]
    }

    proptest::proptest! {
        #[test]
        fn scan_finds_what_a_plain_search_finds(pieces in proptest::collection::vec(piece(), 0..8)) {
            let text = pieces.concat();
            proptest::prop_assert_eq!(Words::scan(&text), reference(&text), "{:?}", text);
        }
    }

    /// Each word at every place of a long statement, so that it starts in
    /// either half of a sixteen-byte block, across a block's end, and in
    /// the bytes left after the last block.
    #[test]
    fn finds_each_word_wherever_a_block_splits_it() {
        for (w, word, _) in super::WORDS {
            let word = std::str::from_utf8(word).unwrap().to_ascii_uppercase();
            for at in 0..48 {
                for tail in [0, 1, 15, 16, 17] {
                    let text = format!("{}{word}{}", "x".repeat(at), "_".repeat(tail));
                    assert_eq!(Words::scan(&text), w, "{text:?}");
                    assert_eq!(Words::scan(&text), reference(&text), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn anchors_are_letters_inside_their_word_and_never_shared() {
        for (i, a) in super::WORDS.iter().enumerate() {
            assert!(a.2 + 2 <= a.1.len());
            assert!(super::anchor(a).iter().all(u8::is_ascii_lowercase));
            for b in &super::WORDS[i + 1..] {
                assert_ne!(super::anchor(a), super::anchor(b));
            }
        }
    }
}
