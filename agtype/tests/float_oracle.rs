//! The float printer against an exact oracle: for each precision from 1 to
//! 17, the candidates around the correctly rounded value are compared with
//! the double's rounding interval in exact big-integer arithmetic; the first
//! precision with a candidate strictly inside wins, nearest first, ties to
//! an even last digit (PostgreSQL's Ryu).

use std::cmp::Ordering;

use proptest::prelude::*;

/// Minimal unsigned big integer, little-endian base 2^32.
#[derive(Clone, Debug)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v as u32, (v >> 32) as u32]);
        b.trim();
        b
    }
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }
    fn mul_pow2(&mut self, mut n: u32) {
        while n >= 16 {
            self.mul_small(1 << 16);
            n -= 16;
        }
        self.mul_small(1 << n);
    }
    fn mul_pow10(&mut self, mut n: u32) {
        while n >= 9 {
            self.mul_small(1_000_000_000);
            n -= 9;
        }
        self.mul_small(10u32.pow(n));
    }
    fn cmp(&self, o: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&o.0.len())
            .then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }
    fn sub(&self, o: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for (i, &a) in self.0.iter().enumerate() {
            let b = i64::from(*o.0.get(i).unwrap_or(&0));
            let mut v = i64::from(a) - b - borrow;
            borrow = 0;
            if v < 0 {
                v += 1 << 32;
                borrow = 1;
            }
            out.push(v as u32);
        }
        let mut b = Big(out);
        b.trim();
        b
    }
    fn abs_diff(&self, o: &Big) -> Big {
        if self.cmp(o) == Ordering::Less {
            o.sub(self)
        } else {
            self.sub(o)
        }
    }
}

/// (digits, exponent of the first digit) PostgreSQL prints for positive finite `f`.
fn oracle(f: f64) -> (Vec<u8>, i32) {
    let bits = f.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    let (m, q) = if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp_bits - 1075)
    };
    let lower_closer = frac == 0 && exp_bits > 1;
    for p in 1..=17usize {
        let s = format!("{:.*e}", p - 1, f);
        let (mant, e) = s.split_once('e').unwrap();
        let first_exp: i32 = e.parse().unwrap();
        let d: u64 = mant.replace('.', "").parse().unwrap();
        // Candidate C means C × 10^k.
        let k = first_exp - (p as i32 - 1);
        let a = (2 - q).max(0) as u32;
        let b = (-k).max(0) as u32;
        let scaled_f = {
            let mut x = Big::from_u64(m);
            x.mul_pow2((q + a as i32) as u32);
            x.mul_pow10(b);
            x
        };
        let gap = |quarter: bool| {
            let mut g = Big::from_u64(1);
            g.mul_pow2((q + a as i32 - if quarter { 2 } else { 1 }) as u32);
            g.mul_pow10(b);
            g
        };
        let (hi_gap, lo_gap) = (gap(false), gap(lower_closer));
        let mut best: Option<(Big, u64)> = None;
        for c in [d.saturating_sub(1), d, d + 1] {
            if c == 0 {
                continue;
            }
            let mut x = Big::from_u64(c);
            x.mul_pow10((k + b as i32) as u32);
            x.mul_pow2(a);
            let dist = x.abs_diff(&scaled_f);
            let limit = if x.cmp(&scaled_f) == Ordering::Less {
                &lo_gap
            } else {
                &hi_gap
            };
            if dist.cmp(limit) != Ordering::Less {
                continue;
            }
            let better = match &best {
                None => true,
                Some((bd, bc)) => match dist.cmp(bd) {
                    Ordering::Less => true,
                    Ordering::Equal => c % 2 == 0 && bc % 2 == 1,
                    Ordering::Greater => false,
                },
            };
            if better {
                best = Some((dist, c));
            }
        }
        if let Some((_, c)) = best {
            let mut digits: Vec<u8> = c.to_string().bytes().map(|x| x - b'0').collect();
            let first = k + digits.len() as i32 - 1;
            while digits.len() > 1 && digits.last() == Some(&0) {
                digits.pop();
            }
            return (digits, first);
        }
    }
    panic!("no candidate for {f:e}");
}

/// Significant digits and first-digit exponent of printed text.
fn printed_digits(s: &str) -> (Vec<u8>, i32) {
    let s = s.trim_start_matches('-');
    let (mant, exp) = match s.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap()),
        None => (s, 0),
    };
    let int_len = mant.split('.').next().unwrap().len() as i32;
    let all: Vec<u8> = mant
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|x| x - b'0')
        .collect();
    let lead = all.iter().position(|&x| x != 0).unwrap_or(0);
    let mut digits = all[lead..].to_vec();
    while digits.len() > 1 && digits.last() == Some(&0) {
        digits.pop();
    }
    (digits, exp + int_len - 1 - lead as i32)
}

fn check(f: f64) {
    if !f.is_finite() || f == 0.0 {
        return;
    }
    let printed = agtype::format_float(f);
    assert_eq!(
        printed_digits(&printed),
        oracle(f.abs()),
        "{printed} for {f:e} ({:#x})",
        f.to_bits()
    );
    assert_eq!(
        printed.parse::<f64>().unwrap(),
        f,
        "{printed} does not read back"
    );
}

#[test]
fn known_differences_from_ryu() {
    for (f, want) in [
        (1e23, "9.999999999999999e+22"),
        (2e23, "1.9999999999999998e+23"),
        (5e22, "4.9999999999999996e+22"),
        (43678137075476736.0, "4.3678137075476736e+16"),
        (2f64.powi(-25), "2.9802322387695312e-08"),
        (5e-324, "5e-324"),
        (1e15, "1e+15"),
        (1e14, "100000000000000.0"),
    ] {
        assert_eq!(agtype::format_float(f), want);
        check(f);
    }
}

#[test]
fn every_power_of_two_and_its_neighbours() {
    // Intervals are asymmetric at powers of two, where ties also occur.
    let normal = (1..2047u64).map(|e| e << 52);
    let subnormal = (0..52).map(|b| 1u64 << b);
    for bits in normal.chain(subnormal) {
        for b in [bits - 1, bits, bits + 1] {
            check(f64::from_bits(b));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10000))]

    #[test]
    fn any_double_prints_as_the_oracle_says(bits in any::<u64>()) {
        check(f64::from_bits(bits));
    }

    #[test]
    fn powers_and_short_values_print_as_the_oracle_says(m in 1u64..100_000, e in -330i32..310) {
        check(format!("{m}e{e}").parse().unwrap());
        check((m as f64) * 2f64.powi(e.clamp(-1074, 1023)));
    }
}
