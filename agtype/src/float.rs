//! float8 text conversions as PostgreSQL (and so AGE) performs them.
//!
//! Output: PostgreSQL's `float8out` with `extra_float_digits >= 1` prints
//! the fewest digits whose value lies *strictly* inside the double's rounding
//! interval, nearest the exact value. zmij (the shortest-digits printer
//! serde_json uses), like Rust's own formatter and `ryu`, also accepts an
//! interval end point when the mantissa is even, so its answer is used
//! unless it is such an end point; then the next longer correctly rounded
//! candidates are tried. End points can only have 17 or fewer significant
//! digits when the double is at least 2^52, so smaller values never need
//! the check.

use std::fmt::Write as _;

/// Digits and exponent of a finite double: value = 0.d1d2… × 10^(exp+1),
/// i.e. `exp` is the decimal exponent of the first digit.
struct Decimal {
    digits: [u8; 17],
    len: usize,
    exp: i32,
}

/// Appends the text `float8out` prints for `f`, with AGE's `.0` suffix for
/// integral values in fixed notation.
#[inline(never)] // keeps its buffers out of the printer's recursive frames
pub fn write_float(out: &mut String, f: f64) {
    let a = f.abs();
    // Where PostgreSQL prints fixed notation (first digit 10^-4 to 10^14)
    // no end point can be short (a < 2^52), and zmij's fixed notation is
    // PostgreSQL's plus AGE's `.0`; only a possible tie needs a closer look.
    if (1e-4..1e15).contains(&a) {
        let mut zb = zmij::Buffer::new();
        let z = zb.format_finite(f);
        // An exponent's `e` would be 2 to 5 bytes from the end (`e5`, `e+300`).
        let text = z.as_bytes();
        let e_at = |back: usize| text.len() >= back && text[text.len() - back] == b'e';
        let exponent = e_at(2) || e_at(3) || e_at(4) || e_at(5);
        let digits_and_point = z.len() - usize::from(f < 0.0);
        if !exponent && (digits_and_point <= 15 || !may_have_short_expansion(a)) {
            out.push_str(z);
            return;
        }
    }
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if f.is_sign_negative() {
        out.push('-');
    }
    if f == 0.0 {
        out.push_str("0.0");
        return;
    }
    write_digits(out, &shortest(a));
}

