//! Line-oriented conversions for debugging agtype from a shell.

use std::io::{self, BufRead, Write};

use crate::binary::{DecodeError, DecodeErrorKind};

/// What [`run`] does with each line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineMode {
    /// agtype text in, AGE's canonical text (`agtype_out`) out.
    Normalize,
    /// agtype text in, container bytes out as lowercase hex, no prefix.
    Encode,
    /// Container bytes as hex in (either case; an optional `\x` prefix, as
    /// `psql` prints bytea, is accepted), AGE's canonical text out.
    Decode,
}

/// Converts one value per input line.
///
/// Output contract: exactly one output line per input line, in order, each
/// ending in `\n`. Output line N is the answer for input line N, or, when
/// that line fails, `error: line N: <message>` (N counts from 1). A
/// trailing `\r` on an input line is ignored. Lines that are not UTF-8 fail.
/// Returns `Ok(true)` when every line succeeded, `Ok(false)` when at least
/// one failed, and `Err` only for I/O errors on `input` or `output`.
pub fn run(mode: LineMode, input: impl BufRead, mut output: impl Write) -> io::Result<bool> {
    let mut all_ok = true;
    let mut line = Vec::new();
    let mut input = input;
    let mut n = 0usize;
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        n += 1;
        let mut text = line.as_slice();
        text = text.strip_suffix(b"\n").unwrap_or(text);
        text = text.strip_suffix(b"\r").unwrap_or(text);
        match convert_line(mode, text) {
            Ok(out) => writeln!(output, "{out}")?,
            Err(msg) => {
                all_ok = false;
                writeln!(output, "error: line {n}: {msg}")?;
            }
        }
    }
    output.flush()?;
    Ok(all_ok)
}

/// Converts a single line (without its line ending).
pub fn convert_line(mode: LineMode, line: &[u8]) -> Result<String, String> {
    let text = || std::str::from_utf8(line).map_err(|_| "line is not valid UTF-8".to_owned());
    match mode {
        LineMode::Normalize => {
            let v = crate::parse(text()?).map_err(|e| e.to_string())?;
            Ok(v.to_string())
        }
        LineMode::Encode => {
            let v = crate::parse(text()?).map_err(|e| e.to_string())?;
            Ok(to_hex(&crate::encode(&v)))
        }
        LineMode::Decode => {
            let bytes = from_hex(text()?).map_err(|e| e.to_string())?;
            let v = crate::decode(&bytes).map_err(|e| e.to_string())?;
            Ok(v.to_string())
        }
    }
}

/// Lowercase hex, no prefix.
pub fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// Parses hex (either case), ignoring surrounding whitespace and an
/// optional `\x` prefix.
pub fn from_hex(text: &str) -> Result<Vec<u8>, DecodeError> {
    let t = text.trim();
    let t = t.strip_prefix("\\x").unwrap_or(t);
    if !t.len().is_multiple_of(2) {
        return Err(DecodeError::new(t.len(), DecodeErrorKind::BadHex));
    }
    let digit = |i: usize| {
        char::from(t.as_bytes()[i])
            .to_digit(16)
            .ok_or(DecodeError::new(i, DecodeErrorKind::BadHex))
    };
    (0..t.len() / 2)
        .map(|i| Ok((digit(2 * i)? * 16 + digit(2 * i + 1)?) as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_every_line_and_names_failing_ones() {
        let input = b"{\"b\":1,\"a\":2}\r\nnope\n1\n";
        let mut out = Vec::new();
        let ok = run(LineMode::Normalize, &input[..], &mut out).unwrap();
        assert!(!ok);
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(lines[0], "{\"a\": 2, \"b\": 1}");
        assert!(lines[1].starts_with("error: line 2: invalid input syntax for type agtype"));
        assert_eq!(lines[2], "1");
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let mut hex = Vec::new();
        assert!(
            run(
                LineMode::Encode,
                &b"1\n[\"a\", 1.5::numeric]\n"[..],
                &mut hex
            )
            .unwrap()
        );
        assert_eq!(
            String::from_utf8(hex.clone()).unwrap(),
            concat!(
                "010000500c0000f0000000000100000000000000\n",
                "02000040010000800d0000106100000028000000808001008813\n"
            )
        );
        let mut text = Vec::new();
        assert!(run(LineMode::Decode, &hex[..], &mut text).unwrap());
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "1\n[\"a\", 1.5::numeric]\n"
        );
    }
}
