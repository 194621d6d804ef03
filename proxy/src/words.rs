//! The few words the proxy looks for in every statement's text (Cypher
//! calls, catalog changes, isolation changes, deallocation), found in one
//! pass: this runs on every Query and Parse.

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

    pub fn scan(text: &str) -> Words {
        let h = text.as_bytes();
        let mut found = Words::default();
        // Every word has three letters or more and no two share their first
        // two, so a pair of bytes picks the one word that may start there.
        // `| 0x20` lower-cases ASCII letters and maps no other byte onto one.
        for i in 0..h.len().saturating_sub(2) {
            let (w, word): (Words, &[u8]) = match (h[i] | 0x20, h[i + 1] | 0x20) {
                (b'a', b'g') => (Words::AGE, b"age"),
                (b'c', b'y') => (Words::CYPHER, b"cypher"),
                (b'd', b'i') => (Words::DISCARD, b"discard"),
                (b'd', b'e') => (Words::DEALLOCATE, b"deallocate"),
                (b'e', b'x') => (Words::EXTENSION, b"extension"),
                (b'g', b'r') => (Words::GRAPH, b"graph"),
                (b'i', b's') => (Words::ISOLATION, b"isolation"),
                (b'l', b'a') => (Words::LABEL, b"label"),
                (b'r', b'e') => (Words::RESET, b"reset"),
                _ => continue,
            };
            if h.get(i + 2..i + word.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(&word[2..]))
            {
                found = found | w;
            }
        }
        found
    }

    /// Does the set hold any of `w` (which may be several words joined by `|`)?
    pub fn any(self, w: Words) -> bool {
        self.0 & w.0 != 0
    }

    pub fn all(self, w: Words) -> bool {
        self.0 & w.0 == w.0
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
}