/// Lays out `d` as `float8out` does (fixed notation from 10^-4 to 10^14,
/// else `d.ddde±XX`), with AGE's `.0` for integral values.
fn write_digits(out: &mut String, d: &Decimal) {
    // Longest text: "0.0000" + 17 digits, or 17 digits + ".0", or
    // "d." + 16 digits + "e-324".
    let mut buf = [0u8; 32];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        buf[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    let digits = &d.digits[..d.len];
    let ascii = |ds: &[u8]| -> ([u8; 17], usize) {
        let mut a = [b'0'; 17];
        for (slot, &x) in a.iter_mut().zip(ds) {
            *slot = b'0' + x;
        }
        (a, ds.len())
    };
    let (all, len) = ascii(digits);
    let all = &all[..len];
    if (-4..15).contains(&d.exp) {
        if d.exp < 0 {
            put(b"0.");
            put(&b"0000"[..(-d.exp - 1) as usize]);
            put(all);
        } else {
            let int_len = d.exp as usize + 1;
            if len <= int_len {
                put(all);
                put(&b"00000000000000"[..int_len - len]);
                put(b".0");
            } else {
                put(&all[..int_len]);
                put(b".");
                put(&all[int_len..]);
            }
        }
    } else {
        put(&all[..1]);
        if len > 1 {
            put(b".");
            put(&all[1..]);
        }
        put(if d.exp < 0 { b"e-" } else { b"e+" });
        let e = d.exp.unsigned_abs();
        if e >= 100 {
            put(&[b'0' + (e / 100) as u8]);
        }
        put(&[b'0' + (e / 10 % 10) as u8, b'0' + (e % 10) as u8]);
    }
    out.push_str(std::str::from_utf8(&buf[..n]).unwrap_or(""));
}

/// The text `float8out` + AGE print for `f`.
pub fn format_float(f: f64) -> String {
    let mut s = String::with_capacity(24);
    write_float(&mut s, f);
    s
}

/// Shortest digits strictly inside the rounding interval of a positive finite `f`.
fn shortest(f: f64) -> Decimal {
    let mut zb = zmij::Buffer::new();
    let d = parse_decimal(zb.format_finite(f));
    if f < 4503599627370496.0 || strictly_inside(&d, f) {
        return break_tie(d, f);
    }
    for precision in d.len..17 {
        let mut buf = StackBuf::new();
        let _ = write!(buf, "{:.*e}", precision, f);
        let c = parse_decimal(buf.as_str());
        if strictly_inside(&c, f) {
            return break_tie(c, f);
        }
    }
    d
}

/// When `f` lies exactly halfway between two candidates of `d`'s length,
/// PostgreSQL's Ryu picks the one with the even last digit; Rust's
/// formatter rounds half up. A tie needs the exact value to have just one
/// more significant digit, a 5, which can only happen at 16 or 17 digits
/// (shorter candidates are never that close to `f`).
fn break_tie(d: Decimal, f: f64) -> Decimal {
    if d.len < 15 || !may_have_short_expansion(f) {
        return d;
    }
    let mut buf = StackBuf::new();
    let _ = write!(buf, "{:.*e}", d.len + 20, f);
    let (mant, exp) = buf.as_str().split_once('e').unwrap_or(("", "0"));
    let digits: Vec<u8> = mant
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    let n = d.len;
    let is_tie = digits.get(n) == Some(&5) && digits[n + 1..].iter().all(|&x| x == 0);
    if !is_tie {
        return d;
    }
    let mut lower = Decimal {
        digits: [0; 17],
        len: n,
        exp: exp.parse().unwrap_or(d.exp),
    };
    lower.digits[..n].copy_from_slice(&digits[..n]);
    let even = if lower.digits[n - 1].is_multiple_of(2) {
        lower
    } else {
        round_up(lower)
    };
    // Just above a power of two the interval is narrower below than above,
    // so the even candidate may fall outside it; then `d` is the only one.
    let even = trim(even);
    if strictly_inside(&even, f) { even } else { d }
}

fn round_up(mut lower: Decimal) -> Decimal {
    let n = lower.len;
    let mut i = n;
    while i > 0 {
        i -= 1;
        if lower.digits[i] == 9 {
            lower.digits[i] = 0;
        } else {
            lower.digits[i] += 1;
            return lower;
        }
    }
    lower.digits[0] = 1;
    lower.exp += 1;
    lower
}

/// Whether the exact decimal expansion of `f` can have 18 or fewer
/// significant digits (a precondition for a tie at 17). With `f = m × 2^q`,
/// `m` odd and `q < 0`, the expansion's digits are those of `m × 5^-q`.
fn may_have_short_expansion(f: f64) -> bool {
    let bits = f.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, q) = if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp_bits - 1075)
    };
    if m == 0 {
        return true;
    }
    let tz = m.trailing_zeros();
    let (m, q) = (m >> tz, q + tz as i32);
    if q >= 0 {
        return true;
    }
    // 5^29 alone has 21 digits.
    if q < -28 {
        return false;
    }
    let digits_m = (64 - m.leading_zeros()) as f64 * std::f64::consts::LOG10_2;
    let digits_5 = f64::from(-q) * (1.0 - std::f64::consts::LOG10_2);
    digits_m + digits_5 < 19.5
}

fn trim(mut d: Decimal) -> Decimal {
    while d.len > 1 && d.digits[d.len - 1] == 0 {
        d.len -= 1;
    }
    d
}

/// Whether the decimal lies strictly between `f`'s rounding end points:
/// nudging it a hair up and down (far less than any gap between a
/// 17-digit decimal and a 54-bit binary end point) still parses to `f`.
fn strictly_inside(d: &Decimal, f: f64) -> bool {
    let mut mantissa: u64 = 0;
    for &c in &d.digits[..d.len] {
        mantissa = mantissa * 10 + u64::from(c);
    }
    // value = mantissa × 10^(exp - len + 1)
    let e = d.exp - d.len as i32 + 1 - 40;
    let up = format!("{mantissa}{}1e{e}", "0".repeat(39));
    let down = format!("{}{}e{e}", mantissa - 1, "9".repeat(40));
    up.parse::<f64>().ok() == Some(f) && down.parse::<f64>().ok() == Some(f)
}

