//! PostgreSQL `numeric` values as agtype stores them: exact decimal digits
//! with a display scale, kept in PostgreSQL's own base-10000 form so that
//! text and binary conversions are both exact and cheap.

use std::fmt;
use std::fmt::Write as _;

const NBASE: u32 = 10000;
/// PostgreSQL refuses more fractional digits than this (`NUMERIC_DSCALE_MAX`).
const DSCALE_MAX: usize = 0x3FFF;
/// PostgreSQL's input refuses exponents beyond this (`NUMERIC_MAX_PRECISION`).
const EXPONENT_MAX: i64 = 1000;

/// An arbitrary-precision decimal, NaN or ±Infinity.
///
/// Finite values are canonical (no leading or trailing zero base-10000
/// groups; zero is positive with weight 0), so derived equality compares
/// value and display scale, which is what `numeric_out` shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Numeric(pub(crate) Repr);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Repr {
    NaN,
    PosInf,
    NegInf,
    Finite {
        negative: bool,
        /// Base-10000 exponent of `digits[0]`.
        weight: i16,
        /// Digits shown after the decimal point.
        dscale: u16,
        /// Base-10000 digits, most significant first, each < 10000.
        digits: Box<[u16]>,
    },
}

impl Numeric {
    pub fn nan() -> Self {
        Numeric(Repr::NaN)
    }

    pub fn infinity(negative: bool) -> Self {
        Numeric(if negative { Repr::NegInf } else { Repr::PosInf })
    }

    pub fn is_nan(&self) -> bool {
        matches!(self.0, Repr::NaN)
    }

    /// Parses text as PostgreSQL 15's `numeric_in` does: surrounding
    /// whitespace, `NaN`/`Infinity`/`inf` in any case, an optional sign,
    /// digits with an optional point and an optional exponent. The error is
    /// PostgreSQL's message.
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = || format!("invalid input syntax for type numeric: \"{text}\"");
        let s = text.trim_matches(is_pg_space);
        if s.eq_ignore_ascii_case("nan") {
            return Ok(Numeric::nan());
        }
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        if body.eq_ignore_ascii_case("infinity") || body.eq_ignore_ascii_case("inf") {
            return Ok(Numeric::infinity(negative));
        }
        let (mantissa, exponent) = match body.find(['e', 'E']) {
            Some(i) => (
                &body[..i],
                parse_exponent(&body[i + 1..]).ok_or_else(invalid)?,
            ),
            None => (body, 0),
        };
        let (int_part, frac_part) = match mantissa.split_once('.') {
            Some((a, b)) => (a, b),
            None => (mantissa, ""),
        };
        let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if int_part.len() + frac_part.len() == 0 || !all_digits(int_part) || !all_digits(frac_part)
        {
            return Err(invalid());
        }
        let frac_len = i64::try_from(frac_part.len()).map_err(|_| invalid())?;
        let dscale = (frac_len - exponent).max(0);
        Self::from_decimal_digits(negative, int_part, frac_part, exponent, dscale)
    }

    /// Builds the canonical base-10000 form of `±int_part.frac_part × 10^exponent`.
    fn from_decimal_digits(
        negative: bool,
        int_part: &str,
        frac_part: &str,
        exponent: i64,
        dscale: i64,
    ) -> Result<Self, String> {
        let overflow = || "value overflows numeric format".to_owned();
        let dscale = usize::try_from(dscale).map_err(|_| overflow())?;
        if dscale > DSCALE_MAX {
            return Err(overflow());
        }
        let all: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
        let first_nonzero = all.iter().position(|&b| b != b'0');
        let Some(first) = first_nonzero else {
            return Ok(Self::zero(dscale as u16));
        };
        let int_len = i64::try_from(int_part.len()).map_err(|_| overflow())?;
        // Decimal exponent of each input digit: the digit at position k (0-based,
        // across int and frac parts) is worth 10^(int_len + exponent - 1 - k).
        let top = int_len + exponent - 1;
        let last = all.iter().rposition(|&b| b != b'0').unwrap_or(first);
        let hi_pow = top - first as i64;
        let lo_pow = top - last as i64;
        let hi_group = hi_pow.div_euclid(4);
        let lo_group = lo_pow.div_euclid(4);
        let weight = i16::try_from(hi_group).map_err(|_| overflow())?;
        let n = usize::try_from(hi_group - lo_group + 1).map_err(|_| overflow())?;
        let mut groups = vec![0u16; n];
        for (k, &b) in all.iter().enumerate().take(last + 1).skip(first) {
            let pow = top - k as i64;
            let slot = (hi_group - pow.div_euclid(4)) as usize;
            let scale = [1u16, 10, 100, 1000][pow.rem_euclid(4) as usize];
            groups[slot] += u16::from(b - b'0') * scale;
        }
        Ok(Self::canonical(negative, weight, dscale as u16, groups))
    }

    fn zero(dscale: u16) -> Self {
        Numeric(Repr::Finite {
            negative: false,
            weight: 0,
            dscale,
            digits: Box::new([]),
        })
    }

    /// Strips zero groups at both ends, as PostgreSQL's `make_result` does.
    ///
    /// Digits beyond `dscale` (which `numeric_in` never produces, but corrupt
    /// bytes can hold) are dropped, as `numeric_out` does not print them.
    pub(crate) fn canonical(
        negative: bool,
        weight: i16,
        dscale: u16,
        mut digits: Vec<u16>,
    ) -> Self {
        let last_weight = -((i64::from(dscale) + 3) / 4);
        for (i, d) in digits.iter_mut().enumerate() {
            let w = i64::from(weight) - i as i64;
            if w < last_weight {
                *d = 0;
            } else if w == last_weight {
                let hidden = 4 * (-w) - i64::from(dscale);
                *d -= *d % [1, 10, 100, 1000][hidden.clamp(0, 3) as usize];
            }
        }
        let Some(first) = digits.iter().position(|&d| d != 0) else {
            return Self::zero(dscale);
        };
        let last = digits.iter().rposition(|&d| d != 0).unwrap_or(first);
        let weight = i16::try_from(i64::from(weight) - first as i64).unwrap_or(i16::MIN);
        Numeric(Repr::Finite {
            negative,
            weight,
            dscale,
            digits: digits[first..=last].into(),
        })
    }
}