/// Significant digits and first-digit exponent of a positive decimal in
/// fixed (`123.45`, `0.001`) or scientific (`1.5e-7`, `1e+23`) notation.
fn parse_decimal(s: &str) -> Decimal {
    let mut d = Decimal {
        digits: [0; 17],
        len: 0,
        exp: 0,
    };
    let bytes = s.as_bytes();
    let e_at = bytes.iter().position(|&b| b == b'e').unwrap_or(bytes.len());
    let (mant, exp) = bytes.split_at(e_at);
    let mut int_len: i32 = 0;
    let mut seen_point = false;
    let mut leading_zeros: i32 = 0;
    for &b in mant {
        match b {
            b'.' => seen_point = true,
            b'0'..=b'9' => {
                if !seen_point {
                    int_len += 1;
                }
                if d.len == 0 && b == b'0' {
                    leading_zeros += 1;
                } else if d.len < d.digits.len() {
                    // Beyond 17 digits only zeros follow in shortest output.
                    d.digits[d.len] = b - b'0';
                    d.len += 1;
                }
            }
            _ => {}
        }
    }
    while d.len > 1 && d.digits[d.len - 1] == 0 {
        d.len -= 1;
    }
    let mut e: i32 = 0;
    for &b in exp.iter().filter(|b| b.is_ascii_digit()) {
        e = e * 10 + i32::from(b - b'0');
    }
    if exp.contains(&b'-') {
        e = -e;
    }
    d.exp = e + int_len - 1 - leading_zeros;
    d
}

/// A fixed-size formatting buffer, so float printing does not allocate.
struct StackBuf {
    buf: [u8; 48],
    len: usize,
}

impl StackBuf {
    fn new() -> Self {
        StackBuf {
            buf: [0; 48],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Parses a JSON-syntax number token (already validated by the lexer) as
/// float8. Errors as PostgreSQL does when the value overflows to infinity or
/// underflows to zero.
pub(crate) fn parse_float_token(token: &str) -> Result<f64, String> {
    let v: f64 = token
        .parse()
        .map_err(|_| format!("invalid input syntax for type double precision: \"{token}\""))?;
    check_range(token, v)
}

fn check_range(token: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && v != 0.0 {
        return Ok(v);
    }
    let mantissa = token.split(['e', 'E']).next().unwrap_or(token);
    let nonzero_input = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if v.is_infinite() || (v == 0.0 && nonzero_input) {
        return Err(format!(
            "\"{token}\" is out of range for type double precision"
        ));
    }
    Ok(v)
}

/// PostgreSQL's `float8in` on arbitrary text (used by the `::float`
/// annotation): surrounding whitespace, `NaN`, `[+-]Infinity`, `[+-]inf` in
/// any case, else a decimal number.
pub(crate) fn float8in(text: &str) -> Result<f64, String> {
    let invalid = || format!("invalid input syntax for type double precision: \"{text}\"");
    let s = text.trim_matches(crate::numeric::is_pg_space);
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if body.eq_ignore_ascii_case("nan") {
        return Ok(f64::NAN);
    }
    if body.eq_ignore_ascii_case("infinity") || body.eq_ignore_ascii_case("inf") {
        return Ok(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if !is_decimal(body) {
        return Err(invalid());
    }
    let v: f64 = s.parse().map_err(|_| invalid())?;
    check_range(text.trim_matches(crate::numeric::is_pg_space), v)
        .map_err(|_| format!("\"{}\" is out of range for type double precision", text))
}

/// `digits[.digits]` or `.digits`, then an optional exponent, as `strtod`
/// accepts (hexadecimal floats are not supported).
fn is_decimal(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let exp_digits = b[j.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if exp_digits > 0 {
            i = j + exp_digits;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The zmij shortcut must print exactly what the digit layout prints,
    /// for `f` and `-f`.
    fn agrees(f: f64) {
        for f in [f, -f] {
            let mut fast = String::new();
            write_float(&mut fast, f);
            let mut slow = String::from(if f < 0.0 { "-" } else { "" });
            write_digits(&mut slow, &shortest(f.abs()));
            assert_eq!(fast, slow, "{f:e} ({:#x})", f.to_bits());
        }
    }

    #[test]
    fn fixed_notation_shortcut_matches_the_digit_layout() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..300_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over the fixed range: mantissa bits, exponents 2^-14..2^50.
            let exp = 1023 - 14 + (x >> 58) % 64;
            let f = f64::from_bits((exp << 52) | (x & ((1 << 52) - 1)));
            agrees(f);
            agrees((x % 100_000_000) as f64 / [1.0, 8.0, 100.0, 1e4][(x >> 60) as usize % 4]);
        }
        for f in [
            1e-4,
            1e-4f64.next_down(),
            1e14,
            999999999999999.9,
            1.0,
            0.5,
            1e-4 * 3.0,
            5.444310685350916e14,
            123456789012345.67,
            0.30000000000000004,
        ] {
            agrees(f);
            agrees(f.next_up());
            agrees(f.next_down());
        }
    }
}