fn parse_exponent(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Anything longer than a few digits is beyond the limit anyway.
    let magnitude: i64 = if digits.len() > 6 {
        EXPONENT_MAX + 1
    } else {
        digits.parse().ok()?
    };
    if magnitude > EXPONENT_MAX {
        return None;
    }
    Some(if s.starts_with('-') {
        -magnitude
    } else {
        magnitude
    })
}

/// PostgreSQL's `isspace` in the C locale.
pub(crate) fn is_pg_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

impl std::str::FromStr for Numeric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Numeric::parse(s)
    }
}

/// Prints as `numeric_out`: plain notation with exactly `dscale` fractional
/// digits (no `::numeric` suffix; agtype's printer adds that).
impl fmt::Display for Numeric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (negative, weight, dscale, digits) = match &self.0 {
            Repr::NaN => return f.write_str("NaN"),
            Repr::PosInf => return f.write_str("Infinity"),
            Repr::NegInf => return f.write_str("-Infinity"),
            Repr::Finite {
                negative,
                weight,
                dscale,
                digits,
            } => (*negative, i32::from(*weight), usize::from(*dscale), digits),
        };
        let group = |i: i32| -> u32 {
            usize::try_from(i)
                .ok()
                .and_then(|i| digits.get(i))
                .map_or(0, |&d| u32::from(d))
        };
        let mut out = String::with_capacity(8 + 4 * digits.len() + dscale);
        if negative {
            out.push('-');
        }
        if weight < 0 {
            out.push('0');
        } else {
            for w in 0..=weight {
                let d = group(w);
                if w == 0 {
                    let _ = write!(out, "{}", d.min(NBASE - 1));
                } else {
                    push_group(&mut out, d);
                }
            }
        }
        if dscale > 0 {
            out.push('.');
            let start = out.len();
            let mut i = weight + 1;
            while out.len() - start < dscale {
                push_group(&mut out, group(i));
                i += 1;
            }
            out.truncate(start + dscale);
        }
        f.write_str(&out)
    }
}

fn push_group(out: &mut String, d: u32) {
    let d = d.min(NBASE - 1);
    for div in [1000, 100, 10, 1] {
        out.push(char::from(b'0' + (d / div % 10) as u8));
    }
}

/// The binary form inside agtype: a varlena with a 4-byte header (AGE always
/// writes the long header), then PostgreSQL's on-disk numeric.
pub(crate) mod binary {
    use super::{NBASE, Numeric, Repr};

    const SHORT: u16 = 0x8000;
    const SPECIAL: u16 = 0xC000;
    const NAN: u16 = 0xC000;
    const PINF: u16 = 0xD000;
    const NINF: u16 = 0xF000;
    const NEG: u16 = 0x4000;
    const SHORT_NEG: u16 = 0x2000;

    pub(crate) fn write(n: &Numeric, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        match &n.0 {
            Repr::NaN => out.extend_from_slice(&NAN.to_le_bytes()),
            Repr::PosInf => out.extend_from_slice(&PINF.to_le_bytes()),
            Repr::NegInf => out.extend_from_slice(&NINF.to_le_bytes()),
            Repr::Finite {
                negative,
                weight,
                dscale,
                digits,
            } => {
                if *dscale <= 63 && (-64..=63).contains(weight) {
                    let mut h = SHORT | (dscale << 7) | (*weight as u16 & 0x3F);
                    if *weight < 0 {
                        h |= 0x40;
                    }
                    if *negative {
                        h |= SHORT_NEG;
                    }
                    out.extend_from_slice(&h.to_le_bytes());
                } else {
                    let h = if *negative { NEG } else { 0 } | (dscale & 0x3FFF);
                    out.extend_from_slice(&h.to_le_bytes());
                    out.extend_from_slice(&weight.to_le_bytes());
                }
                for d in digits.iter() {
                    out.extend_from_slice(&d.to_le_bytes());
                }
            }
        }
        let size = (out.len() - start) as u32;
        out[start..start + 4].copy_from_slice(&(size << 2).to_le_bytes());
    }

    /// Size in bytes of the numeric varlena at the start of `data`, if its
    /// header is one AGE writes.
    pub(crate) fn size(data: &[u8]) -> Option<usize> {
        let word = u32::from_le_bytes(data.get(..4)?.try_into().ok()?);
        if word & 3 != 0 {
            return None;
        }
        let size = (word >> 2) as usize;
        (size >= 6 && size <= data.len()).then_some(size)
    }

    pub(crate) fn read(data: &[u8]) -> Result<Numeric, &'static str> {
        let size = size(data).ok_or("bad numeric header")?;
        let body = &data[4..size];
        let h = u16::from_le_bytes([body[0], body[1]]);
        let (negative, weight, dscale, digits) = if h & SPECIAL == SPECIAL {
            return match h {
                NAN => Ok(Numeric::nan()),
                PINF => Ok(Numeric::infinity(false)),
                NINF => Ok(Numeric::infinity(true)),
                _ => Err("bad numeric special value"),
            };
        } else if h & SPECIAL == SHORT {
            let w = (h & 0x3F) as i16;
            let weight = if h & 0x40 != 0 { w - 64 } else { w };
            (h & SHORT_NEG != 0, weight, (h >> 7) & 0x3F, &body[2..])
        } else {
            let w = body.get(2..4).ok_or("truncated numeric")?;
            let weight = i16::from_le_bytes([w[0], w[1]]);
            (h & NEG != 0, weight, h & 0x3FFF, &body[4..])
        };
        if digits.len() % 2 != 0 {
            return Err("odd numeric digit bytes");
        }
        let mut groups = Vec::with_capacity(digits.len() / 2);
        for pair in digits.chunks_exact(2) {
            let d = u16::from_le_bytes([pair[0], pair[1]]);
            if u32::from(d) >= NBASE {
                return Err("numeric digit out of range");
            }
            groups.push(d);
        }
        Ok(Numeric::canonical(negative, weight, dscale, groups))
    }
}
